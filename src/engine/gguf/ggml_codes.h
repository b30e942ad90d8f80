// The stored codes of ggml's Q5_0 / Q5_1 and K-quant blocks, in value order, unsigned
// (before any offset: Q5_0's -16, Q6_K's -32), and the K-quants' sub-block scales: the one
// place that knows their bit layouts, shared by the decoder (dequant.cpp), the CPU repack
// (cpu_block_repack.cpp), the GPU repack (repack.cpp) and the synthetic writer.
#pragma once

#include <cstdint>
#include <cstring>

namespace lowbit::engine {

// Q5_0 / Q5_1: 16 bytes of nibbles (byte j: value j low, value j + 16 high) and a
// 32-bit word of fifth bits (bit j: value j).
inline void q5_codes(const std::uint8_t* qh_bytes, const std::uint8_t* qs, std::uint8_t (&q)[32]) {
  std::uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<std::uint8_t>((qs[j] & 15) | (((qh >> j) & 1) << 4));
    q[j + 16] = static_cast<std::uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
}

// Q4_K / Q5_K super-block (d, dmin, scales[12], (qh[32],) qs[128]): value 32 s + l of
// sub-block s. Each 64 values read 32 bytes of qs: low nibbles sub-block 2i, high
// nibbles 2i + 1; Q5_K's fifth bit of value l of sub-block s is bit s of qh[l]. Sub-block
// s's 6-bit scale and min are unpack_k_scale_min(block + kQ4kScales, s) (k_scales.h); its
// values are (d * scale) * q - dmin * min.
constexpr int kQ4kD = 0, kQ4kDmin = 2, kQ4kScales = 4, kQ4kCodes = 16;  // Q4_K and Q5_K
constexpr int kQ5kHigh = 16, kQ5kCodes = 48;                            // Q5_K's qh, qs
inline void q4_k_codes(const std::uint8_t* block, bool five_bits, std::uint8_t (&q)[256]) {
  const std::uint8_t* qh = block + kQ5kHigh;
  const std::uint8_t* qs = block + (five_bits ? kQ5kCodes : kQ4kCodes);
  for (int pair = 0; pair < 4; ++pair, qs += 32) {
    for (int nibble = 0; nibble < 2; ++nibble) {
      const int sub = 2 * pair + nibble;
      for (int l = 0; l < 32; ++l) {
        const int high = five_bits ? ((qh[l] >> sub) & 1) << 4 : 0;
        q[32 * sub + l] = static_cast<std::uint8_t>(((qs[l] >> (4 * nibble)) & 15) | high);
      }
    }
  }
}

// The 2-bit plane of Q2_K and Q3_K super-blocks (qs[64]): value 32 p + i (pass p = 0..7,
// i < 32) takes bits 2 (p % 4) and 2 (p % 4) + 1 of qs[32 (p / 4) + i].
inline void two_bit_codes(const std::uint8_t* qs, std::uint8_t (&q)[256]) {
  for (int pass = 0; pass < 8; ++pass) {
    const std::uint8_t* bytes = qs + 32 * (pass / 4);
    for (int i = 0; i < 32; ++i) q[32 * pass + i] = static_cast<std::uint8_t>((bytes[i] >> (2 * (pass % 4))) & 3);
  }
}

// Q2_K super-block (scales[16], qs[64], d, dmin): the codes are the 2-bit plane at qs;
// sub-block s (values 16 s .. 16 s + 15) has scale scales[s] & 15 and min scales[s] >> 4,
// and its values are (d * scale) * q - dmin * min.
constexpr int kQ2kCodes = 16, kQ2kD = 80, kQ2kDmin = 82;
inline void q2_k_codes(const std::uint8_t* block, std::uint8_t (&q)[256]) { two_bit_codes(block + kQ2kCodes, q); }
struct Q2kScaleMin {
  int scale, min;  // 0..15 each
};
inline Q2kScaleMin q2_k_scale_min(const std::uint8_t* block, int s) { return {block[s] & 15, block[s] >> 4}; }

// Q3_K super-block (hmask[32], qs[64], scales[12], d): value 32 p + i takes its low two
// bits from the 2-bit plane at qs (as Q2_K) and, as its third bit, bit p of hmask[i]; the
// value is (d * scale) * (code - 4), the scale of its sub-block of 16 (q3_k_scale).
constexpr int kQ3kHmask = 0, kQ3kCodes = 32, kQ3kScales = 96, kQ3kD = 108;
inline void q3_k_codes(const std::uint8_t* block, std::uint8_t (&q)[256]) {
  const std::uint8_t* hmask = block + kQ3kHmask;
  two_bit_codes(block + kQ3kCodes, q);
  for (int pass = 0; pass < 8; ++pass) {
    for (int i = 0; i < 32; ++i) {
      q[32 * pass + i] = static_cast<std::uint8_t>(q[32 * pass + i] | (((hmask[i] >> pass) & 1) << 2));
    }
  }
}

// Q3_K's scale of sub-block s (values 16 s .. 16 s + 15), minus 32: its low 4 bits in
// byte s % 8 of scales[12] (low nibble for s < 8, high for s >= 8), its top 2 bits in
// byte 8 + s % 4 at bit 2 (s / 4).
inline int q3_k_scale(const std::uint8_t* block, int s) {
  const std::uint8_t* packed = block + kQ3kScales;
  const int low = (packed[s % 8] >> (s < 8 ? 0 : 4)) & 15;
  const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The inverse (synthetic blocks): the sixteen scales, each -32..31, into scales[12].
inline void pack_q3_k_scales(const int (&scales)[16], std::uint8_t* block) {
  std::uint8_t* packed = block + kQ3kScales;
  std::memset(packed, 0, 12);
  for (int s = 0; s < 16; ++s) {
    const int v = scales[s] + 32;
    packed[s % 8] = static_cast<std::uint8_t>(packed[s % 8] | ((v & 15) << (s < 8 ? 0 : 4)));
    packed[8 + s % 4] = static_cast<std::uint8_t>(packed[8 + s % 4] | (((v >> 4) & 3) << (2 * (s / 4))));
  }
}

// Q6_K super-block (ql[128], qh[64], scales[16], d): value 128 h + 32 k + l (half h,
// k = 0..3, l < 32) takes the low (k < 2) or high (k >= 2) nibble of ql[64 h + l +
// 32 (k % 2)] and bits 2k, 2k + 1 of qh[32 h + l] as its bits 4 and 5; sub-block s
// (values 16 s .. 16 s + 15) has the signed scale q6_k_scale(block, s), and its values
// are (d * scale) * (code - 32).
constexpr int kQ6kLow = 0, kQ6kHigh = 128, kQ6kScales = 192, kQ6kD = 208;
inline void q6_k_codes(const std::uint8_t* block, std::uint8_t (&q)[256]) {
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* ql = block + kQ6kLow + 64 * half;
    const std::uint8_t* qh = block + kQ6kHigh + 32 * half;
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int low = (ql[l + 32 * (k % 2)] >> (k < 2 ? 0 : 4)) & 15;
        q[128 * half + 32 * k + l] = static_cast<std::uint8_t>(low | (((qh[l] >> (2 * k)) & 3) << 4));
      }
    }
  }
}

inline int q6_k_scale(const std::uint8_t* block, int s) {
  return static_cast<std::int8_t>(block[kQ6kScales + s]);
}

}  // namespace lowbit::engine
