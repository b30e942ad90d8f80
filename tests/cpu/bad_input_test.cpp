// Every kind of bad argument gets lowbit::Error naming it; nothing crashes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/expect_error.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

constexpr std::int64_t kRows = 8, kCols = 32;

struct Buffers {
  std::vector<float> x = std::vector<float>(kRows * kCols, 1.5f);
  std::vector<std::int8_t> codes = std::vector<std::int8_t>(kRows * kCols);
  std::vector<float> scales = std::vector<float>(kCols);
  std::vector<float> mins = std::vector<float>(kCols);
  std::vector<float> out = std::vector<float>(kRows * kCols);

  TensorView xv() { return TensorView::matrix(x.data(), DType::f32, Device::cpu, kRows, kCols); }
  QuantizedView q() {
    return {TensorView::matrix(codes.data(), DType::i8, Device::cpu, kRows, kCols),
            TensorView::vector(scales.data(), DType::f32, Device::cpu, kCols), TensorView{}};
  }
  TensorView outv() { return TensorView::matrix(out.data(), DType::f32, Device::cpu, kRows, kCols); }
};

const QuantSpec kChannel{QuantScheme::int8_symmetric, Granularity::per_channel, 0};

void run_quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& q) {
  quantize(x, spec, q, Workspace{}, nullptr);
}

TEST(BadInput, InputShapeAndType) {
  Buffers b;
  TensorView x = b.xv();
  x.shape[0] = 0;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kChannel, b.q()), "x: expected a non-empty shape");
  x = b.xv();
  x.shape[1] = -3;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kChannel, b.q()), "x: expected a non-empty shape");
  x = TensorView::vector(b.x.data(), DType::f32, Device::cpu, kCols);
  EXPECT_LOWBIT_ERROR(run_quantize(x, kChannel, b.q()), "x: expected a rank-2 tensor");
  x = b.xv();
  x.data = nullptr;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kChannel, b.q()), "x: data pointer is null");
  x = b.xv();
  x.dtype = DType::i32;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kChannel, b.q()), "x: expected dtype f32, f16 or bf16, got i32");
  x = TensorView::matrix(b.x.data(), DType::f32, Device::cpu, kRows, kCols, kCols - 1);
  EXPECT_LOWBIT_ERROR(run_quantize(x, kChannel, b.q()), "x: row stride 31 is smaller than the row length 32");
  x = b.xv();
  x.strides[1] = 2;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kChannel, b.q()), "x: expected unit column stride, got 2");
}

TEST(BadInput, OutputsAndParameters) {
  Buffers b;
  QuantizedView q = b.q();
  q.codes.dtype = DType::u8;
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "codes: expected dtype i8 for int8, got u8");
  q = b.q();
  q.codes.shape[1] = kCols - 1;
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "codes: expected shape [8, 32], got [8, 31]");
  q = b.q();
  q.codes.data = nullptr;
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "codes: data pointer is null");
  q = b.q();
  q.scales.shape[0] = kCols - 1;
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "scales: expected 32 elements, got 31");
  q = b.q();
  q.scales = TensorView::matrix(b.scales.data(), DType::f32, Device::cpu, 2, 16, 17);
  q.scales.shape[1] = 16;
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "scales: expected a contiguous tensor");
  q = b.q();
  q.scales.dtype = DType::f16;
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "scales: expected dtype f32, got f16");
  q = b.q();
  q.mins = TensorView::vector(b.mins.data(), DType::f32, Device::cpu, kCols);
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "mins: int8 (symmetric) has no mins");
  const QuantSpec int4{QuantScheme::int4_asymmetric, Granularity::per_channel, 0};
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  q = b.q();
  q.codes = TensorView::matrix(packed.data(), DType::u8, Device::cpu, kRows, kCols / 2);
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), int4, q), "mins: data pointer is null");
}

TEST(BadInput, GroupSize) {
  Buffers b;
  for (std::int64_t group : {0, 24, -16, 7}) {
    const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_group, group};
    EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), spec, b.q()), "spec.group_size: expected a positive multiple of 16");
  }
}

TEST(BadInput, AliasingOutputs) {
  Buffers b;
  QuantizedView q = b.q();
  q.codes.data = b.x.data();  // codes on top of the input
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "codes: overlaps x");
  q = b.q();
  q.scales.data = b.x.data() + 4;
  EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), kChannel, q), "scales: overlaps x");
  q = b.q();
  run_quantize(b.xv(), kChannel, q);
  TensorView out = b.outv();
  out.data = b.codes.data();
  out.dtype = DType::f32;
  EXPECT_LOWBIT_ERROR(dequantize(q, kChannel, out, nullptr), "out: overlaps codes");
}

TEST(BadInput, NonFiniteValuesAreNamed) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    for (const Granularity g : {Granularity::per_tensor, Granularity::per_channel, Granularity::per_token,
                                Granularity::per_group}) {
      for (const QuantScheme scheme : {QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric}) {
        Buffers b;
        b.x[5 * kCols + 17] = bad;
        const QuantSpec spec{scheme, g, 16};
        const QuantLayout layout = quant_layout(spec, kRows, kCols);
        std::vector<std::uint8_t> codes(static_cast<std::size_t>(kRows * layout.code_cols));
        std::vector<float> scales(static_cast<std::size_t>(layout.scale_count())), mins(scales.size());
        const bool int4 = scheme == QuantScheme::int4_asymmetric;
        const QuantizedView q{
            TensorView::matrix(codes.data(), int4 ? DType::u8 : DType::i8, Device::cpu, kRows, layout.code_cols),
            TensorView::vector(scales.data(), DType::f32, Device::cpu, layout.scale_count()),
            int4 ? TensorView::vector(mins.data(), DType::f32, Device::cpu, layout.scale_count()) : TensorView{}};
        EXPECT_LOWBIT_ERROR(run_quantize(b.xv(), spec, q), "at row 5, column 17");
      }
    }
  }
}

TEST(BadInput, DequantizeOutput) {
  Buffers b;
  run_quantize(b.xv(), kChannel, b.q());
  TensorView out = b.outv();
  out.dtype = DType::i8;
  EXPECT_LOWBIT_ERROR(dequantize(b.q(), kChannel, out, nullptr), "out: expected dtype f32, f16 or bf16, got i8");
  out = b.outv();
  out.shape[0] = kRows - 1;
  EXPECT_LOWBIT_ERROR(dequantize(b.q(), kChannel, out, nullptr), "codes: expected shape [7, 32], got [8, 32]");
}

TEST(BadInput, Names) {
  EXPECT_LOWBIT_ERROR(parse_scheme("int3"), "scheme: expected int8 or int4, got 'int3'");
  EXPECT_LOWBIT_ERROR(parse_granularity("row"), "granularity: expected tensor, channel, token or group, got 'row'");
  EXPECT_EQ(parse_scheme("int4"), QuantScheme::int4_asymmetric);
  EXPECT_EQ(parse_granularity("group"), Granularity::per_group);
}

TEST(BadInput, InputIsNotModified) {
  Buffers b;
  const std::vector<float> before = b.x;
  run_quantize(b.xv(), kChannel, b.q());
  EXPECT_EQ(b.x, before);
}

}  // namespace
}  // namespace lowbit::test
