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

// 32 codes 0..15 in value order as cpu's nibbles: value j low, value j + 16 high.
void put_nibbles(const int (&q)[32], std::uint8_t* out) {
  for (int j = 0; j < 16; ++j) out[j] = static_cast<std::uint8_t>(q[j] | (q[j + 16] << 4));
}

void put_bytes(const int (&q)[32], std::uint8_t* out) {
  for (int j = 0; j < 32; ++j) out[j] = static_cast<std::uint8_t>(q[j]);  // two's complement for signed
}

// A block of q4_f32 / q5_f32: w = d * q + m.
void put_scale_offset_block(float d, float m, const int (&q)[32], bool nibbles, std::uint8_t* out) {
  put_f32(out, d);
  put_f32(out + 4, m);
  if (nibbles) {
    put_nibbles(q, out + 8);
  } else {
    put_bytes(q, out + 8);
  }
}

// A block of q6_f32x2: w = d0 * q (values 0-15), d1 * q (16-31).
void put_two_scale_block(float d0, float d1, const int (&q)[32], std::uint8_t* out) {
  put_f32(out, d0);
  put_f32(out + 4, d1);
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
    put_scale_offset_block(f16_at(src), f16_at(src + 2), q, false, dst);
  }
}

// dequant.cpp: dl * q - ml with dl = d * scale, ml = dmin * min, each rounded to f32.
// The block keeps dl and -ml: dl * q + (-ml) is the same subtraction.
template <bool five_bits>
void q4_k_or_q5_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  constexpr int block_bytes = five_bits ? 176 : 144;
  constexpr int out_bytes = five_bits ? 40 : 24;
  std::uint8_t codes[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += block_bytes) {
    const float d = f16_at(src);
    const float dmin = f16_at(src + 2);
    q4_k_codes(src, five_bits, codes);
    for (int sub = 0; sub < 8; ++sub, dst += out_bytes) {
      const KScaleMin sm = unpack_k_scale_min(src + 4, sub);
      int q[32];
      codes_plus(codes + 32 * sub, 0, q);
      put_scale_offset_block(d * static_cast<float>(sm.scale), -(dmin * static_cast<float>(sm.min)), q, !five_bits,
                             dst);
    }
  }
}

// dequant.cpp: d * scale * value, evaluated as (d * scale) * value. A block of 32 is two
// sub-blocks of 16.
void q6_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  std::uint8_t codes[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += 210) {
    const auto* scales = reinterpret_cast<const std::int8_t*>(src + 192);
    const float d = f16_at(src + 208);
    q6_k_codes(src, codes);
    for (int block = 0; block < 8; ++block, dst += 40) {
      int q[32];
      codes_plus(codes + 32 * block, -32, q);
      put_two_scale_block(d * static_cast<float>(scales[2 * block]), d * static_cast<float>(scales[2 * block + 1]), q,
                          dst);
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

// Q2_K's own fields, a block of 32 (two sub-blocks of 16) at a time: d and dmin (f16
// bits), the two scale | min << 4 bytes, the codes as 2-bit fields (weight_blocks.h).
// The block's decode forms ggml's factors and values with ggml's operations.
void q2_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  std::uint8_t codes[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += 84) {
    q2_k_codes(src, codes);
    for (int block = 0; block < 8; ++block, dst += 14) {
      std::memcpy(dst, src + kQ2kD, 2);
      std::memcpy(dst + 2, src + kQ2kDmin, 2);
      for (int h = 0; h < 2; ++h) {
        const Q2kScaleMin sm = q2_k_scale_min(src, 2 * block + h);
        dst[4 + h] = static_cast<std::uint8_t>(sm.scale | (sm.min << 4));
      }
      put_two_bit_codes(codes + 32 * block, dst + 6);
    }
  }
}

// Q3_K's own fields, a block of 32 (two sub-blocks of 16, in order) at a time: d (f16
// bits), the two scales minus 32 as signed bytes, the codes' low two bits as 2-bit fields
// and their third bits as a 32-bit mask (weight_blocks.h). The block's decode forms
// ggml's factors d * (scale - 32) and values with ggml's operations.
void q3_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  std::uint8_t codes[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += 110) {
    q3_k_codes(src, codes);
    for (int block = 0; block < 8; ++block, dst += 16) {
      std::memcpy(dst, src + kQ3kD, 2);
      for (int h = 0; h < 2; ++h) dst[2 + h] = static_cast<std::uint8_t>(q3_k_scale(src, 2 * block + h));
      const std::uint8_t* q = codes + 32 * block;
      put_two_bit_codes(q, dst + 4);
      for (int i = 0; i < 4; ++i) {  // value j's third bit: bit j % 8 of byte j / 8
        int bits = 0;
        for (int k = 0; k < 8; ++k) bits |= (q[8 * i + k] >> 2) << k;
        dst[12 + i] = static_cast<std::uint8_t>(bits);
      }
    }
  }
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
    case GgmlType::q4_k: return WeightBlockType::q4_f32;
    case GgmlType::q6_k: return WeightBlockType::q6_f32x2;
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
    case GgmlType::q4_k: return q4_k_or_q5_k<false>(src, blocks, dst);
    case GgmlType::q5_k: return q4_k_or_q5_k<true>(src, blocks, dst);
    case GgmlType::q6_k: return q6_k(src, blocks, dst);
    case GgmlType::q3_k: return q3_k(src, blocks, dst);
    case GgmlType::q2_k: return q2_k(src, blocks, dst);
    default: break;
  }
  LOWBIT_FAIL("repack_cpu_blocks: unreachable type ", info.name);
}

}  // namespace lowbit::engine
