// The decode cache's body codes (core/kv_layout.h) -> f16 values in registers, for the
// prefill kernels that stage codes in shared memory and write f16 tiles for the tensor
// cores (attention_rows_mma.cu, cuda/flash/flash_wgmma_cache.cu): INT8 q * s, INT4
// q * s + min, in f16 arithmetic (the exact q, one rounding of the product / fma).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/lop3.cuh"

namespace lowbit::cuda::kv {

// Shared-memory accesses by address (the staged codes, the f16 tiles): 16 bytes, and 4
// or 8 bytes of codes.
__device__ __forceinline__ void st_shared16(std::uint32_t address, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ std::uint32_t ld_shared4(std::uint32_t address) {
  std::uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(address));
  return v;
}
__device__ __forceinline__ uint2 ld_shared8(std::uint32_t address) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(address));
  return v;
}
__device__ __forceinline__ uint4 ld_shared16(std::uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address));
  return v;
}

__device__ __forceinline__ std::uint32_t half2_bits(__half2 h) { return *reinterpret_cast<const std::uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_half2(std::uint32_t w) { return *reinterpret_cast<const __half2*>(&w); }

// Byte i of a word of INT4 codes (channels 2i, 2i + 1, the low nibble first) as the f16
// pair (q_lo, q_hi): the byte to bits 0-7 and, shifted down a nibble, to bits 16-23; one
// LOP3 keeps each half's low nibble under the f16 exponent of 1024: the halves are 1024 +
// q_lo and 1024 + q_hi, exact, and so is subtracting 1024.
__device__ __forceinline__ __half2 int4_pair(std::uint32_t word, int i) {
  const std::uint32_t both = __byte_perm(word, word >> 4, 0x4400u + 0x1111u * static_cast<unsigned>(i));
  return __hsub2(bits_half2(and_or<0x000F000Fu, 0x64006400u>(both)), __float2half2_rn(1024.0f));
}

// Bytes 2i, 2i + 1 of a word of INT8 codes (two channels) as the f16 pair (q_lo, q_hi):
// 0x64XX is the f16 1024 + XX, and (byte ^ 0x80) = q + 128, so q = that - 1152, exact.
__device__ __forceinline__ __half2 int8_pair(std::uint32_t word, int i) {
  const std::uint32_t flipped = word ^ 0x80808080u;
  return __hsub2(bits_half2(__byte_perm(flipped, 0x64646464u, 0x4140u + 0x0202u * static_cast<unsigned>(i))),
                 __float2half2_rn(1152.0f));
}

// 16 bytes of codes (INT8: 16 channels, INT4: 32, the low nibble first) -> the f16 values
// as 16-byte chunks of 8 channels each (INT8: 2, INT4: 4), handed to store(i, chunk) in
// channel order as each is ready.
template <int Bits, class Store>
__device__ __forceinline__ void dequantize16(uint4 codes, __half2 s2, __half2 m2, Store&& store) {
  const std::uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  if constexpr (Bits == 8) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // words 2h, 2h + 1: channels 8h .. 8h + 7
      std::uint32_t o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) o[i] = half2_bits(__hmul2(int8_pair(w[2 * h + i / 2], i % 2), s2));
      store(h, make_uint4(o[0], o[1], o[2], o[3]));
    }
  } else {
#pragma unroll
    for (int h = 0; h < 4; ++h) {  // word h: channels 8h .. 8h + 7
      std::uint32_t o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) o[i] = half2_bits(__hfma2(int4_pair(w[h], i), s2, m2));
      store(h, make_uint4(o[0], o[1], o[2], o[3]));
    }
  }
}

// 8 channels' codes (INT4: codes.x, the low nibble first; INT8: codes.x, codes.y) with a
// scale (and, INT4, a min) a channel (key blocks; 16 bytes of f16 each) -> their f16
// values: INT8 q * s, INT4 q * s + min, in f16 arithmetic (one rounding).
template <int Bits>
__device__ __forceinline__ uint4 dequantize8_channels(uint2 codes, uint4 s, uint4 m) {
  const std::uint32_t sw[4] = {s.x, s.y, s.z, s.w}, mw[4] = {m.x, m.y, m.z, m.w};
  std::uint32_t o[4];
  if constexpr (Bits == 8) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[i] = half2_bits(__hmul2(int8_pair(i < 2 ? codes.x : codes.y, i % 2), bits_half2(sw[i])));
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = half2_bits(__hfma2(int4_pair(codes.x, i), bits_half2(sw[i]), bits_half2(mw[i])));
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// 16 bytes of codes with a scale (and, INT4, a min) a channel: params(h, scales, mins)
// gives the f16 scales and mins (INT8: mins unused) of the channels of chunk h (8
// channels, 16 bytes each), store(h, chunk) takes their values; chunks as dequantize16's.
template <int Bits, class Params, class Store>
__device__ __forceinline__ void dequantize16_channels(uint4 codes, Params&& params, Store&& store) {
  const std::uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  constexpr int kChunks = Bits == 8 ? 2 : 4;
#pragma unroll
  for (int h = 0; h < kChunks; ++h) {
    uint4 s, m;
    params(h, s, m);
    store(h, dequantize8_channels<Bits>(Bits == 8 ? make_uint2(w[2 * h], w[2 * h + 1]) : make_uint2(w[h], 0u), s, m));
  }
}

}  // namespace lowbit::cuda::kv
