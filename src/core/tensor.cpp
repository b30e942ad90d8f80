#include "lowbit/tensor.h"

#include "core/checked.h"
#include "core/validate.h"
#include "lowbit/error.h"

namespace lowbit {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  LOWBIT_FAIL("unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
  }
  return "unknown";
}

const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

TensorView TensorView::matrix(void* data, DType dtype, Device device, std::int64_t rows,
                              std::int64_t cols, std::int64_t row_stride) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.rank = 2;
  view.shape = {rows, cols, 1, 1};
  LOWBIT_CHECK(row_stride >= -1, "row_stride: expected >= 0, or -1 (the default) for contiguous rows, got ",
               row_stride);
  view.strides = {row_stride == -1 ? cols : row_stride, 1, 1, 1};
  return view;
}

TensorView TensorView::vector(void* data, DType dtype, Device device, std::int64_t length) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.rank = 1;
  view.shape = {length, 1, 1, 1};
  view.strides = {1, 1, 1, 1};
  return view;
}

std::int64_t TensorView::numel() const { return core::element_count(*this, "tensor"); }

bool TensorView::is_contiguous() const {
  (void)numel();  // throws for an invalid rank, a negative size or a count past 64 bits
  std::int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];  // a factor of numel(): cannot overflow
  }
  return true;
}

std::size_t TensorView::span_bytes() const { return static_cast<std::size_t>(core::span_bytes(*this, "tensor")); }

std::string TensorView::describe() const {
  if (rank < 0 || rank > kMaxRank) return detail::concat(dtype_name(dtype), " tensor of invalid rank ", rank);
  std::string out = detail::concat(dtype_name(dtype), '[');
  for (int i = 0; i < rank; ++i) out += detail::concat(i ? "x" : "", shape[i]);
  out += ']';
  if (rank == 2 && strides[0] != shape[1]) out += detail::concat(" row_stride ", strides[0]);
  return out + " on " + device_name(device);
}

}  // namespace lowbit
