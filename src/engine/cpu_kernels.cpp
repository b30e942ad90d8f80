#include "engine/cpu_kernels.h"

#include <algorithm>
#include <cmath>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace lowbit::engine::cpu_kernels {
namespace {

// One SIMD register of floats: load, FMA, horizontal sum.
#if defined(__AVX512F__)
constexpr int W = 16;
using Vec = __m512;
inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float vsum(Vec a) {
  // lanes[i] += lanes[i + w] for w = 8, 4, 2, 1, in registers (GCC's shuffle builtin:
  // GCC 12's reduce / extract / permute intrinsics trip -Wuninitialized in its headers).
  a = a + __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  a = a + __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  a = a + __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  a = a + __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return a[0];
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int W = 8;
using Vec = __m256;
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(Vec a) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}
#else
constexpr int W = 1;
using Vec = float;
inline Vec vzero() { return 0.0f; }
inline Vec vload(const float* p) { return *p; }
inline Vec vfma(Vec a, Vec b, Vec c) { return std::fma(a, b, c); }
inline float vsum(Vec a) { return a; }
#endif

// TT tokens x TO output rows of y, each a dot product over k.
template <int TT, int TO>
inline void tile(const float* x, std::int64_t k, const float* w, float* y, std::int64_t ldy) {
  Vec acc[TT][TO];
  for (int t = 0; t < TT; ++t)
    for (int o = 0; o < TO; ++o) acc[t][o] = vzero();
  std::int64_t i = 0;
  for (; i + W <= k; i += W) {
    Vec wv[TO];
    for (int o = 0; o < TO; ++o) wv[o] = vload(w + o * k + i);
    for (int t = 0; t < TT; ++t) {
      const Vec xv = vload(x + t * k + i);
      for (int o = 0; o < TO; ++o) acc[t][o] = vfma(xv, wv[o], acc[t][o]);
    }
  }
  for (int t = 0; t < TT; ++t) {
    for (int o = 0; o < TO; ++o) {
      float s = vsum(acc[t][o]);
      for (std::int64_t j = i; j < k; ++j) s = std::fma(x[t * k + j], w[o * k + j], s);
      y[t * ldy + o] = s;
    }
  }
}

template <int TO>
inline void row_tile(const float* x, std::int64_t n, std::int64_t k, const float* w, float* y, std::int64_t ldy) {
  std::int64_t t = 0;
  for (; t + 4 <= n; t += 4) tile<4, TO>(x + t * k, k, w, y + t * ldy, ldy);
  switch (n - t) {
    case 3: tile<3, TO>(x + t * k, k, w, y + t * ldy, ldy); break;
    case 2: tile<2, TO>(x + t * k, k, w, y + t * ldy, ldy); break;
    case 1: tile<1, TO>(x + t * k, k, w, y + t * ldy, ldy); break;
    default: break;
  }
}

}  // namespace

void matmul_nt(const float* x, std::int64_t n, std::int64_t k, const float* w, std::int64_t m, float* y,
               std::int64_t ldy) {
  std::int64_t o = 0;
  for (; o + 4 <= m; o += 4) row_tile<4>(x, n, k, w + o * k, y + o, ldy);
  for (; o < m; ++o) row_tile<1>(x, n, k, w + o * k, y + o, ldy);
}

void dot4(const float* a, const float* const b[4], std::int64_t n, float out[4]) {
  Vec acc[4] = {vzero(), vzero(), vzero(), vzero()};
  std::int64_t i = 0;
  for (; i + W <= n; i += W) {
    const Vec av = vload(a + i);
    for (int j = 0; j < 4; ++j) acc[j] = vfma(av, vload(b[j] + i), acc[j]);
  }
  for (int j = 0; j < 4; ++j) {
    float s = vsum(acc[j]);
    for (std::int64_t t = i; t < n; ++t) s = std::fma(a[t], b[j][t], s);
    out[j] = s;
  }
}

float dot(const float* a, const float* b, std::int64_t n) {
  Vec acc = vzero();
  std::int64_t i = 0;
  for (; i + W <= n; i += W) acc = vfma(vload(a + i), vload(b + i), acc);
  float s = vsum(acc);
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void rms_norm(const float* x, const float* weight, std::int64_t n, std::int64_t d, float eps, float* y) {
  for (std::int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * d;
    double ss = 0.0;
    for (std::int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (std::int64_t i = 0; i < d; ++i) y[t * d + i] = xr[i] * inv * weight[i];
  }
}

}  // namespace lowbit::engine::cpu_kernels
