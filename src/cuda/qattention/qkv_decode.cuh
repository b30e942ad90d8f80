// The block decode shared by both kernel-1 variants (qkv_fused.cu: mma.sync;
// qkv_fused_wgmma.cu: wgmma): per format the 16-entry code table, the scale word of a
// (weight row, 64-wide K step) and the factor of its k16 block s, and the decode of
// one code byte to an f16 pair. Both kernels decode through decode_pair, so they
// multiply by the very same f16 weights: table value x block scale (x NVFP4's tensor
// scale) in f32, in the order src/formats decodes, then one rounding to f16 (what
// block_decode() to f16 writes).
#pragma once

#include <cstdint>

#include "cuda/qattention/kernels.h"
#include "formats/minifloat.h"
#include "formats/nf4.h"

namespace lowbit::cuda::attention {

// factor(w, s): the factor straight from the word. The 8-bit scales' decoders branch
// (NaN, subnormals), and a branch among RS wgmmas makes ptxas serialize them (C7513), so
// the wgmma kernel reads factors from a 256-entry shared table of scale_value() instead
// (kScaleTable; scale_byte(w, s): the byte of k16 block s): the same values.
struct Nf4Fmt {
  using Word = std::uint32_t;  // f32 absmax, one block per K step
  static constexpr bool kGlobal = false;
  static __device__ float table(int i) { return formats::nf4_level(i); }
  static __device__ float factor(std::uint32_t w, int) { return __uint_as_float(w); }
  static constexpr bool kScaleTable = false;
  static __device__ float scale_value(int) { return 0.0f; }
  static __device__ int scale_byte(std::uint32_t, int) { return 0; }
};
struct Mxfp4Fmt {
  using Word = std::uint16_t;  // two E8M0 bytes, blocks of 32
  static constexpr bool kGlobal = false;
  static __device__ float table(int i) { return formats::e2m1_decode(i); }
  static __device__ float factor(std::uint32_t w, int s) {
    return formats::e8m0_decode(static_cast<std::uint8_t>(w >> (8 * (s / 2))));
  }
  static constexpr bool kScaleTable = true;
  static __device__ float scale_value(int byte) { return formats::e8m0_decode(static_cast<std::uint8_t>(byte)); }
  static __device__ int scale_byte(std::uint32_t w, int s) { return (w >> (8 * (s / 2))) & 0xffu; }
};
struct Nvfp4Fmt {
  using Word = std::uint32_t;  // four E4M3 bytes, blocks of 16
  static constexpr bool kGlobal = true;
  static __device__ float table(int i) { return formats::e2m1_decode(i); }
  static __device__ float factor(std::uint32_t w, int s) {
    return formats::e4m3_decode(static_cast<std::uint8_t>(w >> (8 * s)));
  }
  static constexpr bool kScaleTable = true;
  static __device__ float scale_value(int byte) { return formats::e4m3_decode(static_cast<std::uint8_t>(byte)); }
  static __device__ int scale_byte(std::uint32_t w, int s) { return (w >> (8 * s)) & 0xffu; }
};

// Two codes of one byte -> the f16 pair of a fragment register (low nibble = lower k).
// `table`: the format's 16 values in shared memory (distinct banks: conflict-free).
template <class F>
__device__ __forceinline__ std::uint32_t decode_pair(const float* table, std::uint32_t byte, float f, float g) {
  float lo = table[byte & 15u] * f, hi = table[(byte >> 4) & 15u] * f;
  if constexpr (F::kGlobal) lo *= g, hi *= g;
  return pack_half2(lo, hi);
}

// The segment (0 Wq, 1 Wk, 2 Wv) of Q|K|V column `col`, and its first column.
__device__ __forceinline__ int segment_of(const ProjectionArgs& p, int col) {
  return col < p.seg[0].rows ? 0 : (col < p.seg[0].rows + p.seg[1].rows ? 1 : 2);
}
__device__ __forceinline__ int segment_base(const ProjectionArgs& p, int s) {
  return s == 0 ? 0 : (s == 1 ? p.seg[0].rows : p.seg[0].rows + p.seg[1].rows);
}
// Segment s by selects: a dynamic index into the kernel's parameters would copy them
// to local memory.
__device__ __forceinline__ const FusedSegment& segment_at(const ProjectionArgs& p, int s) {
  return s == 0 ? p.seg[0] : (s == 1 ? p.seg[1] : p.seg[2]);
}

}  // namespace lowbit::cuda::attention
