// Weight-only GEMM, host side: the packer (round trip through the layout's
// accessors, padding), the dequantized value (hand-checked, rounding ties and the
// double-rounding traps), the CPU reference against an independent FP64 loop on the
// unpacked inputs, awkward shapes, and the packer's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/expect_error.h"
#include "common/random.h"
#include "cpu/weight_only.h"
#include "formats/float16.h"
#include "formats/weight_pack.h"
#include "lowbit/weight_only.h"

namespace lowbit::test {
namespace {

using formats::BFloat16;
using formats::Half;

// The caller's (unpacked) quantized weight, and its packed form in host memory.
struct WeightCase {
  WeightOnlySpec spec;
  std::int64_t n = 0, k = 0, groups = 0;
  std::vector<std::uint8_t> codes;  // [N x ceil(K/2)] u8 or [N x K] i8
  std::vector<float> scales, mins;  // [N x groups]
  std::vector<std::uint8_t> packed_codes;
  std::vector<std::uint16_t> packed_scales, packed_mins;
  PackedWeights packed;

  std::int64_t code_cols() const { return spec.bits == 4 ? (k + 1) / 2 : k; }
  int code(std::int64_t row, std::int64_t col) const {  // the raw code (nibble, or i8 value)
    if (spec.bits == 8) return static_cast<std::int8_t>(codes[row * k + col]);
    return (codes[row * code_cols() + col / 2] >> (4 * (col % 2))) & 0xf;
  }
};

WeightCase random_case(Rng& rng, WeightOnlySpec spec, std::int64_t n, std::int64_t k) {
  WeightCase c;
  c.spec = spec;
  c.n = n;
  c.k = k;
  c.groups = (k + spec.group_size - 1) / spec.group_size;
  c.codes.resize(static_cast<std::size_t>(n * c.code_cols()));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : c.codes) b = static_cast<std::uint8_t>(byte(rng));
  // Scales of both signs and mins around them, moderate magnitudes (every exact
  // q * s + m then fits a double, which the FP64 loop below relies on).
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f), min(-0.5f, 0.5f);
  c.scales.resize(static_cast<std::size_t>(n * c.groups));
  for (auto& s : c.scales) s = scale(rng);
  if (spec.bits == 4 && spec.zero_point) {
    c.mins.resize(c.scales.size());
    for (auto& m : c.mins) m = min(rng);
  }
  return c;
}

void pack(WeightCase& c) {
  const PackedWeightSizes sizes = packed_weight_sizes(c.spec, c.n, c.k);
  c.packed_codes.assign(static_cast<std::size_t>(sizes.code_bytes), 0xa5);  // poison: all must be written
  c.packed_scales.assign(static_cast<std::size_t>(sizes.scale_count), 0xa5a5);
  c.packed_mins.assign(static_cast<std::size_t>(sizes.min_count), 0xa5a5);
  c.packed.spec = c.spec;
  c.packed.n = c.n;
  c.packed.k = c.k;
  c.packed.codes = TensorView::vector(c.packed_codes.data(), DType::u8, Device::cpu, sizes.code_bytes);
  c.packed.scales = TensorView::vector(c.packed_scales.data(), c.spec.act_dtype, Device::cpu, sizes.scale_count);
  if (sizes.min_count) {
    c.packed.mins = TensorView::vector(c.packed_mins.data(), c.spec.act_dtype, Device::cpu, sizes.min_count);
  }
  const TensorView codes = TensorView::matrix(c.codes.data(), c.spec.bits == 4 ? DType::u8 : DType::i8, Device::cpu,
                                              c.n, c.code_cols());
  const TensorView scales = TensorView::matrix(c.scales.data(), DType::f32, Device::cpu, c.n, c.groups);
  const TensorView mins =
      c.mins.empty() ? TensorView{} : TensorView::matrix(c.mins.data(), DType::f32, Device::cpu, c.n, c.groups);
  cpu::pack_weights(codes, scales, mins, c.packed);
}

formats::WeightPackLayout layout_of(const WeightCase& c) {
  return formats::make_weight_pack_layout(c.spec.bits, c.spec.zero_point, c.spec.group_size, c.n, c.k);
}

std::uint16_t to_act_bits(DType dtype, float value) {
  return dtype == DType::f16 ? formats::from_float<Half>(value).bits : formats::from_float<BFloat16>(value).bits;
}
double act_value(DType dtype, std::uint16_t bits) {
  return dtype == DType::f16 ? formats::to_float(Half{bits}) : formats::to_float(BFloat16{bits});
}

// Round to nearest even at the act dtype, found independently of the library's
// round-to-odd path: the nearest of three neighbouring codes, ties to the even one.
std::uint16_t nearest_act_bits(DType dtype, double v) {
  const std::uint16_t guess = to_act_bits(dtype, static_cast<float>(v));
  if (v == 0.0) return guess;
  if (std::isinf(act_value(dtype, guess))) {
    // The float cast may have rounded v up past the overflow threshold (double
    // rounding): v overflows only from max + half an ulp of max on (the tie goes to
    // inf, whose code is even).
    const auto max_bits = static_cast<std::uint16_t>(guess - 1);
    const double max = std::fabs(act_value(dtype, max_bits));
    const double half_ulp = (max - std::fabs(act_value(dtype, static_cast<std::uint16_t>(guess - 2)))) / 2;
    return std::fabs(v) < max + half_ulp ? max_bits : guess;
  }
  std::uint16_t best = guess;
  double best_error = std::fabs(act_value(dtype, guess) - v);
  for (int delta : {-1, 1}) {
    const auto candidate = static_cast<std::uint16_t>(guess + delta);
    const double value = act_value(dtype, candidate);
    if (std::isnan(value)) continue;
    const double error = std::fabs(value - v);
    if (error < best_error || (error == best_error && (candidate & 1) == 0)) {
      best = candidate;
      best_error = error;
    }
  }
  return best;
}

const WeightOnlySpec kForms[] = {
    {4, 32, true, DType::f16},  {4, 64, false, DType::f16}, {8, 128, false, DType::f16},
    {4, 128, true, DType::bf16}, {4, 32, false, DType::bf16}, {8, 64, false, DType::bf16},
};

// ---- packer ----

TEST(WeightOnlyPack, RoundTripThroughTheAccessors) {
  LOWBIT_TEST_RNG(rng);
  struct Shape {
    std::int64_t n, k;
  };
  for (const WeightOnlySpec& form : kForms) {
    for (const Shape shape : {Shape{1, 1}, Shape{7, 33}, Shape{9, 129}, Shape{16, 256}, Shape{13, 300}}) {
      for (const std::int64_t group : {form.group_size, shape.k}) {
        WeightOnlySpec spec = form;
        spec.group_size = group;
        SCOPED_TRACE(testing::Message() << "bits " << spec.bits << " zero_point " << spec.zero_point << " group "
                                        << group << " " << dtype_name(spec.act_dtype) << " N " << shape.n << " K "
                                        << shape.k);
        WeightCase c = random_case(rng, spec, shape.n, shape.k);
        pack(c);
        const formats::WeightPackLayout layout = layout_of(c);
        std::vector<bool> code_seen(c.packed_codes.size() * 2, false);
        for (std::int64_t n = 0; n < c.n; ++n) {
          for (std::int64_t k = 0; k < c.k; ++k) {
            const auto [byte, shift] = layout.code_place(n, k);
            ASSERT_LT(byte, static_cast<std::int64_t>(c.packed_codes.size()));
            ASSERT_FALSE(code_seen[byte * 2 + shift / 4]) << "two weights share a code slot at n " << n << " k " << k;
            code_seen[byte * 2 + shift / 4] = true;
            const int stored = (c.packed_codes[byte] >> shift) & (spec.bits == 8 ? 0xff : 0xf);
            const int want = spec.bits == 8 ? c.code(n, k) : (spec.zero_point ? c.code(n, k) : c.code(n, k) - 8);
            ASSERT_EQ(formats::weight_code_value(layout, stored), want) << "n " << n << " k " << k;
            const std::int64_t s = layout.scale_index(n, layout.group_of(k));
            const std::int64_t g = k / spec.group_size;
            ASSERT_EQ(c.packed_scales[s], to_act_bits(spec.act_dtype, c.scales[n * c.groups + g]));
            if (!c.mins.empty()) {
              ASSERT_EQ(c.packed_mins[s], to_act_bits(spec.act_dtype, c.mins[n * c.groups + g]));
            }
          }
        }
        // Padding: every code slot no weight owns holds the zero code; scales and
        // mins of padded rows and groups are zero.
        const int zero_code = spec.bits == 8 ? 0x80 : (layout.zero_point ? 0 : 8);
        for (std::size_t slot = 0; slot < code_seen.size(); ++slot) {
          if (code_seen[slot]) continue;
          const std::uint8_t byte = c.packed_codes[slot / 2];
          const int stored = spec.bits == 8 ? byte : (byte >> (4 * (slot % 2))) & 0xf;
          if (spec.bits == 8 && slot % 2) continue;  // one slot per byte
          ASSERT_EQ(stored, zero_code) << "padded code slot " << slot;
        }
        std::vector<bool> scale_seen(c.packed_scales.size(), false);
        for (std::int64_t n = 0; n < c.n; ++n) {
          for (std::int64_t k = 0; k < c.k; ++k) scale_seen[layout.scale_index(n, layout.group_of(k))] = true;
        }
        for (std::size_t i = 0; i < scale_seen.size(); ++i) {
          if (scale_seen[i]) continue;
          ASSERT_EQ(c.packed_scales[i], 0) << "padded scale " << i;
          if (!c.mins.empty()) {
            ASSERT_EQ(c.packed_mins[i], 0) << "padded min " << i;
          }
        }
      }
    }
  }
}

TEST(WeightOnlyPack, SizesArePaddedToUnits) {
  const PackedWeightSizes q41 = packed_weight_sizes({4, 32, true, DType::f16}, 28672, 8192);
  EXPECT_EQ(q41.code_bytes, 28672LL * 8192 / 2);
  EXPECT_EQ(q41.scale_count, 28672LL * 8192 / 32);
  EXPECT_EQ(q41.min_count, q41.scale_count);
  const PackedWeightSizes odd = packed_weight_sizes({8, 100, false, DType::bf16}, 9, 100);  // per channel
  EXPECT_EQ(odd.code_bytes, 16 * 128);
  EXPECT_EQ(odd.scale_count, 16);
  EXPECT_EQ(odd.min_count, 0);
  const PackedWeightSizes q40 = packed_weight_sizes({4, 64, false, DType::f16}, 1, 129);
  EXPECT_EQ(q40.code_bytes, 2 * 512);
  EXPECT_EQ(q40.scale_count, 8 * 4);
  EXPECT_EQ(q40.min_count, 0);
}

TEST(WeightOnlyPack, RejectsWhatTheFormatCannotTake) {
  EXPECT_LOWBIT_ERROR(packed_weight_sizes({4, 48, true, DType::f16}, 8, 96), "spec.group_size: expected 32, 64, 128 or K");
  EXPECT_LOWBIT_ERROR(packed_weight_sizes({4, 256, true, DType::f16}, 8, 1000), "spec.group_size");
  EXPECT_LOWBIT_ERROR(packed_weight_sizes({5, 32, true, DType::f16}, 8, 64), "spec.bits: expected 4 or 8");
  EXPECT_LOWBIT_ERROR(packed_weight_sizes({4, 32, true, DType::f32}, 8, 64), "spec.act_dtype");
  EXPECT_LOWBIT_ERROR(packed_weight_sizes({4, 32, true, DType::f16}, 0, 64), "N, K >= 1");

  LOWBIT_TEST_RNG(rng);
  WeightCase c = random_case(rng, {4, 32, false, DType::f16}, 8, 64);
  std::vector<float> mins(c.scales.size(), 0.0f);
  const PackedWeightSizes sizes = packed_weight_sizes(c.spec, c.n, c.k);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(sizes.code_bytes));
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(sizes.scale_count));
  PackedWeights out{c.spec, c.n, c.k, TensorView::vector(codes.data(), DType::u8, Device::cpu, sizes.code_bytes),
                    TensorView::vector(scales.data(), DType::f16, Device::cpu, sizes.scale_count), TensorView{}};
  const TensorView in_codes = TensorView::matrix(c.codes.data(), DType::u8, Device::cpu, 8, 32);
  const TensorView in_scales = TensorView::matrix(c.scales.data(), DType::f32, Device::cpu, 8, 2);
  EXPECT_LOWBIT_ERROR(cpu::pack_weights(in_codes, in_scales,
                                        TensorView::matrix(mins.data(), DType::f32, Device::cpu, 8, 2), out),
                      "mins: expected empty");
  EXPECT_LOWBIT_ERROR(cpu::pack_weights(in_codes, TensorView::matrix(c.scales.data(), DType::f32, Device::cpu, 8, 1),
                                        TensorView{}, out),
                      "scales: expected f32 [8 x 2]");
  EXPECT_LOWBIT_ERROR(cpu::pack_weights(TensorView::matrix(c.codes.data(), DType::u8, Device::cpu, 8, 64), in_scales,
                                        TensorView{}, out),
                      "codes: expected [8 x 32]");
}

// ---- the dequantized value ----

TEST(WeightOnlyDequant, HandCheckedValues) {
  const auto h = [](float v) { return formats::from_float<Half>(v); };
  const auto b = [](float v) { return formats::from_float<BFloat16>(v); };
  // Q4_1: 3 * 0.5 - 1 = 0.5; Q4_0 code 11: (11 - 8) * 0.25; INT8: -128 * 0.5.
  EXPECT_EQ(formats::dequant_weight<Half>(3, h(0.5f), h(-1.0f)).bits, h(0.5f).bits);
  EXPECT_EQ(formats::dequant_weight<BFloat16>(3, b(0.5f), b(-1.0f)).bits, b(0.5f).bits);
  EXPECT_EQ(formats::dequant_weight<Half>(11 - 8, h(0.25f)).bits, h(0.75f).bits);
  EXPECT_EQ(formats::dequant_weight<Half>(-128, h(0.5f)).bits, h(-64.0f).bits);
  EXPECT_EQ(formats::dequant_weight<BFloat16>(-128, b(0.5f)).bits, b(-64.0f).bits);

  // f16 ties: 3 * 683 = 2049 lies halfway between the halves 2048 (even) and 2050.
  EXPECT_EQ(formats::dequant_weight<Half>(3, h(683.0f)).bits, h(2048.0f).bits);          // tie: to even
  EXPECT_EQ(formats::dequant_weight<Half>(-3, h(683.0f)).bits, h(-2048.0f).bits);        // Q4_0 code 5
  EXPECT_EQ(formats::dequant_weight<Half>(3, h(683.0f), h(0.0f)).bits, h(2048.0f).bits);
  // A min of 2^-24 (the smallest subnormal half) breaks the tie upwards. Rounding the
  // exact sum to float first would land on the tie (2049) and then on 2048: the
  // double rounding the definition forbids (__hfma2 rounds once).
  const Half tiny_h{0x0001};
  EXPECT_EQ(formats::dequant_weight<Half>(3, h(683.0f), tiny_h).bits, h(2050.0f).bits);
  EXPECT_EQ(formats::dequant_weight<Half>(3, h(683.0f), Half{0x8001}).bits, h(2048.0f).bits);
  // 1 + 3 * 2^-11 is a tie between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(formats::dequant_weight<Half>(3, h(std::ldexp(1.0f, -11)), h(1.0f)).bits, h(1.0f + std::ldexp(1.0f, -9)).bits);

  // bf16 ties: 3 * 99 = 297 lies halfway between 296 (even) and 298.
  EXPECT_EQ(formats::dequant_weight<BFloat16>(3, b(99.0f)).bits, b(296.0f).bits);
  EXPECT_EQ(formats::dequant_weight<BFloat16>(3, b(99.0f), b(std::ldexp(1.0f, -20))).bits, b(298.0f).bits);
  EXPECT_EQ(formats::dequant_weight<BFloat16>(3, b(99.0f), b(-std::ldexp(1.0f, -20))).bits, b(296.0f).bits);
  // A min so small that 297 + m is not even a double: the TwoSum path must keep it.
  EXPECT_EQ(formats::dequant_weight<BFloat16>(3, b(99.0f), b(std::ldexp(1.0f, -100))).bits, b(298.0f).bits);
  // Overflow: 15 * (bf16 max) rounds to inf; f16: 15 * 65504 too.
  EXPECT_EQ(formats::dequant_weight<BFloat16>(15, BFloat16{0x7f7f}).bits, 0x7f80);
  EXPECT_EQ(formats::dequant_weight<Half>(15, Half{0x7bff}).bits, 0x7c00);
  // Subnormal results are kept, not flushed: 1 * 2^-24 (f16), 3 * 2^-133 (bf16).
  EXPECT_EQ(formats::dequant_weight<Half>(1, tiny_h).bits, 0x0001);
  EXPECT_EQ(formats::dequant_weight<BFloat16>(3, BFloat16{0x0001}, BFloat16{0x0000}).bits, 0x0003);
}

// Every (q, s, m) over a sweep agrees with the independent nearest-even search.
TEST(WeightOnlyDequant, MatchesNearestEvenOfTheExactValue) {
  LOWBIT_TEST_RNG(rng);
  std::uniform_int_distribution<int> bits16(0, 0xffff);
  for (int i = 0; i < 200000; ++i) {
    const int q = static_cast<int>(bits16(rng) % 16);
    const auto sb = static_cast<std::uint16_t>(bits16(rng)), mb = static_cast<std::uint16_t>(bits16(rng));
    for (const DType dtype : {DType::f16, DType::bf16}) {
      const double s = act_value(dtype, sb), m = act_value(dtype, mb);
      if (!std::isfinite(s) || !std::isfinite(m)) continue;
      const double exact = q * s + m;  // exact in double when the exponents are close
      // ilogb(0) is INT_MIN: the difference in double, where it cannot overflow.
      const double exponent_gap = static_cast<double>(std::ilogb(q * s + 0.0)) - std::ilogb(m + 0.0);
      if (dtype == DType::bf16 && std::fabs(exponent_gap) > 40) continue;
      const std::uint16_t got = dtype == DType::f16 ? formats::dequant_weight<Half>(q, Half{sb}, Half{mb}).bits
                                                    : formats::dequant_weight<BFloat16>(q, BFloat16{sb}, BFloat16{mb}).bits;
      const std::uint16_t want = nearest_act_bits(dtype, exact);
      if (exact == 0.0) {
        ASSERT_EQ(act_value(dtype, got), 0.0);
        continue;
      }
      ASSERT_EQ(got, want) << dtype_name(dtype) << " q " << q << " s 0x" << std::hex << sb << " m 0x" << mb;
    }
  }
}

// ---- the CPU reference ----

// X [M x K] in the act dtype, as raw bits.
std::vector<std::uint16_t> random_x(Rng& rng, DType dtype, std::int64_t count) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(count));
  for (auto& v : x) v = to_act_bits(dtype, value(rng));
  return x;
}

TEST(WeightOnlyReference, MatchesAnFp64LoopOnTheUnpackedInputs) {
  LOWBIT_TEST_RNG(rng);
  struct Shape {
    std::int64_t n, k;
  };
  for (const WeightOnlySpec& form : kForms) {
    for (const Shape shape : {Shape{1, 1}, Shape{13, 100}, Shape{33, 257}, Shape{8, 128}}) {
      for (const std::int64_t m_rows : {1, 3, 16, 17, 100}) {
        for (const bool with_bias : {false, true}) {
          WeightOnlySpec spec = form;
          if (shape.k < spec.group_size && m_rows == 3) spec.group_size = shape.k;  // per channel too
          SCOPED_TRACE(testing::Message() << "bits " << spec.bits << " zero_point " << spec.zero_point << " group "
                                          << spec.group_size << " " << dtype_name(spec.act_dtype) << " M " << m_rows
                                          << " N " << shape.n << " K " << shape.k << " bias " << with_bias);
          WeightCase c = random_case(rng, spec, shape.n, shape.k);
          pack(c);
          const DType dt = spec.act_dtype;
          const std::int64_t ldx = shape.k + 3, ldo = shape.n + 5;  // padded rows
          std::vector<std::uint16_t> x = random_x(rng, dt, m_rows * ldx);
          std::vector<std::uint16_t> bias = random_x(rng, dt, shape.n);
          std::vector<std::uint16_t> out(static_cast<std::size_t>(m_rows * ldo), 0xffff);
          cpu::weight_only_gemm(TensorView::matrix(x.data(), dt, Device::cpu, m_rows, shape.k, ldx), c.packed,
                                with_bias ? TensorView::vector(bias.data(), dt, Device::cpu, shape.n) : TensorView{},
                                TensorView::matrix(out.data(), dt, Device::cpu, m_rows, shape.n, ldo));
          // FP64 loop over the caller's inputs: w = RNE(q * s + m) with s, m first
          // rounded to the act dtype (what the packer stores); sum in k order.
          for (std::int64_t n = 0; n < shape.n; ++n) {
            std::vector<double> w(static_cast<std::size_t>(shape.k));
            for (std::int64_t k = 0; k < shape.k; ++k) {
              const std::int64_t g = k / spec.group_size;
              const double s = act_value(dt, to_act_bits(dt, c.scales[n * c.groups + g]));
              const double mn = c.mins.empty() ? 0.0 : act_value(dt, to_act_bits(dt, c.mins[n * c.groups + g]));
              const int q = spec.bits == 4 && !spec.zero_point ? c.code(n, k) - 8 : c.code(n, k);
              w[k] = act_value(dt, nearest_act_bits(dt, q * s + mn));
            }
            for (std::int64_t m = 0; m < m_rows; ++m) {
              double acc = 0.0;
              for (std::int64_t k = 0; k < shape.k; ++k) acc += act_value(dt, x[m * ldx + k]) * w[k];
              if (with_bias) acc += act_value(dt, bias[n]);
              const std::uint16_t got = out[m * ldo + n];
              ASSERT_EQ(got, nearest_act_bits(dt, acc)) << "m " << m << " n " << n << ": got " << act_value(dt, got)
                                                        << ", FP64 " << acc;
            }
          }
          // Row padding of out untouched.
          for (std::int64_t m = 0; m < m_rows; ++m) {
            for (std::int64_t j = shape.n; j < ldo; ++j) ASSERT_EQ(out[m * ldo + j], 0xffff);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lowbit::test
