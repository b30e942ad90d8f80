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

// Where a block's parts lie (bytes from its start).
struct BlockLayout {
  int bytes, codes_at;
  bool has_min;
};
constexpr BlockLayout layout(Type type) {
  switch (type) {
    case Type::q4_0: return {18, 2, false};
    case Type::q4_1: return {20, 4, true};
    case Type::q8_0: return {34, 2, false};
  }
  return {0, 0, false};
}

float f16_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return formats::half_to_float(formats::Half{bits});
}

// One block's codes as 32 weights in value order: the 4-bit types hold value j in
// the low nibble of byte j and value j + 16 in its high nibble.
template <Type T>
int scalar_block_dot(const std::uint8_t* codes, const std::int8_t* xq) {
  int sum = 0;
  if constexpr (T == Type::q8_0) {
    // Read as int8 through the pointer: GCC 12 at -O2 -march=native vectorizes
    // static_cast<int8_t>(byte) * int8 into vpdpbusd (an unsigned x signed product),
    // which gives wrong sums for negative weights.
    const auto* w = reinterpret_cast<const std::int8_t*>(codes);
    for (int j = 0; j < 32; ++j) sum += w[j] * xq[j];
  } else {
    for (int j = 0; j < 16; ++j) sum += (codes[j] & 15) * xq[j] + (codes[j] >> 4) * xq[j + 16];
  }
  return sum;
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
        const float dw = f16_at(blk);
        const int dot = scalar_block_dot<T>(blk + L.codes_at, xq + b * kValuesPerBlock);
        acc += static_cast<float>(dot) * (dw * dx[b]);
        if constexpr (T == Type::q4_0) corr += -8.0f * dw * xs[b];
        if constexpr (T == Type::q4_1) corr += f16_at(blk + 2) * xs[b];
      }
      y[t * ldy + r] = acc + corr;
    }
  }
}

#if LOWBIT_BLOCK_DOT_SIMD

// Sum of u8 x s8 products, four adjacent pairs into each i32 lane.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  // u <= 15 (Q4) or |w| <= 128 (Q8), |s| <= 127: the i16 pair sums cannot saturate.
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
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

// The 32 codes of a block as bytes in value order (unsigned nibbles for Q4, the raw
// signed bytes for Q8).
template <Type T>
inline __m256i load_codes(const std::uint8_t* codes) {
  if constexpr (T == Type::q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
}

template <Type T>
inline __m256i block_dot(__m256i w, __m256i xq) {
  if constexpr (T == Type::q8_0) {
    // s8 x s8 through the u8 x s8 product: |w| times x with w's sign.
    return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xq, w));
  } else {
    return dot_u8s8(w, xq);
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
  for (int r = 0; r < RT; ++r) {
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps(), corr[r][t] = 0.0f;
  }
  const std::int8_t* xq0 = x.q.data() + t0 * x.k;
  const float* dx0 = x.d.data() + t0 * blocks;
  const float* xs0 = x.dsum.data() + t0 * blocks;
  for (std::int64_t b = 0; b < blocks; ++b) {
    __m256i xq[TT];
    float dx[TT], xs[TT];
    for (int t = 0; t < TT; ++t) {
      xq[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq0 + t * x.k + b * kValuesPerBlock));
      dx[t] = dx0[t * blocks + b];
      xs[t] = xs0[t * blocks + b];
    }
    for (int r = 0; r < RT; ++r) {
      const std::uint8_t* blk = w + r * row_bytes + b * L.bytes;
      const float dw = f16_fast(blk);
      const __m256i codes = load_codes<T>(blk + L.codes_at);
      float coef = 0.0f;
      if constexpr (T == Type::q4_0) coef = -8.0f * dw;
      if constexpr (T == Type::q4_1) coef = f16_fast(blk + 2);
      for (int t = 0; t < TT; ++t) {
        const __m256 dot = _mm256_cvtepi32_ps(block_dot<T>(codes, xq[t]));
        acc[r][t] = _mm256_fmadd_ps(dot, _mm256_set1_ps(dw * dx[t]), acc[r][t]);
        if constexpr (T != Type::q8_0) corr[r][t] = std::fma(coef, xs[t], corr[r][t]);
      }
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

std::int64_t weight_block_bytes(WeightBlockType type) { return layout(type).bytes; }

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
  }
}

}  // namespace lowbit::cpu
