// Symmetric INT8: the one definition of its arithmetic, shared by the CPU reference
// and every GPU kernel so that their codes agree bit for bit.
//
//   scale s = absmax / 127                       (IEEE division, on host and device;
//                                                  one ulp less if 127 * s would overflow)
//   inv     = 1 / s, or 0 when s is 0, NaN, or so small that 1/s overflows
//   code q  = clamp(round_half_even(x * inv), -128, 127); NaN in x gives 0
//   value   = q * s
//
// The reciprocal is computed once per scale and multiplied, rather than dividing
// every element: a GPU division costs about ten instructions, a multiply one. The
// codes are the same as round(x / s) except where x / s is within an ulp of a .5
// tie. A zero (or denormal-tiny) group gets inv = 0: codes 0, values exactly 0.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "formats/hd.h"

namespace lowbit::formats {

// Round to nearest, ties to even, after clamping to [lo, hi]; NaN maps to 0.
// Host and device both round in the FPU's default mode (ties to even).
LOWBIT_HD int round_clamp(float v, float lo, float hi) {
  v = (v == v) ? v : 0.0f;
  v = (v > lo) ? v : lo;
  v = (v < hi) ? v : hi;
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  return static_cast<int>(__builtin_rintf(v));
#endif
}

// Reciprocal of a scale, with the degenerate cases mapped to 0.
LOWBIT_HD float inverse_scale(float scale) {
  const float inv = 1.0f / scale;
  return (scale > 0.0f && inv <= FLT_MAX) ? inv : 0.0f;
}

constexpr float kInt8MaxCode = 127.0f;

// The scale of a symmetric code with largest code qmax (127 for INT8, 7 for INT4).
// Near FLT_MAX, absmax / qmax can round up so far that qmax * s overflows and the
// absmax code would decode to inf; one ulp less keeps every decoded value finite.
LOWBIT_HD float symmetric_scale(float absmax, float qmax) {
  float s = absmax / qmax;
  if (absmax <= FLT_MAX && s * qmax > FLT_MAX) s = nextafterf(s, 0.0f);
  return s;
}

LOWBIT_HD float int8_scale(float absmax) { return symmetric_scale(absmax, kInt8MaxCode); }

LOWBIT_HD std::int8_t int8_encode(float x, float inv_scale) {
  return static_cast<std::int8_t>(round_clamp(x * inv_scale, -128.0f, 127.0f));
}

LOWBIT_HD float int8_decode(std::int8_t code, float scale) { return static_cast<float>(code) * scale; }

}  // namespace lowbit::formats
