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
//
// HalfParams<Scheme> is the KV cache's stored form of a scheme's parameters (f16).
#pragma once

#include <cstdint>

#include "formats/float16.h"
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

// The KV cache's parameters: a scheme's f32 scale (and minimum), computed as
// above, rounded to f16 (IEEE half, to nearest even, as llama.cpp's q4_1 and KIVI keep
// them; finite values past the f16 range saturate at +-65504; a -0 is stored as +0),
// and the codes encoded WITH the rounded values, so that decode(code) = code * s (+ m)
// is the value each code was chosen for. One definition for the CPU KvCache, the GPU
// append (cuda/kv/append.cu), decode attention and every twin; lowbit::quantize() keeps f32.
// Round trip: |x - decode(encode(x))| <= s / 2 (float rounding aside) wherever the code
// does not clamp; a rounded minimum above the domain's min (or a scale rounded down)
// clamps the extreme codes, adding at most |m - min| + levels |s - scale| (the latter
// under s / 8 for a normal f16 scale).
// Inputs that are f16 values (the selective body, the GPU's tokens) have m == min.
template <class Scheme>
struct HalfParams {
  Half scale{0}, min{0};                 // stored bits (min: 0 for symmetric schemes)
  float s = 0.0f, m = 0.0f, inv = 0.0f;  // their values; inv = inverse_scale(s)

  LOWBIT_HD static Half to_stored(float v) {
    v = v > 65504.0f ? 65504.0f : v;  // NaN passes through (as NaN)
    v = v < -65504.0f ? -65504.0f : v;
    const Half h = float_to_half(v);
    return Half{static_cast<std::uint16_t>(h.bits == 0x8000u ? 0u : h.bits)};
  }
  // From the stored bits (what decode reads).
  LOWBIT_HD static HalfParams from_stored(Half scale, Half min) {
    HalfParams p;
    p.scale = scale;
    p.min = Scheme::kAsymmetric ? min : Half{0};
    p.s = half_to_float(p.scale);
    p.m = half_to_float(p.min);
    p.inv = inverse_scale(p.s);
    return p;
  }
  // From a domain's statistics, as CodeScheme::scale / min_value take them.
  LOWBIT_HD static HalfParams from_range(float absmax, float lo, float hi) {
    return from_stored(to_stored(Scheme::scale(absmax, lo, hi)), to_stored(Scheme::min_value(lo)));
  }
  LOWBIT_HD int encode(float x) const { return Scheme::encode(x, inv, m); }
  LOWBIT_HD float decode(int code) const { return Scheme::decode(code, s, m); }
};

using Int8Symmetric = CodeScheme<8, false>;
using Int4Asymmetric = CodeScheme<4, true>;
using Int8Asymmetric = CodeScheme<8, true>;
using Int4Symmetric = CodeScheme<4, false>;

}  // namespace lowbit::formats
