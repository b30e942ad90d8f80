#include "cpu/quant.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype_dispatch.h"
#include "cpu/parallel.h"
#include "formats/code_scheme.h"
#include "formats/float16.h"

namespace lowbit::cpu {
namespace {

using formats::to_float;

// Running statistics of one reduction domain (a tensor, column, row or group).
struct Range {
  std::uint32_t abs_bits = 0;  // max |x| as bits; >= kInfBits means NaN/Inf was seen
  float lo = std::numeric_limits<float>::infinity();
  float hi = -std::numeric_limits<float>::infinity();

  void add(float v) {
    const std::uint32_t bits = formats::abs_bits(v);
    abs_bits = bits > abs_bits ? bits : abs_bits;
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  void merge(const Range& other) {
    abs_bits = std::max(abs_bits, other.abs_bits);
    lo = std::min(lo, other.lo);
    hi = std::max(hi, other.hi);
  }
};

// Which scale a (row, col) element uses: scales are a [scale_rows, scale_cols] matrix.
struct ParamIndex {
  Granularity granularity;
  std::int64_t group_size;
  std::int64_t scale_cols;
  std::int64_t operator()(std::int64_t row, std::int64_t col) const {
    switch (granularity) {
      case Granularity::per_tensor: return 0;
      case Granularity::per_channel: return col;
      case Granularity::per_token: return row;
      case Granularity::per_group: return row * scale_cols + col / group_size;
    }
    return 0;
  }
};

ParamIndex param_index(const QuantSpec& spec, std::int64_t cols) {
  const QuantLayout layout = quant_layout(spec, 1, cols);
  return ParamIndex{spec.granularity, spec.group_size, layout.scale_cols};
}

template <class In>
[[noreturn]] void throw_non_finite(const TensorView& x, const QuantSpec& spec, std::int64_t param) {
  const In* data = x.ptr<In>();
  const ParamIndex index = param_index(spec, x.cols());
  for (std::int64_t r = 0; r < x.rows(); ++r) {
    for (std::int64_t c = 0; c < x.cols(); ++c) {
      const float v = to_float(data[r * x.row_stride() + c]);
      if (index(r, c) == param && !formats::is_finite_bits(formats::abs_bits(v))) {
        LOWBIT_FAIL("x: contains ", v, " at row ", r, ", column ", c,
                    "; quantization needs finite values");
      }
    }
  }
  LOWBIT_FAIL("x: contains NaN or Inf");
}

// Column statistics as three arrays, so that the per-row update is one
// branch-free loop over columns that the compiler vectorizes.
struct ColumnRanges {
  std::vector<std::uint32_t> abs_bits;
  std::vector<float> lo, hi;
  explicit ColumnRanges(std::int64_t cols)
      : abs_bits(static_cast<std::size_t>(cols), 0u),
        lo(static_cast<std::size_t>(cols), std::numeric_limits<float>::infinity()),
        hi(static_cast<std::size_t>(cols), -std::numeric_limits<float>::infinity()) {}

  template <class In>
  void add_row(const In* row, std::int64_t cols) {
    std::uint32_t* bits = abs_bits.data();
    float* low = lo.data();
    float* high = hi.data();
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = to_float(row[c]);
      const std::uint32_t b = formats::abs_bits(v);
      bits[c] = b > bits[c] ? b : bits[c];
      low[c] = v < low[c] ? v : low[c];
      high[c] = v > high[c] ? v : high[c];
    }
  }
  Range column(std::int64_t c) const { return Range{abs_bits[c], lo[c], hi[c]}; }
};

template <class In>
Range segment_range(const In* values, std::int64_t count) {
  Range range;
  for (std::int64_t i = 0; i < count; ++i) range.add(to_float(values[i]));
  return range;
}

// The statistics of every reduction domain, in scale order.
template <class In>
std::vector<Range> reduce_domains(const TensorView& x, const QuantSpec& spec) {
  const std::int64_t rows = x.rows();
  const std::int64_t cols = x.cols();
  const std::int64_t ld = x.row_stride();
  const In* data = x.ptr<In>();
  const QuantLayout layout = quant_layout(spec, rows, cols);
  std::vector<Range> ranges(static_cast<std::size_t>(layout.scale_count()));

  if (spec.granularity == Granularity::per_token || spec.granularity == Granularity::per_group) {
    // Each domain lies within one row: rows are independent.
    const std::int64_t width = spec.granularity == Granularity::per_token ? cols : spec.group_size;
    // ~1 ns an element (a scalar min/max/abs chain per domain).
#pragma omp parallel for schedule(static) if (parallel_worth(rows, 1.0 * cols))
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t g = 0; g < layout.scale_cols; ++g) {
        const std::int64_t c0 = g * width;
        ranges[r * layout.scale_cols + g] = segment_range(data + r * ld + c0, std::min(width, cols - c0));
      }
    }
    return ranges;
  }
  // Column domains span all rows: each thread reduces a block of rows, then merge.
  ColumnRanges columns(cols);
#pragma omp parallel if (parallel_worth(rows, 0.3 * cols))  // vectorized: 0.2-0.3 ns an element
  {
    ColumnRanges partial(cols);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) partial.add_row(data + r * ld, cols);
#pragma omp critical
    for (std::int64_t c = 0; c < cols; ++c) {
      Range merged = columns.column(c);
      merged.merge(partial.column(c));
      columns.abs_bits[c] = merged.abs_bits;
      columns.lo[c] = merged.lo;
      columns.hi[c] = merged.hi;
    }
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    ranges[spec.granularity == Granularity::per_channel ? c : 0].merge(columns.column(c));
  }
  return ranges;
}


template <class In, class Code>
void compute_scales_typed(const TensorView& x, const QuantSpec& spec, const QuantizedView& out) {
  const std::vector<Range> ranges = reduce_domains<In>(x, spec);
  float* scales = out.scales.ptr<float>();
  float* mins = Code::kAsymmetric ? out.mins.ptr<float>() : nullptr;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (!formats::is_finite_bits(ranges[i].abs_bits)) {
      throw_non_finite<In>(x, spec, static_cast<std::int64_t>(i));
    }
    scales[i] = Code::scale(formats::bits_to_float(ranges[i].abs_bits), ranges[i].lo, ranges[i].hi);
    if (mins) mins[i] = Code::min_value(ranges[i].lo);
  }
}

// Expands the parameters of one row into per-column arrays, so that the encode and
// decode loops below are plain element-wise loops.
void expand_row_params(const ParamIndex& index, std::int64_t row,
                       std::int64_t cols, const float* params, bool invert, float* per_column) {
  for (std::int64_t c = 0; c < cols; ++c) {
    const float p = params[index(row, c)];
    per_column[c] = invert ? formats::inverse_scale(p) : p;
  }
}

bool params_vary_by_row(Granularity granularity) {
  return granularity == Granularity::per_token || granularity == Granularity::per_group;
}

template <class In, class Code>
void quantize_typed(const TensorView& x, const QuantSpec& spec, const QuantizedView& out) {
  const std::int64_t rows = x.rows();
  const std::int64_t cols = x.cols();
  const std::int64_t ld = x.row_stride();
  const std::int64_t ldq = out.codes.row_stride();
  const In* data = x.ptr<In>();
  const float* scales = out.scales.ptr<float>();
  constexpr bool kMins = Code::kAsymmetric;
  const float* mins = kMins ? out.mins.ptr<float>() : nullptr;
  const ParamIndex index = param_index(spec, cols);
  const bool per_row = params_vary_by_row(spec.granularity);

  // ns an element: 8-bit codes 0.4, packed 4-bit ones 1-1.8; 2-3 and 4.5 where each row
  // expands (and inverts) its own scales.
  const double encode_ns = per_row ? (Code::kBits == 8 ? 2.5 : 4.5) : (Code::kBits == 8 ? 0.4 : 1.5);
#pragma omp parallel if (parallel_worth(rows, encode_ns * cols))
  {
    std::vector<float> inv(static_cast<std::size_t>(cols));
    std::vector<float> lo(static_cast<std::size_t>(cols), 0.0f);
    if (!per_row) {
      expand_row_params(index, 0, cols, scales, true, inv.data());
      if (kMins) expand_row_params(index, 0, cols, mins, false, lo.data());
    }
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      if (per_row) {
        expand_row_params(index, r, cols, scales, true, inv.data());
        if (kMins) expand_row_params(index, r, cols, mins, false, lo.data());
      }
      const In* x_row = data + r * ld;
      std::uint8_t* q_row = out.codes.ptr<std::uint8_t>() + r * ldq;
      auto code = [&](std::int64_t c) { return Code::to_storage(Code::encode(to_float(x_row[c]), inv[c], lo[c])); };
      if constexpr (Code::kBits == 8) {
        for (std::int64_t c = 0; c < cols; ++c) q_row[c] = static_cast<std::uint8_t>(code(c));
      } else {
        for (std::int64_t c = 0; c + 1 < cols; c += 2) q_row[c / 2] = static_cast<std::uint8_t>(code(c) | code(c + 1) << 4);
        if (cols % 2) q_row[cols / 2] = static_cast<std::uint8_t>(code(cols - 1));
      }
    }
  }
}

template <class Out, class Code>
void dequantize_typed(const QuantizedView& in, const QuantSpec& spec, const TensorView& out) {
  const std::int64_t rows = out.rows();
  const std::int64_t cols = out.cols();
  const std::int64_t ld = out.row_stride();
  const std::int64_t ldq = in.codes.row_stride();
  const float* scales = in.scales.ptr<float>();
  constexpr bool kMins = Code::kAsymmetric;
  const float* mins = kMins ? in.mins.ptr<float>() : nullptr;
  const ParamIndex index = param_index(spec, cols);
  const bool per_row = params_vary_by_row(spec.granularity);
  Out* result = out.ptr<Out>();

  // ns an element: 8-bit codes 0.15, packed 4-bit ones 0.6-1.2; 0.8-2.9 and 3 where each
  // row expands its own scales.
  const double decode_ns = per_row ? (Code::kBits == 8 ? 2.0 : 3.0) : (Code::kBits == 8 ? 0.15 : 1.0);
#pragma omp parallel if (parallel_worth(rows, decode_ns * cols))
  {
    std::vector<float> scale(static_cast<std::size_t>(cols));
    std::vector<float> lo(static_cast<std::size_t>(cols), 0.0f);
    if (!per_row) {
      expand_row_params(index, 0, cols, scales, false, scale.data());
      if (kMins) expand_row_params(index, 0, cols, mins, false, lo.data());
    }
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      if (per_row) {
        expand_row_params(index, r, cols, scales, false, scale.data());
        if (kMins) expand_row_params(index, r, cols, mins, false, lo.data());
      }
      Out* out_row = result + r * ld;
      const std::uint8_t* q_row = in.codes.ptr<const std::uint8_t>() + r * ldq;
      for (std::int64_t c = 0; c < cols; ++c) {
        const unsigned stored = Code::kBits == 8 ? q_row[c] : (c % 2 ? q_row[c / 2] >> 4 : q_row[c / 2]);
        out_row[c] = formats::from_float<Out>(Code::decode(Code::from_storage(stored), scale[c], lo[c]));
      }
    }
  }
}

}  // namespace

void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out) {
  visit_float_dtype(x.dtype, "x", [&](auto tag) {
    visit_code_scheme(spec.scheme, [&](auto code) { compute_scales_typed<decltype(tag), decltype(code)>(x, spec, out); });
  });
}

void quantize_with_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out) {
  visit_float_dtype(x.dtype, "x", [&](auto tag) {
    visit_code_scheme(spec.scheme, [&](auto code) { quantize_typed<decltype(tag), decltype(code)>(x, spec, out); });
  });
}

void dequantize(const QuantizedView& in, const QuantSpec& spec, const TensorView& out) {
  visit_float_dtype(out.dtype, "out", [&](auto tag) {
    visit_code_scheme(spec.scheme, [&](auto code) { dequantize_typed<decltype(tag), decltype(code)>(in, spec, out); });
  });
}

}  // namespace lowbit::cpu
