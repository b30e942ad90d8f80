#include "data.h"

#include <cmath>
#include <cstring>

#include "core/dtype_dispatch.h"
#include "formats/float16.h"

namespace lowbit::bench {
namespace {

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1], from 24 random bits.
double uniform(std::uint64_t bits) { return (static_cast<double>(bits >> 40) + 1.0) / 16777216.0; }

// A standard normal for counter i (Box-Muller on two hashed uniforms).
float normal_at(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h = splitmix64(seed ^ splitmix64(i));
  const double u1 = uniform(h);
  const double u2 = uniform(splitmix64(h));
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace

void fill_normal(float* x, std::int64_t count, std::uint64_t seed) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) x[i] = normal_at(seed, static_cast<std::uint64_t>(i));
}

void fill_kv_like(float* x, std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::vector<float> channel_scale(static_cast<std::size_t>(cols));
  for (std::int64_t c = 0; c < cols; ++c) {
    const std::uint64_t key = splitmix64(seed + 0x51ed270b27ULL) + static_cast<std::uint64_t>(c);
    const bool outlier = splitmix64(key) % 100 == 0;
    channel_scale[c] = std::exp(0.5f * normal_at(seed + 1, static_cast<std::uint64_t>(c))) * (outlier ? 10.0f : 1.0f);
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::uint64_t>(r * cols + c);
      x[r * cols + c] = normal_at(seed, i) * channel_scale[c];
    }
  }
}

std::vector<std::uint8_t> convert_to_dtype(const float* x, std::int64_t count, DType dtype) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(count) * dtype_size(dtype));
  visit_float_dtype(dtype, "dtype", [&](auto tag) {
    using T = decltype(tag);
    T* values = reinterpret_cast<T*>(out.data());
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < count; ++i) values[i] = formats::from_float<T>(x[i]);
  });
  return out;
}

std::vector<float> dtype_values_as_float(const std::uint8_t* storage, std::int64_t count, DType dtype) {
  std::vector<float> out(static_cast<std::size_t>(count));
  visit_float_dtype(dtype, "dtype", [&](auto tag) {
    using T = decltype(tag);
    const T* values = reinterpret_cast<const T*>(storage);
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < count; ++i) out[i] = formats::to_float(values[i]);
  });
  return out;
}

ErrorMetrics error_metrics(const float* x, const void* reconstruction, DType dtype, std::int64_t rows,
                           std::int64_t cols, const float* query) {
  return visit_float_dtype(dtype, "reconstruction", [&](auto tag) {
    using T = decltype(tag);
    const T* y = static_cast<const T*>(reconstruction);
    double err2 = 0, ref2 = 0, max_abs = 0, attn = 0;
#pragma omp parallel for schedule(static) reduction(+ : err2, ref2, attn) reduction(max : max_abs)
    for (std::int64_t r = 0; r < rows; ++r) {
      double dot_diff = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double ref = x[r * cols + c];
        const double diff = ref - static_cast<double>(formats::to_float(y[r * cols + c]));
        err2 += diff * diff;
        ref2 += ref * ref;
        max_abs = std::max(max_abs, std::fabs(diff));
        dot_diff += static_cast<double>(query[c]) * diff;
      }
      attn += std::fabs(dot_diff);
    }
    ErrorMetrics m;
    m.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    m.max_abs = max_abs;
    m.attn_surrogate = attn / static_cast<double>(rows);
    return m;
  });
}

}  // namespace lowbit::bench
