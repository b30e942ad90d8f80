// Device building blocks of the weight-only GEMM kernels: the raw arguments, the
// in-register dequantization of packed codes into mma B fragments, and mma.sync.
// The packed layout and the value definition are in formats/weight_pack.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/async_copy.cuh"
#include "cuda/lop3.cuh"
#include "cuda/mma.cuh"
#include "cuda/swiglu.cuh"
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

// One packed INT4 word (8 codes) -> 4 pairs of exact code values (Q4_1 q, Q4_0 q - 8)
// as T2: pair i holds nibbles i and i + 4 (see weight_pack.h). The codes become exact
// 16-bit floats by the magic-number trick and one exact subtraction.
// f16: nibbles 1 and 5 are taken in place with the mask 0x00f000f0: 1024 + 16q is
// exact (the f16 ulp at 1024 is 1), and fma(v, 1/16, -64) = q exactly; so one shift
// (>> 8) serves pairs 2 and 3 and a word costs 1 SHF + 4 LOP3 + 4 half ops. bf16 has
// a 7-bit mantissa (128 + 16q would carry into the exponent): three shifts.
template <class T, Form F>
__device__ __forceinline__ void int4_code_pairs(std::uint32_t word, typename Act<T>::T2 (&q)[4]) {
  using T2 = typename Act<T>::T2;
  constexpr bool kZp = F == Form::q4_zero_point;
  constexpr std::uint32_t kMagic = Act<T>::kMagic;
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
}

// Nibbles n and n + 4 of one packed word (shift = 4 n, n < 4) as an exact pair of code
// values (Q4_1 q, Q4_0 q - 8): one shift, one LOP3, one subtraction. The wgmma kernel
// takes each A-fragment register straight from its source word with it (n = the lane's
// quad column), where int4_code_pairs first needs the nibbles gathered into one word.
template <class T, Form F>
__device__ __forceinline__ typename Act<T>::T2 int4_code_pair_at(std::uint32_t word, std::uint32_t shift) {
  using T2 = typename Act<T>::T2;
  constexpr bool kZp = F == Form::q4_zero_point;
  const T2 sub = Act<T>::constant2(std::is_same_v<T, __half> ? (kZp ? 1024.0f : 1032.0f) : (kZp ? 128.0f : 136.0f));
  return __hsub2(as_t2<T2>(and_or<0x000f000fu, Act<T>::kMagic>(word >> shift)), sub);
}

// The weight of a code pair with the single rounding the definition requires: one
// __hfma2 (Q4_1, w = q*s + m) or __hmul2 (Q4_0 w = (q-8)*s; INT8 w = q*s).
template <class T, Form F>
__device__ __forceinline__ std::uint32_t scale_pair(typename Act<T>::T2 q, const Scale2<T>& sc) {
  return F == Form::q4_zero_point ? as_u32(__hfma2(q, sc.s, sc.m)) : as_u32(__hmul2(q, sc.s));
}

// One packed INT4 word (8 codes) -> 4 fragment registers: register i holds the k
// pair of nibbles i and i + 4, all of one (n, group).
template <class T, Form F>
__device__ __forceinline__ void dequant_int4_word(std::uint32_t word, const Scale2<T>& sc, std::uint32_t (&b)[4]) {
  typename Act<T>::T2 q[4];
  int4_code_pairs<T, F>(word, q);
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = scale_pair<T, F>(q[i], sc);
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
// formats/weight_pack.h has the unit (low plane, high-bit planes, lane scales, row
// factors) and the value of each weight. A lane reads its part of a unit once per (tile,
// step): its low-plane bytes (16 nibble bytes, or 8 bytes of 2-bit fields), its high-plane
// words, its scale (and min) and its row's d (and dmin); the sub-block factors are formed
// there, once, in f32 (K forms: d * sc, dmin * mn, exact) or kept as f16 (Q5_0, Q5_1: d,
// m). Then each packed word gives 4 B fragment registers as the INT4 word does: (low bits |
// high bits | 0x6400) is the f16 1024 + q exactly, one HSUB2 gives q (or q - 16, q - 32,
// q - 4) exactly, and
//   Q5_0: * d (HMUL2), Q5_1: * d + m (HFMA2): one rounding of the exact value;
//   K forms: widened to f32, s * q - m (Q6_K, Q3_K: s * q) in one f32 rounding (ggml's
//            value), then rounded to f16 (cvt.rn.f16x2.f32).

constexpr formats::WeightBlocks blocks_of(Form f) {
  return f == Form::q5_0   ? formats::WeightBlocks::q5_0
         : f == Form::q5_1 ? formats::WeightBlocks::q5_1
         : f == Form::q4_k ? formats::WeightBlocks::q4_k
         : f == Form::q5_k ? formats::WeightBlocks::q5_k
         : f == Form::q6_k ? formats::WeightBlocks::q6_k
         : f == Form::q3_k ? formats::WeightBlocks::q3_k
         : f == Form::q2_k ? formats::WeightBlocks::q2_k
                           : formats::WeightBlocks::none;
}

// Bytes of one packed unit (8 n x 128 k) of a form.
template <Form F>
constexpr int form_unit_bytes() {
  return is_block_form(F) ? formats::block_unit_bytes(blocks_of(F)) : F == Form::int8 ? 1024 : 512;
}

// What a form's stored code is offset by (the weight takes q - offset): Q5_0 16, Q6_K 32,
// Q3_K 4, else 0; the f16 1024 + offset is subtracted from (code | 0x6400).
constexpr float block_code_base(formats::WeightBlocks b) {
  return b == formats::WeightBlocks::q5_0   ? 1040.0f
         : b == formats::WeightBlocks::q6_k ? 1056.0f
         : b == formats::WeightBlocks::q3_k ? 1028.0f
                                            : 1024.0f;
}

// Word w (0..3) of a lane's 16 nibble bytes.
__device__ __forceinline__ std::uint32_t word_of(const uint4& q, int w) {
  return w == 0 ? q.x : w == 1 ? q.y : w == 2 ? q.z : q.w;
}

// A lane's low-plane bytes of the unit at `unit` (formats::block_lane_low_bytes): 16
// nibble bytes, or (2-bit forms) 8 bytes in x and y.
template <formats::WeightBlocks kB>
__device__ __forceinline__ uint4 load_low_plane(const std::uint8_t* unit, int lane) {
  constexpr int kBytes = formats::block_lane_low_bytes(kB);
  if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(unit + lane * kBytes);
    return make_uint4(v.x, v.y, 0u, 0u);
  } else {
    return *reinterpret_cast<const uint4*>(unit + lane * kBytes);
  }
}

// A lane's code words of a unit: its low plane q (load_low_plane) and its high-plane word
// h0 (code bit low_bits), or Q6_K's six-bit codes, words 0-3 in q and 4, 5 in h0, h1.
struct LaneCodes {
  uint4 q;
  std::uint32_t h0 = 0, h1 = 0;
};
template <formats::WeightBlocks kB>
__device__ __forceinline__ LaneCodes load_lane_codes(const std::uint8_t* unit, int lane) {
  LaneCodes c;
  if constexpr (formats::block_low_bits(kB) == 6) {
    c.q = *reinterpret_cast<const uint4*>(unit + formats::six_bit_word_offset(lane, 0));
    const uint2 hi = *reinterpret_cast<const uint2*>(unit + formats::six_bit_word_offset(lane, 4));
    c.h0 = hi.x, c.h1 = hi.y;
  } else {
    c.q = load_low_plane<kB>(unit, lane);
    if constexpr (formats::block_high_planes(kB) >= 1) {
      c.h0 = *reinterpret_cast<const std::uint32_t*>(unit + formats::block_low_bytes(kB) + 4 * lane);
    }
  }
  return c;
}

// Q6_K's word group of packed word w (0..3): words 0-2 of the six for k 0..15, 3-5 for
// k 16..31.
struct SixBitGroup {
  std::uint32_t w0, w1, w2;
};
__device__ __forceinline__ SixBitGroup six_bit_group(const LaneCodes& c, int w) {
  return SixBitGroup{w < 2 ? c.q.x : c.q.w, w < 2 ? c.q.y : c.h0, w < 2 ? c.q.z : c.h1};
}

// (moved & kMask) | v in one LOP3: written as C++, NVVM reassociated a pair's ORs into one
// LOP3 more a pair (32 more a step in a sub-block loop).
template <std::uint32_t kMask>
__device__ __forceinline__ std::uint32_t or_masked(std::uint32_t v, std::uint32_t moved) {
  std::uint32_t out;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(out) : "r"(moved), "n"(kMask), "r"(v));
  return out;
}

// Pair kP (0..7) of a Q6_K lane's word group (w0, w1, w2): formats::six_bit_piece.
template <int kP>
__device__ __forceinline__ std::uint32_t six_bit_pair_1024(std::uint32_t w0, std::uint32_t w1, std::uint32_t w2) {
  constexpr formats::CodePiece a = formats::six_bit_piece(kP, 0), b = formats::six_bit_piece(kP, 1);
  const std::uint32_t words[3] = {w0, w1, w2};
  const std::uint32_t v = and_or<a.mask, 0x64006400u>(words[a.word] >> a.shift);
  if constexpr (b.mask == 0u) {
    return v;
  } else {
    return or_masked<b.mask>(v, words[b.word] >> b.shift);
  }
}

// The pair (w, i) of a lane's codes (k 8w + 2i, + 1) in the two 16-bit halves, each 0x6400
// | its code (the f16 1024 + code): the low plane's nibbles at shift 4i of word w, or 2-bit
// fields at shift 8 (w % 2) + 2i of word w / 2 (formats::block_pair_*), with the high
// plane's bit 4w + i above them; Q6_K's pieces of word group w / 2. w and i are unrolled
// constants, so the switch folds.
template <formats::WeightBlocks kB>
__device__ __forceinline__ std::uint32_t code_pair_1024(const LaneCodes& c, int w, int i) {
  if constexpr (formats::block_low_bits(kB) == 6) {
    const auto [w0, w1, w2] = six_bit_group(c, w);
    switch (4 * (w % 2) + i) {
      case 0: return six_bit_pair_1024<0>(w0, w1, w2);
      case 1: return six_bit_pair_1024<1>(w0, w1, w2);
      case 2: return six_bit_pair_1024<2>(w0, w1, w2);
      case 3: return six_bit_pair_1024<3>(w0, w1, w2);
      case 4: return six_bit_pair_1024<4>(w0, w1, w2);
      case 5: return six_bit_pair_1024<5>(w0, w1, w2);
      case 6: return six_bit_pair_1024<6>(w0, w1, w2);
      default: return six_bit_pair_1024<7>(w0, w1, w2);
    }
  } else {
    constexpr int kLowBits = formats::block_low_bits(kB);
    const std::uint32_t v = and_or<formats::block_pair_mask(kB), 0x64006400u>(
        word_of(c.q, formats::block_pair_word(kB, w)) >> formats::block_pair_shift(kB, w, i));
    if constexpr (formats::block_high_planes(kB) == 0) {
      return v;
    } else {
      const int shift = 4 * w + i;  // the pair's bit in the high plane (and + 16)
      return or_masked<0x00010001u << kLowBits>(v, shift >= kLowBits ? c.h0 >> (shift - kLowBits)
                                                                       : c.h0 << (kLowBits - shift));
    }
  }
}

// A lane's quad column c (0..3) where the wgmma A fragments need pair c of each packed
// word (k 8w + 2c, + 1; wgmma.cu): c is a run-time value there, so the field shifts are
// per-lane values, computed once: the low plane's c * (field width); for Q6_K, whose even
// packed words hold pairs 0-3 of a six-bit word group and odd ones pairs 4-7, pair c is a
// whole field (bits 6 (c % 2) of six-bit word c / 2) and pair 4 + c one or two pieces
// (formats::six_bit_piece).
struct QuadColumn {
  int c = 0;
  std::uint32_t low_shift = 0;
  formats::CodePiece upper[2];  // six_bit_piece(4 + c, part)
};
template <formats::WeightBlocks kB>
__device__ __forceinline__ QuadColumn make_quad_column(int c) {
  QuadColumn q;
  q.c = c;
  q.low_shift = static_cast<std::uint32_t>(c * formats::block_low_bits(kB));
  q.upper[0] = formats::six_bit_piece(4 + c, 0);
  q.upper[1] = formats::six_bit_piece(4 + c, 1);
  return q;
}

constexpr bool lower_six_bit_pairs_are_whole_fields() {
  for (int p = 0; p < 4; ++p) {
    const formats::CodePiece a = formats::six_bit_piece(p, 0), b = formats::six_bit_piece(p, 1);
    if (a.word != p / 2 || a.shift != 6 * (p % 2) || a.mask != 0x003f003fu || b.mask != 0u) return false;
  }
  return true;
}
static_assert(lower_six_bit_pairs_are_whole_fields(), "code_pair_1024_at reads Q6_K pairs 0-3 as whole fields");
// code_pair_1024_at shifts a low-plane word by pair 0's shift + c * the field width: the
// pairs of a word must sit at that stride, as formats::block_pair_shift places them.
constexpr bool low_plane_pairs_at_field_stride() {
  for (const formats::WeightBlocks b : {formats::WeightBlocks::q5_0, formats::WeightBlocks::q5_1,
                                        formats::WeightBlocks::q4_k, formats::WeightBlocks::q5_k,
                                        formats::WeightBlocks::q3_k, formats::WeightBlocks::q2_k}) {
    for (int w = 0; w < 4; ++w) {
      for (int i = 0; i < 4; ++i) {
        if (formats::block_pair_shift(b, w, i) != formats::block_pair_shift(b, w, 0) + i * formats::block_low_bits(b)) {
          return false;
        }
      }
    }
  }
  return true;
}
static_assert(low_plane_pairs_at_field_stride(), "code_pair_1024_at's run-time pair shift");

// Word `index` (0..2) of a Q6_K word group.
__device__ __forceinline__ std::uint32_t pick_word(int index, std::uint32_t w0, std::uint32_t w1, std::uint32_t w2) {
  return index == 0 ? w0 : index == 1 ? w1 : w2;
}

// code_pair_1024 of pair (w, q.c): w an unrolled constant, the pair the lane's column.
template <formats::WeightBlocks kB>
__device__ __forceinline__ std::uint32_t code_pair_1024_at(const LaneCodes& l, int w, const QuadColumn& q) {
  if constexpr (formats::block_low_bits(kB) == 6) {
    const auto [w0, w1, w2] = six_bit_group(l, w);
    if (w % 2 == 0) {  // pair c: bits 6 (c % 2) .. + 5 of word c / 2
      return ((q.c < 2 ? w0 : w1) >> (6 * (q.c % 2)) & 0x003f003fu) | 0x64006400u;
    }
    const formats::CodePiece a = q.upper[0], b = q.upper[1];
    const std::uint32_t v = ((pick_word(a.word, w0, w1, w2) >> a.shift) & a.mask) | 0x64006400u;
    return v | ((pick_word(b.word, w0, w1, w2) >> b.shift) & b.mask);  // b.mask 0: one piece
  } else {
    constexpr int kLowBits = formats::block_low_bits(kB);
    const std::uint32_t v = and_or<formats::block_pair_mask(kB), 0x64006400u>(
        word_of(l.q, formats::block_pair_word(kB, w)) >> (formats::block_pair_shift(kB, w, 0) + q.low_shift));
    if constexpr (formats::block_high_planes(kB) == 0) {
      return v;
    } else {
      const std::uint32_t h = l.h0 >> q.c;  // the pair's bit of word w at bit 4w
      return or_masked<0x00010001u << kLowBits>(v, 4 * w >= kLowBits ? h >> (4 * w - kLowBits) : h << (kLowBits - 4 * w));
    }
  }
}

template <Form F>
struct BlockLane {
  LaneCodes c;                    // the lane's codes (load_lane_codes)
  __half2 s2, m2;                 // Q5_0 / Q5_1: d (and m), splat
  // K forms: d * sc and dmin * mn; the halves forms (Q6_K, Q3_K, Q2_K) of k 0..15 in s0 /
  // m0, of k 16..31 in s1 / m1.
  float s0 = 0.0f, s1 = 0.0f, m0 = 0.0f, m1 = 0.0f;
};

// A lane's part of the unit at `unit` (shared or global memory, 16-byte aligned).
template <Form F>
__device__ __forceinline__ BlockLane<F> load_block_lane(const std::uint8_t* unit, int lane) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  static_assert(kB != formats::WeightBlocks::none, "a GGML block form");
  BlockLane<F> l;
  l.c = load_lane_codes<kB>(unit, lane);
  const std::uint16_t scale =
      *reinterpret_cast<const std::uint16_t*>(unit + formats::block_scale_offset(kB) + 2 * lane);
  const std::uint8_t* factor = unit + formats::block_super_offset(kB) + (lane / 4) * formats::block_super_bytes(kB);
  if constexpr (kB == formats::WeightBlocks::q5_0 || kB == formats::WeightBlocks::q5_1) {
    l.s2 = __half2half2(__ushort_as_half(scale));
    l.m2 = kB == formats::WeightBlocks::q5_1
               ? __half2half2(__ushort_as_half(
                     *reinterpret_cast<const std::uint16_t*>(unit + formats::block_scale_offset(kB) + 64 + 2 * lane)))
               : __float2half2_rn(0.0f);
  } else if constexpr (kB == formats::WeightBlocks::q6_k || kB == formats::WeightBlocks::q3_k) {
    const float d = __half2float(__ushort_as_half(*reinterpret_cast<const std::uint16_t*>(factor)));
    l.s0 = d * static_cast<float>(static_cast<std::int8_t>(scale & 0xffu));  // exact
    l.s1 = d * static_cast<float>(static_cast<std::int8_t>(scale >> 8));
  } else {
    const std::uint32_t dm = *reinterpret_cast<const std::uint32_t*>(factor);
    const float d = __half2float(__ushort_as_half(static_cast<std::uint16_t>(dm & 0xffffu)));
    const float dmin = __half2float(__ushort_as_half(static_cast<std::uint16_t>(dm >> 16)));
    if constexpr (kB == formats::WeightBlocks::q2_k) {  // a byte a half: scale | min << 4
      l.s0 = d * static_cast<float>(scale & 15u), l.m0 = dmin * static_cast<float>((scale >> 4) & 15u);  // exact
      l.s1 = d * static_cast<float>((scale >> 8) & 15u), l.m1 = dmin * static_cast<float>(scale >> 12);
    } else {
      l.s0 = d * static_cast<float>(scale & 0xffu), l.m0 = dmin * static_cast<float>(scale >> 8);
    }
  }
  return l;
}

// The two f16 weights of a code pair of packed word w (0..3) from its 1024 + code halves
// (code_pair_1024): the halves forms take the factors of k 16..31 from word 2 on.
template <Form F>
__device__ __forceinline__ std::uint32_t scale_block_pair(const BlockLane<F>& l, int w, std::uint32_t pair_1024) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  const float s = formats::block_halves(kB) && w >= 2 ? l.s1 : l.s0;
  const float m = formats::block_halves(kB) && w >= 2 ? l.m1 : l.m0;
  const __half2 q1024 = as_t2<__half2>(pair_1024);  // 1024 + q, exact
  if constexpr (kB == formats::WeightBlocks::q5_0) {
    return as_u32(__hmul2(__hsub2(q1024, __float2half2_rn(block_code_base(kB))), l.s2));
  } else if constexpr (kB == formats::WeightBlocks::q5_1) {
    return as_u32(__hfma2(__hsub2(q1024, __float2half2_rn(block_code_base(kB))), l.s2, l.m2));
  } else if constexpr (kB == formats::WeightBlocks::q6_k || kB == formats::WeightBlocks::q3_k) {
    const float2 q = __half22float2(__hsub2(q1024, __float2half2_rn(block_code_base(kB))));  // q - 32, q - 4
    return as_u32(__floats2half2_rn(__fmul_rn(s, q.x), __fmul_rn(s, q.y)));
  } else {
    const float2 q = __half22float2(__hsub2(q1024, __float2half2_rn(block_code_base(kB))));
    return as_u32(__floats2half2_rn(__fmaf_rn(s, q.x, -m), __fmaf_rn(s, q.y, -m)));
  }
}

// Packed word w (0..3, the lane's k 8w .. 8w + 7) -> 4 B fragment registers, register i
// the k pair (8w + 2i, 8w + 2i + 1), as dequant_int4_word.
template <Form F>
__device__ __forceinline__ void dequant_block_word(const BlockLane<F>& l, int w, std::uint32_t (&b)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = scale_block_pair<F>(l, w, code_pair_1024<blocks_of(F)>(l.c, w, i));
}

// ---- GGML block forms, the sub-block decode (gemv, M <= 2) ----------------------------
//
// The per-weight decode above spends ~8 (Q4_K) to ~12 (Q5_K) instructions a k pair on
// the f32 value and its f16 rounding, and the GEMV is instruction-bound on it. Here the
// mma multiplies the codes themselves: (low bits | high bits | 0x6400) - 1024 (Q5_0: 1040,
// Q6_K: 1056, Q3_K: 1028) is q (q - 16, q - 32, q - 4) exactly in f16, and the sub-block
// factors are applied to the FP32 partials instead. The k order does it: lane column c of a
// unit owns one ggml sub-block of 32 (the halves forms Q6_K, Q3_K, Q2_K: two of 16, words
// 0-1 and 2-3), so the activations are fed as B column j = 4 * (M row) + (sub-block
// column), B[k][j] = x[j / 4][k] if k is in lane column j % 4, else 0 (only lanes with c ==
// r % 4 load x, of row r / 4). Then D[n][j] of the unit's 8 products is the sub-block dot
// product q . x of row n (the halves forms: two D sets, words 0-1 and 2-3), and per step
//   acc[n][j] += s[n][j % 4] * D[n][j]  -  m[n][j % 4] * X[j]
// with X[j] the sub-block's sum of x: 8 more mma of an all-ones A (the same for every row
// of the tile pair; Q2_K: into two sums, words 0-1 and 2-3), only for the forms with a min
// (Q5_1, Q4_K, Q5_K, Q2_K). M <= 2 fills the 8 columns: the same 8 mma a tile pair a step
// as the per-weight decode at M <= 8.
//
// Numerics: the weights are no longer rounded to f16: q (|q| <= 63) and x are exact f16
// mma inputs, their products exact, summed in FP32; the factors d * sc, dmin * mn (exact in
// f32) multiply FP32 partials. So the result is ggml's real-valued product up to FP32
// summation (of |s q x| + |m x|: the min term is subtracted, not folded into w), and it
// differs from lowbit's CPU twin (formats::block_weight_value, f16 weights) by the twin's
// weight rounding (<= 2^-11 |w| a weight); the GPU tests bound exactly that.
//
// Instructions a k pair (SASS to be confirmed): 0.75 SHF + 1 LOP3 + 1 HSUB2 (+ 2 for a
// high plane: SHF, LOP3; Q6_K's whole codes ~2.1 SHF and LOP3 in all), + 0.25 HMMA (+ 0.25
// for the sums of x) + ~1 of per-step factor work (LDS, conversions, FFMA): Q4_K ~4.4, Q5_K
// ~6.4, Q6_K ~4.5, Q5_0 ~5.4, Q5_1 ~6.2; the per-weight decode: ~8.5, ~12, ~10.5, ~7.5, ~7.5.

// The pair (w, i) of a lane's codes (k 8w + 2i, + 1) as exact f16 q - offset, in place
// in a B fragment register.
template <Form F>
__device__ __forceinline__ std::uint32_t block_code_pair(const LaneCodes& c, int w, int i) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  return as_u32(__hsub2(as_t2<__half2>(code_pair_1024<kB>(c, w, i)), __float2half2_rn(block_code_base(kB))));
}

// Whether a form subtracts (or adds) a per-sub-block min: needs the sums of x.
constexpr bool block_has_min(Form f) {
  return f == Form::q5_1 || f == Form::q4_k || f == Form::q5_k || f == Form::q2_k;
}

// The factors of a lane's two D columns e = 0, 1 (sub-blocks 2 (c % 2) + e of row r) of
// one unit: s and m, in f32 (exact); the halves forms' of k 0..15 in s, m and of k 16..31
// in s_hi, m_hi.
struct SubFactors {
  float s[2], s_hi[2], m[2], m_hi[2];
};
template <Form F>
__device__ __forceinline__ SubFactors load_sub_factors(const std::uint8_t* unit, int lane) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  const int r = lane / 4, half = lane % 2;  // D columns 2c, 2c + 1: sub-blocks 2 (c % 2) + e; c % 2 == lane % 2
  const std::uint32_t sc = *reinterpret_cast<const std::uint32_t*>(unit + formats::block_scale_offset(kB) + 4 * (2 * r + half));
  SubFactors f{};
  if constexpr (kB == formats::WeightBlocks::q5_0 || kB == formats::WeightBlocks::q5_1) {
    const float2 d = __half22float2(as_t2<__half2>(sc));
    f.s[0] = d.x, f.s[1] = d.y;
    if constexpr (kB == formats::WeightBlocks::q5_1) {
      const float2 m = __half22float2(
          as_t2<__half2>(*reinterpret_cast<const std::uint32_t*>(unit + formats::block_scale_offset(kB) + 64 + 4 * (2 * r + half))));
      f.m[0] = -m.x, f.m[1] = -m.y;  // acc += s D - m X: Q5_1 adds its min
    }
  } else if constexpr (kB == formats::WeightBlocks::q6_k || kB == formats::WeightBlocks::q3_k) {
    const float d = __half2float(__ushort_as_half(
        *reinterpret_cast<const std::uint16_t*>(unit + formats::block_super_offset(kB) + 2 * r)));
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      f.s[e] = d * static_cast<float>(static_cast<std::int8_t>((sc >> (16 * e)) & 0xffu));  // exact
      f.s_hi[e] = d * static_cast<float>(static_cast<std::int8_t>((sc >> (16 * e + 8)) & 0xffu));
    }
  } else {
    const std::uint32_t dm = *reinterpret_cast<const std::uint32_t*>(unit + formats::block_super_offset(kB) + 4 * r);
    const float2 d = __half22float2(as_t2<__half2>(dm));  // d, dmin
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if constexpr (kB == formats::WeightBlocks::q2_k) {  // a byte a half: scale | min << 4
        const std::uint32_t lo = (sc >> (16 * e)) & 0xffu, hi = (sc >> (16 * e + 8)) & 0xffu;
        f.s[e] = d.x * static_cast<float>(lo & 15u), f.m[e] = d.y * static_cast<float>(lo >> 4);  // exact
        f.s_hi[e] = d.x * static_cast<float>(hi & 15u), f.m_hi[e] = d.y * static_cast<float>(hi >> 4);
      } else {
        f.s[e] = d.x * static_cast<float>((sc >> (16 * e)) & 0xffu);  // exact
        f.m[e] = d.y * static_cast<float>((sc >> (16 * e + 8)) & 0xffu);
      }
    }
  }
  return f;
}

using cuda::mma_16816;  // D += A (16x16, row) * B (16x8, col), FP32 accumulators

using cuda::cp_async16;  // cp.async helpers (cuda/async_copy.cuh)
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::smem_address;

// Eight activations of a row from column k on (the ragged end of K, or a row not
// aligned for 16-byte copies): element by element, zero past K, one 16-byte store.
inline __device__ __noinline__ void store_x_ragged(const Params& p, std::uint8_t* dst, const std::uint16_t* src,
                                                   std::int64_t k) {
  std::uint16_t v[8];
  for (int e = 0; e < 8; ++e) v[e] = k + e < p.k ? src[e] : std::uint16_t{0};
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
}

// Output element: FP32 accumulator + bias, one rounding to the act dtype.
template <class T>
__device__ __forceinline__ void store_out(const Params& p, std::int64_t row, std::int64_t col, float acc) {
  if (row >= p.m || col >= p.n) return;
  if (p.bias) acc += Act<T>::to_float(p.bias[col * p.bias_stride]);
  static_cast<std::uint16_t*>(p.out)[row * p.ldo + col] = Act<T>::from_float(acc);
}

// A lane's four D-fragment elements of a tile pair: rows row, row + 1 (element i % 2) of
// columns col (tile 2j, i < 2) and col + 8 (tile 2j + 1). Under Params::swiglu these are
// gate and up of channel 8j + col % 8: each rounded to the act dtype, as the separate
// GEMM would store them, then silu(gate) * up into out column 8j + col % 8.
template <class T>
__device__ __forceinline__ void store_quad(const Params& p, std::int64_t row, std::int64_t col, float a0, float a1,
                                           float a2, float a3) {
  if (!p.swiglu) {
    store_out<T>(p, row, col, a0);
    store_out<T>(p, row + 1, col, a1);
    store_out<T>(p, row, col + 8, a2);
    store_out<T>(p, row + 1, col + 8, a3);
    return;
  }
  if (col >= p.n) return;
  const std::int64_t channel = col / 16 * 8 + col % 8;
  auto put = [&](std::int64_t m, float gate, float up) {
    if (m >= p.m) return;
    const float g = Act<T>::to_float(Act<T>::from_float(gate)), u = Act<T>::to_float(Act<T>::from_float(up));
    static_cast<std::uint16_t*>(p.out)[m * p.ldo + channel] = Act<T>::from_float(swiglu_value(g, u));
  };
  put(row, a0, a2);
  put(row + 1, a1, a3);
}

}  // namespace lowbit::cuda::weight_only
