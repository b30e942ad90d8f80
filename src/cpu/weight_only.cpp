// Weight-only GEMM, host side: packed sizes, the repacker, and the CPU reference.
// Everything about where a code or a scale lives is in formats/weight_pack.h; this
// file only moves values through those accessors.
#include "cpu/weight_only.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/layout.h"
#include "cpu/parallel.h"
#include "formats/float16.h"
#include "formats/weight_pack.h"
#include "lowbit/error.h"

namespace lowbit {
namespace {


// Real (unpadded) groups per row in the caller's scale matrix.
std::int64_t input_groups(const WeightOnlySpec& spec, std::int64_t k) {
  return (k + spec.group_size - 1) / spec.group_size;
}

// Element (row, col) of a rank-1 ([rows], col 0) or rank-2 view.
template <class T>
T at(const TensorView& v, std::int64_t row, std::int64_t col) {
  const std::int64_t offset = v.rank == 1 ? row * v.strides[0] : row * v.strides[0] + col * v.strides[1];
  return v.ptr<const T>()[offset];
}

template <class T>
std::uint16_t bits_of(T value) {
  return value.bits;
}

template <class T>
void pack_scales(const TensorView& in, const formats::WeightPackLayout& layout, std::int64_t real_groups,
                 T* out) {
  std::memset(out, 0, static_cast<std::size_t>(layout.scale_count()) * sizeof(T));
  for (std::int64_t n = 0; n < layout.n; ++n) {
    for (std::int64_t g = 0; g < real_groups; ++g) {
      out[layout.scale_index(n, g)] = formats::from_float<T>(at<float>(in, n, g));
    }
  }
}

template <class T>
void pack_typed(const TensorView& codes, const TensorView& scales, const TensorView& mins, const PackedWeights& out,
                const formats::WeightPackLayout& layout) {
  const std::int64_t real_groups = input_groups(out.spec, out.k);
  auto* packed = out.codes.ptr<std::uint8_t>();
  // The zero code everywhere first: padded rows and k dequantize to 0 (or to a
  // finite min that meets zero activations).
  const std::uint8_t fill = layout.bits == 8 ? 0x80 : (layout.zero_point ? 0x00 : 0x88);
  std::memset(packed, fill, static_cast<std::size_t>(layout.code_bytes()));
  // Units are disjoint per tile of 8 rows, so rows of tiles pack in parallel (~6 ns a code).
#pragma omp parallel for schedule(static) if (cpu::parallel_worth(layout.n_tiles, 8 * 6.0 * layout.k))
  for (std::int64_t tile = 0; tile < layout.n_tiles; ++tile) {
    const std::int64_t n_end = (tile + 1) * 8 < layout.n ? (tile + 1) * 8 : layout.n;
    for (std::int64_t n = tile * 8; n < n_end; ++n) {
      const auto* row = codes.ptr<const std::uint8_t>() + n * codes.strides[0];
      for (std::int64_t k = 0; k < layout.k; ++k) {
        const auto [byte, shift] = layout.code_place(n, k);
        if (layout.bits == 8) {
          packed[byte] = static_cast<std::uint8_t>(row[k] ^ 0x80u);  // q + 128
        } else {
          const int q = (row[k / 2] >> (4 * (k % 2))) & 0xf;
          packed[byte] = static_cast<std::uint8_t>((packed[byte] & ~(0xf << shift)) | (q << shift));
        }
      }
    }
  }
  pack_scales<T>(scales, layout, real_groups, out.scales.ptr<T>());
  if (layout.zero_point) pack_scales<T>(mins, layout, real_groups, out.mins.ptr<T>());
}

// Row n of W dequantized (act dtype values, exactly as the kernels produce them),
// widened to double; k beyond K is not produced.
template <class T>
void dequant_row(const PackedWeights& w, const formats::WeightPackLayout& layout, std::int64_t n, double* row) {
  const auto* codes = w.codes.ptr<const std::uint8_t>();
  if (layout.blocks != formats::WeightBlocks::none) {  // a GGML block form: f16, scales in the units
    for (std::int64_t k = 0; k < layout.k; ++k) row[k] = formats::to_float(formats::block_weight_at(layout, codes, n, k));
    return;
  }
  const T* scales = w.scales.ptr<const T>();
  const T* mins = layout.zero_point ? w.mins.ptr<const T>() : nullptr;
  for (std::int64_t k = 0; k < layout.k; ++k) {
    const formats::WeightPackLayout::CodePlace place = layout.code_place(n, k);
    const int stored = (codes[place.byte] >> place.shift) & (layout.bits == 8 ? 0xff : 0xf);
    const int q = formats::weight_code_value(layout, stored);
    const std::int64_t s = layout.scale_index(n, layout.group_of(k));
    const T value = mins ? formats::dequant_weight<T>(q, scales[s], mins[s]) : formats::dequant_weight<T>(q, scales[s]);
    row[k] = formats::to_float(value);
  }
}

template <class T>
void gemm_typed(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out) {
  const formats::WeightPackLayout layout = core::checked_weight_layout(w.spec, w.n, w.k);
  const std::int64_t m_rows = x.rows();
  const T* bias_data = bias.data ? bias.ptr<const T>() : nullptr;
  const std::int64_t bias_stride = bias.data ? bias.strides[bias.rank - 1] : 0;
  // Activations widened once (exact).
  std::vector<double> xs(static_cast<std::size_t>(m_rows * layout.k));
  for (std::int64_t m = 0; m < m_rows; ++m) {
    for (std::int64_t k = 0; k < layout.k; ++k) {
      xs[m * layout.k + k] = formats::to_float(x.ptr<const T>()[m * x.strides[0] + k]);
    }
  }
  // A weight row: ~10 ns a weight dequantized, ~1 ns a multiply-add in double.
#pragma omp parallel if (cpu::parallel_worth(layout.n, 10.0 * layout.k + 1.0 * m_rows * layout.k))
  {
    std::vector<double> row(static_cast<std::size_t>(layout.k));
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < layout.n; ++n) {
      dequant_row<T>(w, layout, n, row.data());
      const double b = bias_data ? formats::to_float(bias_data[n * bias_stride]) : 0.0;
      for (std::int64_t m = 0; m < m_rows; ++m) {
        // Products of two act-dtype values are exact in double; the sum is in
        // double (more accurate than the kernels' FP32, which the tests allow for).
        double acc = 0.0;
        const double* xr = &xs[m * layout.k];
        for (std::int64_t k = 0; k < layout.k; ++k) acc += xr[k] * row[k];
        out.ptr<T>()[m * out.strides[0] + n] = formats::round_exact_to<T>(acc + b);
      }
    }
  }
}

}  // namespace


namespace cpu {

void pack_weights(const TensorView& codes, const TensorView& scales, const TensorView& mins,
                  const PackedWeights& out) {
  const WeightOnlySpec& spec = out.spec;
  const formats::WeightPackLayout layout = core::checked_weight_layout(spec, out.n, out.k);
  const std::int64_t code_cols = spec.bits == 4 ? (out.k + 1) / 2 : out.k;
  LOWBIT_CHECK(codes.rank == 2 && codes.rows() == out.n && codes.cols() == code_cols && codes.strides[1] == 1,
               "codes: expected [", out.n, " x ", code_cols, "] with unit column stride for a ", spec.bits,
               "-bit ", out.n, " x ", out.k, " weight, got ", codes.describe());
  LOWBIT_CHECK(codes.dtype == (spec.bits == 4 ? DType::u8 : DType::i8), "codes: expected dtype ",
               spec.bits == 4 ? "u8" : "i8", ", got ", dtype_name(codes.dtype));
  const std::int64_t groups = input_groups(spec, out.k);
  auto check_scales = [&](const TensorView& v, const char* name) {
    const bool shape_ok = (v.rank == 2 && v.rows() == out.n && v.cols() == groups) ||
                          (v.rank == 1 && groups == 1 && v.shape[0] == out.n);
    LOWBIT_CHECK(v.data && v.dtype == DType::f32 && shape_ok, name, ": expected f32 [", out.n, " x ", groups,
                 "] (ceil(K / group_size) = ceil(", out.k, " / ", spec.group_size, ")), got ", v.describe());
  };
  check_scales(scales, "scales");
  if (layout.zero_point) {
    check_scales(mins, "mins");
  } else {
    LOWBIT_CHECK(!mins.data, "mins: expected empty (no zero point: ",
                 spec.bits == 8 ? "8-bit weights are symmetric" : "spec.zero_point is false", "), got ",
                 mins.describe());
  }
  const PackedWeightSizes sizes = packed_weight_sizes(spec, out.n, out.k);
  LOWBIT_CHECK(out.codes.data && out.codes.numel() == sizes.code_bytes, "out.codes: expected ", sizes.code_bytes,
               " bytes (packed_weight_sizes), got ", out.codes.describe());
  LOWBIT_CHECK(out.scales.data && out.scales.numel() == sizes.scale_count && out.scales.dtype == spec.act_dtype,
               "out.scales: expected ", sizes.scale_count, " ", dtype_name(spec.act_dtype), ", got ",
               out.scales.describe());
  LOWBIT_CHECK(sizes.min_count == 0 ? !out.mins.data
                                    : (out.mins.data && out.mins.numel() == sizes.min_count &&
                                       out.mins.dtype == spec.act_dtype),
               "out.mins: expected ", sizes.min_count, " ", dtype_name(spec.act_dtype), ", got ", out.mins.describe());
  if (spec.act_dtype == DType::f16) {
    pack_typed<formats::Half>(codes, scales, mins, out, layout);
  } else {
    pack_typed<formats::BFloat16>(codes, scales, mins, out, layout);
  }
}

void weight_only_gemm(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out) {
  if (w.spec.act_dtype == DType::f16) {
    gemm_typed<formats::Half>(x, w, bias, out);
  } else {
    gemm_typed<formats::BFloat16>(x, w, bias, out);
  }
}

}  // namespace cpu
}  // namespace lowbit
