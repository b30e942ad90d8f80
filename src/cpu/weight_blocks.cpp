#include "cpu/weight_blocks.h"

#include <cmath>
#include <cstring>

#include "formats/float16.h"
#include "lowbit/error.h"

namespace lowbit::cpu {
namespace {

using Type = WeightBlockType;

// Nibble codes in value order: value j is the low nibble of byte j (j < 16), value
// j + 16 its high nibble.
void nibbles(const std::uint8_t* codes, int (&q)[32]) {
  for (int j = 0; j < 16; ++j) q[j] = codes[j] & 15, q[j + 16] = codes[j] >> 4;
}

template <Type T>
void decode_block(const std::uint8_t* blk, float* out) {
  int q[32];
  if constexpr (T == Type::q4_0) {
    const float d = f16_at(blk);
    nibbles(blk + 2, q);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j] - 8) * d;
  } else if constexpr (T == Type::q4_1) {
    const float d = f16_at(blk), m = f16_at(blk + 2);
    nibbles(blk + 4, q);
    for (int j = 0; j < 32; ++j) out[j] = std::fma(static_cast<float>(q[j]), d, m);
  } else if constexpr (T == Type::q8_0) {
    const float d = f16_at(blk);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<std::int8_t>(blk[2 + j])) * d;
  } else if constexpr (T == Type::q4_f32) {
    const float d = f32_at(blk), m = f32_at(blk + 4);
    nibbles(blk + 8, q);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(q[j]) + m;
  } else if constexpr (T == Type::q5_f32) {
    const float d = f32_at(blk), m = f32_at(blk + 4);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(blk[8 + j]) + m;
  } else if constexpr (T == Type::q2_f16x2) {
    // ggml's order: dl = d * sc, ml = dmin * mn, then dl * q - ml.
    const float d = f16_at(blk), dmin = f16_at(blk + 2);
    for (int h = 0; h < 2; ++h) {
      const float dl = d * static_cast<float>(blk[4 + h] & 15), ml = dmin * static_cast<float>(blk[4 + h] >> 4);
      for (int j = 16 * h; j < 16 * h + 16; ++j) out[j] = dl * static_cast<float>(two_bit_code(blk + 6, j)) - ml;
    }
  } else if constexpr (T == Type::q3_f16x2) {
    // ggml's order: dl = d * sc (sc = the file's scale - 32), then dl * (q - 4).
    const float d = f16_at(blk);
    for (int h = 0; h < 2; ++h) {
      const float dl = d * static_cast<float>(static_cast<std::int8_t>(blk[2 + h]));
      for (int j = 16 * h; j < 16 * h + 16; ++j) out[j] = dl * static_cast<float>(three_bit_code(blk + 4, j) - 4);
    }
  } else if constexpr (T == Type::q4_f16) {
    // ggml's order: dl = d * sc, ml = dmin * mn, then dl * q - ml.
    const float dl = f16_at(blk) * static_cast<float>(blk[4]), ml = f16_at(blk + 2) * static_cast<float>(blk[5]);
    nibbles(blk + 6, q);
    for (int j = 0; j < 32; ++j) out[j] = dl * static_cast<float>(q[j]) - ml;
  } else if constexpr (T == Type::q6_f16x2) {
    // ggml's order: dl = d * sc, then dl * (q - 32).
    const float d = f16_at(blk);
    nibbles(blk + 4, q);
    for (int h = 0; h < 2; ++h) {
      const float dl = d * static_cast<float>(static_cast<std::int8_t>(blk[2 + h]));
      for (int j = 16 * h; j < 16 * h + 16; ++j) {
        out[j] = dl * static_cast<float>((q[j] | (two_bit_code(blk + 20, j) << 4)) - 32);
      }
    }
  } else {
    const float d0 = f32_at(blk), d1 = f32_at(blk + 4);
    const auto* codes = reinterpret_cast<const std::int8_t*>(blk + 8);
    for (int j = 0; j < 16; ++j) out[j] = d0 * static_cast<float>(codes[j]);
    for (int j = 16; j < 32; ++j) out[j] = d1 * static_cast<float>(codes[j]);
  }
}

template <Type T>
void decode_all(const std::uint8_t* blocks, std::int64_t n, float* out) {
  const std::int64_t bytes = weight_block_bytes(T);
  for (std::int64_t b = 0; b < n; ++b) decode_block<T>(blocks + b * bytes, out + b * kValuesPerBlock);
}

bool finite_params(Type type, const std::uint8_t* blk) {
  switch (type) {
    case Type::q4_0:
    case Type::q8_0:
    case Type::q3_f16x2:
    case Type::q6_f16x2: return std::isfinite(f16_at(blk));
    case Type::q4_1:
    case Type::q2_f16x2:
    case Type::q4_f16: return std::isfinite(f16_at(blk)) && std::isfinite(f16_at(blk + 2));
    case Type::q4_f32:
    case Type::q5_f32:
    case Type::q6_f32x2: return std::isfinite(f32_at(blk)) && std::isfinite(f32_at(blk + 4));
  }
  return false;
}

std::int64_t whole_blocks(std::int64_t count, const char* what) {
  LOWBIT_CHECK(count >= 0 && count % kValuesPerBlock == 0, what, ": ", count,
               " values is not a whole number of blocks of 32");
  return count / kValuesPerBlock;
}

}  // namespace

std::int64_t weight_block_bytes(WeightBlockType type) {
  switch (type) {
    case Type::q4_0: return 18;
    case Type::q4_1: return 20;
    case Type::q8_0: return 34;
    case Type::q4_f32: return 24;
    case Type::q5_f32:
    case Type::q6_f32x2: return 40;
    case Type::q2_f16x2: return 14;
    case Type::q3_f16x2: return 16;
    case Type::q4_f16: return 22;
    case Type::q6_f16x2: return 28;
  }
  return 0;
}

const char* weight_block_name(WeightBlockType type) {
  switch (type) {
    case Type::q4_0: return "q4_0";
    case Type::q4_1: return "q4_1";
    case Type::q8_0: return "q8_0";
    case Type::q4_f32: return "q4_f32";
    case Type::q5_f32: return "q5_f32";
    case Type::q6_f32x2: return "q6_f32x2";
    case Type::q2_f16x2: return "q2_f16x2";
    case Type::q3_f16x2: return "q3_f16x2";
    case Type::q4_f16: return "q4_f16";
    case Type::q6_f16x2: return "q6_f16x2";
  }
  return "?";
}

void decode_weight_blocks(WeightBlockType type, const std::uint8_t* blocks, std::int64_t count, float* out) {
  const std::int64_t n = whole_blocks(count, "decode_weight_blocks");
  switch (type) {
    case Type::q4_0: return decode_all<Type::q4_0>(blocks, n, out);
    case Type::q4_1: return decode_all<Type::q4_1>(blocks, n, out);
    case Type::q8_0: return decode_all<Type::q8_0>(blocks, n, out);
    case Type::q4_f32: return decode_all<Type::q4_f32>(blocks, n, out);
    case Type::q5_f32: return decode_all<Type::q5_f32>(blocks, n, out);
    case Type::q6_f32x2: return decode_all<Type::q6_f32x2>(blocks, n, out);
    case Type::q2_f16x2: return decode_all<Type::q2_f16x2>(blocks, n, out);
    case Type::q3_f16x2: return decode_all<Type::q3_f16x2>(blocks, n, out);
    case Type::q4_f16: return decode_all<Type::q4_f16>(blocks, n, out);
    case Type::q6_f16x2: return decode_all<Type::q6_f16x2>(blocks, n, out);
  }
}

std::int64_t first_non_finite_block(WeightBlockType type, const std::uint8_t* blocks, std::int64_t count) {
  const std::int64_t n = whole_blocks(count, "first_non_finite_block");
  const std::int64_t bytes = weight_block_bytes(type);
  for (std::int64_t b = 0; b < n; ++b) {
    if (!finite_params(type, blocks + b * bytes)) return b;
  }
  return n;
}

}  // namespace lowbit::cpu
