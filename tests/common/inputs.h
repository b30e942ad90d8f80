// Test matrices, dense fp32 with a row stride (padding elements hold kPadValue, which
// no quantizer may read: it is large enough to change any scale it reaches).
//
//   Fill::zeros     normal values with a log-normal scale per column, plus a row and
//                   a column of zeros of mixed sign (all-zero domains)
//   Fill::constant  the same, plus a row and a column holding one constant value
//                   (int4 domains with max == min)
//   Fill::ties      half-integers placed so that every domain has scale exactly 1
//                   (int8: absmax 127; int4: min 0, max 15): many codes are exact
//                   .5 ties, which must round to even
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/random.h"
#include "lowbit/quant.h"

namespace lowbit::test {

enum class Fill { zeros, constant, ties };

inline const char* fill_name(Fill fill) {
  switch (fill) {
    case Fill::zeros: return "zeros";
    case Fill::constant: return "constant";
    case Fill::ties: return "ties";
  }
  return "?";
}

constexpr float kPadValue = 30000.0f;  // finite in f16, bf16 and f32

inline std::vector<float> normal_matrix(Rng& rng, std::int64_t rows, std::int64_t cols, std::int64_t ld, Fill fill) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> column_scale(static_cast<std::size_t>(cols));
  for (float& s : column_scale) s = std::exp(normal(rng));
  std::vector<float> x(static_cast<std::size_t>(rows * ld), kPadValue);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) x[r * ld + c] = normal(rng) * column_scale[c];
  }
  const float constant = fill == Fill::zeros ? 0.0f : normal(rng) * 4.0f;
  auto planted = [&](std::int64_t i) { return fill == Fill::zeros ? ((i % 2) ? -0.0f : 0.0f) : constant; };
  if (rows >= 3) {
    for (std::int64_t c = 0; c < cols; ++c) x[(rows / 2) * ld + c] = planted(c);
  }
  if (cols >= 3) {
    for (std::int64_t r = 0; r < rows; ++r) x[r * ld + cols / 3] = planted(r + 1);
  }
  return x;
}

inline std::vector<float> ties_matrix(Rng& rng, QuantScheme scheme, std::int64_t rows, std::int64_t cols,
                                      std::int64_t ld) {
  // Every domain gets scale 1 (range 0..top for asymmetric schemes, absmax top for
  // symmetric ones), so that the half-integers below land exactly on rounding ties.
  const bool asym = scheme_has_mins(scheme);
  const int bits = scheme_bits(scheme);
  const int top = asym ? (1 << bits) - 1 : (1 << (bits - 1)) - 1;
  std::uniform_int_distribution<int> halves(asym ? 0 : -2 * top, 2 * top);
  std::bernoulli_distribution coin;
  std::vector<float> x(static_cast<std::size_t>(rows * ld), kPadValue);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      float v = static_cast<float>(halves(rng)) / 2.0f;
      // The extremes, where every domain sees them: rows 0 and 1 cover each column,
      // columns 16k and 16k+1 cover each row and each group (groups are 16k wide).
      const auto extreme = static_cast<float>(top);
      if (asym) {
        if (r < 2) v = ((r + c) % 2) ? extreme : 0.0f;
        else if (c % 16 < 2) v = (c % 16) ? extreme : 0.0f;
      } else if (r == 0 || c % 16 == 0) {
        v = coin(rng) ? extreme : -extreme;
      }
      x[r * ld + c] = v;
    }
  }
  return x;
}

inline std::vector<float> test_matrix(Rng& rng, Fill fill, QuantScheme scheme, std::int64_t rows, std::int64_t cols,
                                      std::int64_t ld) {
  return fill == Fill::ties ? ties_matrix(rng, scheme, rows, cols, ld) : normal_matrix(rng, rows, cols, ld, fill);
}

}  // namespace lowbit::test
