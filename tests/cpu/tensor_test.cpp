#include <gtest/gtest.h>

#include "lowbit/tensor.h"

namespace lowbit {
namespace {

TEST(TensorView, MatrixHelpers) {
  float data[24];
  const TensorView m = TensorView::matrix(data, DType::f32, Device::cpu, 3, 5, 8);
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.rows(), 3);
  EXPECT_EQ(m.cols(), 5);
  EXPECT_EQ(m.row_stride(), 8);
  EXPECT_EQ(m.numel(), 15);
  EXPECT_FALSE(m.is_contiguous());
  EXPECT_EQ(m.span_bytes(), (2 * 8 + 5) * 4u);
  EXPECT_EQ(m.describe(), "f32[3x5] row_stride 8 on cpu");
  const TensorView c = TensorView::matrix(data, DType::bf16, Device::cuda, 4, 6);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.span_bytes(), 48u);
  EXPECT_EQ(c.describe(), "bf16[4x6] on cuda");
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
}

}  // namespace
}  // namespace lowbit
