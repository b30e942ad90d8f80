#include "cpu/quant.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/float_dispatch.h"
#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"

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
#pragma omp parallel for schedule(static)
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
#pragma omp parallel
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

template <class In>
void compute_scales_typed(const TensorView& x, const QuantSpec& spec, const QuantizedView& out) {
  const std::vector<Range> ranges = reduce_domains<In>(x, spec);
  float* scales = out.scales.ptr<float>();
  float* mins = spec.scheme == QuantScheme::int4_asymmetric ? out.mins.ptr<float>() : nullptr;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (!formats::is_finite_bits(ranges[i].abs_bits)) {
      throw_non_finite<In>(x, spec, static_cast<std::int64_t>(i));
    }
    if (mins) {
      scales[i] = formats::int4_scale(ranges[i].lo, ranges[i].hi);
      mins[i] = formats::int4_min(ranges[i].lo);
    } else {
      scales[i] = formats::int8_scale(formats::bits_to_float(ranges[i].abs_bits));
    }
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

template <class In>
void quantize_typed(const TensorView& x, const QuantSpec& spec, const QuantizedView& out) {
  const std::int64_t rows = x.rows();
  const std::int64_t cols = x.cols();
  const std::int64_t ld = x.row_stride();
  const std::int64_t ldq = out.codes.row_stride();
  const In* data = x.ptr<In>();
  const float* scales = out.scales.ptr<float>();
  const bool int4 = spec.scheme == QuantScheme::int4_asymmetric;
  const float* mins = int4 ? out.mins.ptr<float>() : nullptr;
  const ParamIndex index = param_index(spec, cols);
  const bool per_row = params_vary_by_row(spec.granularity);

#pragma omp parallel
  {
    std::vector<float> inv(static_cast<std::size_t>(cols));
    std::vector<float> lo(int4 ? static_cast<std::size_t>(cols) : 0);
    if (!per_row) {
      expand_row_params(index, 0, cols, scales, true, inv.data());
      if (int4) expand_row_params(index, 0, cols, mins, false, lo.data());
    }
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      if (per_row) {
        expand_row_params(index, r, cols, scales, true, inv.data());
        if (int4) expand_row_params(index, r, cols, mins, false, lo.data());
      }
      const In* x_row = data + r * ld;
      if (!int4) {
        std::int8_t* q_row = out.codes.ptr<std::int8_t>() + r * ldq;
        for (std::int64_t c = 0; c < cols; ++c) q_row[c] = formats::int8_encode(to_float(x_row[c]), inv[c]);
      } else {
        std::uint8_t* q_row = out.codes.ptr<std::uint8_t>() + r * ldq;
        for (std::int64_t c = 0; c + 1 < cols; c += 2) {
          const std::uint8_t low = formats::int4_encode(to_float(x_row[c]), lo[c], inv[c]);
          const std::uint8_t high = formats::int4_encode(to_float(x_row[c + 1]), lo[c + 1], inv[c + 1]);
          q_row[c / 2] = formats::int4_pack(low, high);
        }
        if (cols % 2) q_row[cols / 2] = formats::int4_encode(to_float(x_row[cols - 1]), lo[cols - 1], inv[cols - 1]);
      }
    }
  }
}

template <class Out>
void dequantize_typed(const QuantizedView& in, const QuantSpec& spec, const TensorView& out) {
  const std::int64_t rows = out.rows();
  const std::int64_t cols = out.cols();
  const std::int64_t ld = out.row_stride();
  const std::int64_t ldq = in.codes.row_stride();
  const float* scales = in.scales.ptr<float>();
  const bool int4 = spec.scheme == QuantScheme::int4_asymmetric;
  const float* mins = int4 ? in.mins.ptr<float>() : nullptr;
  const ParamIndex index = param_index(spec, cols);
  const bool per_row = params_vary_by_row(spec.granularity);
  Out* result = out.ptr<Out>();

#pragma omp parallel
  {
    std::vector<float> scale(static_cast<std::size_t>(cols));
    std::vector<float> lo(int4 ? static_cast<std::size_t>(cols) : 0);
    if (!per_row) {
      expand_row_params(index, 0, cols, scales, false, scale.data());
      if (int4) expand_row_params(index, 0, cols, mins, false, lo.data());
    }
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      if (per_row) {
        expand_row_params(index, r, cols, scales, false, scale.data());
        if (int4) expand_row_params(index, r, cols, mins, false, lo.data());
      }
      Out* out_row = result + r * ld;
      if (!int4) {
        const std::int8_t* q_row = in.codes.ptr<const std::int8_t>() + r * ldq;
        for (std::int64_t c = 0; c < cols; ++c) {
          out_row[c] = formats::from_float<Out>(formats::int8_decode(q_row[c], scale[c]));
        }
      } else {
        const std::uint8_t* q_row = in.codes.ptr<const std::uint8_t>() + r * ldq;
        for (std::int64_t c = 0; c < cols; ++c) {
          const std::uint8_t byte = q_row[c / 2];
          const std::uint8_t code = (c % 2) ? formats::int4_high(byte) : formats::int4_low(byte);
          out_row[c] = formats::from_float<Out>(formats::int4_decode(code, scale[c], lo[c]));
        }
      }
    }
  }
}

}  // namespace

void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out) {
  visit_float_dtype(x.dtype, "x", [&](auto tag) { compute_scales_typed<decltype(tag)>(x, spec, out); });
}

void quantize_with_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out) {
  visit_float_dtype(x.dtype, "x", [&](auto tag) { quantize_typed<decltype(tag)>(x, spec, out); });
}

void dequantize(const QuantizedView& in, const QuantSpec& spec, const TensorView& out) {
  visit_float_dtype(out.dtype, "out", [&](auto tag) { dequantize_typed<decltype(tag)>(in, spec, out); });
}

}  // namespace lowbit::cpu
