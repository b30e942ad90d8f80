// The four integer code schemes of lowbit::quantize as one template, so that the CPU
// reference and the GPU kernels share every formula:
//
//   symmetric  (int8, int4):  s = absmax / qmax          q = clamp(rint(x * inv), -qmax-1, qmax)
//                             value = q * s              qmax = 127 / 7
//   asymmetric (int8, int4):  s = (max - min) / levels   q = clamp(rint((x - min) * inv), 0, levels)
//                             value = fma(q, s, min)     levels = 255 / 15
//
// inv = inverse_scale(s) (0 for a zero or constant domain: codes 0, values 0 / min).
// Storage: 8-bit codes one per byte (int8_symmetric as i8, int8_asymmetric as u8);
// 4-bit codes two per byte, low nibble first (int4_symmetric as two's complement
// nibbles, -8..7, the form the INT4 GEMM takes; int4_asymmetric as 0..15).
#pragma once

#include <cstdint>

#include "formats/hd.h"
#include "formats/int4.h"
#include "formats/int8.h"

namespace lowbit::formats {

template <int Bits, bool Asymmetric>
struct CodeScheme {
  static_assert(Bits == 4 || Bits == 8);
  static constexpr int kBits = Bits;
  static constexpr bool kAsymmetric = Asymmetric;
  static constexpr float kLevels = static_cast<float>((1 << Bits) - 1);      // asymmetric: 0..kLevels
  static constexpr float kQMax = static_cast<float>((1 << (Bits - 1)) - 1);  // symmetric: -kQMax-1..kQMax

  // From a domain's statistics: max |x| (as a float) and its min and max.
  LOWBIT_HD static float scale(float absmax, float lo, float hi) {
    if constexpr (Asymmetric) {
      return asymmetric_scale(lo, hi, kLevels);
    } else {
      (void)lo, (void)hi;
      return symmetric_scale(absmax, kQMax);
    }
  }
  // The stored minimum (canonical +0 for -0); 0 for symmetric schemes.
  LOWBIT_HD static float min_value(float lo) {
    if constexpr (Asymmetric) {
      return int4_min(lo);
    } else {
      (void)lo;
      return 0.0f;
    }
  }
  LOWBIT_HD static int encode(float x, float inv, float min) {
    if constexpr (Asymmetric) {
      return round_clamp((x - min) * inv, 0.0f, kLevels);
    } else {
      (void)min;
      return round_clamp(x * inv, -kQMax - 1.0f, kQMax);
    }
  }
  LOWBIT_HD static float decode(int code, float scale, float min) {
    if constexpr (Asymmetric) {
      return fmaf(static_cast<float>(code), scale, min);
    } else {
      (void)min;
      return static_cast<float>(code) * scale;
    }
  }
  // The code held in a stored byte (8-bit) or nibble (4-bit, in the low bits).
  LOWBIT_HD static int from_storage(unsigned bits) {
    constexpr unsigned kMask = (1u << Bits) - 1u;
    constexpr unsigned kSign = 1u << (Bits - 1);
    if constexpr (Asymmetric) {
      return static_cast<int>(bits & kMask);
    } else if constexpr (Bits == 8) {
      return static_cast<std::int8_t>(bits & kMask);
    } else {
      return static_cast<int>((bits & kMask) ^ kSign) - static_cast<int>(kSign);
    }
  }
  // The stored byte or nibble of a code (two's complement for symmetric codes).
  LOWBIT_HD static unsigned to_storage(int code) { return static_cast<unsigned>(code) & ((1u << Bits) - 1u); }
};

using Int8Symmetric = CodeScheme<8, false>;
using Int4Asymmetric = CodeScheme<4, true>;
using Int8Asymmetric = CodeScheme<8, true>;
using Int4Symmetric = CodeScheme<4, false>;

}  // namespace lowbit::formats
