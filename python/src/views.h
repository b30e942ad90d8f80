// DLPack arrays (nanobind ndarrays from NumPy, PyTorch, CuPy, ...) as lowbit
// TensorViews, and the other small conversions every binding needs.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>

#include "lowbit/tensor.h"

namespace lowbit::python {

namespace nb = nanobind;

using In = nb::ndarray<nb::ro>;  // read by the op (read-only arrays accepted)
using Out = nb::ndarray<>;       // written by the op (must be writable)
using OptIn = std::optional<In>;
using OptOut = std::optional<Out>;

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
