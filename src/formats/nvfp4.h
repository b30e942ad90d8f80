// NVFP4 (NVIDIA's 4-bit format of Blackwell tensor cores; the two-level scaling
// recipe of NVIDIA's "Pretraining LLMs with NVFP4" and Transformer Engine / TensorRT
// Model Optimizer): one definition for host and device.
//
//   global   one fp32 per tensor: g = absmax_tensor / (448 * 6), so that the largest
//            block's scale lands on E4M3's max normal. g = 0 for an all-zero tensor
//            (and when absmax_tensor / 2688 underflows to 0: |x| < ~3.8e-42).
//   block    16 consecutive values of a row, one E4M3 scale:
//            s = E4M3(absmax_block / (6 * g))   (fp32 product 6 * g, IEEE division,
//            then E4M3 round-to-nearest-even, saturating at 448); s = 0x00 when g = 0.
//   element  d = decode(s) * g (fp32 product);
//            code = E2M1(x / d) (IEEE division, round to nearest even, saturating to
//            +-6); when d = 0 (g = 0, or s rounded to 0 because the block's absmax is
//            below 2^-10 / 448 of the tensor's) every code is E2M1(0) = 0.
//   decode   value = (E2M1 value * decode(s)) * g: the first product is exact (at most
//            2 + 4 significant bits), so the value is the exact one rounded once.
//   storage  E2M1 codes two per byte, low nibble first; block scales one byte each
//            (raw E4M3FN bits); g as one f32.
//
// NaN/Inf: lowbit's API rejects them. At the value level a non-finite absmax makes g
// non-finite; the functions below stay total (no undefined conversions).
#pragma once

#include <cstdint>

#include "formats/hd.h"
#include "formats/minifloat.h"

namespace lowbit::formats {

constexpr int kNvfp4BlockSize = 16;
constexpr float kNvfp4GlobalDivisor = kE4M3Max * kE2M1Max;  // 2688

LOWBIT_HD float nvfp4_global_scale(float tensor_absmax) { return tensor_absmax / kNvfp4GlobalDivisor; }

LOWBIT_HD std::uint8_t nvfp4_block_scale(float block_absmax, float global_scale) {
  if (!(global_scale > 0.0f)) return 0;
  return e4m3_encode(block_absmax / (kE2M1Max * global_scale));
}

// The divisor d of a block's values (0: encode everything as 0).
LOWBIT_HD float nvfp4_divisor(std::uint8_t block_scale, float global_scale) {
  const float d = e4m3_decode(block_scale) * global_scale;
  return d > 0.0f ? d : 0.0f;  // also maps a NaN product to 0
}

LOWBIT_HD std::uint8_t nvfp4_encode(float x, float divisor) {
  return e2m1_encode(divisor > 0.0f ? x / divisor : 0.0f);
}

LOWBIT_HD float nvfp4_decode(unsigned code, std::uint8_t block_scale, float global_scale) {
  return (e2m1_decode(code) * e4m3_decode(block_scale)) * global_scale;
}

// The uniform face of the three block formats (nf4.h, mxfp4.h, nvfp4.h) that the CPU
// reference and the kernels are templated on: scale(block absmax bits, global scale),
// param(scale, global) computed once per block, encode(x, param), decode(code, scale,
// global).
struct Nvfp4Codec {
  static constexpr int kBlock = kNvfp4BlockSize;
  static constexpr bool kHasGlobal = true;
  using Scale = std::uint8_t;
  LOWBIT_HD static Scale scale(std::uint32_t absmax_bits, float global) {
    return nvfp4_block_scale(bits_to_float(absmax_bits), global);
  }
  LOWBIT_HD static float param(Scale s, float global) { return nvfp4_divisor(s, global); }
  LOWBIT_HD static std::uint8_t encode(float x, float divisor) { return nvfp4_encode(x, divisor); }
  LOWBIT_HD static float decode(unsigned code, Scale s, float global) { return nvfp4_decode(code, s, global); }
};

}  // namespace lowbit::formats
