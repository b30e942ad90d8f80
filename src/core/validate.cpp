#include "core/validate.h"

#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "core/device.h"
#endif

namespace lowbit::core {

bool is_float_dtype(DType dtype) { return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16; }

void check_dim(std::int64_t value, const char* what) {
  constexpr std::int64_t kMaxDim = 0x7fffffff;
  LOWBIT_CHECK(value >= 1 && value <= kMaxDim, what, ": expected 1 <= ", what, " <= ", kMaxDim, ", got ", value);
}

void check_dtype(const TensorView& view, const char* what, DType expected) {
  LOWBIT_CHECK(view.dtype == expected, what, ": expected dtype ", dtype_name(expected), ", got ",
               dtype_name(view.dtype));
}

void check_matrix(const TensorView& view, const char* what, std::int64_t rows, std::int64_t cols) {
  LOWBIT_CHECK(view.rank == 2, what, ": expected a rank-2 tensor, got rank ", view.rank);
  LOWBIT_CHECK(view.shape[0] == rows && view.shape[1] == cols, what, ": expected shape [", rows, ", ",
               cols, "], got [", view.shape[0], ", ", view.shape[1], "]");
  LOWBIT_CHECK(view.strides[1] == 1, what, ": expected unit column stride, got ", view.strides[1]);
  LOWBIT_CHECK(view.strides[0] >= cols, what, ": row stride ", view.strides[0],
               " is smaller than the row length ", cols, " (rows would overlap)");
  LOWBIT_CHECK(view.data != nullptr, what, ": data pointer is null");
}

void check_vector(const TensorView& view, const char* what, DType dtype, std::int64_t count) {
  LOWBIT_CHECK(view.data != nullptr, what, ": data pointer is null");
  check_dtype(view, what, dtype);
  LOWBIT_CHECK(view.numel() == count, what, ": expected ", count, " elements, got ", view.numel(), " (",
               view.describe(), ")");
  LOWBIT_CHECK(view.is_contiguous(), what, ": expected a contiguous tensor, got ", view.describe());
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(view.data) % dtype_size(view.dtype) == 0, what, ": data pointer ",
               view.data, " is not aligned to its ", dtype_size(view.dtype), "-byte elements");
}

bool overlaps(const TensorView& a, const TensorView& b) {
  if (!a.data || !b.data || a.empty() || b.empty()) return false;
  const auto* a0 = static_cast<const char*>(a.data);
  const auto* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.span_bytes() && b0 < a0 + a.span_bytes();
}

void check_no_overlap(const TensorView& input, const char* input_name, const TensorView& output,
                      const char* output_name) {
  LOWBIT_CHECK(!overlaps(input, output), output_name, ": overlaps ", input_name,
               " in memory; the output must not alias the input");
}

void check_same_device(Device device, const TensorView& view, const char* what) {
  LOWBIT_CHECK(view.device == device, what, ": on ", device_name(view.device), " but the input is on ",
               device_name(device));
}

void check_device_data(const TensorView& view, const char* what) { check_device_data(view.data, what); }

void check_device_data(const void* data, const char* what) {
#if LOWBIT_WITH_CUDA
  if (data) check_device_pointer(data, what);
#else
  (void)data, (void)what;
#endif
}

void check_workspace(const Workspace& workspace, std::size_t needed, const char* sizer) {
  LOWBIT_CHECK(workspace.bytes >= needed, "workspace: expected at least ", needed, " bytes, got ", workspace.bytes,
               " (see ", sizer, ")");
  LOWBIT_CHECK(needed == 0 || workspace.data != nullptr, "workspace: data pointer is null (see ", sizer, ")");
  if (needed) check_device_data(workspace.data, "workspace");
}

void fail_no_cuda(const char* what) {
  LOWBIT_FAIL(what, ": tensors are on cuda but this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
}

}  // namespace lowbit::core
