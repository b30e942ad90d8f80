// Device building blocks of the weight-only GEMM kernels: the raw arguments, the
// in-register dequantization of packed codes into mma B fragments, and mma.sync.
// The packed layout and the value definition are in formats/weight_pack.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/async_copy.cuh"
#include "cuda/mma.cuh"
#include "cuda/weight_only/weight_only_cuda.h"
#include "formats/weight_pack.h"

namespace lowbit::cuda::weight_only {

// ---- act dtype traits: the magic-number conversion of codes to half2/bf162 ----
//
// (q | kMagic) read as a 16-bit float is kMagicValue + q exactly (q fits the
// mantissa), so one subtraction, exact too, yields q (Q4_1) or q - 8 (Q4_0).
template <class T>
struct Act;
template <>
struct Act<__half> {
  using T2 = __half2;
  static constexpr std::uint32_t kMagic = 0x64006400u;  // 1024.0 in both halves
  static __device__ __forceinline__ T2 splat(std::uint16_t bits) { return __half2half2(__ushort_as_half(bits)); }
  static __device__ __forceinline__ T2 constant2(float v) { return __float2half2_rn(v); }
  static __device__ __forceinline__ std::uint16_t from_float(float v) { return __half_as_ushort(__float2half_rn(v)); }
  static __device__ __forceinline__ float to_float(std::uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
};
template <>
struct Act<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr std::uint32_t kMagic = 0x43004300u;  // 128.0 in both halves
  static __device__ __forceinline__ T2 splat(std::uint16_t bits) {
    return __bfloat162bfloat162(__ushort_as_bfloat16(bits));
  }
  static __device__ __forceinline__ T2 constant2(float v) { return __float2bfloat162_rn(v); }
  static __device__ __forceinline__ std::uint16_t from_float(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
  static __device__ __forceinline__ float to_float(std::uint16_t bits) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  }
};

template <class T2>
__device__ __forceinline__ T2 as_t2(std::uint32_t bits) {
  return *reinterpret_cast<const T2*>(&bits);
}
template <class T2>
__device__ __forceinline__ std::uint32_t as_u32(T2 value) {
  return *reinterpret_cast<const std::uint32_t*>(&value);
}

// The per-(n, group) factors of one lane, splat to both halves.
template <class T>
struct Scale2 {
  typename Act<T>::T2 s, m;
};

// (a & b) | c in one LOP3: the compiler splits a mask-and-or with two immediates
// into two LOP3s (one immediate per LOP3), which made the INT4 path ALU-bound.
template <std::uint32_t kMask, std::uint32_t kOr>
__device__ __forceinline__ std::uint32_t and_or(std::uint32_t a) {
  std::uint32_t out;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(out) : "r"(a), "n"(kMask), "n"(kOr));
  return out;
}

// One packed INT4 word (8 codes) -> 4 fragment registers (see weight_pack.h):
// register i holds the k pair of nibbles i and i + 4. The codes become exact
// 16-bit floats by the magic-number trick, then one __hfma2 (Q4_1, w = q*s + m) or
// __hmul2 (Q4_0, w = (q-8)*s) gives each weight with the single rounding the
// definition requires.
// f16: nibbles 1 and 5 are taken in place with the mask 0x00f000f0: 1024 + 16q is
// exact (the f16 ulp at 1024 is 1), and fma(v, 1/16, -64) = q exactly; so one shift
// (>> 8) serves pairs 2 and 3 and a word costs 1 SHF + 4 LOP3 + 8 half ops. bf16 has
// a 7-bit mantissa (128 + 16q would carry into the exponent): three shifts.
template <class T, Form F>
__device__ __forceinline__ void dequant_int4_word(std::uint32_t word, const Scale2<T>& sc, std::uint32_t (&b)[4]) {
  using T2 = typename Act<T>::T2;
  constexpr bool kZp = F == Form::q4_zero_point;
  constexpr std::uint32_t kMagic = Act<T>::kMagic;
  T2 q[4];
  if constexpr (std::is_same_v<T, __half>) {
    const T2 sub = Act<T>::constant2(kZp ? 1024.0f : 1032.0f);  // q or q - 8
    const T2 sixteenth = Act<T>::constant2(0.0625f);
    const T2 sub16 = Act<T>::constant2(kZp ? -64.0f : -72.0f);
    const std::uint32_t hi = word >> 8;
    q[0] = __hsub2(as_t2<T2>(and_or<0x000f000fu, kMagic>(word)), sub);
    q[1] = __hfma2(as_t2<T2>(and_or<0x00f000f0u, kMagic>(word)), sixteenth, sub16);
    q[2] = __hsub2(as_t2<T2>(and_or<0x000f000fu, kMagic>(hi)), sub);
    q[3] = __hfma2(as_t2<T2>(and_or<0x00f000f0u, kMagic>(hi)), sixteenth, sub16);
  } else {
    const T2 sub = Act<T>::constant2(kZp ? 128.0f : 136.0f);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = __hsub2(as_t2<T2>(and_or<0x000f000fu, kMagic>(word >> (4 * i))), sub);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = kZp ? as_u32(__hfma2(q[i], sc.s, sc.m)) : as_u32(__hmul2(q[i], sc.s));
}

// One packed INT8 word (4 codes stored as q + 128) -> 2 B registers (bytes 0,1 and
// 2,3). f16: 0x6400 | byte is 1024 + q + 128 exactly. bf16 has too few mantissa bits
// for a 8-bit code, so the code goes through f32 (2^23 + byte, exact) instead.
template <class T>
__device__ __forceinline__ void dequant_int8_word(std::uint32_t word, const Scale2<T>& sc, std::uint32_t (&b)[2]);
template <>
__device__ __forceinline__ void dequant_int8_word<__half>(std::uint32_t word, const Scale2<__half>& sc,
                                                         std::uint32_t (&b)[2]) {
  const __half2 offset = __float2half2_rn(1152.0f);
  const __half2 q01 = __hsub2(as_t2<__half2>(__byte_perm(word, 0x64646464u, 0x4140)), offset);
  const __half2 q23 = __hsub2(as_t2<__half2>(__byte_perm(word, 0x64646464u, 0x4342)), offset);
  b[0] = as_u32(__hmul2(q01, sc.s));
  b[1] = as_u32(__hmul2(q23, sc.s));
}
template <>
__device__ __forceinline__ void dequant_int8_word<__nv_bfloat16>(std::uint32_t word, const Scale2<__nv_bfloat16>& sc,
                                                                std::uint32_t (&b)[2]) {
  float q[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) q[e] = __uint_as_float(__byte_perm(word, 0x4b000000u, 0x7440 | e)) - 8388736.0f;
  b[0] = as_u32(__hmul2(__floats2bfloat162_rn(q[0], q[1]), sc.s));  // exact conversions: |q| <= 128
  b[1] = as_u32(__hmul2(__floats2bfloat162_rn(q[2], q[3]), sc.s));
}

// ---- GGML block forms (f16 activations) -------------------------------------------------
//
// formats/weight_pack.h has the unit (nibble plane, high-bit planes, lane scales, row
// factors) and the value of each weight. A lane reads its part of a unit once per (tile,
// step): the 16 nibble bytes, its high-plane words, its scale (and min) and its row's
// d (and dmin); the sub-block factors are formed there, once, in f32 (K forms: d * sc,
// dmin * mn, exact) or kept as f16 (Q5_0, Q5_1: d, m). Then each packed word gives 4 B
// fragment registers as the INT4 word does: (nibbles | high bits | 0x6400) is the f16
// 1024 + q exactly, one HSUB2 gives q (or q - 16, q - 32) exactly, and
//   Q5_0: * d (HMUL2), Q5_1: * d + m (HFMA2): one rounding of the exact value;
//   K forms: widened to f32, s * q - m (Q6_K: s * q) in one f32 rounding (ggml's value),
//            then rounded to f16 (cvt.rn.f16x2.f32).

constexpr formats::WeightBlocks blocks_of(Form f) {
  return f == Form::q5_0   ? formats::WeightBlocks::q5_0
         : f == Form::q5_1 ? formats::WeightBlocks::q5_1
         : f == Form::q4_k ? formats::WeightBlocks::q4_k
         : f == Form::q5_k ? formats::WeightBlocks::q5_k
         : f == Form::q6_k ? formats::WeightBlocks::q6_k
                           : formats::WeightBlocks::none;
}

// Bytes of one packed unit (8 n x 128 k) of a form.
template <Form F>
constexpr int form_unit_bytes() {
  return is_block_form(F) ? formats::block_unit_bytes(blocks_of(F)) : F == Form::int8 ? 1024 : 512;
}

// Word w (0..3) of a lane's 16 nibble bytes.
__device__ __forceinline__ std::uint32_t word_of(const uint4& q, int w) {
  return w == 0 ? q.x : w == 1 ? q.y : w == 2 ? q.z : q.w;
}

template <Form F>
struct BlockLane {
  uint4 q;                        // the lane's nibble bytes
  std::uint32_t h0 = 0, h1 = 0;   // its high-plane words (bits 4 and 5 of the codes)
  __half2 s2, m2;                 // Q5_0 / Q5_1: d (and m), splat
  float s0 = 0.0f, s1 = 0.0f, m = 0.0f;  // K forms: d * sc (Q6_K: of k 0..15, then 16..31), dmin * mn
};

// A lane's part of the unit at `unit` (shared or global memory, 16-byte aligned).
template <Form F>
__device__ __forceinline__ BlockLane<F> load_block_lane(const std::uint8_t* unit, int lane) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  static_assert(kB != formats::WeightBlocks::none, "a GGML block form");
  BlockLane<F> l;
  l.q = *reinterpret_cast<const uint4*>(unit + lane * 16);
  if constexpr (formats::block_high_planes(kB) >= 1) l.h0 = *reinterpret_cast<const std::uint32_t*>(unit + 512 + 4 * lane);
  if constexpr (formats::block_high_planes(kB) >= 2) l.h1 = *reinterpret_cast<const std::uint32_t*>(unit + 640 + 4 * lane);
  const std::uint16_t scale =
      *reinterpret_cast<const std::uint16_t*>(unit + formats::block_scale_offset(kB) + 2 * lane);
  const std::uint8_t* factor = unit + formats::block_super_offset(kB) + (lane / 4) * formats::block_super_bytes(kB);
  if constexpr (kB == formats::WeightBlocks::q5_0 || kB == formats::WeightBlocks::q5_1) {
    l.s2 = __half2half2(__ushort_as_half(scale));
    l.m2 = kB == formats::WeightBlocks::q5_1
               ? __half2half2(__ushort_as_half(
                     *reinterpret_cast<const std::uint16_t*>(unit + formats::block_scale_offset(kB) + 64 + 2 * lane)))
               : __float2half2_rn(0.0f);
  } else if constexpr (kB == formats::WeightBlocks::q6_k) {
    const float d = __half2float(__ushort_as_half(*reinterpret_cast<const std::uint16_t*>(factor)));
    l.s0 = d * static_cast<float>(static_cast<std::int8_t>(scale & 0xffu));  // exact
    l.s1 = d * static_cast<float>(static_cast<std::int8_t>(scale >> 8));
  } else {
    const std::uint32_t dm = *reinterpret_cast<const std::uint32_t*>(factor);
    l.s0 = __half2float(__ushort_as_half(static_cast<std::uint16_t>(dm & 0xffffu))) * static_cast<float>(scale & 0xffu);
    l.m = __half2float(__ushort_as_half(static_cast<std::uint16_t>(dm >> 16))) * static_cast<float>(scale >> 8);
  }
  return l;
}

// Packed word w (0..3, the lane's k 8w .. 8w + 7) -> 4 B fragment registers, register i
// the k pair (8w + 2i, 8w + 2i + 1), as dequant_int4_word.
template <Form F>
__device__ __forceinline__ void dequant_block_word(const BlockLane<F>& l, int w, std::uint32_t (&b)[4]) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  const std::uint32_t word = word_of(l.q, w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    std::uint32_t v = and_or<0x000f000fu, 0x64006400u>(word >> (4 * i));  // 1024 + low 4 bits
    const int shift = 4 * w + i;
    if constexpr (formats::block_high_planes(kB) >= 1) v |= ((l.h0 >> shift) & 0x00010001u) << 4;
    if constexpr (formats::block_high_planes(kB) >= 2) v |= ((l.h1 >> shift) & 0x00010001u) << 5;
    const __half2 q1024 = as_t2<__half2>(v);  // 1024 + q, exact
    if constexpr (kB == formats::WeightBlocks::q5_0) {
      b[i] = as_u32(__hmul2(__hsub2(q1024, __float2half2_rn(1040.0f)), l.s2));
    } else if constexpr (kB == formats::WeightBlocks::q5_1) {
      b[i] = as_u32(__hfma2(__hsub2(q1024, __float2half2_rn(1024.0f)), l.s2, l.m2));
    } else if constexpr (kB == formats::WeightBlocks::q6_k) {
      const float2 q = __half22float2(__hsub2(q1024, __float2half2_rn(1056.0f)));  // q - 32
      const float s = w < 2 ? l.s0 : l.s1;
      b[i] = as_u32(__floats2half2_rn(__fmul_rn(s, q.x), __fmul_rn(s, q.y)));
    } else {
      const float2 q = __half22float2(__hsub2(q1024, __float2half2_rn(1024.0f)));
      b[i] = as_u32(__floats2half2_rn(__fmaf_rn(l.s0, q.x, -l.m), __fmaf_rn(l.s0, q.y, -l.m)));
    }
  }
}

using cuda::mma_16816;  // D += A (16x16, row) * B (16x8, col), FP32 accumulators

using cuda::cp_async16;  // cp.async helpers (cuda/async_copy.cuh)
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::smem_address;

// Output element: FP32 accumulator + bias, one rounding to the act dtype.
template <class T>
__device__ __forceinline__ void store_out(const Params& p, std::int64_t row, std::int64_t col, float acc) {
  if (row >= p.m || col >= p.n) return;
  if (p.bias) acc += Act<T>::to_float(p.bias[col * p.bias_stride]);
  static_cast<std::uint16_t*>(p.out)[row * p.ldo + col] = Act<T>::from_float(acc);
}

}  // namespace lowbit::cuda::weight_only
