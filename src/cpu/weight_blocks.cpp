#include "cpu/weight_blocks.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "formats/float16.h"
#include "lowbit/error.h"

#if defined(__AVX2__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lowbit::cpu {
namespace {

using Type = WeightBlockType;

// Nibble codes in value order: value j is the low nibble of byte j (j < 16), value
// j + 16 its high nibble.
void nibbles(const std::uint8_t* codes, int (&q)[32]) {
  for (int j = 0; j < 16; ++j) q[j] = codes[j] & 15, q[j + 16] = codes[j] >> 4;
}

// The f16 blocks' packed codes are decoded 8 values an operation: 4 words of 8 bytes,
// word i's byte m (its bits 8m .. 8m + 7) value 8i + m's code, then 8 floats a word (a
// loop over the values one at a time compiled to byte-by-byte code, ~5x slower, and
// batches decode every row: engine/cpu_matmul.cpp).
static_assert(std::endian::native == std::endian::little, "the words are read from the blocks' bytes by memcpy");
constexpr std::uint64_t kEveryByte = 0x0101010101010101ull;

// 8 bytes of 2-bit codes (weight_blocks.h): word i holds bits 2i, 2i + 1 of each byte.
void two_bit_words(const std::uint8_t* codes, std::uint64_t (&w)[4]) {
  std::uint64_t bits;
  std::memcpy(&bits, codes, 8);
  for (int i = 0; i < 4; ++i) w[i] = (bits >> (2 * i)) & (3 * kEveryByte);
}

// 16 bytes of nibbles: words 0, 1 the low nibbles (values 0-15), 2, 3 the high ones.
void nibble_words(const std::uint8_t* codes, std::uint64_t (&w)[4]) {
  std::uint64_t half[2];
  std::memcpy(half, codes, 16);
  for (int i = 0; i < 4; ++i) w[i] = (half[i % 2] >> (i < 2 ? 0 : 4)) & (15 * kEveryByte);
}

// A byte of q3_f16x2's mask of third bits as 8 bytes 0 or 1 (byte m: bit m).
std::uint64_t bit_bytes(std::uint8_t bits) {
  const std::uint64_t kept = (bits * kEveryByte) & 0x8040201008040201ull;  // byte m: bit m, in place
  return ((kept + 0x7f * kEveryByte) >> 7) & kEveryByte;
}

// out[m] = dl * (code m + bias) - ml for the 8 codes of a word (m = 0..7), two roundings.
void scale_codes(std::uint64_t codes, int bias, float dl, float ml, float* out) {
#if defined(__AVX2__) && defined(__x86_64__)
  const __m256i q = _mm256_add_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(codes))),
                                     _mm256_set1_epi32(bias));
  _mm256_storeu_ps(out, _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(dl), _mm256_cvtepi32_ps(q)), _mm256_set1_ps(ml)));
#else
  for (int m = 0; m < 8; ++m) out[m] = dl * static_cast<float>(static_cast<int>((codes >> (8 * m)) & 255) + bias) - ml;
#endif
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
    std::uint64_t w[4];
    two_bit_words(blk + 6, w);
    for (int i = 0; i < 4; ++i) {  // values 8i .. 8i + 7, in sub-block i / 2
      const int h = i / 2;
      scale_codes(w[i], 0, d * static_cast<float>(blk[4 + h] & 15), dmin * static_cast<float>(blk[4 + h] >> 4),
                  out + 8 * i);
    }
  } else if constexpr (T == Type::q3_f16x2) {
    // ggml's order: dl = d * sc (sc = the file's scale - 32), then dl * (q - 4).
    const float d = f16_at(blk);
    std::uint64_t w[4];
    two_bit_words(blk + 4, w);
    for (int i = 0; i < 4; ++i) w[i] |= bit_bytes(blk[12 + i]) << 2;
    for (int i = 0; i < 4; ++i) {
      scale_codes(w[i], -4, d * static_cast<float>(static_cast<std::int8_t>(blk[2 + i / 2])), 0.0f, out + 8 * i);
    }
  } else if constexpr (T == Type::q4_f16) {
    // ggml's order: dl = d * sc, ml = dmin * mn, then dl * q - ml.
    const float dl = f16_at(blk) * static_cast<float>(blk[4]), ml = f16_at(blk + 2) * static_cast<float>(blk[5]);
    std::uint64_t w[4];
    nibble_words(blk + 6, w);
    for (int i = 0; i < 4; ++i) scale_codes(w[i], 0, dl, ml, out + 8 * i);
  } else if constexpr (T == Type::q6_f16x2) {
    // ggml's order: dl = d * sc, then dl * (q - 32).
    const float d = f16_at(blk);
    std::uint64_t low[4], top[4];
    nibble_words(blk + 4, low);
    two_bit_words(blk + 20, top);
    for (int i = 0; i < 4; ++i) {
      const float dl = d * static_cast<float>(static_cast<std::int8_t>(blk[2 + i / 2]));
      scale_codes(low[i] | (top[i] << 4), -32, dl, 0.0f, out + 8 * i);
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
