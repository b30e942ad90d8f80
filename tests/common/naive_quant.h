// An independent, obviously-right quantizer for the tests: loops over each domain
// (tensor, column, row or group) to find its min / max / absmax, then applies the
// formats layer's element arithmetic. The library's CPU path is checked against
// this; the GPU path is checked against the library's CPU path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"
#include "lowbit/quant.h"

namespace lowbit::test {

// Storage bytes of `values` (dense) in dtype, and the floats that storage holds.
inline std::vector<std::uint8_t> to_storage(const std::vector<float>& values, DType dtype) {
  std::vector<std::uint8_t> out(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const std::uint16_t bits =
          dtype == DType::f16 ? formats::float_to_half(values[i]).bits : formats::float_to_bf16(values[i]).bits;
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

inline float storage_value(const std::uint8_t* storage, std::size_t i, DType dtype) {
  if (dtype == DType::f32) {
    float v;
    std::memcpy(&v, storage + 4 * i, 4);
    return v;
  }
  std::uint16_t bits;
  std::memcpy(&bits, storage + 2 * i, 2);
  return dtype == DType::f16 ? formats::half_to_float(formats::Half{bits}) : formats::bf16_to_float(formats::BFloat16{bits});
}

// Code of element (r, c) in a codes buffer with row stride ldq bytes.
inline int code_at(const std::uint8_t* codes, std::int64_t ldq, std::int64_t r, std::int64_t c, QuantScheme scheme) {
  if (scheme == QuantScheme::int8_symmetric) return static_cast<std::int8_t>(codes[r * ldq + c]);
  const std::uint8_t byte = codes[r * ldq + c / 2];
  return (c % 2) ? formats::int4_high(byte) : formats::int4_low(byte);
}

struct NaiveQuantized {
  std::vector<float> scales, mins;
  std::vector<int> codes;       // rows x cols, dense
  std::vector<float> decoded;   // rows x cols, dense, in fp32 before rounding to the output dtype
};

// x: dense rows x cols values as the quantizer sees them.
inline NaiveQuantized naive_quantize(const std::vector<float>& x, const QuantSpec& spec, std::int64_t rows,
                                     std::int64_t cols) {
  const QuantLayout layout = quant_layout(spec, rows, cols);
  auto domain = [&](std::int64_t r, std::int64_t c) -> std::int64_t {
    switch (spec.granularity) {
      case Granularity::per_tensor: return 0;
      case Granularity::per_channel: return c;
      case Granularity::per_token: return r;
      case Granularity::per_group: return r * layout.scale_cols + c / spec.group_size;
    }
    return 0;
  };
  const auto n = static_cast<std::size_t>(layout.scale_count());
  std::vector<float> lo(n, INFINITY), hi(n, -INFINITY), absmax(n, 0.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      const auto d = static_cast<std::size_t>(domain(r, c));
      lo[d] = std::min(lo[d], v);
      hi[d] = std::max(hi[d], v);
      absmax[d] = std::max(absmax[d], std::fabs(v));
    }
  }
  NaiveQuantized q;
  q.scales.resize(n);
  q.mins.resize(n);
  const bool int4 = spec.scheme == QuantScheme::int4_asymmetric;
  for (std::size_t d = 0; d < n; ++d) {
    q.scales[d] = int4 ? formats::int4_scale(lo[d], hi[d]) : formats::int8_scale(absmax[d]);
    q.mins[d] = int4 ? formats::int4_min(lo[d]) : 0.0f;
  }
  q.codes.resize(static_cast<std::size_t>(rows * cols));
  q.decoded.resize(q.codes.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto d = static_cast<std::size_t>(domain(r, c));
      const float v = x[r * cols + c];
      const float inv = formats::inverse_scale(q.scales[d]);
      const std::size_t i = static_cast<std::size_t>(r * cols + c);
      if (int4) {
        q.codes[i] = formats::int4_encode(v, q.mins[d], inv);
        q.decoded[i] = formats::int4_decode(static_cast<std::uint8_t>(q.codes[i]), q.scales[d], q.mins[d]);
      } else {
        q.codes[i] = formats::int8_encode(v, inv);
        q.decoded[i] = formats::int8_decode(static_cast<std::int8_t>(q.codes[i]), q.scales[d]);
      }
    }
  }
  return q;
}

inline float round_to(DType dtype, float v) {
  if (dtype == DType::f16) return formats::half_to_float(formats::float_to_half(v));
  if (dtype == DType::bf16) return formats::bf16_to_float(formats::float_to_bf16(v));
  return v;
}

// Every configuration the tests sweep.
inline std::vector<QuantSpec> all_specs() {
  std::vector<QuantSpec> specs;
  for (QuantScheme scheme : {QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric}) {
    for (Granularity g : {Granularity::per_tensor, Granularity::per_channel, Granularity::per_token}) {
      specs.push_back({scheme, g, 0});
    }
    for (std::int64_t group : {16, 32, 48, 64, 128, 1024}) specs.push_back({scheme, Granularity::per_group, group});
  }
  return specs;
}

inline std::string spec_name(const QuantSpec& spec) {
  std::string name = std::string(scheme_name(spec.scheme)) + "_" + granularity_name(spec.granularity);
  if (spec.granularity == Granularity::per_group) name += std::to_string(spec.group_size);
  return name;
}

}  // namespace lowbit::test
