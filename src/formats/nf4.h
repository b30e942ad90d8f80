// NF4 (4-bit NormalFloat, QLoRA: Dettmers et al. 2023, section 3 "4-bit NormalFloat
// Quantization"): one definition for host and device.
//
//   block    64 consecutive values of a row, one fp32 scale: absmax = max |x|
//   encode   code = the level nearest to x * inv, inv = 1 / absmax (inverse_scale:
//            0 when absmax is 0 or 1/absmax overflows, so such a block encodes to
//            code 7, level 0.0). Multiplying by the reciprocal is what bitsandbytes'
//            kQuantizeBlockwise does.
//            "Nearest" is decided by 15 thresholds, the midpoints between
//            neighbouring levels as bitsandbytes' dQuantizeNF4 spells them (float
//            literals, below), compared with a strict `>`: a value exactly on a
//            threshold takes the LOWER index, as in bitsandbytes. Given the same
//            y = x * inv, the codes are bitsandbytes' for every input. A NaN compares false
//            everywhere and gives code 0 (as in bitsandbytes); lowbit's API rejects
//            NaN/Inf input before encoding.
//   decode   value = level[code] * absmax (one float multiply).
//   storage  two codes per byte, LOW nibble first (column 2j in bits 0..3, 2j+1 in
//            bits 4..7), like the rest of lowbit. bitsandbytes packs the HIGH nibble
//            first: swap nibbles to exchange data with it.
//
// QLoRA's double quantization (absmax stored as 8-bit codes with a second-level fp32
// scale per 256 blocks: 4.127 instead of 4.5 bits per value) is not implemented.
#pragma once

#include <cstdint>

#include "formats/hd.h"
#include "formats/int8.h"

namespace lowbit::formats {

constexpr int kNf4BlockSize = 64;
constexpr int kNf4Levels = 16;

// The 16 levels, ascending (index = code): bitsandbytes' NF4 table (functional.py
// create_normal_map(offset=0.9677083) as float32; identical to dDequantizeNF4's
// literals). Code 7 is exactly 0.
#define LOWBIT_NF4_LEVEL_LIST                                                                     \
  -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f, \
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f, \
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,         \
      0.7229568362236023f, 1.0f

// Level `code` (low 4 bits; higher bits ignored). Kernels that decode many values
// stage these 16 values in shared memory once (see src/cuda/block_formats).
LOWBIT_HD float nf4_level(unsigned code) {
  constexpr float kLevels[kNf4Levels] = {LOWBIT_NF4_LEVEL_LIST};
  return kLevels[code & 15u];
}

// The 15 decision thresholds, ascending: the pivots of bitsandbytes' dQuantizeNF4
// (csrc/kernels.cu) as the float literals it compiles. Each is the exact midpoint of
// two neighbouring levels, written as the shortest decimal of that double. 7 of the
// 15 midpoints lie exactly halfway between two floats, and for 4 of those the decimal
// literal rounds to the other neighbour than double -> float (ties to even) would, so
// the floats are spelled here rather than computed (the tests check both counts).
#define LOWBIT_NF4_THRESHOLD_LIST                                                                        \
  -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,                \
      -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,          \
      0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,                  \
      0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f

LOWBIT_HD float nf4_threshold(int i) {
  constexpr float kThresholds[kNf4Levels - 1] = {LOWBIT_NF4_THRESHOLD_LIST};
  return kThresholds[i];
}

// The code of a normalized value y = x * inv (nominally in [-1, 1]): the number of
// thresholds strictly below y (the indices are constants once the loop is unrolled).
LOWBIT_HD std::uint8_t nf4_encode_normalized(float y) {
  constexpr float kThresholds[kNf4Levels - 1] = {LOWBIT_NF4_THRESHOLD_LIST};
  unsigned code = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < kNf4Levels - 1; ++i) code += y > kThresholds[i] ? 1u : 0u;
  return static_cast<std::uint8_t>(code);
}

// inv of a block: 1 / absmax, or 0 for a zero block (or one whose reciprocal overflows).
LOWBIT_HD float nf4_inverse(float absmax) { return inverse_scale(absmax); }

LOWBIT_HD std::uint8_t nf4_encode(float x, float inv) { return nf4_encode_normalized(x * inv); }

// The value of a level (nf4_level(code), or a kernel's shared-memory copy of it).
LOWBIT_HD float nf4_scale_level(float level, float absmax) { return level * absmax; }

LOWBIT_HD float nf4_decode(unsigned code, float absmax) { return nf4_scale_level(nf4_level(code), absmax); }

// The uniform codec face (see Nvfp4Codec in nvfp4.h); NF4 has no global scale. A
// non-finite absmax (rejected by the API) is stored as it is.
struct Nf4Codec {
  static constexpr int kBlock = kNf4BlockSize;
  static constexpr bool kHasGlobal = false;
  using Scale = float;
  LOWBIT_HD static Scale scale(std::uint32_t absmax_bits, float) { return bits_to_float(absmax_bits); }
  LOWBIT_HD static float param(Scale s, float) { return nf4_inverse(s); }
  LOWBIT_HD static std::uint8_t encode(float x, float inv) { return nf4_encode(x, inv); }
  LOWBIT_HD static float decode(unsigned code, Scale s, float) { return nf4_decode(code, s); }
};

}  // namespace lowbit::formats
