// Outputs that alias inputs (or other outputs) are rejected by every entry point's one
// check (core::check_no_aliasing), naming both, before anything is written.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/expect_error.h"
#include "lowbit/gemm.h"
#include "lowbit/quant.h"
#include "lowbit/weight_only.h"

namespace lowbit::test {
namespace {

TEST(Aliasing, Int8GemmOutputAgainstEveryInput) {
  std::vector<std::int8_t> a(4 * 32, 1), b(32 * 8, 1);
  std::vector<float> out(4 * 8 + 8, 0.0f), scale_b(8, 1.0f);
  const TensorView av = TensorView::matrix(a.data(), DType::i8, Device::cpu, 4, 32);
  const TensorView bv = TensorView::matrix(b.data(), DType::i8, Device::cpu, 32, 8);
  GemmEpilogue e;
  e.scale_b = TensorView::vector(out.data() + 4 * 8 - 2, DType::f32, Device::cpu, 8);  // inside out's last row
  const TensorView ov = TensorView::matrix(out.data(), DType::f32, Device::cpu, 4, 8);
  EXPECT_LOWBIT_ERROR(int8_gemm(av, bv, BLayout::k_by_n, ov, e, nullptr), "out: overlaps epilogue.scale_b");
  e = GemmEpilogue{};
  e.bias = TensorView::vector(out.data(), DType::f32, Device::cpu, 8);
  EXPECT_LOWBIT_ERROR(int8_gemm(av, bv, BLayout::k_by_n, ov, e, nullptr), "out: overlaps epilogue.bias");
}

TEST(Aliasing, WeightOnlyGemmAndPackWeights) {
  const WeightOnlySpec spec{4, 32, true, DType::f16};
  const std::int64_t n = 8, k = 64;
  const PackedWeightSizes sizes = packed_weight_sizes(spec, n, k);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(sizes.code_bytes));
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(sizes.scale_count)), mins(scales.size());
  const PackedWeights w{spec, n, k, TensorView::vector(codes.data(), DType::u8, Device::cpu, sizes.code_bytes),
                        TensorView::vector(scales.data(), DType::f16, Device::cpu, sizes.scale_count),
                        TensorView::vector(mins.data(), DType::f16, Device::cpu, sizes.min_count)};
  std::vector<std::uint16_t> x(2 * k, 0x3c00);
  const TensorView xv = TensorView::matrix(x.data(), DType::f16, Device::cpu, 2, k);
  // out (2 x 8 f16) laid over the packed scales.
  EXPECT_LOWBIT_ERROR(
      weight_only_gemm(xv, w, TensorView{}, TensorView::matrix(scales.data(), DType::f16, Device::cpu, 2, n), nullptr),
      "out: overlaps w.scales");
  // pack_weights: an output over one of its inputs, and two outputs over each other.
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(n * k / 2), 0x11);
  std::vector<float> raw_scales(static_cast<std::size_t>(n * 2), 1.0f), raw_mins(raw_scales.size(), 0.0f);
  const TensorView rc = TensorView::matrix(raw.data(), DType::u8, Device::cpu, n, k / 2);
  const TensorView rs = TensorView::vector(raw_scales.data(), DType::f32, Device::cpu, n * 2);
  const TensorView rm = TensorView::vector(raw_mins.data(), DType::f32, Device::cpu, n * 2);
  PackedWeights over_input = w;
  over_input.codes = TensorView::vector(raw.data(), DType::u8, Device::cpu, sizes.code_bytes);
  EXPECT_LOWBIT_ERROR(pack_weights(rc, rs, rm, over_input), "out.codes: overlaps codes");
  PackedWeights over_output = w;
  over_output.mins = TensorView::vector(scales.data(), DType::f16, Device::cpu, sizes.min_count);
  EXPECT_LOWBIT_ERROR(pack_weights(rc, rs, rm, over_output), "out.mins: overlaps out.scales");
}

TEST(Aliasing, QuantizeOutputsAgainstEachOtherAndTheInput) {
  const QuantSpec spec{QuantScheme::int4_asymmetric, Granularity::per_token, 0};
  std::vector<float> x(4 * 32, 1.0f), params(16);
  std::vector<std::uint8_t> codes(4 * 16);
  const TensorView xv = TensorView::matrix(x.data(), DType::f32, Device::cpu, 4, 32);
  QuantizedView q{TensorView::matrix(codes.data(), DType::u8, Device::cpu, 4, 16),
                  TensorView::vector(params.data(), DType::f32, Device::cpu, 4),
                  TensorView::vector(params.data() + 2, DType::f32, Device::cpu, 4)};
  EXPECT_LOWBIT_ERROR(quantize(xv, spec, q, Workspace{}, nullptr), "mins: overlaps scales");
  q.mins = TensorView::vector(params.data() + 8, DType::f32, Device::cpu, 4);
  // quantize_with_scales reads scales and mins: codes must not cover them.
  q.codes = TensorView::matrix(reinterpret_cast<std::uint8_t*>(params.data()), DType::u8, Device::cpu, 4, 16);
  EXPECT_LOWBIT_ERROR(quantize_with_scales(xv, spec, q, nullptr), "codes: overlaps scales");
}

}  // namespace
}  // namespace lowbit::test
