// Marks the value-level functions of the formats layer as callable from host and
// device code, and gives both sides the same bit-level helpers.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LOWBIT_HD __host__ __device__ __forceinline__
#else
#define LOWBIT_HD inline
#endif

namespace lowbit::formats {

LOWBIT_HD std::uint32_t float_to_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

LOWBIT_HD float bits_to_float(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

// |x| as raw bits: +0 .. +inf are ordered like unsigned integers and every NaN
// compares above +inf (0x7f800000), so one integer max over these bits yields the
// absmax and flags NaN/Inf in the same pass.
LOWBIT_HD std::uint32_t abs_bits(float value) { return float_to_bits(value) & 0x7fffffffu; }

constexpr std::uint32_t kInfBits = 0x7f800000u;

LOWBIT_HD bool is_finite_bits(std::uint32_t abs_value_bits) { return abs_value_bits < kInfBits; }

// f32 arithmetic in round-to-nearest, never fused into an FMA on either side (the
// device intrinsics; the host build does not contract), so host and device agree.
LOWBIT_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
LOWBIT_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LOWBIT_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LOWBIT_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace lowbit::formats
