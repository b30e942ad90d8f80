// The formats layer against hand-checked values and exhaustive sweeps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"

namespace lowbit::formats {
namespace {

std::uint16_t half_bits(float v) { return float_to_half(v).bits; }
std::uint16_t bf16_bits(float v) { return float_to_bf16(v).bits; }

TEST(Half, HandCheckedValues) {
  EXPECT_EQ(half_bits(0.0f), 0x0000);
  EXPECT_EQ(half_bits(-0.0f), 0x8000);
  EXPECT_EQ(half_bits(1.0f), 0x3c00);
  EXPECT_EQ(half_bits(-2.0f), 0xc000);
  EXPECT_EQ(half_bits(65504.0f), 0x7bff);              // largest finite
  EXPECT_EQ(half_bits(65519.0f), 0x7bff);              // rounds down to max
  EXPECT_EQ(half_bits(65520.0f), 0x7c00);              // rounds to inf
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(half_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp tie -> even (2)
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie between 1 and 1+2^-10 -> even
  EXPECT_EQ(half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(half_to_float(Half{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(Half{0x7bff}), 65504.0f);
  EXPECT_EQ(half_to_float(Half{0xfc00}), -std::numeric_limits<float>::infinity());
}

TEST(Half, EveryBitPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = half_to_float(Half{static_cast<std::uint16_t>(bits)});
    if (std::isnan(f)) {
      EXPECT_EQ(bits & 0x7c00u, 0x7c00u);
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    ASSERT_EQ(float_to_half(f).bits, bits) << "half bits " << std::hex << bits;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even (down)
  EXPECT_EQ(bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16_bits(1.0f + std::ldexp(1.0f, -7) + std::ldexp(1.0f, -12)), 0x3f81);
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = bf16_to_float(BFloat16{static_cast<std::uint16_t>(bits)});
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f).bits, bits);
    }
  }
}

TEST(Int8, EncodeDecodeEdges) {
  const float absmax = 3.7f;
  const float scale = int8_scale(absmax);
  const float inv = inverse_scale(scale);
  EXPECT_EQ(int8_encode(absmax, inv), 127);
  EXPECT_EQ(int8_encode(-absmax, inv), -127);
  EXPECT_EQ(int8_encode(0.0f, inv), 0);
  EXPECT_EQ(int8_encode(1e30f, inv), 127);    // clamped
  EXPECT_EQ(int8_encode(-1e30f, inv), -128);  // clamped to the format's range
  EXPECT_EQ(int8_encode(std::numeric_limits<float>::quiet_NaN(), inv), 0);
  EXPECT_EQ(int8_encode(2.5f, 1.0f), 2);   // ties to even
  EXPECT_EQ(int8_encode(3.5f, 1.0f), 4);
  EXPECT_EQ(int8_encode(-2.5f, 1.0f), -2);
  EXPECT_EQ(int8_decode(127, scale), 127.0f * scale);
  // A zero domain: scale 0, inverse 0, codes 0, values exactly 0.
  EXPECT_EQ(int8_scale(0.0f), 0.0f);
  EXPECT_EQ(inverse_scale(0.0f), 0.0f);
  EXPECT_EQ(int8_encode(0.0f, inverse_scale(0.0f)), 0);
  EXPECT_EQ(int8_decode(0, 0.0f), 0.0f);
  EXPECT_FALSE(std::signbit(int8_decode(0, 0.0f)));
  // Degenerate scales never give an infinite or NaN inverse.
  EXPECT_EQ(inverse_scale(std::numeric_limits<float>::denorm_min()), 0.0f);
  EXPECT_EQ(inverse_scale(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  EXPECT_EQ(inverse_scale(-1.0f), 0.0f);
}

TEST(Int8, EveryElementReconstructsWithinHalfAStep) {
  const float absmax = 10.0f;
  const float scale = int8_scale(absmax);
  for (int i = -1000; i <= 1000; ++i) {
    const float x = absmax * static_cast<float>(i) / 1000.0f;
    const float back = int8_decode(int8_encode(x, inverse_scale(scale)), scale);
    EXPECT_LE(std::fabs(back - x), 0.5f * scale * (1 + 1e-5f)) << x;
  }
}

TEST(Int4, EncodeDecodeEdges) {
  const float lo = -1.5f, hi = 6.0f;
  const float scale = int4_scale(lo, hi);
  EXPECT_FLOAT_EQ(scale, 0.5f);
  const float inv = inverse_scale(scale);
  EXPECT_EQ(int4_encode(lo, lo, inv), 0);
  EXPECT_EQ(int4_encode(hi, lo, inv), 15);
  EXPECT_EQ(int4_encode(100.0f, lo, inv), 15);
  EXPECT_EQ(int4_encode(-100.0f, lo, inv), 0);
  EXPECT_EQ(int4_encode(std::numeric_limits<float>::quiet_NaN(), lo, inv), 0);
  EXPECT_EQ(int4_decode(0, scale, lo), lo);
  EXPECT_EQ(int4_decode(15, scale, lo), hi);
  // All values equal: scale 0, code 0, value exactly the minimum.
  EXPECT_EQ(int4_scale(2.25f, 2.25f), 0.0f);
  EXPECT_EQ(int4_encode(2.25f, 2.25f, inverse_scale(0.0f)), 0);
  EXPECT_EQ(int4_decode(0, 0.0f, 2.25f), 2.25f);
  // A range near FLT_MAX does not overflow the scale.
  const float big = std::numeric_limits<float>::max();
  EXPECT_TRUE(std::isfinite(int4_scale(-big, big)));
  // -0.0 is stored as +0.0.
  EXPECT_FALSE(std::signbit(int4_min(-0.0f)));
  EXPECT_EQ(int4_min(-1.0f), -1.0f);
}

TEST(Int4, PacksLowNibbleFirst) {
  EXPECT_EQ(int4_pack(0x3, 0xa), 0xa3);
  EXPECT_EQ(int4_low(0xa3), 0x3);
  EXPECT_EQ(int4_high(0xa3), 0xa);
}

}  // namespace
}  // namespace lowbit::formats
