#include "cpu/block_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/float16.h"
#include "lowbit/error.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LOWBIT_BLOCK_DOT_SIMD 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define LOWBIT_BLOCK_DOT_ISA "AVX-512 VNNI"
#elif defined(__AVXVNNI__)
#define LOWBIT_BLOCK_DOT_ISA "AVX-VNNI"
#else
#define LOWBIT_BLOCK_DOT_ISA "AVX2"
#endif
#else
#define LOWBIT_BLOCK_DOT_SIMD 0
#define LOWBIT_BLOCK_DOT_ISA "scalar"
#endif

namespace lowbit::cpu {
namespace {

using Type = WeightBlockType;

// How a block's codes are stored, and what its parameters are.
// three_bits: 0..7, 2-bit codes and a mask of third bits (q3_f16x2); six_bits: 0..63,
// nibbles and 2-bit codes as bits 4-5 (q6_f16x2).
enum class Codes { nibbles, unsigned_bytes, signed_bytes, two_bits, three_bits, six_bits };
// q4_0's -8 d; q4_1's m; q2_f16x2's -dmin * mn of each half (the activations' half sums).
enum class Offset { none, minus_8_d, stored, per_half };
struct BlockLayout {
  int bytes, codes_at;  // bytes from the block's start
  Codes codes;
  bool f32_params;  // f32 (else f16) scale(s) and offset, from the block's start
  Offset offset;
  bool two_scales;  // one scale for values 0-15, another for 16-31
  int code_bias;    // added to every code in the integer dot product (q3_f16x2's -4, q6_f16x2's -32)
};
constexpr BlockLayout layout(Type type) {
  switch (type) {
    case Type::q4_0: return {18, 2, Codes::nibbles, false, Offset::minus_8_d, false, 0};
    case Type::q4_1: return {20, 4, Codes::nibbles, false, Offset::stored, false, 0};
    case Type::q8_0: return {34, 2, Codes::signed_bytes, false, Offset::none, false, 0};
    case Type::q4_f32: return {24, 8, Codes::nibbles, true, Offset::stored, false, 0};
    case Type::q5_f32: return {40, 8, Codes::unsigned_bytes, true, Offset::stored, false, 0};
    case Type::q6_f32x2: return {40, 8, Codes::signed_bytes, true, Offset::none, true, 0};
    case Type::q2_f16x2: return {14, 6, Codes::two_bits, false, Offset::per_half, true, 0};
    case Type::q3_f16x2: return {16, 4, Codes::three_bits, false, Offset::none, true, -4};
    case Type::q4_f16: return {22, 6, Codes::nibbles, false, Offset::stored, false, 0};
    case Type::q6_f16x2: return {28, 4, Codes::six_bits, false, Offset::none, true, -32};
  }
  return {0, 0, Codes::nibbles, false, Offset::none, false, 0};
}

// A block's scale for values 0-15 and 16-31 (the same one unless two_scales) and the
// coefficient of the activations' d_x * sum(q_x) (the offset term; 0 without one; per_half:
// offset of values 0-15, offset1 of 16-31).
struct BlockParams {
  float d0, d1, offset, offset1;
};
template <Type T, typename F16>
inline BlockParams block_params(const std::uint8_t* blk, F16 f16) {
  constexpr BlockLayout L = layout(T);
  BlockParams p{};
  if constexpr (T == Type::q2_f16x2) {  // ggml's factors: d * sc, -(dmin * mn), exact in f32
    const float d = f16(blk), dmin = f16(blk + 2);
    p.d0 = d * static_cast<float>(blk[4] & 15), p.d1 = d * static_cast<float>(blk[5] & 15);
    p.offset = -(dmin * static_cast<float>(blk[4] >> 4)), p.offset1 = -(dmin * static_cast<float>(blk[5] >> 4));
    return p;
  }
  if constexpr (T == Type::q3_f16x2 || T == Type::q6_f16x2) {  // ggml's factors: d * sc, exact in f32
    const float d = f16(blk);
    p.d0 = d * static_cast<float>(static_cast<std::int8_t>(blk[2]));
    p.d1 = d * static_cast<float>(static_cast<std::int8_t>(blk[3]));
    return p;
  }
  if constexpr (T == Type::q4_f16) {  // ggml's factors: d * sc, -(dmin * mn), exact in f32
    p.d0 = f16(blk) * static_cast<float>(blk[4]);
    p.offset = -(f16(blk + 2) * static_cast<float>(blk[5]));
    return p;
  }
  p.d0 = L.f32_params ? f32_at(blk) : f16(blk);
  p.d1 = L.two_scales ? f32_at(blk + 4) : p.d0;
  if constexpr (L.offset == Offset::minus_8_d) p.offset = -8.0f * p.d0;
  if constexpr (L.offset == Offset::stored) p.offset = L.f32_params ? f32_at(blk + 4) : f16(blk + 2);
  return p;
}

// The integer dot products of one block's codes (plus bias) with 32 activation codes,
// over values 0-15 and 16-31.
template <Codes C, int bias>
void scalar_half_dots(const std::uint8_t* codes, const std::int8_t* xq, int (&dot)[2]) {
  static_assert(bias == 0 || C == Codes::three_bits || C == Codes::six_bits);
  dot[0] = dot[1] = 0;
  if constexpr (C == Codes::signed_bytes) {
    // Read as int8 through the pointer: GCC 12 at -O2 -march=native vectorizes
    // static_cast<int8_t>(byte) * int8 into vpdpbusd (an unsigned x signed product),
    // which gives wrong sums for negative weights.
    const auto* w = reinterpret_cast<const std::int8_t*>(codes);
    for (int j = 0; j < 32; ++j) dot[j / 16] += w[j] * xq[j];
  } else if constexpr (C == Codes::unsigned_bytes) {
    for (int j = 0; j < 32; ++j) dot[j / 16] += codes[j] * xq[j];
  } else if constexpr (C == Codes::two_bits) {
    for (int j = 0; j < 32; ++j) dot[j / 16] += two_bit_code(codes, j) * xq[j];
  } else if constexpr (C == Codes::three_bits) {
    for (int j = 0; j < 32; ++j) dot[j / 16] += (three_bit_code(codes, j) + bias) * xq[j];
  } else if constexpr (C == Codes::six_bits) {
    for (int j = 0; j < 32; ++j) dot[j / 16] += (six_bit_code(codes, j) + bias) * xq[j];
  } else {
    for (int j = 0; j < 16; ++j) dot[0] += (codes[j] & 15) * xq[j], dot[1] += (codes[j] >> 4) * xq[j + 16];
  }
}

template <Type T>
void scalar_matmul(const std::uint8_t* w, std::int64_t row_bytes, std::int64_t rows, const QuantizedActivations& x,
                   float* y, std::int64_t ldy) {
  constexpr BlockLayout L = layout(T);
  const std::int64_t blocks = x.k / kValuesPerBlock;
  for (std::int64_t t = 0; t < x.rows; ++t) {
    const std::int8_t* xq = x.q.data() + t * x.k;
    const float* dx = x.d.data() + t * blocks;
    const float* xs = x.dsum.data() + t * blocks;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint8_t* row = w + r * row_bytes;
      float acc = 0.0f, corr = 0.0f;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const std::uint8_t* blk = row + b * L.bytes;
        const BlockParams p = block_params<T>(blk, f16_at);
        int dot[2];
        scalar_half_dots<L.codes, L.code_bias>(blk + L.codes_at, xq + b * kValuesPerBlock, dot);
        if constexpr (L.two_scales) {
          acc += static_cast<float>(dot[0]) * (p.d0 * dx[b]) + static_cast<float>(dot[1]) * (p.d1 * dx[b]);
        } else {
          acc += static_cast<float>(dot[0] + dot[1]) * (p.d0 * dx[b]);
        }
        if constexpr (L.offset == Offset::per_half) {
          int half[2] = {0, 0};
          for (int j = 0; j < 32; ++j) half[j / 16] += xq[b * kValuesPerBlock + j];
          corr += p.offset * (dx[b] * static_cast<float>(half[0])) + p.offset1 * (dx[b] * static_cast<float>(half[1]));
        } else if constexpr (L.offset != Offset::none) {
          corr += p.offset * xs[b];
        }
      }
      y[t * ldy + r] = acc + corr;
    }
  }
}

#if LOWBIT_BLOCK_DOT_SIMD

// acc plus the sums of u8 x s8 products, four adjacent pairs into each i32 lane.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  // u <= 63 (the codes but signed bytes, the code biases' 4 and 32) or |w| <= 128 (signed
  // bytes), |s| <= 127: the i16 pair sums cannot saturate.
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

inline float f16_fast(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

// The 32 codes of a block as bytes in value order: values 0-15 in the low 128 bits,
// whose dot products fill i32 lanes 0-3, values 16-31 in the high ones (lanes 4-7).
template <Codes C>
inline __m256i load_codes(const std::uint8_t* codes) {
  if constexpr (C == Codes::nibbles) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  } else if constexpr (C == Codes::two_bits) {
    // The 8 code bytes in each 64-bit lane, lane i shifted by 2i: its bytes' bits 2i, 2i + 1
    // are values 8i .. 8i + 7.
    std::uint64_t bits;
    std::memcpy(&bits, codes, 8);
    const __m256i shifted =
        _mm256_srlv_epi64(_mm256_set1_epi64x(static_cast<long long>(bits)), _mm256_setr_epi64x(0, 2, 4, 6));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(3));
  } else if constexpr (C == Codes::three_bits) {
    // The 2-bit codes, plus 4 where the third bit is set.
    const __m256i low = load_codes<Codes::two_bits>(codes);
    std::uint32_t third;
    std::memcpy(&third, codes + 8, 4);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    // The third bits are the byte mask of the values that take the 4 (bit j: value j).
    return _mm256_mask_add_epi8(low, static_cast<__mmask32>(third), low, _mm256_set1_epi8(4));
#else
    // Byte j takes byte j / 8 of the mask (each 128-bit lane holds all four), keeps bit
    // j % 8 and becomes 4 where it is set.
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(third)),
                                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(4)));
#endif
  } else if constexpr (C == Codes::six_bits) {
    // The nibbles, or the 2-bit codes moved to bits 4-5: lane i's bits 2i, 2i + 1 (values
    // 8i .. 8i + 7) to 4, 5, within each byte.
    std::uint64_t bits;
    std::memcpy(&bits, codes + 16, 8);
    const __m256i all = _mm256_set1_epi64x(static_cast<long long>(bits));
#if defined(__AVX512F__) && defined(__AVX512VL__)
    // Rotations by 4, 2, 0 and -2: bits 4-5 of each byte come from the same byte.
    const __m256i high = _mm256_rolv_epi64(all, _mm256_setr_epi64x(4, 2, 0, 62));
#else
    const __m256i high = _mm256_slli_epi16(_mm256_srlv_epi64(all, _mm256_setr_epi64x(0, 2, 4, 6)), 4);
#endif
    return _mm256_or_si256(load_codes<Codes::nibbles>(codes), _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  }
}

// acc plus the block's dot products (acc: the code bias times the activations' sums).
template <Codes C>
inline __m256i block_dot(__m256i acc, __m256i w, __m256i xq) {
  if constexpr (C == Codes::signed_bytes) {
    // s8 x s8 through the u8 x s8 product: |w| times x with w's sign.
    return dot_u8s8(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(xq, w));
  } else {
    return dot_u8s8(acc, w, xq);
  }
}

// The f16 forms whose factors the tile forms for its rows at once (tile_factors).
constexpr bool row_vector_factors(Type type) {
  return type == Type::q4_f16 || type == Type::q3_f16x2 || type == Type::q6_f16x2;
}

// ggml's f32 factors of block b of each of the tile's RT <= 4 rows (each lane as
// block_params' scalar one), lanes 2r and 2r + 1 row r's: q4_f16 d * sc and dmin * mn;
// q3_f16x2 / q6_f16x2 d * sc0 and d * sc1. One set of vector operations for all the
// rows, where one row's scalar factors took as many.
template <Type T, int RT>
inline __m256 tile_factors(const std::uint8_t* w, std::int64_t row_bytes, std::int64_t at) {
  static_assert(RT <= 4 && layout(T).bytes >= 8);
  // Qword r: the first 8 bytes of row r's block (f16 d, then dmin and sc, mn or sc0, sc1).
  long long head[4] = {0, 0, 0, 0};
  for (int r = 0; r < RT; ++r) std::memcpy(&head[r], w + r * row_bytes + at, 8);
  const __m256i h = _mm256_setr_epi64x(head[0], head[1], head[2], head[3]);
  if constexpr (T == Type::q4_f16) {
    // [d, dmin] of each row as 8 halves; the bytes sc, mn of each row as i32.
    const __m128i halves =
        _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    const __m256i sm = _mm256_shuffle_epi8(h, _mm256_setr_epi8(4, -1, -1, -1, 5, -1, -1, -1, 12, -1, -1, -1, 13, -1,
                                                               -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, 12, -1, -1, -1,
                                                               13, -1, -1, -1));
    return _mm256_mul_ps(_mm256_cvtph_ps(halves), _mm256_cvtepi32_ps(sm));
  } else {
    // [d, d] of each row as 8 halves (within each 128-bit lane, then its low qwords); the
    // signed bytes sc0, sc1 at the top of i32 lanes, shifted down with their sign.
    const __m256i dd = _mm256_shuffle_epi8(h, _mm256_setr_epi8(0, 1, 0, 1, 8, 9, 8, 9, -1, -1, -1, -1, -1, -1, -1, -1,
                                                               0, 1, 0, 1, 8, 9, 8, 9, -1, -1, -1, -1, -1, -1, -1, -1));
    const __m128i halves = _mm256_castsi256_si128(_mm256_permute4x64_epi64(dd, 0x08));
    const __m256i sc = _mm256_srai_epi32(
        _mm256_shuffle_epi8(h, _mm256_setr_epi8(-1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1,
                                                -1, 2, -1, -1, -1, 3, -1, -1, -1, 10, -1, -1, -1, 11)),
        24);
    return _mm256_mul_ps(_mm256_cvtph_ps(halves), _mm256_cvtepi32_ps(sc));
  }
}

// RT weight rows x TT activation rows: every weight block is unpacked once and used
// for TT tokens; every activation block loaded once and used for RT rows.
template <Type T, int RT, int TT>
void tile(const std::uint8_t* w, std::int64_t row_bytes, const QuantizedActivations& x, std::int64_t t0, float* y,
          std::int64_t ldy) {
  constexpr BlockLayout L = layout(T);
  const std::int64_t blocks = x.k / kValuesPerBlock;
  __m256 acc[RT][TT];
  float corr[RT][TT];
  __m256 corr_lanes[TT];  // row_vector_factors with an offset: row r's sum in lane 2r + 1
  for (int r = 0; r < RT; ++r) {
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps(), corr[r][t] = 0.0f;
  }
  for (int t = 0; t < TT; ++t) corr_lanes[t] = _mm256_setzero_ps();
  const std::int8_t* xq0 = x.q.data() + t0 * x.k;
  const float* dx0 = x.d.data() + t0 * blocks;
  const float* xs0 = x.dsum.data() + t0 * blocks;
  for (std::int64_t b = 0; b < blocks; ++b) {
    __m256i xq[TT];
    float dx[TT], xs[TT];
    __m256 xhalf[TT];   // per_half: d_x times the code sums of 4 values, lanes 0-3 values 0-15
    __m256i xbias[TT];  // the code bias times those code sums (0 without one)
    for (int t = 0; t < TT; ++t) {
      xq[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq0 + t * x.k + b * kValuesPerBlock));
      dx[t] = dx0[t * blocks + b];
      xs[t] = xs0[t * blocks + b];
      xbias[t] = _mm256_setzero_si256();
      if constexpr (L.offset == Offset::per_half) {
        const __m256i sums = dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(1), xq[t]);
        xhalf[t] = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(dx[t]));
      }
      if constexpr (L.code_bias < 0) {
        xbias[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                    dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(-L.code_bias), xq[t]));
      }
    }
    // row_vector_factors: the rows' factors, and times each token's d_x.
    __m256 factors = _mm256_setzero_ps(), factors_dx[TT];
    if constexpr (row_vector_factors(T)) {
      factors = tile_factors<T, RT>(w, row_bytes, b * L.bytes);
      for (int t = 0; t < TT; ++t) factors_dx[t] = _mm256_mul_ps(factors, _mm256_set1_ps(dx[t]));
    }
    for (int r = 0; r < RT; ++r) {
      const std::uint8_t* blk = w + r * row_bytes + b * L.bytes;
      const __m256i codes = load_codes<L.codes>(blk + L.codes_at);
      // Two scales: a vector of d0 in lanes 0-3 (values 0-15) and d1 in lanes 4-7.
      __m256 dw, mw;  // mw (per_half): the halves' dmin * mn, lanes as dw
      float d0 = 0.0f, offset = 0.0f;
      if constexpr (T == Type::q2_f16x2) {
        // [d, dmin, d, dmin] * [sc0, mn0, sc1, mn1] in one f32 multiply (each lane as
        // block_params' scalar one), then spread over the halves' lanes.
        std::uint32_t d_dmin;
        std::uint16_t sm;
        std::memcpy(&d_dmin, blk, 4);
        std::memcpy(&sm, blk + 4, 2);
        const __m128 dd = _mm_cvtph_ps(_mm_set1_epi32(static_cast<int>(d_dmin)));
        const __m128i nibbles = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(sm), _mm_setr_epi32(0, 4, 8, 12)),
                                              _mm_set1_epi32(15));
        const __m256 f = _mm256_castps128_ps256(_mm_mul_ps(dd, _mm_cvtepi32_ps(nibbles)));
        dw = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
        mw = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));
      } else if constexpr (row_vector_factors(T)) {
        dw = mw = _mm256_setzero_ps();  // (the scales come from factors_dx below)
      } else {
        const BlockParams p = block_params<T>(blk, f16_fast);
        dw = _mm256_set_m128(_mm_set1_ps(p.d1), _mm_set1_ps(p.d0));
        mw = _mm256_setzero_ps();
        d0 = p.d0, offset = p.offset;
      }
      for (int t = 0; t < TT; ++t) {
        const __m256 dot = _mm256_cvtepi32_ps(block_dot<L.codes>(xbias[t], codes, xq[t]));
        __m256 scale;
        if constexpr (row_vector_factors(T)) {
          // Row r's factor(s) times d_x: lanes 0-3 factors_dx's lane 2r, lanes 4-7 its lane
          // 2r + 1 with two scales (d * sc1), else 2r again (q4_f16's 2r + 1 is dmin * mn).
          const int second = L.two_scales ? 2 * r + 1 : 2 * r;
          scale = _mm256_permutevar8x32_ps(factors_dx[t], _mm256_setr_epi32(2 * r, 2 * r, 2 * r, 2 * r, second,
                                                                            second, second, second));
        } else {
          scale = L.two_scales ? _mm256_mul_ps(dw, _mm256_set1_ps(dx[t])) : _mm256_set1_ps(d0 * dx[t]);
        }
        acc[r][t] = _mm256_fmadd_ps(dot, scale, acc[r][t]);
        if constexpr (L.offset == Offset::per_half) {
          acc[r][t] = _mm256_fnmadd_ps(xhalf[t], mw, acc[r][t]);
        } else if constexpr (L.offset != Offset::none && !row_vector_factors(T)) {
          corr[r][t] = std::fma(offset, xs[t], corr[r][t]);
        }
      }
    }
    // q4_f16: every row's corr -= (dmin * mn) * d_x sum(q_x) (lanes 2r + 1), in one rounding
    // as the scalar fma(-(dmin * mn), ...).
    if constexpr (row_vector_factors(T) && L.offset == Offset::stored) {
      for (int t = 0; t < TT; ++t) corr_lanes[t] = _mm256_fnmadd_ps(factors, _mm256_set1_ps(xs[t]), corr_lanes[t]);
    }
  }
  if constexpr (row_vector_factors(T) && L.offset == Offset::stored) {
    for (int t = 0; t < TT; ++t) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, corr_lanes[t]);
      for (int r = 0; r < RT; ++r) corr[r][t] = lanes[2 * r + 1];
    }
  }
  for (int r = 0; r < RT; ++r) {
    for (int t = 0; t < TT; ++t) y[(t0 + t) * ldy + r] = hsum(acc[r][t]) + corr[r][t];
  }
}

// All rows for activation rows [t0, t0 + TT).
template <Type T, int TT>
void token_tile(const std::uint8_t* w, std::int64_t row_bytes, std::int64_t rows, const QuantizedActivations& x,
                std::int64_t t0, float* y, std::int64_t ldy) {
  constexpr int RT = 4;
  std::int64_t r = 0;
  for (; r + RT <= rows; r += RT) tile<T, RT, TT>(w + r * row_bytes, row_bytes, x, t0, y + r, ldy);
  for (; r < rows; ++r) tile<T, 1, TT>(w + r * row_bytes, row_bytes, x, t0, y + r, ldy);
}

template <Type T>
void simd_matmul(const std::uint8_t* w, std::int64_t row_bytes, std::int64_t rows, const QuantizedActivations& x,
                 float* y, std::int64_t ldy) {
  constexpr int TT = 4;
  std::int64_t t = 0;
  for (; t + TT <= x.rows; t += TT) token_tile<T, TT>(w, row_bytes, rows, x, t, y, ldy);
  switch (x.rows - t) {
    case 3: token_tile<T, 3>(w, row_bytes, rows, x, t, y, ldy); break;
    case 2: token_tile<T, 2>(w, row_bytes, rows, x, t, y, ldy); break;
    case 1: token_tile<T, 1>(w, row_bytes, rows, x, t, y, ldy); break;
    default: break;
  }
}

#endif  // LOWBIT_BLOCK_DOT_SIMD

void check_activations(const QuantizedActivations& x) {
  LOWBIT_CHECK(x.k > 0 && x.k % kValuesPerBlock == 0, "block_matmul: k = ", x.k,
               ", expected a positive multiple of 32");
  const std::int64_t blocks = x.rows * (x.k / kValuesPerBlock);
  LOWBIT_CHECK(x.rows >= 0 && static_cast<std::int64_t>(x.q.size()) >= x.rows * x.k &&
                   static_cast<std::int64_t>(x.d.size()) >= blocks &&
                   static_cast<std::int64_t>(x.dsum.size()) >= blocks,
               "block_matmul: activations hold fewer values than rows x k (", x.rows, " x ", x.k, ")");
}

}  // namespace

const char* block_matmul_isa() { return LOWBIT_BLOCK_DOT_ISA; }

void QuantizedActivations::resize(std::int64_t new_rows, std::int64_t new_k) {
  LOWBIT_CHECK(new_k > 0 && new_k % kValuesPerBlock == 0, "quantize_activations: k = ", new_k,
               ", expected a positive multiple of 32");
  LOWBIT_CHECK(new_rows >= 0, "quantize_activations: rows = ", new_rows);
  rows = new_rows;
  k = new_k;
  const std::int64_t blocks = rows * (k / kValuesPerBlock);
  q.resize(static_cast<std::size_t>(rows * k));
  d.resize(static_cast<std::size_t>(blocks));
  dsum.resize(static_cast<std::size_t>(blocks));
}

void quantize_activation_rows(const float* x, std::int64_t first, std::int64_t count, QuantizedActivations& out) {
  LOWBIT_CHECK(first >= 0 && count >= 0 && first + count <= out.rows, "quantize_activation_rows: rows ", first, " + ",
               count, " outside 0..", out.rows);
  const std::int64_t per_row = out.k / kValuesPerBlock;
  for (std::int64_t b = first * per_row; b < (first + count) * per_row; ++b) {
    const float* v = x + b * kValuesPerBlock;
    std::int8_t* q = out.q.data() + b * kValuesPerBlock;
    float amax = 0.0f;
    for (int j = 0; j < kValuesPerBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
#if LOWBIT_BLOCK_DOT_SIMD
    const __m256 scale = _mm256_set1_ps(inv);
    __m256i codes32[4];
    for (int i = 0; i < 4; ++i) codes32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * i), scale));
    // i32 -> i16 -> i8 packs work within 128-bit lanes; the permute restores value order.
    const __m256i p01 = _mm256_packs_epi32(codes32[0], codes32[1]);
    const __m256i p23 = _mm256_packs_epi32(codes32[2], codes32[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), bytes);
    for (int j = 0; j < kValuesPerBlock; ++j) sum += q[j];
#else
    for (int j = 0; j < kValuesPerBlock; ++j) {
      q[j] = static_cast<std::int8_t>(std::nearbyint(v[j] * inv));
      sum += q[j];
    }
#endif
    out.d[static_cast<std::size_t>(b)] = d;
    out.dsum[static_cast<std::size_t>(b)] = d * static_cast<float>(sum);
  }
}

void quantize_activations(const float* x, std::int64_t rows, std::int64_t k, QuantizedActivations& out) {
  out.resize(rows, k);
  quantize_activation_rows(x, 0, rows, out);
}

void block_matmul(WeightBlockType type, const std::uint8_t* w, std::int64_t row_bytes, std::int64_t rows,
                  const QuantizedActivations& x, float* y, std::int64_t ldy) {
#if LOWBIT_BLOCK_DOT_SIMD
  check_activations(x);
  switch (type) {
    case Type::q4_0: return simd_matmul<Type::q4_0>(w, row_bytes, rows, x, y, ldy);
    case Type::q4_1: return simd_matmul<Type::q4_1>(w, row_bytes, rows, x, y, ldy);
    case Type::q8_0: return simd_matmul<Type::q8_0>(w, row_bytes, rows, x, y, ldy);
    case Type::q4_f32: return simd_matmul<Type::q4_f32>(w, row_bytes, rows, x, y, ldy);
    case Type::q5_f32: return simd_matmul<Type::q5_f32>(w, row_bytes, rows, x, y, ldy);
    case Type::q6_f32x2: return simd_matmul<Type::q6_f32x2>(w, row_bytes, rows, x, y, ldy);
    case Type::q2_f16x2: return simd_matmul<Type::q2_f16x2>(w, row_bytes, rows, x, y, ldy);
    case Type::q3_f16x2: return simd_matmul<Type::q3_f16x2>(w, row_bytes, rows, x, y, ldy);
    case Type::q4_f16: return simd_matmul<Type::q4_f16>(w, row_bytes, rows, x, y, ldy);
    case Type::q6_f16x2: return simd_matmul<Type::q6_f16x2>(w, row_bytes, rows, x, y, ldy);
  }
#else
  block_matmul_scalar(type, w, row_bytes, rows, x, y, ldy);
#endif
}

void block_matmul_scalar(WeightBlockType type, const std::uint8_t* w, std::int64_t row_bytes, std::int64_t rows,
                         const QuantizedActivations& x, float* y, std::int64_t ldy) {
  check_activations(x);
  switch (type) {
    case Type::q4_0: return scalar_matmul<Type::q4_0>(w, row_bytes, rows, x, y, ldy);
    case Type::q4_1: return scalar_matmul<Type::q4_1>(w, row_bytes, rows, x, y, ldy);
    case Type::q8_0: return scalar_matmul<Type::q8_0>(w, row_bytes, rows, x, y, ldy);
    case Type::q4_f32: return scalar_matmul<Type::q4_f32>(w, row_bytes, rows, x, y, ldy);
    case Type::q5_f32: return scalar_matmul<Type::q5_f32>(w, row_bytes, rows, x, y, ldy);
    case Type::q6_f32x2: return scalar_matmul<Type::q6_f32x2>(w, row_bytes, rows, x, y, ldy);
    case Type::q2_f16x2: return scalar_matmul<Type::q2_f16x2>(w, row_bytes, rows, x, y, ldy);
    case Type::q3_f16x2: return scalar_matmul<Type::q3_f16x2>(w, row_bytes, rows, x, y, ldy);
    case Type::q4_f16: return scalar_matmul<Type::q4_f16>(w, row_bytes, rows, x, y, ldy);
    case Type::q6_f16x2: return scalar_matmul<Type::q6_f16x2>(w, row_bytes, rows, x, y, ldy);
  }
}

}  // namespace lowbit::cpu
