// The CPU path of the public API against the naive quantizer, on fresh random inputs
// of awkward shapes, every scheme x granularity x dtype, outputs poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/naive_quant.h"
#include "common/random.h"
#include "cpu/kvquant_baseline.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

constexpr std::uint8_t kCodePoison = 0x5a;

struct Shape {
  std::int64_t rows, cols, pad;  // pad: extra elements at the end of every row
};

void check_cpu_path(const QuantSpec& spec, DType dtype, const Shape& shape, std::mt19937_64& rng) {
  SCOPED_TRACE(spec_name(spec) + " " + dtype_name(dtype) + " " + std::to_string(shape.rows) + "x" +
               std::to_string(shape.cols) + " pad " + std::to_string(shape.pad));
  const std::int64_t rows = shape.rows, cols = shape.cols, ld = cols + shape.pad;
  const std::vector<float> master = random_matrix(rng, rows, cols, ld);
  const std::vector<std::uint8_t> storage = to_storage(master, dtype);
  std::vector<float> seen(static_cast<std::size_t>(rows * cols));  // the values the quantizer sees
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) seen[r * cols + c] = storage_value(storage.data(), r * ld + c, dtype);
  }
  const NaiveQuantized expected = naive_quantize(seen, spec, rows, cols);

  const QuantLayout layout = quant_layout(spec, rows, cols);
  const bool int4 = spec.scheme == QuantScheme::int4_asymmetric;
  const std::int64_t ldq = layout.code_cols + shape.pad;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * ldq), kCodePoison);
  std::vector<float> scales(static_cast<std::size_t>(layout.scale_count()), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> mins(int4 ? scales.size() : 0, std::numeric_limits<float>::quiet_NaN());
  const TensorView x = TensorView::matrix(const_cast<std::uint8_t*>(storage.data()), dtype, Device::cpu, rows, cols, ld);
  const QuantizedView q{
      TensorView::matrix(codes.data(), int4 ? DType::u8 : DType::i8, Device::cpu, rows, layout.code_cols, ldq),
      TensorView::vector(scales.data(), DType::f32, Device::cpu, layout.scale_count()),
      int4 ? TensorView::vector(mins.data(), DType::f32, Device::cpu, layout.scale_count()) : TensorView{}};
  quantize(x, spec, q, Workspace{}, nullptr);

  for (std::size_t i = 0; i < scales.size(); ++i) {
    ASSERT_EQ(std::memcmp(&scales[i], &expected.scales[i], 4), 0) << "scale " << i << ": " << scales[i] << " vs " << expected.scales[i];
    if (int4) {
      ASSERT_EQ(std::memcmp(&mins[i], &expected.mins[i], 4), 0) << "min " << i;
    }
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(code_at(codes.data(), ldq, r, c, spec.scheme), expected.codes[r * cols + c]) << "row " << r << " col " << c;
    }
    // Nothing written past the end of a row.
    for (std::int64_t b = (int4 ? (cols + 1) / 2 : cols); b < ldq; ++b) ASSERT_EQ(codes[r * ldq + b], kCodePoison);
  }

  // Dequantize into a poisoned, padded output of the same dtype.
  std::vector<float> poison(static_cast<std::size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
  std::vector<std::uint8_t> out = to_storage(poison, dtype);
  dequantize(q, spec, TensorView::matrix(out.data(), dtype, Device::cpu, rows, cols, ld), nullptr);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float got = storage_value(out.data(), r * ld + c, dtype);
      const float want = round_to(dtype, expected.decoded[r * cols + c]);
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "row " << r << " col " << c << ": " << got << " vs " << want;
      // The error bound the format promises: half a step (plus the output rounding).
      const std::int64_t d = spec.granularity == Granularity::per_channel ? c
                             : spec.granularity == Granularity::per_token ? r
                             : spec.granularity == Granularity::per_group ? r * layout.scale_cols + c / spec.group_size
                                                                          : 0;
      const float step = expected.scales[d];
      const float tolerance = 0.5f * step * 1.0001f + std::fabs(seen[r * cols + c]) * (dtype == DType::f32 ? 0 : 1.0f / 128);
      EXPECT_LE(std::fabs(expected.decoded[r * cols + c] - seen[r * cols + c]), tolerance);
    }
    for (std::int64_t c = cols; c < ld; ++c) ASSERT_TRUE(std::isnan(storage_value(out.data(), r * ld + c, dtype)));
  }

  // compute_scales + quantize_with_scales give the same as quantize.
  std::vector<float> scales2(scales.size()), mins2(mins.size());
  std::vector<std::uint8_t> codes2(codes.size(), kCodePoison);
  const QuantizedView q2{TensorView::matrix(codes2.data(), q.codes.dtype, Device::cpu, rows, layout.code_cols, ldq),
                         TensorView::vector(scales2.data(), DType::f32, Device::cpu, layout.scale_count()),
                         int4 ? TensorView::vector(mins2.data(), DType::f32, Device::cpu, layout.scale_count()) : TensorView{}};
  compute_scales(x, spec, q2, Workspace{}, nullptr);
  quantize_with_scales(x, spec, q2, nullptr);
  EXPECT_EQ(std::memcmp(scales2.data(), scales.data(), scales.size() * 4), 0);
  EXPECT_EQ(codes2, codes);
}

TEST(QuantReference, MatchesNaiveQuantizerEverywhere) {
  LOWBIT_TEST_RNG(rng);
  const Shape shapes[] = {{1, 1, 0}, {3, 3, 0}, {31, 33, 0}, {33, 31, 5}, {1000, 3, 0}, {3, 1000, 0}, {17, 129, 3}};
  for (const QuantSpec& spec : all_specs()) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const Shape& shape : shapes) check_cpu_path(spec, dtype, shape, rng);
    }
  }
}

TEST(QuantReference, SeedBaselineMatchesReference) {
  LOWBIT_TEST_RNG(rng);
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {31, 33}, {1000, 100}, {7, 1031}}) {
    const std::vector<float> x = random_matrix(rng, rows, cols);
    std::vector<float> base_scales(static_cast<std::size_t>(cols)), ref_scales(base_scales.size());
    std::vector<std::int8_t> base_codes(x.size()), ref_codes(x.size());
    std::vector<float> base_out(x.size()), ref_out(x.size());
    cpu::baseline::compute_scales(x.data(), rows, cols, base_scales.data());
    cpu::baseline::quantize(x.data(), base_scales.data(), base_codes.data(), rows, cols);
    cpu::baseline::dequantize(base_codes.data(), base_scales.data(), base_out.data(), rows, cols);

    const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_channel, 0};
    const QuantizedView q{TensorView::matrix(ref_codes.data(), DType::i8, Device::cpu, rows, cols),
                          TensorView::vector(ref_scales.data(), DType::f32, Device::cpu, cols), TensorView{}};
    quantize(TensorView::matrix(const_cast<float*>(x.data()), DType::f32, Device::cpu, rows, cols), spec, q, Workspace{}, nullptr);
    dequantize(q, spec, TensorView::matrix(ref_out.data(), DType::f32, Device::cpu, rows, cols), nullptr);
    EXPECT_EQ(base_scales, ref_scales);
    EXPECT_EQ(base_codes, ref_codes);
    EXPECT_EQ(std::memcmp(base_out.data(), ref_out.data(), x.size() * 4), 0);
  }
}

TEST(QuantReference, ZeroColumnGivesExactZeros) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t rows = 40, cols = 9;
  std::vector<float> x = random_matrix(rng, rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) x[r * cols + 4] = (r % 2) ? 0.0f : -0.0f;
  for (QuantScheme scheme : {QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric}) {
    const QuantSpec spec{scheme, Granularity::per_channel, 0};
    const QuantLayout layout = quant_layout(spec, rows, cols);
    const bool int4 = scheme == QuantScheme::int4_asymmetric;
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * layout.code_cols), kCodePoison);
    std::vector<float> scales(static_cast<std::size_t>(cols)), mins(int4 ? scales.size() : 0), out(x.size(), NAN);
    const QuantizedView q{TensorView::matrix(codes.data(), int4 ? DType::u8 : DType::i8, Device::cpu, rows, layout.code_cols),
                          TensorView::vector(scales.data(), DType::f32, Device::cpu, cols),
                          int4 ? TensorView::vector(mins.data(), DType::f32, Device::cpu, cols) : TensorView{}};
    quantize(TensorView::matrix(x.data(), DType::f32, Device::cpu, rows, cols), spec, q, Workspace{}, nullptr);
    dequantize(q, spec, TensorView::matrix(out.data(), DType::f32, Device::cpu, rows, cols), nullptr);
    EXPECT_EQ(scales[4], 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(code_at(codes.data(), layout.code_cols, r, 4, scheme), 0);
      EXPECT_EQ(out[r * cols + 4], 0.0f);
      EXPECT_FALSE(std::signbit(out[r * cols + 4]));
    }
  }
}

}  // namespace
}  // namespace lowbit::test
