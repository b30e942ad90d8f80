// The DLPack C exchange API (DLPack 1.3, `DLPackExchangeAPI` in dlpack.h): a table of
// C functions that an array library publishes on its array type as
// `__dlpack_c_exchange_api__`, a PyCapsule named "dlpack_exchange_api" (torch.Tensor
// from torch 2.11). Declared here, field for field as the standard lays it out, for
// the functions lowbit calls; the DLTensor is nanobind's declaration of the same
// struct. Only a table of major version 1 is used.
#pragma once

#include <nanobind/ndarray.h>

#include <cstdint>

namespace lowbit::python::dlpack_exchange {

struct Version {
  std::uint32_t major;
  std::uint32_t minor;
};

struct Header {
  Version version;
  Header* prev_api;  // an older table, for consumers of an older major version
};

using DLTensor = nanobind::dlpack::dltensor;
using AnyFunction = void (*)();  // a slot lowbit does not call

// An owned tensor: deleter(self) releases it.
struct ManagedTensor {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};

using SetError = void (*)(void* error_ctx, const char* kind, const char* message);

struct Api {
  Header header;
  // A new tensor of prototype's dtype, ndim, shape and device, from the producer's
  // allocator. 0 on success; else -1, after set_error.
  int (*managed_tensor_allocator)(DLTensor* prototype, ManagedTensor** out, void* error_ctx, SetError set_error);
  AnyFunction managed_tensor_from_py_object_no_sync;
  // The producer's Python object for `tensor`, whose ownership it takes. 0 on success,
  // -1 with a Python exception set.
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensor* tensor, void** out_py_object);
  // Describes py_object in *out without taking a reference or synchronizing; the
  // shape and strides point into the producer's object, valid while it lives
  // unchanged. 0 on success, -1 with a Python exception set. May be null.
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  AnyFunction current_work_stream;
};

inline constexpr const char* kAttribute = "__dlpack_c_exchange_api__";
inline constexpr const char* kCapsuleName = "dlpack_exchange_api";

}  // namespace lowbit::python::dlpack_exchange
