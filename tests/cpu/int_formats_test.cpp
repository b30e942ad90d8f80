// INT8 (symmetric) and INT4 (asymmetric) element arithmetic: hand-checked edges,
// ties, degenerate scales, and sweeps over random domains.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "common/random.h"
#include "formats/int4.h"
#include "formats/int8.h"

namespace lowbit::formats {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMax = std::numeric_limits<float>::max();

TEST(InverseScale, DegenerateScalesGiveZero) {
  EXPECT_EQ(inverse_scale(0.0f), 0.0f);
  EXPECT_EQ(inverse_scale(-0.0f), 0.0f);
  EXPECT_EQ(inverse_scale(kNaN), 0.0f);
  EXPECT_EQ(inverse_scale(-1.0f), 0.0f);
  EXPECT_EQ(inverse_scale(kInf), 0.0f);
  EXPECT_EQ(inverse_scale(std::numeric_limits<float>::denorm_min()), 0.0f);  // 1/s overflows
  EXPECT_EQ(inverse_scale(std::ldexp(1.0f, -130)), 0.0f);
  EXPECT_EQ(inverse_scale(0.25f), 4.0f);
  EXPECT_EQ(inverse_scale(std::ldexp(1.0f, -126)), std::ldexp(1.0f, 126));
  EXPECT_EQ(inverse_scale(3.0f), 1.0f / 3.0f);
}

TEST(Int8, HandCheckedEdges) {
  const float absmax = 3.7f;
  const float scale = int8_scale(absmax);
  EXPECT_EQ(scale, 3.7f / 127.0f);
  const float inv = inverse_scale(scale);
  EXPECT_EQ(int8_encode(absmax, inv), 127);
  EXPECT_EQ(int8_encode(-absmax, inv), -127);
  EXPECT_EQ(int8_encode(0.0f, inv), 0);
  EXPECT_EQ(int8_encode(-0.0f, inv), 0);
  EXPECT_EQ(int8_encode(1e30f, inv), 127);    // clamped
  EXPECT_EQ(int8_encode(-1e30f, inv), -128);  // clamped to the format's range
  EXPECT_EQ(int8_encode(kInf, inv), 127);
  EXPECT_EQ(int8_encode(-kInf, inv), -128);
  EXPECT_EQ(int8_encode(kNaN, inv), 0);
  EXPECT_EQ(int8_encode(-kNaN, inv), 0);
  EXPECT_EQ(int8_decode(127, scale), 127.0f * scale);
  EXPECT_EQ(int8_decode(-128, scale), -128.0f * scale);
}

TEST(Int8, ZeroScaleGivesZeroCodesAndExactZeros) {
  EXPECT_EQ(int8_scale(0.0f), 0.0f);
  const float inv = inverse_scale(int8_scale(0.0f));
  EXPECT_EQ(inv, 0.0f);
  for (const float x : {0.0f, -0.0f, 1.0f, -5.0f, 1e30f, kNaN}) {
    EXPECT_EQ(int8_encode(x, inv), 0) << x;
  }
  const float value = int8_decode(0, 0.0f);
  EXPECT_EQ(value, 0.0f);
  EXPECT_FALSE(std::signbit(value));
}

TEST(Int8, TiesRoundToEven) {
  EXPECT_EQ(int8_encode(2.5f, 1.0f), 2);
  EXPECT_EQ(int8_encode(3.5f, 1.0f), 4);
  EXPECT_EQ(int8_encode(-2.5f, 1.0f), -2);
  EXPECT_EQ(int8_encode(-3.5f, 1.0f), -4);
  EXPECT_EQ(int8_encode(0.5f, 1.0f), 0);
  EXPECT_EQ(int8_encode(-0.5f, 1.0f), 0);
  EXPECT_EQ(int8_encode(126.5f, 1.0f), 126);
  EXPECT_EQ(int8_encode(127.5f, 1.0f), 127);    // clamped first
  EXPECT_EQ(int8_encode(-128.5f, 1.0f), -128);  // clamped first
  // Every tie of a power-of-two scale (x * inv exact).
  const float scale = 0.25f, inv = inverse_scale(scale);
  for (int k = -128; k < 127; ++k) {
    const float x = (static_cast<float>(k) + 0.5f) * scale;
    const int even = (k % 2 == 0) ? k : k + 1;
    EXPECT_EQ(int8_encode(x, inv), even) << x;
    EXPECT_EQ(int8_encode(std::nextafter(x, -kInf), inv), k) << x;
    EXPECT_EQ(int8_encode(std::nextafter(x, kInf), inv), k + 1) << x;
  }
}

// For random domains: the absmax element encodes to +-127, every code decodes to
// code * scale, and every value in the domain comes back within half a step.
TEST(Int8, RandomDomains) {
  LOWBIT_TEST_RNG(rng);
  std::uniform_real_distribution<float> exponent(-35.0f, 37.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    const float absmax = trial == 0 ? kMax : std::pow(10.0f, exponent(rng));
    const float scale = int8_scale(absmax);
    const float inv = inverse_scale(scale);
    SCOPED_TRACE("absmax " + std::to_string(absmax));
    ASSERT_GT(inv, 0.0f);
    ASSERT_EQ(int8_encode(absmax, inv), 127);
    ASSERT_EQ(int8_encode(-absmax, inv), -127);
    for (int i = 0; i < 50; ++i) {
      const float x = absmax * unit(rng);
      const std::int8_t code = int8_encode(x, inv);
      ASSERT_EQ(code, static_cast<int>(std::nearbyint(x * inv)));
      const float back = int8_decode(code, scale);
      ASSERT_EQ(back, static_cast<float>(code) * scale);
      ASSERT_LE(std::fabs(static_cast<double>(back) - x), 0.5 * scale * (1 + 1e-5) + std::ldexp(std::fabs(x), -22)) << x;
    }
  }
}

TEST(Int4, HandCheckedEdges) {
  const float lo = -1.5f, hi = 6.0f;
  const float scale = int4_scale(lo, hi);
  EXPECT_EQ(scale, 0.5f);
  const float inv = inverse_scale(scale);
  EXPECT_EQ(int4_encode(lo, lo, inv), 0);
  EXPECT_EQ(int4_encode(hi, lo, inv), 15);
  EXPECT_EQ(int4_encode(100.0f, lo, inv), 15);  // clamped
  EXPECT_EQ(int4_encode(-100.0f, lo, inv), 0);  // clamped
  EXPECT_EQ(int4_encode(kInf, lo, inv), 15);
  EXPECT_EQ(int4_encode(-kInf, lo, inv), 0);
  EXPECT_EQ(int4_encode(kNaN, lo, inv), 0);
  EXPECT_EQ(int4_decode(0, scale, lo), lo);
  EXPECT_EQ(int4_decode(15, scale, lo), hi);
  EXPECT_EQ(int4_decode(7, scale, lo), 2.0f);
  // Ties (scale 1, min 0): to even.
  EXPECT_EQ(int4_encode(2.5f, 0.0f, 1.0f), 2);
  EXPECT_EQ(int4_encode(3.5f, 0.0f, 1.0f), 4);
  EXPECT_EQ(int4_encode(0.5f, 0.0f, 1.0f), 0);
  EXPECT_EQ(int4_encode(14.5f, 0.0f, 1.0f), 14);
  // The scale is computed in double: a range near FLT_MAX does not overflow.
  EXPECT_TRUE(std::isfinite(int4_scale(-kMax, kMax)));
  EXPECT_EQ(int4_scale(-kMax, kMax), static_cast<float>(2.0 * kMax / 15.0));
  EXPECT_EQ(int4_encode(kMax, -kMax, inverse_scale(int4_scale(-kMax, kMax))), 15);
  EXPECT_EQ(int4_encode(-kMax, -kMax, inverse_scale(int4_scale(-kMax, kMax))), 0);
}

TEST(Int4, EqualValuesGiveZeroScaleAndExactMin) {
  for (const float v : {2.25f, -7.0f, 0.0f, 1e-40f, -3e38f}) {
    const float scale = int4_scale(v, v);
    EXPECT_EQ(scale, 0.0f) << v;
    EXPECT_FALSE(std::signbit(scale)) << v;
    const float min = int4_min(v);
    const float inv = inverse_scale(scale);
    EXPECT_EQ(inv, 0.0f);
    EXPECT_EQ(int4_encode(v, min, inv), 0) << v;
    const float back = int4_decode(0, scale, min);
    EXPECT_EQ(back, v) << v;
    EXPECT_EQ(std::signbit(back), std::signbit(min)) << v;
  }
}

TEST(Int4, NegativeZeroMinIsStoredAsPositiveZero) {
  EXPECT_EQ(int4_min(-0.0f), 0.0f);
  EXPECT_FALSE(std::signbit(int4_min(-0.0f)));
  EXPECT_FALSE(std::signbit(int4_min(0.0f)));
  EXPECT_EQ(int4_min(-1.0f), -1.0f);
  EXPECT_EQ(int4_min(3.5f), 3.5f);
  // An all-zero domain of either sign: scale +0, min +0, code 0, value +0.
  for (const float z : {0.0f, -0.0f}) {
    const float scale = int4_scale(z, z);
    EXPECT_FALSE(std::signbit(scale));
    const float back = int4_decode(int4_encode(z, int4_min(z), inverse_scale(scale)), scale, int4_min(z));
    EXPECT_EQ(back, 0.0f);
    EXPECT_FALSE(std::signbit(back));
  }
}

TEST(Int4, DecodeIsOneFusedMultiplyAdd) {
  LOWBIT_TEST_RNG(rng);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int i = 0; i < 10000; ++i) {
    const float scale = std::fabs(normal(rng)), min = normal(rng);
    const auto code = static_cast<std::uint8_t>(i % 16);
    const double exact = static_cast<double>(code) * scale + min;  // exact in double
    ASSERT_EQ(int4_decode(code, scale, min), static_cast<float>(exact));
  }
}

// For random domains: min encodes to 0, max to 15, and every value in [min, max]
// comes back within half a step.
TEST(Int4, RandomDomains) {
  LOWBIT_TEST_RNG(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    const float magnitude = std::pow(10.0f, 6.0f * unit(rng) - 3.0f);
    float lo = normal(rng) * magnitude, hi = normal(rng) * magnitude;
    if (lo > hi) std::swap(lo, hi);
    if (lo == hi) continue;
    const float scale = int4_scale(lo, hi);
    const float min = int4_min(lo);
    const float inv = inverse_scale(scale);
    SCOPED_TRACE("min " + std::to_string(lo) + " max " + std::to_string(hi));
    ASSERT_EQ(int4_encode(lo, min, inv), 0);
    ASSERT_EQ(int4_encode(hi, min, inv), 15);
    for (int i = 0; i < 50; ++i) {
      const float x = lo + (hi - lo) * unit(rng);
      const std::uint8_t code = int4_encode(x, min, inv);
      ASSERT_LE(code, 15);
      const float back = int4_decode(code, scale, min);
      ASSERT_LE(std::fabs(static_cast<double>(back) - x),
                0.5 * scale * (1 + 1e-5) + std::ldexp(std::fabs(x) + std::fabs(lo), -22))
          << x;
    }
  }
}

TEST(Int4, PacksLowNibbleFirst) {
  EXPECT_EQ(int4_pack(0x3, 0xa), 0xa3);
  EXPECT_EQ(int4_pack(0xf, 0x0), 0x0f);
  EXPECT_EQ(int4_pack(0x0, 0xf), 0xf0);
  for (int low = 0; low < 16; ++low) {
    for (int high = 0; high < 16; ++high) {
      const std::uint8_t byte = int4_pack(static_cast<std::uint8_t>(low), static_cast<std::uint8_t>(high));
      EXPECT_EQ(byte, low + 16 * high);
      EXPECT_EQ(int4_low(byte), low);
      EXPECT_EQ(int4_high(byte), high);
    }
  }
}

}  // namespace
}  // namespace lowbit::formats
