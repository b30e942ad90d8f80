// TensorView's helpers: element counts, contiguity, byte spans and descriptions.
#include <gtest/gtest.h>

#include "common/expect_error.h"
#include "lowbit/tensor.h"

namespace lowbit {
namespace {

TEST(TensorView, PaddedMatrix) {
  float data[24];
  const TensorView m = TensorView::matrix(data, DType::f32, Device::cpu, 3, 5, 8);
  EXPECT_EQ(m.data, data);
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.rows(), 3);
  EXPECT_EQ(m.cols(), 5);
  EXPECT_EQ(m.row_stride(), 8);
  EXPECT_EQ(m.strides[1], 1);
  EXPECT_EQ(m.numel(), 15);
  EXPECT_FALSE(m.empty());
  EXPECT_FALSE(m.is_contiguous());
  EXPECT_EQ(m.span_bytes(), (2 * 8 + 5) * 4u);  // up to the last element, not the last row's padding
  EXPECT_EQ(m.describe(), "f32[3x5] row_stride 8 on cpu");
}

TEST(TensorView, ContiguousMatrix) {
  char data[64];
  const TensorView c = TensorView::matrix(data, DType::bf16, Device::cuda, 4, 6);
  EXPECT_EQ(c.row_stride(), 6);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.numel(), 24);
  EXPECT_EQ(c.span_bytes(), 48u);
  EXPECT_EQ(c.describe(), "bf16[4x6] on cuda");
  // One row: its stride does not matter for contiguity, nor for the span.
  const TensorView row = TensorView::matrix(data, DType::i8, Device::cpu, 1, 7, 100);
  EXPECT_TRUE(row.is_contiguous());
  EXPECT_EQ(row.span_bytes(), 7u);
  EXPECT_EQ(row.describe(), "i8[1x7] row_stride 100 on cpu");
}

TEST(TensorView, VectorAndEmpty) {
  float data[7];
  const TensorView v = TensorView::vector(data, DType::f32, Device::cpu, 7);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.numel(), 7);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.span_bytes(), 28u);
  EXPECT_EQ(v.describe(), "f32[7] on cpu");
  const TensorView e = TensorView::matrix(data, DType::f16, Device::cpu, 0, 5);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.span_bytes(), 0u);
  EXPECT_EQ(e.describe(), "f16[0x5] on cpu");
  EXPECT_EQ(TensorView::vector(data, DType::u8, Device::cuda, 0).span_bytes(), 0u);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i8), 1u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(dtype_name(DType::i32), "i32");
  EXPECT_STREQ(device_name(Device::cuda), "cuda");
  EXPECT_LOWBIT_ERROR(dtype_size(static_cast<DType>(42)), "unknown dtype 42");
}

}  // namespace
}  // namespace lowbit
