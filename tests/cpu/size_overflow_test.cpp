// Sizes that do not fit 64 bits, strides that wrap, ranks past kMaxRank and products of
// configuration fields: each is an error that names the argument and the dimension,
// before anything is read, written or allocated.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/expect_error.h"
#include "lowbit/block_formats.h"
#include "lowbit/gemm.h"
#include "lowbit/quant.h"
#include "lowbit/quantized_attention.h"
#include "lowbit/weight_only.h"

namespace lowbit::test {
namespace {

constexpr std::int64_t k2to33 = std::int64_t{1} << 33, k2to62 = std::int64_t{1} << 62;
const QuantSpec kInt8Channel{QuantScheme::int8_symmetric, Granularity::per_channel, 0};

// A real buffer behind every view: a wrong size must be caught by the checks, not by a
// fault. Views claim more than it holds.
struct Buffers {
  std::vector<float> x = std::vector<float>(64, 1.0f), scales = std::vector<float>(64);
  std::vector<std::int8_t> codes = std::vector<std::int8_t>(256);
  QuantizedView q(std::int64_t rows, std::int64_t cols) {
    return {TensorView::matrix(codes.data(), DType::i8, Device::cpu, rows, cols),
            TensorView::vector(scales.data(), DType::f32, Device::cpu, cols), TensorView{}};
  }
};

TEST(SizeOverflow, TallInputIsRejectedNamingTheDimension) {
  Buffers b;
  const TensorView x = TensorView::matrix(b.x.data(), DType::f32, Device::cpu, k2to62, 4);
  EXPECT_LOWBIT_ERROR(quantize(x, kInt8Channel, b.q(k2to62, 4), Workspace{}, nullptr),
                      "x: element count at dimension 1: 4611686018427387904 x 4 does not fit");
  // 2^62 elements fit; their 2^64 bytes do not.
  const std::int64_t rows = std::int64_t{1} << 60;
  const TensorView x60 = TensorView::matrix(b.x.data(), DType::f32, Device::cpu, rows, 4);
  EXPECT_LOWBIT_ERROR(quantize(x60, kInt8Channel, b.q(rows, 4), Workspace{}, nullptr),
                      "x: bytes spanned (f32): 4611686018427387904 x 4 does not fit");
}

TEST(SizeOverflow, HugeSquareIsRejectedBeforeAnyAllocation) {
  Buffers b;
  const TensorView x = TensorView::matrix(b.x.data(), DType::f32, Device::cpu, k2to33, k2to33);
  EXPECT_LOWBIT_ERROR(quantize(x, kInt8Channel, b.q(k2to33, k2to33), Workspace{}, nullptr),
                      "x: element count at dimension 1: 8589934592 x 8589934592 does not fit");
}

TEST(SizeOverflow, WrappingRowStrideIsRejected) {
  std::vector<std::int8_t> a(8 * 32, 1), bm(32 * 8, 1);
  std::vector<std::int32_t> out(64, -1);
  const TensorView av = TensorView::matrix(a.data(), DType::i8, Device::cpu, 8, 32, k2to62);
  const TensorView bv = TensorView::matrix(bm.data(), DType::i8, Device::cpu, 32, 8);
  const TensorView ov = TensorView::matrix(out.data(), DType::i32, Device::cpu, 8, 8);
  EXPECT_LOWBIT_ERROR(int8_gemm(av, bv, BLayout::k_by_n, ov, GemmEpilogue{}, nullptr),
                      "a: dimension 0 (size 8, stride 4611686018427387904)");
  for (const std::int32_t v : out) ASSERT_EQ(v, -1) << "nothing may be written";
}

TEST(SizeOverflow, RankPastTheMaximumIsRejected) {
  Buffers b;
  TensorView scales = TensorView::vector(b.scales.data(), DType::f32, Device::cpu, 4);
  scales.rank = 7;
  const TensorView x = TensorView::matrix(b.x.data(), DType::f32, Device::cpu, 2, 4);
  QuantizedView q = b.q(2, 4);
  q.scales = scales;
  EXPECT_LOWBIT_ERROR(quantize(x, kInt8Channel, q, Workspace{}, nullptr), "scales: rank 7, expected 0..4");
  EXPECT_LOWBIT_ERROR(scales.numel(), "tensor: rank 7, expected 0..4");
  EXPECT_EQ(scales.describe(), "f32 tensor of invalid rank 7");
  scales.rank = -1;
  EXPECT_LOWBIT_ERROR(scales.span_bytes(), "tensor: rank -1");
}

TEST(SizeOverflow, NegativeSizesAndStridesAreRejected) {
  Buffers b;
  TensorView x = TensorView::matrix(b.x.data(), DType::f32, Device::cpu, 2, 4);
  x.strides[1] = -1;
  EXPECT_LOWBIT_ERROR(quantize(x, kInt8Channel, b.q(2, 4), Workspace{}, nullptr), "x: ");
  TensorView v = TensorView::vector(b.x.data(), DType::f32, Device::cpu, 4);
  v.strides[0] = -1;
  EXPECT_LOWBIT_ERROR(v.span_bytes(), "tensor: dimension 0 has a negative stride, -1");
  v.shape[0] = -4;
  EXPECT_LOWBIT_ERROR(v.numel(), "tensor: dimension 0 has a negative size, -4");
}

TEST(SizeOverflow, NegativeRowStrideIsAnErrorNotContiguous) {
  float data[8] = {};
  EXPECT_LOWBIT_ERROR(TensorView::matrix(data, DType::f32, Device::cpu, 2, 4, -64),
                      "row_stride: expected >= 0, or -1 (the default) for contiguous rows, got -64");
  EXPECT_EQ(TensorView::matrix(data, DType::f32, Device::cpu, 2, 4).row_stride(), 4);
  EXPECT_EQ(TensorView::matrix(data, DType::f32, Device::cpu, 2, 4, -1).row_stride(), 4);
}

TEST(SizeOverflow, LayoutHelpersCheckTheirProducts) {
  EXPECT_LOWBIT_ERROR(block_memory_bytes(BlockFormat::nf4, k2to62, k2to62), "block_layout: scale count");
  EXPECT_LOWBIT_ERROR(block_layout(BlockFormat::nvfp4, k2to62, 64), "block_layout: scale count");
  EXPECT_LOWBIT_ERROR(block_memory_bytes(BlockFormat::mxfp4, k2to33, k2to33), "block layout: code bytes");
  const QuantSpec group{QuantScheme::int4_asymmetric, Granularity::per_group, 16};
  EXPECT_LOWBIT_ERROR(quant_layout(group, k2to62, k2to62), "quant_layout: scale count");
  EXPECT_LOWBIT_ERROR(quant_layout(kInt8Channel, 0, 4), "quant_layout: expected a non-empty shape (rows, cols >= 1), got 0 x 4");
  const WeightOnlySpec w4{4, 32, true, DType::f16};
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(w4, k2to62, 128), "weight-only: N x K = 4611686018427387904 x 128");
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(w4, 128, k2to62), "expected N, K < 2^31");
}

TEST(SizeOverflow, HeadsTimesHeadDimIsChecked) {
  AttentionConfig c;
  c.seq_len = 16, c.d_model = 64, c.head_dim = 64, c.format = BlockFormat::nf4;
  c.heads = std::int64_t{1} << 58, c.kv_heads = 1;  // heads x 64 = 2^64: wraps to 0 unchecked
  EXPECT_LOWBIT_ERROR(check_attention_config(c), "heads x head_dim: 288230376151711744 x 64 does not fit");
  c.heads = std::int64_t{1} << 40;
  EXPECT_LOWBIT_ERROR(check_attention_config(c), "d_model and heads * head_dim: expected <= 65536");
  c.heads = std::int64_t{1} << 61, c.kv_heads = std::int64_t{1} << 61;
  EXPECT_LOWBIT_ERROR(attention_qkv_cols(c), "2 x kv_heads");
}

}  // namespace
}  // namespace lowbit::test
