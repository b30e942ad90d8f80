// DLPack arrays (nanobind ndarrays from NumPy, PyTorch, CuPy, ...) as lowbit
// TensorViews, and the other small conversions every binding needs.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "dlpack_exchange.h"
#include "lowbit/tensor.h"

namespace lowbit::python {

namespace nb = nanobind;

// An array argument as its caster found it: the DLPack description, copied (shape and
// strides included, so it outlives a non-owning export), and what keeps the memory
// alive while the binding holds it (the Python object, or nanobind's import of it).
template <class Imported>
struct ArrayArg {
  void* data = nullptr;
  nb::dlpack::dtype dtype{};
  std::int32_t device_type = 0;
  std::int32_t device = 0;
  std::int32_t ndim = 0;  // above kMaxRank: shape and strides are not copied
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // in elements
  nb::object owner;       // the array itself (exchange-API path)
  Imported imported;      // nanobind's import (the other paths)

  int device_id() const { return device; }
};

// The arrays an op reads (read-only ones accepted) and writes (must be writable).
struct In : ArrayArg<nb::ndarray<nb::ro>> {};
struct Out : ArrayArg<nb::ndarray<>> {};
using OptIn = std::optional<In>;
using OptOut = std::optional<Out>;

// Host cost per call (issue 6). The casters at the end of this file take, in order:
// 1. arrays whose type publishes the DLPack C exchange API (`__dlpack_c_exchange_api__`,
//    DLPack 1.3; torch.Tensor from torch 2.11): its dltensor_from_py_object_no_sync
//    describes the array without a capsule or a Python call (tens of ns);
// 2. plain torch tensors of a torch without it, through torch's C to_dlpack and
//    nanobind's import of the capsule (0.5-1 us a CUDA tensor more than path 1 on the
//    H100 host, bench/NOTES.md);
// 3. anything else (NumPy, CuPy, subclasses) through nanobind's own import, which calls
//    the Python-level __dlpack__ (3-4 us a torch tensor) and reports what it cannot take.
// None of them synchronizes. Path 1 takes the inputs of a type that defines the API
// itself (not one that inherits it: torch's tensor subclasses, FakeTensor and DTensor
// among them, take path 3) and of the torch types set_torch_export names; outputs only
// of those torch types (a DLTensor cannot say it is read-only; torch's are writable).
void set_torch_export(nb::handle tensor_type, nb::handle parameter_type, nb::handle to_dlpack);

// Fills `out` from src by path 1; false (no Python error set) where it does not apply.
template <class Imported>
bool exchange_import(nb::handle src, ArrayArg<Imported>& out) noexcept;
// The DLPack capsule of src if it is a plain torch tensor that to_dlpack takes (path 2),
// else an invalid object.
nb::object torch_capsule(nb::handle src) noexcept;
// The exchange table path 1 uses for src's type, or null.
const dlpack_exchange::Api* exchange_api_of(nb::handle src) noexcept;
// `out`'s fields from out.imported, nanobind's import (paths 2 and 3).
template <class Imported>
void describe_import(ArrayArg<Imported>& out) noexcept;

// A view of `array` (shape and strides in elements); throws lowbit::Error naming
// `what` when its dtype, device or rank is not one lowbit takes.
TensorView view_of(const In& array, const char* what);
TensorView view_of(const Out& array, const char* what);
TensorView view_of(const OptIn& array, const char* what);   // empty view for None
TensorView view_of(const OptOut& array, const char* what);  // empty view for None

// The checks every op makes of a matrix input (dtype lowbit takes, rank 2, non-empty,
// unit column stride, rows apart, a byte span that fits), without the op: the Python
// layer runs them before it allocates large outputs.
void check_matrix_arg(const In& array, const char* what);

// `array`, which must be a contiguous byte buffer, re-typed as a vector of `dtype`
// (the packed weights are opaque bytes on the Python side).
TensorView bytes_as(const In& array, const char* what, DType dtype);
TensorView bytes_as(const Out& array, const char* what, DType dtype);

// A cudaStream_t passed from Python as an integer (0: the legacy default stream).
inline cuda_stream_t stream_of(std::uintptr_t stream) { return reinterpret_cast<cuda_stream_t>(stream); }

// Makes the device of a CUDA view current for the lifetime of the guard (the
// library launches on the current device), and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(const TensorView& view, int device_id);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

DType parse_dtype(const char* name);  // "f32" | "f16" | "bf16" | "i8" | "u8" | "i32"

}  // namespace lowbit::python

namespace nanobind::detail {

// In / Out: the fast paths, then nanobind's ndarray caster.
template <class Array, class Imported>
struct array_arg_caster {
  NB_TYPE_CASTER(Array, make_caster<Imported>::Name)

  template <class Flags>
  bool from_python(handle src, Flags flags, cleanup_list* cleanup) noexcept {
    if (lowbit::python::exchange_import(src, value)) return true;
    make_caster<Imported> base;
    const object capsule = lowbit::python::torch_capsule(src);
    if (!base.from_python(capsule.is_valid() ? handle(capsule) : src, flags, cleanup)) return false;
    value.imported = std::move(base.value);
    lowbit::python::describe_import(value);
    return true;
  }

  static handle from_cpp(const Array&, rv_policy, cleanup_list*) noexcept { return handle(); }  // arguments only
};

template <>
struct type_caster<lowbit::python::In> : array_arg_caster<lowbit::python::In, ndarray<ro>> {};
template <>
struct type_caster<lowbit::python::Out> : array_arg_caster<lowbit::python::Out, ndarray<>> {};

}  // namespace nanobind::detail
