// DLPack arrays (nanobind ndarrays from NumPy, PyTorch, CuPy, ...) as lowbit
// TensorViews, and the other small conversions every binding needs.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "lowbit/tensor.h"

namespace lowbit::python {

namespace nb = nanobind;

// The arrays an op reads (read-only ones accepted) and writes (must be writable):
// nanobind ndarrays, taken by the casters at the end of this file, which export a plain
// torch tensor through torch's C to_dlpack (see set_torch_export).
struct In : nb::ndarray<nb::ro> {
  In() = default;
  explicit In(nb::ndarray<nb::ro>&& array) : nb::ndarray<nb::ro>(std::move(array)) {}
};
struct Out : nb::ndarray<> {
  Out() = default;
  explicit Out(nb::ndarray<>&& array) : nb::ndarray<>(std::move(array)) {}
};
using OptIn = std::optional<In>;
using OptOut = std::optional<Out>;

// Host cost per call (issue 6): nanobind's ndarray caster exports a torch tensor by
// calling the Python-level Tensor.__dlpack__ (3-4 us a tensor); torch's C to_dlpack
// makes the same capsule (same memory, no synchronization) in ~0.3 us. Once torch is
// in use, the Python layer passes torch.Tensor, torch.nn.Parameter and to_dlpack here;
// tensors of exactly those types then go through it, anything else (NumPy, CuPy,
// subclasses) through nanobind's own import.
void set_torch_export(nb::handle tensor_type, nb::handle parameter_type, nb::handle to_dlpack);
// The DLPack capsule of src if it is a plain torch tensor that to_dlpack takes, else
// an invalid object (nanobind then tries src itself and reports what it cannot take).
nb::object torch_capsule(nb::handle src) noexcept;

// A view of `array` (shape and strides in elements); throws lowbit::Error naming
// `what` when its dtype, device or rank is not one lowbit takes.
TensorView view_of(const In& array, const char* what);
TensorView view_of(const Out& array, const char* what);
TensorView view_of(const OptIn& array, const char* what);   // empty view for None
TensorView view_of(const OptOut& array, const char* what);  // empty view for None

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

// The device id of an array (0 for host arrays).
inline int device_id_of(const In& array) { return array.device_id(); }
inline int device_id_of(const Out& array) { return array.device_id(); }

DType parse_dtype(const char* name);  // "f32" | "f16" | "bf16" | "i8" | "u8" | "i32"

}  // namespace lowbit::python

namespace nanobind::detail {

// In / Out / their optionals: a plain torch tensor as its to_dlpack capsule, then
// nanobind's ndarray caster.
template <class Array, class Base>
struct torch_first_caster {
  NB_TYPE_CASTER(Array, make_caster<Base>::Name)

  template <class Flags>
  bool from_python(handle src, Flags flags, cleanup_list* cleanup) noexcept {
    make_caster<Base> base;
    const object capsule = lowbit::python::torch_capsule(src);
    if (!base.from_python(capsule.is_valid() ? handle(capsule) : src, flags, cleanup)) return false;
    value = Array(std::move(base.value));
    return true;
  }

  static handle from_cpp(const Array& array, rv_policy policy, cleanup_list* cleanup) noexcept {
    return make_caster<Base>::from_cpp(array, policy, cleanup);
  }
};

template <>
struct type_caster<lowbit::python::In> : torch_first_caster<lowbit::python::In, ndarray<ro>> {};
template <>
struct type_caster<lowbit::python::Out> : torch_first_caster<lowbit::python::Out, ndarray<>> {};

}  // namespace nanobind::detail
