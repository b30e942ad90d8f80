#include "engine/cpu_block_repack.h"

#include <cstring>

#include "engine/gguf/ggml_codes.h"
#include "engine/gguf/k_scales.h"
#include "formats/float16.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

using cpu::WeightBlockType;

float f16_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return formats::half_to_float(formats::Half{bits});
}

void put_f32(std::uint8_t* p, float v) { std::memcpy(p, &v, 4); }

// 32 codes in value order (their low four bits) as cpu's nibbles: value j low, value
// j + 16 high (weight_blocks.h).
void put_nibbles(const std::uint8_t* q, std::uint8_t* out) {
  for (int j = 0; j < 16; ++j) out[j] = static_cast<std::uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

void put_bytes(const int (&q)[32], std::uint8_t* out) {
  for (int j = 0; j < 32; ++j) out[j] = static_cast<std::uint8_t>(q[j]);  // two's complement for signed
}

// A block of q5_f32: w = d * q + m.
void put_scale_offset_block(float d, float m, const int (&q)[32], std::uint8_t* out) {
  put_f32(out, d);
  put_f32(out + 4, m);
  put_bytes(q, out + 8);
}

// 32 stored codes (ggml_codes.h) plus `offset`, as the blocks' ints.
void codes_plus(const std::uint8_t* codes, int offset, int (&q)[32]) {
  for (int j = 0; j < 32; ++j) q[j] = codes[j] + offset;
}

// dequant.cpp: (lo - 16) * d. As q8_0: the code lo - 16 (-16..15) times the same d.
void q5_0(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 22, dst += 34) {
    std::uint8_t codes[32];
    q5_codes(src + 2, src + 6, codes);
    int q[32];
    codes_plus(codes, -16, q);
    std::memcpy(dst, src, 2);
    put_bytes(q, dst + 2);
  }
}

// dequant.cpp: q * d + m, two roundings; d * q is the same product.
void q5_1(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 24, dst += 40) {
    std::uint8_t codes[32];
    q5_codes(src + 4, src + 8, codes);
    int q[32];
    codes_plus(codes, 0, q);
    put_scale_offset_block(f16_at(src), f16_at(src + 2), q, dst);
  }
}

// dequant.cpp: dl * q - ml with dl = d * scale, ml = dmin * min, each rounded to f32.
// The block keeps dl and -ml: dl * q + (-ml) is the same subtraction.
void q5_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  std::uint8_t codes[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += 176) {
    const float d = f16_at(src + kQ4kD);
    const float dmin = f16_at(src + kQ4kDmin);
    q4_k_codes(src, true, codes);
    for (int sub = 0; sub < 8; ++sub, dst += 40) {
      const KScaleMin sm = unpack_k_scale_min(src + kQ4kScales, sub);
      int q[32];
      codes_plus(codes + 32 * sub, 0, q);
      put_scale_offset_block(d * static_cast<float>(sm.scale), -(dmin * static_cast<float>(sm.min)), q, dst);
    }
  }
}

// 32 codes in value order (their low two bits) as cpu's 2-bit codes: byte j holds values
// j, j + 8, j + 16, j + 24 (weight_blocks.h).
void put_two_bit_codes(const std::uint8_t* q, std::uint8_t* out) {
  for (int j = 0; j < 8; ++j) {
    out[j] = static_cast<std::uint8_t>((q[j] & 3) | ((q[j + 8] & 3) << 2) | ((q[j + 16] & 3) << 4) |
                                       ((q[j + 24] & 3) << 6));
  }
}

// The K-quants kept as their own fields: each super-block of 256 values (src_bytes in
// the file) as 8 blocks of 32 (dst_bytes each). codes(src, q) gives the super-block's
// 256 codes in value order (ggml_codes.h); put(src, block, q, dst) writes block `block`
// (0..7) from its 32 codes q.
template <typename Codes, typename Put>
void k_blocks_of_32(const std::uint8_t* src, std::int64_t blocks, int src_bytes, int dst_bytes, std::uint8_t* dst,
                    Codes codes, Put put) {
  std::uint8_t q[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += src_bytes) {
    codes(src, q);
    for (int block = 0; block < 8; ++block, dst += dst_bytes) put(src, block, q + 32 * block, dst);
  }
}

// Q2_K's own fields, a block of 32 (two sub-blocks of 16) at a time: d and dmin (f16
// bits), the two scale | min << 4 bytes, the codes as 2-bit fields (weight_blocks.h).
// The block's decode forms ggml's factors and values with ggml's operations.
void q2_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  k_blocks_of_32(src, blocks, 84, 14, dst, q2_k_codes,
                 [](const std::uint8_t* s, int block, const std::uint8_t* q, std::uint8_t* out) {
                   std::memcpy(out, s + kQ2kD, 2);
                   std::memcpy(out + 2, s + kQ2kDmin, 2);
                   for (int h = 0; h < 2; ++h) {
                     const Q2kScaleMin sm = q2_k_scale_min(s, 2 * block + h);
                     out[4 + h] = static_cast<std::uint8_t>(sm.scale | (sm.min << 4));
                   }
                   put_two_bit_codes(q, out + 6);
                 });
}

// Q3_K's own fields, a block of 32 (two sub-blocks of 16, in order) at a time: d (f16
// bits), the two scales minus 32 as signed bytes, the codes' low two bits as 2-bit fields
// and their third bits as a 32-bit mask (weight_blocks.h). The block's decode forms
// ggml's factors d * (scale - 32) and values with ggml's operations.
void q3_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  k_blocks_of_32(src, blocks, 110, 16, dst, q3_k_codes,
                 [](const std::uint8_t* s, int block, const std::uint8_t* q, std::uint8_t* out) {
                   std::memcpy(out, s + kQ3kD, 2);
                   for (int h = 0; h < 2; ++h) out[2 + h] = static_cast<std::uint8_t>(q3_k_scale(s, 2 * block + h));
                   put_two_bit_codes(q, out + 4);
                   for (int i = 0; i < 4; ++i) {  // value j's third bit: bit j % 8 of byte j / 8
                     int bits = 0;
                     for (int k = 0; k < 8; ++k) bits |= (q[8 * i + k] >> 2) << k;
                     out[12 + i] = static_cast<std::uint8_t>(bits);
                   }
                 });
}

// Q4_K's own fields, a block of 32 (one sub-block) at a time: d and dmin (f16 bits), the
// sub-block's 6-bit scale and min as bytes, the codes as nibbles (weight_blocks.h). The
// block's decode forms ggml's factors and values with ggml's operations.
void q4_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  const auto codes = [](const std::uint8_t* s, std::uint8_t (&q)[256]) { q4_k_codes(s, false, q); };
  k_blocks_of_32(src, blocks, 144, 22, dst, codes,
                 [](const std::uint8_t* s, int sub, const std::uint8_t* q, std::uint8_t* out) {
                   std::memcpy(out, s + kQ4kD, 2);
                   std::memcpy(out + 2, s + kQ4kDmin, 2);
                   const KScaleMin sm = unpack_k_scale_min(s + kQ4kScales, sub);
                   out[4] = sm.scale;
                   out[5] = sm.min;
                   put_nibbles(q, out + 6);
                 });
}

// Q6_K's own fields, a block of 32 (two sub-blocks of 16) at a time: d (f16 bits), the
// two signed scale bytes, the codes' low four bits as nibbles and their top two as 2-bit
// codes (weight_blocks.h). The block's decode forms ggml's factors d * scale and values
// with ggml's operations.
void q6_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  k_blocks_of_32(src, blocks, 210, 28, dst, q6_k_codes,
                 [](const std::uint8_t* s, int block, const std::uint8_t* q, std::uint8_t* out) {
                   std::memcpy(out, s + kQ6kD, 2);
                   std::memcpy(out + 2, s + kQ6kScales + 2 * block, 2);
                   std::uint8_t high[32];
                   for (int j = 0; j < 32; ++j) high[j] = static_cast<std::uint8_t>(q[j] >> 4);
                   put_nibbles(q, out + 4);
                   put_two_bit_codes(high, out + 20);
                 });
}

}  // namespace

std::optional<cpu::WeightBlockType> cpu_block_type(GgmlType type) {
  switch (type) {
    case GgmlType::q4_0: return WeightBlockType::q4_0;
    case GgmlType::q4_1: return WeightBlockType::q4_1;
    case GgmlType::q8_0:
    case GgmlType::q5_0: return WeightBlockType::q8_0;
    case GgmlType::q5_1:
    case GgmlType::q5_k: return WeightBlockType::q5_f32;
    case GgmlType::q4_k: return WeightBlockType::q4_f16;
    case GgmlType::q6_k: return WeightBlockType::q6_f16x2;
    case GgmlType::q2_k: return WeightBlockType::q2_f16x2;
    case GgmlType::q3_k: return WeightBlockType::q3_f16x2;
    default: return std::nullopt;
  }
}

void repack_cpu_blocks(GgmlType type, const std::uint8_t* src, std::int64_t count, std::uint8_t* dst) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  LOWBIT_CHECK(cpu_block_type(type).has_value(), "repack_cpu_blocks: type ", info.name,
               " has no CPU block form (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
  LOWBIT_CHECK(count >= 0 && count % info.block_elements == 0, "repack_cpu_blocks: ", count,
               " values is not a whole number of ", info.name, " blocks of ", info.block_elements);
  const std::int64_t blocks = count / info.block_elements;
  switch (type) {
    case GgmlType::q4_0:
    case GgmlType::q4_1:
    case GgmlType::q8_0: std::memcpy(dst, src, static_cast<std::size_t>(blocks * info.block_bytes)); return;
    case GgmlType::q5_0: return q5_0(src, blocks, dst);
    case GgmlType::q5_1: return q5_1(src, blocks, dst);
    case GgmlType::q4_k: return q4_k(src, blocks, dst);
    case GgmlType::q5_k: return q5_k(src, blocks, dst);
    case GgmlType::q6_k: return q6_k(src, blocks, dst);
    case GgmlType::q3_k: return q3_k(src, blocks, dst);
    case GgmlType::q2_k: return q2_k(src, blocks, dst);
    default: break;
  }
  LOWBIT_FAIL("repack_cpu_blocks: unreachable type ", info.name);
}

}  // namespace lowbit::engine
