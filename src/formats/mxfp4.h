// MXFP4 (OCP Microscaling Formats (MX) Specification v1.0): one definition for host
// and device.
//
//   block    32 consecutive values of a row (MX k = 32), one shared E8M0 scale X
//   scale    section 6.3: shared_exp = floor(log2(max_i |V_i|)) - emax_elem, with
//            emax_elem = 2 for E2M1 (6 = 1.5 * 2^2); clamped to the E8M0 range
//            [-127, 127] (float inputs reach at most 127 - 2 = 125; an all-zero block,
//            log2(0) = -inf, clamps to -127: code 0x00). floor(log2) is taken exactly
//            from the float's bits (formats::floor_log2), never with log2f.
//            A block holding NaN or Inf gets X = NaN (0xFF), as the spec's reference
//            behaviour does, so that every element decodes to NaN (lowbit's API rejects
//            such input before encoding; this keeps the value-level function total).
//   element  P_i = E2M1(V_i / X): round to nearest even, saturating to +-6
//            (minifloat.h). V_i / X is computed as V_i * 2^-shared_exp, an exact
//            power-of-two product (2^-shared_exp is in [2^-125, 2^127], a normal float).
//            Since |V_i| < 2^(floor(log2 absmax) + 1), |V_i / X| < 8: values in (5, 8)
//            saturate to 6, the spec's known clipping of the top of each block.
//   decode   V_i~ = E2M1 value * X, exact (a 2-significant-bit value times a power of
//            two); NaN when X is NaN.
//   storage  E2M1 codes two per byte, low nibble first; scales one byte each (raw E8M0).
//
// Other recipes round the scale up (e.g. ceil(log2(absmax / 6))) to avoid the
// clipping; this is the spec's floor rule.
#pragma once

#include <cstdint>

#include "formats/hd.h"
#include "formats/minifloat.h"

namespace lowbit::formats {

constexpr int kMxfp4BlockSize = 32;

// The E8M0 scale of a block from max |x| given as raw bits (formats::abs_bits).
LOWBIT_HD std::uint8_t mxfp4_scale(std::uint32_t absmax_bits) {
  if (!is_finite_bits(absmax_bits)) return kE8M0Nan;
  if (absmax_bits == 0) return e8m0_from_exponent(-127);
  int shared = floor_log2(bits_to_float(absmax_bits)) - kE2M1Emax;
  shared = shared < -127 ? -127 : (shared > 127 ? 127 : shared);
  return e8m0_from_exponent(shared);
}

// The factor that takes a block's values to element units: 2^-shared_exp (exact), or
// 0 for a NaN scale (its codes are then all +-0 and never read as numbers).
LOWBIT_HD float mxfp4_multiplier(std::uint8_t scale) {
  if (scale == kE8M0Nan) return 0.0f;
  const int shared = static_cast<int>(scale) - kE8M0Bias;  // -127..127; float inputs give <= 125
  return shared >= -127 && shared <= 126 ? exp2_int(-shared) : bits_to_float(0x00400000u);  // 2^-127 for 127
}

LOWBIT_HD std::uint8_t mxfp4_encode(float x, float multiplier) { return e2m1_encode(x * multiplier); }

LOWBIT_HD float mxfp4_decode(unsigned code, std::uint8_t scale) { return e2m1_decode(code) * e8m0_decode(scale); }

// The uniform codec face (see Nvfp4Codec in nvfp4.h); MXFP4 has no global scale.
struct Mxfp4Codec {
  static constexpr int kBlock = kMxfp4BlockSize;
  static constexpr bool kHasGlobal = false;
  using Scale = std::uint8_t;
  LOWBIT_HD static Scale scale(std::uint32_t absmax_bits, float) { return mxfp4_scale(absmax_bits); }
  LOWBIT_HD static float param(Scale s, float) { return mxfp4_multiplier(s); }
  LOWBIT_HD static std::uint8_t encode(float x, float multiplier) { return mxfp4_encode(x, multiplier); }
  LOWBIT_HD static float decode(unsigned code, Scale s, float) { return mxfp4_decode(code, s); }
};

}  // namespace lowbit::formats
