#include "engine/cpu_block_repack.h"

#include <cstring>

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

// The fifth bits of Q5_0 / Q5_1: bit j of the word belongs to value j.
void five_bit_codes(const std::uint8_t* qh_bytes, const std::uint8_t* qs, int (&q)[32]) {
  std::uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 15) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

// dequant.cpp: (lo - 16) * d. As q8_0: the code lo - 16 (-16..15) times the same d.
void q5_0(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 22, dst += 34) {
    int q[32];
    five_bit_codes(src + 2, src + 6, q);
    for (int& v : q) v -= 16;
    std::memcpy(dst, src, 2);
    put_bytes(q, dst + 2);
  }
}

// dequant.cpp: q * d + m, two roundings; d * q is the same product.
void q5_1(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 24, dst += 40) {
    int q[32];
    five_bit_codes(src + 4, src + 8, q);
    put_scale_offset_block(f16_at(src), f16_at(src + 2), q, false, dst);
  }
}

// dequant.cpp: dl * q - ml with dl = d * scale, ml = dmin * min, each rounded to f32.
// The block keeps dl and -ml: dl * q + (-ml) is the same subtraction.
template <bool five_bits>
void q4_k_or_q5_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  constexpr int block_bytes = five_bits ? 176 : 144;
  constexpr int out_bytes = five_bits ? 40 : 24;
  for (std::int64_t b = 0; b < blocks; ++b, src += block_bytes) {
    const float d = f16_at(src);
    const float dmin = f16_at(src + 2);
    const std::uint8_t* packed = src + 4;
    const std::uint8_t* qh = src + 16;
    const std::uint8_t* qs = src + (five_bits ? 48 : 16);
    for (int pair = 0; pair < 4; ++pair, qs += 32) {
      for (int nibble = 0; nibble < 2; ++nibble, dst += out_bytes) {
        const int sub = 2 * pair + nibble;
        const KScaleMin sm = unpack_k_scale_min(packed, sub);
        const float dl = d * static_cast<float>(sm.scale);
        const float ml = dmin * static_cast<float>(sm.min);
        int q[32];
        for (int l = 0; l < 32; ++l) {
          const int high = five_bits ? ((qh[l] >> sub) & 1) << 4 : 0;
          q[l] = ((qs[l] >> (4 * nibble)) & 15) | high;
        }
        put_scale_offset_block(dl, -ml, q, !five_bits, dst);
      }
    }
  }
}

// dequant.cpp: d * scale * value, evaluated as (d * scale) * value. Element 32 * k + l
// of a half is sub-block 2k + l / 16: a block of 32 is two sub-blocks.
void q6_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 210) {
    const auto* scales = reinterpret_cast<const std::int8_t*>(src + 192);
    const float d = f16_at(src + 208);
    for (int half = 0; half < 2; ++half) {
      const std::uint8_t* ql = src + 64 * half;
      const std::uint8_t* qh = src + 128 + 32 * half;
      const std::int8_t* sc = scales + 8 * half;
      for (int k = 0; k < 4; ++k, dst += 40) {
        int q[32];
        for (int l = 0; l < 32; ++l) {
          const int low = (ql[l + 32 * (k % 2)] >> (k < 2 ? 0 : 4)) & 15;
          q[l] = (low | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        }
        put_two_scale_block(d * static_cast<float>(sc[2 * k]), d * static_cast<float>(sc[2 * k + 1]), q, dst);
      }
    }
  }
}

// dequant.cpp: dl * value with dl = d * (scale - 32); sub-blocks of 16 in order, so a
// block of 32 is the two parts of one (half, shift) pass.
void q3_k(const std::uint8_t* src, std::int64_t blocks, std::uint8_t* dst) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 110) {
    const std::uint8_t* hmask = src;
    const std::uint8_t* packed = src + 96;
    const float d = f16_at(src + 108);
    int sub = 0, pass = 0;
    for (int half = 0; half < 2; ++half) {
      const std::uint8_t* qs = src + 32 + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, ++pass, dst += 40) {
        float dl[2];
        int q[32];
        for (int part = 0; part < 2; ++part, ++sub) {
          const int low = (packed[sub % 8] >> (sub < 8 ? 0 : 4)) & 15;
          const int high = (packed[8 + sub % 4] >> (2 * (sub / 4))) & 3;
          dl[part] = d * static_cast<float>((low | (high << 4)) - 32);
          for (int l = 0; l < 16; ++l) {
            const int i = 16 * part + l;
            q[i] = ((qs[i] >> shift) & 3) - (((hmask[i] >> pass) & 1) != 0 ? 0 : 4);
          }
        }
        put_two_scale_block(dl[0], dl[1], q, dst);
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
    case GgmlType::q3_k:
    case GgmlType::q6_k: return WeightBlockType::q6_f32x2;
    default: return std::nullopt;
  }
}

void repack_cpu_blocks(GgmlType type, const std::uint8_t* src, std::int64_t count, std::uint8_t* dst) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  LOWBIT_CHECK(cpu_block_type(type).has_value(), "repack_cpu_blocks: type ", info.name,
               " has no CPU block form (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K)");
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
    default: break;
  }
  LOWBIT_FAIL("repack_cpu_blocks: unreachable type ", info.name);
}

}  // namespace lowbit::engine
