// The small floating-point element and scale types of the block formats, as one
// definition for host and device (the CPU reference and the kernels call these, so
// their codes agree bit for bit). All conversions are integer/bit arithmetic plus
// comparisons: no FPU rounding mode or flush-to-zero setting can change them.
//
// E2M1 (FP4; OCP Microscaling Formats (MX) v1.0, section 5.3.3): 1 sign, 2 exponent
//   (bias 1), 1 mantissa bit; no Inf, no NaN; subnormal 0.5. Magnitudes by code
//   0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign (0x8 is -0).
//   float -> E2M1: round to nearest, ties to even (the code with mantissa bit 0),
//   saturating: |x| > 5 (the midpoint of 4 and 6) and +-Inf give +-6, as the MX spec
//   asks for conversions into an element type ("clamping normal numbers to max",
//   section 6.3). The sign is kept, so negatives that round to zero give -0 (0x8),
//   as an IEEE conversion does. E2M1 has no NaN: a NaN input gives +0 (0x0); the
//   spec leaves it to the implementation, and in an MX block a NaN makes the shared
//   scale NaN (mxfp4.h) so that every element of the block decodes to NaN.
//
// E8M0 (MX v1.0 section 5.4.1): an unsigned power of two, 2^(code - 127) for codes
//   0..254 (0x00 = 2^-127, 0x7F = 1, 0xFE = 2^127); 0xFF is NaN. No zero, no sign.
//
// E4M3 (the OCP 8-bit floating point (OFP8) "E4M3FN" variant, OFP8 spec v1.0
//   section 5.1): 1 sign, 4 exponent (bias 7), 3 mantissa bits; subnormals
//   m * 2^-9 (min 2^-9), min normal 2^-6, max normal 448 = 1.75 * 2^8; no Inf;
//   NaN is S.1111.111 (0x7F, 0xFF).
//   float -> E4M3: round to nearest, ties to even, in saturating mode (OFP8 section
//   3.2.3 / PTX cvt.rn.satfinite): |x| >= 448 (after rounding: anything above max
//   normal) and +-Inf give +-448 (0x7E / 0xFE); NaN gives 0x7F (0xFF if negative).
#pragma once

#include <cstdint>

#include "formats/hd.h"

namespace lowbit::formats {

// ---- E2M1 -----------------------------------------------------------------------

constexpr float kE2M1Max = 6.0f;
constexpr int kE2M1Emax = 2;  // exponent of the largest normal (6 = 1.5 * 2^2): MX's emax_elem

LOWBIT_HD std::uint8_t e2m1_encode(float x) {
  if (!(x == x)) return 0;  // NaN: +0 (E2M1 has no NaN; see above)
  const float a = x < 0.0f ? -x : x;
  // Decision points are the midpoints between neighbouring magnitudes; at a midpoint
  // the even code wins: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0,
  // 3.5 -> 4.0, 5 -> 4.0 (strict > where the lower code is even, >= where it is odd).
  const unsigned code = static_cast<unsigned>(a > 0.25f) + static_cast<unsigned>(a >= 0.75f) +
                        static_cast<unsigned>(a > 1.25f) + static_cast<unsigned>(a >= 1.75f) +
                        static_cast<unsigned>(a > 2.5f) + static_cast<unsigned>(a >= 3.5f) +
                        static_cast<unsigned>(a > 5.0f);
  const unsigned sign = (float_to_bits(x) >> 31) << 3;
  return static_cast<std::uint8_t>(sign | code);
}

// The value of a code held in the low 4 bits of `code` (higher bits ignored).
LOWBIT_HD float e2m1_decode(unsigned code) {
  const std::uint32_t sign = (code & 8u) << 28;
  const std::uint32_t exponent = (code >> 1) & 3u;
  const std::uint32_t mantissa = code & 1u;
  // exponent 0: subnormal, mantissa * 0.5 (0x3f000000 is 0.5f); else (1 + m/2) * 2^(e-1).
  const std::uint32_t magnitude = exponent == 0 ? (mantissa ? 0x3f000000u : 0u)
                                                : ((exponent + 126u) << 23) | (mantissa << 22);
  return bits_to_float(sign | magnitude);
}

// ---- E8M0 -----------------------------------------------------------------------

constexpr std::uint8_t kE8M0Nan = 0xff;
constexpr int kE8M0Bias = 127;

// 2^(code - 127); NaN for 0xFF. Exact (0x00 is the float subnormal 2^-127).
LOWBIT_HD float e8m0_decode(std::uint8_t code) {
  if (code == kE8M0Nan) return bits_to_float(0x7fc00000u);
  if (code == 0) return bits_to_float(0x00400000u);  // 2^-127
  return bits_to_float(static_cast<std::uint32_t>(code) << 23);
}

// The E8M0 code of 2^exponent for exponent in [-127, 127] (callers clamp first).
LOWBIT_HD std::uint8_t e8m0_from_exponent(int exponent) { return static_cast<std::uint8_t>(exponent + kE8M0Bias); }

// floor(log2(a)) of a positive finite float, exactly, from its bits (subnormals too).
LOWBIT_HD int floor_log2(float a) {
  const std::uint32_t bits = float_to_bits(a) & 0x7fffffffu;
  const int biased = static_cast<int>(bits >> 23);
  if (biased != 0) return biased - 127;
  // Subnormal: mantissa * 2^-149, so floor(log2) = index of the top set bit - 149.
#if defined(__CUDA_ARCH__)
  const int top = 31 - __clz(static_cast<int>(bits));
#else
  const int top = 31 - __builtin_clz(bits);
#endif
  return top - 149;
}

// 2^k as a float, for k in [-126, 127] (a normal float: exact).
LOWBIT_HD float exp2_int(int k) { return bits_to_float(static_cast<std::uint32_t>(k + 127) << 23); }

// ---- E4M3 (FN) ------------------------------------------------------------------

constexpr float kE4M3Max = 448.0f;
constexpr std::uint8_t kE4M3MaxCode = 0x7e;
constexpr std::uint8_t kE4M3Nan = 0x7f;

LOWBIT_HD std::uint8_t e4m3_encode(float x) {
  const std::uint32_t bits = float_to_bits(x);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint8_t>(sign | kE4M3Nan);  // NaN
  if (magnitude >= 0x43e00000u) return static_cast<std::uint8_t>(sign | kE4M3MaxCode);  // >= 448, Inf
  if (magnitude < 0x3c800000u) {
    // Below the smallest normal 2^-6: code = round_half_even(|x| / 2^-9), 0..8 (a
    // result of 8 is 2^-6, the smallest normal, whose code is also 8). |x| has float
    // exponent field <= 120; shift its significand to units of 2^-9 and round the
    // bits shifted out.
    const int exponent = static_cast<int>(magnitude >> 23);  // 0..120
    if (exponent < 110) return sign;  // < 2^-17: far below half of 2^-9
    const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;  // value = sig * 2^(exponent-150)
    // units of 2^-9: sig * 2^(exponent - 150 + 9) = sig >> (141 - exponent), shift 21..31
    const int shift = 141 - exponent;
    const std::uint32_t kept = significand >> shift;
    const std::uint32_t rest = significand & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t up = (rest > half || (rest == half && (kept & 1u))) ? 1u : 0u;
    return static_cast<std::uint8_t>(sign | (kept + up));
  }
  // Normal: rebias the exponent (127 -> 7) and round the 20 dropped mantissa bits to
  // nearest even; a carry out of the mantissa increments the exponent, as it should.
  const std::uint32_t odd = (magnitude >> 20) & 1u;
  const std::uint32_t rounded = (magnitude + 0x7ffffu + odd) >> 20;
  const std::uint32_t code = rounded - (120u << 3);
  return static_cast<std::uint8_t>(sign | (code > kE4M3MaxCode ? kE4M3MaxCode : code));
}

LOWBIT_HD float e4m3_decode(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t exponent = (code >> 3) & 0xfu;
  const std::uint32_t mantissa = code & 7u;
  if (exponent == 15 && mantissa == 7) return bits_to_float(sign | 0x7fc00000u);  // NaN
  if (exponent == 0) {
    // Subnormal: mantissa * 2^-9, exact (0x3b000000 is 2^-9).
    return bits_to_float(sign | float_to_bits(static_cast<float>(mantissa) * bits_to_float(0x3b000000u)));
  }
  return bits_to_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

}  // namespace lowbit::formats
