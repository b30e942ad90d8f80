// FP16 and BF16 conversions on the host: hand-checked values, every 16-bit pattern,
// and every rounding tie between neighbouring values (round to nearest, ties to even).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "formats/float16.h"

namespace lowbit::formats {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::uint16_t half_bits(float v) { return float_to_half(v).bits; }
std::uint16_t bf16_bits(float v) { return float_to_bf16(v).bits; }
float half_value(std::uint32_t bits) { return half_to_float(Half{static_cast<std::uint16_t>(bits)}); }
float bf16_value(std::uint32_t bits) { return bf16_to_float(BFloat16{static_cast<std::uint16_t>(bits)}); }
float next_up(float v) { return std::nextafter(v, kInf); }
float next_down(float v) { return std::nextafter(v, -kInf); }

// NaN inputs, including signalling ones whose payload sits in the bits a naive
// truncation would drop (and so turn into Inf).
constexpr std::uint32_t kNaNBits[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7f801fffu, 0x7fffffffu};

TEST(Half, HandCheckedValues) {
  EXPECT_EQ(half_bits(0.0f), 0x0000);
  EXPECT_EQ(half_bits(-0.0f), 0x8000);
  EXPECT_EQ(half_bits(1.0f), 0x3c00);
  EXPECT_EQ(half_bits(-2.0f), 0xc000);
  EXPECT_EQ(half_bits(0.333251953125f), 0x3555);
  EXPECT_EQ(half_bits(65504.0f), 0x7bff);                   // largest finite
  EXPECT_EQ(half_bits(next_down(65520.0f)), 0x7bff);        // just below the tie: down
  EXPECT_EQ(half_bits(65520.0f), 0x7c00);                   // tie between 65504 and 65536: to even (inf)
  EXPECT_EQ(half_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(half_bits(1e10f), 0x7c00);
  EXPECT_EQ(half_bits(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(half_bits(kInf), 0x7c00);
  EXPECT_EQ(half_bits(-kInf), 0xfc00);
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -14)), 0x0400);      // smallest normal
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -24)), 0x0001);      // smallest subnormal
  EXPECT_EQ(half_bits(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -25)), 0x0000);      // tie between 0 and 2^-24: to even (0)
  EXPECT_EQ(half_bits(next_up(std::ldexp(1.0f, -25))), 0x0001);
  EXPECT_EQ(half_bits(std::ldexp(3.0f, -25)), 0x0002);      // 1.5 steps: to even (2)
  EXPECT_EQ(half_bits(std::ldexp(5.0f, -25)), 0x0002);      // 2.5 steps: to even (2)
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -30)), 0x0000);      // underflow
  EXPECT_EQ(half_bits(-std::ldexp(1.0f, -30)), 0x8000);     // underflow keeps the sign
  EXPECT_EQ(half_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: to even (down)
  EXPECT_EQ(half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: to even (up)
  EXPECT_EQ(half_bits(next_up(1.0f + std::ldexp(1.0f, -11))), 0x3c01);
  EXPECT_EQ(half_bits(2047.0f + 0.5f), 0x67ff + 1);         // 2047.5 -> 2048 (even)
  EXPECT_EQ(half_bits(2049.0f), 0x6800);                    // 2049 is a tie: 2048 (even)
  EXPECT_EQ(half_bits(2051.0f), 0x6802);                    // 2051 is a tie: 2052 (even)
  EXPECT_EQ(half_value(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_value(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_value(0x7bff), 65504.0f);
  EXPECT_EQ(half_value(0x7c00), kInf);
  EXPECT_EQ(half_value(0xfc00), -kInf);
  EXPECT_TRUE(std::signbit(half_value(0x8000)) && half_value(0x8000) == 0.0f);
}

TEST(Half, NaNStaysNaN) {
  for (std::uint32_t bits : kNaNBits) {
    const Half h = float_to_half(std::bit_cast<float>(bits));
    EXPECT_EQ(h.bits & 0x7c00u, 0x7c00u) << std::hex << bits;
    EXPECT_NE(h.bits & 0x03ffu, 0u) << "NaN " << std::hex << bits << " became Inf";
    EXPECT_EQ(h.bits >> 15, bits >> 31) << "sign of NaN " << std::hex << bits;
    EXPECT_TRUE(std::isnan(half_to_float(h)));
  }
  for (std::uint32_t bits = 0x7c01; bits <= 0x7fff; ++bits) {
    EXPECT_TRUE(std::isnan(half_value(bits)));
    EXPECT_TRUE(std::isnan(half_value(bits | 0x8000)));
  }
}

TEST(Half, EveryBitPatternRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = half_value(bits);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(half_bits(f), bits) << "half 0x" << std::hex << bits << " -> " << f;
  }
}

// For every pair of neighbouring finite halves (both signs): the float midpoint
// rounds to the even one, and one float ulp either side rounds to the nearer one.
TEST(Half, EveryTieRoundsToEven) {
  for (std::uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const double lo = half_value(bits);
    const double hi = bits + 1 == 0x7c00 ? 65536.0 : half_value(bits + 1);  // past max: the next power of two
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const std::uint32_t even = (bits % 2 == 0) ? bits : bits + 1;
    for (const std::uint32_t sign : {0x0000u, 0x8000u}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(half_bits(s * mid), sign | even) << "tie above half 0x" << std::hex << (sign | bits);
      ASSERT_EQ(half_bits(s * next_down(mid)), sign | bits) << "below the tie above 0x" << std::hex << (sign | bits);
      ASSERT_EQ(half_bits(s * next_up(mid)), sign | (bits + 1)) << "above the tie above 0x" << std::hex << (sign | bits);
    }
  }
}

// double_to_half rounds once: a double a hair either side of a tie (which its float
// rounds onto the tie) goes to the nearer half; the tie itself to the even one.
TEST(Half, DoubleToHalfRoundsOnce) {
  for (std::uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const double lo = half_value(bits);
    const double hi = bits + 1 == 0x7c00 ? 65536.0 : half_value(bits + 1);
    const double mid = (lo + hi) / 2, hair = (hi - lo) * 0x1p-30;
    const std::uint32_t even = (bits % 2 == 0) ? bits : bits + 1;
    for (const std::uint32_t sign : {0x0000u, 0x8000u}) {
      const double s = sign ? -1.0 : 1.0;
      ASSERT_EQ(double_to_half(s * lo).bits, sign | bits) << std::hex << bits;
      ASSERT_EQ(double_to_half(s * mid).bits, sign | even) << "tie above 0x" << std::hex << (sign | bits);
      ASSERT_EQ(double_to_half(s * (mid - hair)).bits, sign | bits) << "below the tie above 0x" << std::hex << bits;
      ASSERT_EQ(double_to_half(s * (mid + hair)).bits, sign | (bits + 1)) << "above the tie above 0x" << std::hex
                                                                          << bits;
    }
  }
  EXPECT_TRUE(std::isnan(half_to_float(double_to_half(std::nan("")))));
  EXPECT_EQ(double_to_half(1e300).bits, 0x7c00u);
  EXPECT_EQ(double_to_half(-0.0).bits, 0x8000u);
}

TEST(BFloat16, HandCheckedValues) {
  EXPECT_EQ(bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits(-3.0f), 0xc040);
  EXPECT_EQ(bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie: to even (down)
  EXPECT_EQ(bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie: to even (up)
  EXPECT_EQ(bf16_bits(next_up(1.0f + std::ldexp(1.0f, -8))), 0x3f81);
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(bf16_bits(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(bf16_bits(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7f);  // largest finite, just below the tie
  EXPECT_EQ(bf16_bits(kInf), 0x7f80);
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);  // tie-free underflow
  EXPECT_EQ(bf16_bits(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie: to even (up)
  EXPECT_EQ(bf16_value(0x7f80), kInf);
  EXPECT_EQ(bf16_value(0x0001), std::bit_cast<float>(0x00010000u));
  for (std::uint32_t bits : kNaNBits) {
    const BFloat16 b = float_to_bf16(std::bit_cast<float>(bits));
    EXPECT_TRUE(std::isnan(bf16_to_float(b))) << "NaN 0x" << std::hex << bits << " became 0x" << b.bits;
    EXPECT_EQ(b.bits >> 15, bits >> 31);
  }
}

TEST(BFloat16, EveryBitPatternRoundTripsAndEveryTieRoundsToEven) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = bf16_value(bits);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(bf16_bits(f), bits) << std::hex << bits;
    if ((bits & 0x7fffu) >= 0x7f80u) continue;  // inf: no neighbour above
    // The float halfway to the next bf16 away from zero, and its float neighbours.
    const float mid = std::bit_cast<float>((bits << 16) | 0x8000u);
    const std::uint32_t away = bits + 1;  // next magnitude, same sign (0x7f7f + 1 is inf)
    ASSERT_EQ(bf16_bits(mid), (bits % 2 == 0) ? bits : away) << "tie above 0x" << std::hex << bits;
    ASSERT_EQ(bf16_bits(std::bit_cast<float>((bits << 16) | 0x7fffu)), bits) << std::hex << bits;
    ASSERT_EQ(bf16_bits(std::bit_cast<float>((bits << 16) | 0x8001u)), away) << std::hex << bits;
  }
}

TEST(Dispatch, ToAndFromFloatMatchTheNamedConversions) {
  for (const float v : {0.0f, -1.5f, 3.14159f, 65519.0f, 1e-6f, 1e20f}) {
    EXPECT_EQ(from_float<Half>(v).bits, float_to_half(v).bits);
    EXPECT_EQ(from_float<BFloat16>(v).bits, float_to_bf16(v).bits);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(from_float<float>(v)), std::bit_cast<std::uint32_t>(v));
    EXPECT_EQ(to_float(Half{0x3c00}), 1.0f);
    EXPECT_EQ(to_float(BFloat16{0x3f80}), 1.0f);
    EXPECT_EQ(to_float(v), v);
  }
}

}  // namespace
}  // namespace lowbit::formats
