// The weight blocks of the CPU engine's matrix products (cpu/block_dot.h): 32 values a
// block, one code per value and the block's scale(s) and offset. Three are ggml's own,
// as a GGUF file stores them:
//
//   q4_0      f16 d, 16 bytes of nibbles            w = (q - 8) * d         q in 0..15
//   q4_1      f16 d, f16 m, 16 bytes of nibbles     w = fma(q, d, m)        q in 0..15
//   q8_0      f16 d, 32 signed bytes                w = q * d               q in -128..127
//
// (q4_1 in one rounding: lowbit's definition, gguf/dequant.h.) The others hold ggml's
// other types exactly, the same f32 values ggml's reference decoder gives, repacked at
// load (engine/cpu_block_repack.h):
//
//   q5_f32    f32 d, f32 m, 32 unsigned bytes       w = d * q + m           q in 0..31     (Q5_K, Q5_1)
//   q2_f16x2  f16 d, f16 dmin, 2 bytes sc | mn << 4, 8 bytes of 2-bit codes
//                                                   w = (d * sc_h) * q - dmin * mn_h, h = j / 16
//                                                                           q in 0..3      (Q2_K)
//   q3_f16x2  f16 d, 2 signed bytes sc, 8 bytes of 2-bit codes, 4 bytes of third bits
//                                                   w = (d * sc_h) * (q - 4), h = j / 16
//                                                                           q in 0..7      (Q3_K)
//   q4_f16    f16 d, f16 dmin, byte sc, byte mn, 16 bytes of nibbles
//                                                   w = (d * sc) * q - dmin * mn
//                                                                           q in 0..15     (Q4_K)
//   q6_f16x2  f16 d, 2 signed bytes sc, 16 bytes of nibbles (bits 0-3 of the codes), 8
//             bytes of 2-bit codes (bits 4-5)       w = (d * sc_h) * (q - 32), h = j / 16
//                                                                           q in 0..63     (Q6_K)
//
// and two that held Q4_K and Q6_K before (no GGUF type's form now: the f32-factor
// definitions the f16 blocks are tested to equal, product for product, in
// cpu/block_dot_test.cpp):
//
//   q4_f32    f32 d, f32 m, 16 bytes of nibbles     w = d * q + m           q in 0..15
//   q6_f32x2  f32 d0, f32 d1, 32 signed bytes       w = d0 * q (values 0-15), d1 * q (16-31)
//                                                                           q in -32..31
//
// (q4_f32 and q5_f32 in two roundings, product then sum, as ggml's K-quant decoders.)
// The f16 blocks keep the K-quant's own fields, the super-block's f16 d (and dmin) and
// the scales of the block's sub-blocks (Q2_K: a 4-bit scale and min a 16 values; Q3_K:
// the 6-bit scale minus 32, sc in -32..31, a 16; Q4_K: the 6-bit scale and min of its
// 32; Q6_K: the signed byte scale a 16), and form ggml's f32 factors where they are used,
// with ggml's operations (d * sc is the f32 the f32 forms stored): 14, 16, 22 and 28
// bytes a block (the files' 2.625, 3.4375, 4.5 and 6.5625 bits a value as 3.5, 4, 5.5
// and 7), where f32 factors take 24 (Q2_K: d0, d1, m0, m1), 20 (Q3_K: d0, d1; it was
// held as q6_f32x2, 40, a byte a code), 24 (q4_f32) and 40 (q6_f32x2).
// Nibbles: byte j holds value j in its low nibble and value j + 16 in its high one.
// 2-bit codes: byte j (0..7) holds values j, j + 8, j + 16, j + 24 at bits 0, 2, 4, 6.
// Third bits (q3_f16x2): bit j % 8 of byte j / 8 is value j's bit 2 (a little-endian
// 32-bit mask of the values whose code is 4 or more).
#pragma once

#include <cstdint>
#include <cstring>

#include "formats/float16.h"

namespace lowbit::cpu {

enum class WeightBlockType { q4_0, q4_1, q8_0, q4_f32, q5_f32, q6_f32x2, q2_f16x2, q3_f16x2, q4_f16, q6_f16x2 };

inline constexpr std::int64_t kValuesPerBlock = 32;

// A block's f16 or f32 field at p (blocks are byte arrays: no alignment).
inline float f16_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return formats::half_to_float(formats::Half{bits});
}
inline float f32_at(const std::uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

std::int64_t weight_block_bytes(WeightBlockType type);  // 18, 20, 34, 24, 40, 40, 14, 16, 22, 28
const char* weight_block_name(WeightBlockType type);    // "q4_0", ..., "q6_f16x2"

// Code j (0..31) of 16 bytes of nibbles.
inline int nibble_code(const std::uint8_t* codes, int j) { return j < 16 ? codes[j] & 15 : codes[j - 16] >> 4; }
// Code j (0..31) of a q2_f16x2 block's 8 code bytes.
inline int two_bit_code(const std::uint8_t* codes, int j) { return (codes[j % 8] >> (2 * (j / 8))) & 3; }
// Code j (0..31) of a q3_f16x2 block's 12 code bytes (the 2-bit codes, then the third bits).
inline int three_bit_code(const std::uint8_t* codes, int j) {
  return two_bit_code(codes, j) | (((codes[8 + j / 8] >> (j % 8)) & 1) << 2);
}
// Code j (0..31) of a q6_f16x2 block's 24 code bytes (the nibbles, then the 2-bit codes).
inline int six_bit_code(const std::uint8_t* codes, int j) {
  return nibble_code(codes, j) | (two_bit_code(codes + 16, j) << 4);
}

// count values (a multiple of 32: count / 32 blocks at `blocks`) as f32, each by its
// type's formula above. Throws for a count that is not a whole number of blocks.
void decode_weight_blocks(WeightBlockType type, const std::uint8_t* blocks, std::int64_t count, float* out);

// The index of the first of count / 32 blocks with a NaN or Inf scale or offset, or
// count / 32 when there is none. Finite parameters mean finite values: the scales are
// f16 values times integers of at most 128 in magnitude, and so are the codes (q2_f16x2:
// f16 d and dmin times integers of at most 15, the codes at most 3; q3_f16x2: f16 d times
// at most 32, the codes at most 4; q4_f16: f16 d and dmin times at most 63, the codes at
// most 15; q6_f16x2: f16 d times at most 128, the codes at most 32).
std::int64_t first_non_finite_block(WeightBlockType type, const std::uint8_t* blocks, std::int64_t count);

}  // namespace lowbit::cpu
