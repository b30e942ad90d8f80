// Fresh random inputs for every test run; the seed is printed with each failure.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace lowbit::test {

inline std::uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) | device();
}

// Normal values scaled per column by a log-normal factor, a few columns of zeros
// left out on purpose (zero columns are tested separately).
inline std::vector<float> random_matrix(std::mt19937_64& rng, std::int64_t rows, std::int64_t cols,
                                        std::int64_t row_stride = -1) {
  if (row_stride < 0) row_stride = cols;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scale(static_cast<std::size_t>(cols));
  for (auto& s : scale) s = std::exp(normal(rng));
  std::vector<float> x(static_cast<std::size_t>(rows * row_stride), 1e30f);  // padding: large, finite
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) x[r * row_stride + c] = normal(rng) * scale[c];
  }
  return x;
}

}  // namespace lowbit::test

// Records the seed in every failure message of the enclosing scope.
#define LOWBIT_TEST_RNG(rng)                             \
  const std::uint64_t rng##_seed = ::lowbit::test::fresh_seed(); \
  SCOPED_TRACE("random seed " + std::to_string(rng##_seed));     \
  std::mt19937_64 rng(rng##_seed)
