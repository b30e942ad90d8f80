// FP16 and BF16 storage types and their conversions to and from FP32, identical on
// host and device. Widening is exact; narrowing rounds to nearest, ties to even,
// as the CUDA intrinsics __float2half_rn and __float2bfloat16_rn do.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "formats/hd.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace lowbit::formats {

// Storage only: 16 bits, the same layout as __half / __nv_bfloat16.
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

LOWBIT_HD float half_to_float(Half h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h.bits));
#else
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return bits_to_float(sign | float_to_bits(magnitude));
  }
  if (exponent == 31) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
#endif
}

LOWBIT_HD Half float_to_half(float value) {
#if defined(__CUDA_ARCH__)
  return Half{__half_as_ushort(__float2half_rn(value))};
#else
  const std::uint32_t bits = float_to_bits(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return Half{static_cast<std::uint16_t>(sign | 0x7fffu)};  // NaN
  if (magnitude >= 0x477ff000u) return Half{static_cast<std::uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): adding 0.5f makes the FPU round the value
    // to a multiple of 2^-24 (ties to even); the low mantissa bits are then the half code.
    const float shifted = bits_to_float(magnitude) + 0.5f;
    return Half{static_cast<std::uint16_t>(sign | (float_to_bits(shifted) - 0x3f000000u))};
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  const std::uint32_t odd = (magnitude >> 13) & 1u;
  const std::uint32_t rounded = magnitude + 0xc8000fffu + odd;
  return Half{static_cast<std::uint16_t>(sign | (rounded >> 13))};
#endif
}

// The f16 nearest a double (ties to even) by one rounding, where float_to_half of the
// double's float could round twice. Host only; rounds in the default rounding mode.
inline Half double_to_half(double value) {
  const auto f = static_cast<float>(value);
  if (static_cast<double>(f) == value) return float_to_half(f);  // exact in float: one rounding left
  if (std::isnan(value)) return Half{0x7fffu};
  int exponent = 0;
  std::frexp(std::fabs(value), &exponent);  // |value| = m 2^exponent, m in [0.5, 1)
  // The f16 grid at |value|: 11 significant bits, subnormals on 2^-24's.
  const double ulp = std::ldexp(1.0, std::max(exponent - 1, -14) - 10);
  const double rounded = std::nearbyint(std::fabs(value) / ulp) * ulp;  // on the grid, or 2^16 (inf)
  return float_to_half(static_cast<float>(std::copysign(rounded, value)));
}

LOWBIT_HD float bf16_to_float(BFloat16 b) { return bits_to_float(static_cast<std::uint32_t>(b.bits) << 16); }

LOWBIT_HD BFloat16 float_to_bf16(float value) {
#if defined(__CUDA_ARCH__)
  return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(value))};
#else
  const std::uint32_t bits = float_to_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<std::uint16_t>((bits >> 16) | 0x40u)};
  const std::uint32_t odd = (bits >> 16) & 1u;
  return BFloat16{static_cast<std::uint16_t>((bits + 0x7fffu + odd) >> 16)};
#endif
}

// Uniform access for templates over the three floating input/output types.
LOWBIT_HD float to_float(float value) { return value; }
LOWBIT_HD float to_float(Half value) { return half_to_float(value); }
LOWBIT_HD float to_float(BFloat16 value) { return bf16_to_float(value); }

template <class T>
LOWBIT_HD T from_float(float value);
template <>
LOWBIT_HD float from_float<float>(float value) {
  return value;
}
template <>
LOWBIT_HD Half from_float<Half>(float value) {
  return float_to_half(value);
}
template <>
LOWBIT_HD BFloat16 from_float<BFloat16>(float value) {
  return float_to_bf16(value);
}

}  // namespace lowbit::formats
