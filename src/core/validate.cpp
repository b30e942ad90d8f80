#include "core/validate.h"

#include <cstdint>

#include "core/checked.h"
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

std::int64_t element_count(const TensorView& view, const char* what) {
  LOWBIT_CHECK(view.rank >= 0 && view.rank <= kMaxRank, what, ": rank ", view.rank, ", expected 0..", kMaxRank);
  std::int64_t count = 1;
  for (int i = 0; i < view.rank; ++i) {
    LOWBIT_CHECK(view.shape[i] >= 0, what, ": dimension ", i, " has a negative size, ", view.shape[i]);
    count = checked_mul(count, view.shape[i], what, ": element count at dimension ", i);
  }
  return count;
}

std::int64_t span_bytes(const TensorView& view, const char* what) {
  if (element_count(view, what) == 0) return 0;
  std::int64_t last = 0;  // offset of the last element, in elements
  for (int i = 0; i < view.rank; ++i) {
    if (view.shape[i] == 1) continue;  // its stride is never applied
    LOWBIT_CHECK(view.strides[i] >= 0, what, ": dimension ", i, " has a negative stride, ", view.strides[i]);
    const std::int64_t extent = checked_mul(view.shape[i] - 1, view.strides[i], what, ": dimension ", i,
                                            " (size ", view.shape[i], ", stride ", view.strides[i], ")");
    last = checked_add(last, extent, what, ": offset of the last element at dimension ", i);
  }
  const std::int64_t elements = checked_add(last, 1, what, ": elements spanned");
  return checked_mul(elements, static_cast<std::int64_t>(dtype_size(view.dtype)), what, ": bytes spanned (",
                     dtype_name(view.dtype), ")");
}

void check_view(const TensorView& view, const char* what) {
  const std::int64_t bytes = span_bytes(view, what);
  const auto begin = reinterpret_cast<std::uintptr_t>(view.data);
  LOWBIT_CHECK(static_cast<std::uint64_t>(bytes) <= UINTPTR_MAX - begin, what, ": ", bytes, " bytes from ", view.data,
               " run past the end of the address space");
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
  check_view(view, what);
}

void check_vector(const TensorView& view, const char* what, DType dtype, std::int64_t count) {
  LOWBIT_CHECK(view.data != nullptr, what, ": data pointer is null");
  check_dtype(view, what, dtype);
  check_view(view, what);
  LOWBIT_CHECK(view.numel() == count, what, ": expected ", count, " elements, got ", view.numel(), " (",
               view.describe(), ")");
  LOWBIT_CHECK(view.is_contiguous(), what, ": expected a contiguous tensor, got ", view.describe());
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(view.data) % dtype_size(view.dtype) == 0, what, ": data pointer ",
               view.data, " is not aligned to its ", dtype_size(view.dtype), "-byte elements");
}

bool overlaps(const TensorView& a, const TensorView& b) {
  if (!a.data || !b.data || a.empty() || b.empty()) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data), b0 = reinterpret_cast<std::uintptr_t>(b.data);
  return a0 < b0 + b.span_bytes() && b0 < a0 + a.span_bytes();
}

TensorView byte_view(const void* data, std::size_t bytes) {
  LOWBIT_CHECK(bytes <= static_cast<std::size_t>(INT64_MAX), "buffer of ", bytes, " bytes: larger than 2^63");
  return TensorView::vector(const_cast<void*>(data), DType::u8, Device::cpu, static_cast<std::int64_t>(bytes));
}

void check_no_aliasing(std::initializer_list<NamedView> outputs, std::initializer_list<NamedView> inputs) {
  check_no_aliasing(std::span<const NamedView>(outputs.begin(), outputs.size()),
                    std::span<const NamedView>(inputs.begin(), inputs.size()));
}

void check_no_aliasing(std::span<const NamedView> outputs, std::span<const NamedView> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    for (auto other = outputs.begin(); other != out; ++other) {
      LOWBIT_CHECK(!overlaps(out->view, other->view), out->name, ": overlaps ", other->name,
                   " in memory; outputs must not share bytes");
    }
    for (const NamedView& in : inputs) {
      LOWBIT_CHECK(!overlaps(out->view, in.view), out->name, ": overlaps ", in.name,
                   " in memory; an output must not alias an input");
    }
  }
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
