// An independent, obviously-right quantizer: one plain loop over all elements finds
// each domain's absmax, min and max, then the formats layer's element arithmetic
// turns them into scales, codes and decoded values. The library's CPU path is
// checked against this; the GPU path is checked against the library's CPU path.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/specs.h"
#include "formats/code_scheme.h"
#include "lowbit/quant.h"

namespace lowbit::test {

// The domain (index into scales) of element (r, c): the tensor, its column, its row,
// or its group of G columns within the row.
inline std::int64_t naive_domain(const QuantSpec& spec, std::int64_t cols, std::int64_t r, std::int64_t c) {
  switch (spec.granularity) {
    case Granularity::per_tensor: return 0;
    case Granularity::per_channel: return c;
    case Granularity::per_token: return r;
    case Granularity::per_group: {
      const std::int64_t groups_per_row = (cols + spec.group_size - 1) / spec.group_size;
      return r * groups_per_row + c / spec.group_size;
    }
  }
  return -1;
}

inline std::int64_t naive_domain_count(const QuantSpec& spec, std::int64_t rows, std::int64_t cols) {
  switch (spec.granularity) {
    case Granularity::per_tensor: return 1;
    case Granularity::per_channel: return cols;
    case Granularity::per_token: return rows;
    case Granularity::per_group: return rows * ((cols + spec.group_size - 1) / spec.group_size);
  }
  return 0;
}

struct NaiveQuantized {
  std::vector<float> scales, mins;  // one per domain; mins for the asymmetric schemes only
  std::vector<int> codes;           // rows x cols, dense, one code per element
  std::vector<float> decoded;       // rows x cols, dense, in fp32 (before rounding to an output dtype)
};

// x: rows x cols dense, the values exactly as the quantizer sees them (finite).
inline NaiveQuantized naive_quantize(const std::vector<float>& x, const QuantSpec& spec, std::int64_t rows,
                                     std::int64_t cols) {
  const auto n = static_cast<std::size_t>(naive_domain_count(spec, rows, cols));
  std::vector<float> absmax(n, 0.0f);
  std::vector<float> lo(n, std::numeric_limits<float>::infinity());
  std::vector<float> hi(n, -std::numeric_limits<float>::infinity());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = x[static_cast<std::size_t>(r * cols + c)];
      const auto d = static_cast<std::size_t>(naive_domain(spec, cols, r, c));
      if (std::fabs(v) > absmax[d]) absmax[d] = std::fabs(v);
      if (v < lo[d]) lo[d] = v;
      if (v > hi[d]) hi[d] = v;
    }
  }
  NaiveQuantized q;
  auto run = [&](auto code_scheme) {
    using Code = decltype(code_scheme);
    for (std::size_t d = 0; d < n; ++d) {
      q.scales.push_back(Code::scale(absmax[d], lo[d], hi[d]));
      if (Code::kAsymmetric) q.mins.push_back(Code::min_value(lo[d]));
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto d = static_cast<std::size_t>(naive_domain(spec, cols, r, c));
        const float v = x[static_cast<std::size_t>(r * cols + c)];
        const float min = Code::kAsymmetric ? q.mins[d] : 0.0f;
        const int code = Code::encode(v, formats::inverse_scale(q.scales[d]), min);
        q.codes.push_back(code);
        q.decoded.push_back(Code::decode(code, q.scales[d], min));
      }
    }
  };
  switch (spec.scheme) {
    case QuantScheme::int8_symmetric: run(formats::Int8Symmetric{}); break;
    case QuantScheme::int4_asymmetric: run(formats::Int4Asymmetric{}); break;
    case QuantScheme::int8_asymmetric: run(formats::Int8Asymmetric{}); break;
    case QuantScheme::int4_symmetric: run(formats::Int4Symmetric{}); break;
  }
  return q;
}

}  // namespace lowbit::test
