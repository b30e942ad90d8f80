// Asymmetric INT4 with a scale and a minimum per group (the form of GGUF's Q4_1 and
// of KIVI's KV cache): the one definition of its arithmetic for CPU and GPU.
//
//   scale s = (max - min) / 15     (in double, so that a range near FLT_MAX cannot
//                                   overflow; rounded once to float)
//   inv     = inverse_scale(s)
//   code q  = clamp(round_half_even((x - min) * inv), 0, 15)
//   value   = fma(q, s, min)       (one rounding, the same on host and device)
//
// Two codes per byte, low nibble first: column 2j in bits 0..3, column 2j+1 in bits
// 4..7. A group whose values are all equal gets s = 0: codes 0, values exactly min.
#pragma once

#include <cmath>
#include <cstdint>

#include "formats/hd.h"
#include "formats/int8.h"

namespace lowbit::formats {

constexpr float kInt4MaxCode = 15.0f;

// The scale of an asymmetric code with codes 0..levels (15 for INT4, 255 for INT8).
LOWBIT_HD float asymmetric_scale(float min_value, float max_value, float levels) {
  return static_cast<float>((static_cast<double>(max_value) - static_cast<double>(min_value)) /
                            static_cast<double>(levels));
}

LOWBIT_HD float int4_scale(float min_value, float max_value) {
  return asymmetric_scale(min_value, max_value, kInt4MaxCode);
}

// The stored minimum: -0.0 becomes +0.0, so that every reduction order (CPU loops,
// GPU atomics) stores the same bits.
LOWBIT_HD float int4_min(float lo) { return lo == 0.0f ? 0.0f : lo; }

LOWBIT_HD std::uint8_t int4_encode(float x, float min_value, float inv_scale) {
  return static_cast<std::uint8_t>(round_clamp((x - min_value) * inv_scale, 0.0f, kInt4MaxCode));
}

LOWBIT_HD float int4_decode(std::uint8_t code, float scale, float min_value) {
  return fmaf(static_cast<float>(code), scale, min_value);
}

LOWBIT_HD std::uint8_t int4_pack(std::uint8_t low_code, std::uint8_t high_code) {
  return static_cast<std::uint8_t>(low_code | (high_code << 4));
}

LOWBIT_HD std::uint8_t int4_low(std::uint8_t byte) { return byte & 0x0fu; }
LOWBIT_HD std::uint8_t int4_high(std::uint8_t byte) { return byte >> 4; }

// Signed INT4, as the INT4 x INT4 GEMM takes it: a two's complement nibble, -8..7.
LOWBIT_HD int int4_to_signed(std::uint8_t nibble) { return static_cast<int>(nibble ^ 8u) - 8; }

}  // namespace lowbit::formats
