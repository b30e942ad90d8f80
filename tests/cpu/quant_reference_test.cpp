// The CPU path of the public API (quantize, compute_scales, quantize_with_scales,
// dequantize on Device::cpu views) against the naive quantizer, for every scheme x
// granularity x input dtype x output dtype, on fresh random inputs of awkward shapes
// (and padded row strides), outputs poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/host_quant.h"
#include "common/inputs.h"
#include "common/naive_quant.h"
#include "common/poison.h"
#include "common/random.h"
#include "common/specs.h"
#include "common/storage.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

struct Shape {
  std::int64_t rows, cols, pad;  // pad: spare elements (bytes for codes) at the end of every row
};

std::vector<Shape> reference_shapes() {
  std::vector<Shape> shapes;
  for (std::int64_t rows : {1, 3, 31, 33, 1000}) {
    for (std::int64_t cols : {1, 3, 31, 33, 1000}) shapes.push_back({rows, cols, 0});
  }
  for (const Shape& padded : {Shape{31, 33, 5}, Shape{3, 1000, 3}, Shape{1000, 31, 1}, Shape{33, 1, 2}, Shape{17, 129, 16}}) {
    shapes.push_back(padded);
  }
  return shapes;
}

class QuantReference : public ::testing::TestWithParam<QuantSpec> {};

// x (rows x cols, row stride ld) stored in dtype; `seen` is what the quantizer reads.
void check_case(const QuantSpec& spec, DType dtype, const Shape& shape, const std::vector<float>& master) {
  const std::int64_t rows = shape.rows, cols = shape.cols, ld = cols + shape.pad;
  std::vector<std::uint8_t> storage = to_storage(master, dtype);
  std::vector<float> seen(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) seen[r * cols + c] = read_value(storage.data(), r * ld + c, dtype);
  }
  const std::vector<std::uint8_t> storage_before = storage;
  const NaiveQuantized want = naive_quantize(seen, spec, rows, cols);
  const TensorView x = TensorView::matrix(storage.data(), dtype, Device::cpu, rows, cols, ld);
  const bool int4 = has_mins(spec);

  auto expect_params = [&](const HostQuantized& q, const char* op) {
    ASSERT_EQ(q.scales.size(), want.scales.size());
    ASSERT_TRUE(bitwise_equal(q.scales.data(), want.scales.data(), q.scales.size(), DType::f32, q.layout.scale_cols,
                              std::string(op) + " scales"));
    if (int4) {
      ASSERT_TRUE(bitwise_equal(q.mins.data(), want.mins.data(), q.mins.size(), DType::f32, q.layout.scale_cols,
                                std::string(op) + " mins"));
    }
  };
  auto expect_codes = [&](const HostQuantized& q, const char* op) {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        if (q.code(r, c) != want.codes[r * cols + c]) {
          FAIL() << op << ": code at row " << r << ", column " << c << " is " << q.code(r, c) << ", expected "
                 << want.codes[r * cols + c] << " (x = " << seen[r * cols + c] << ")";
        }
      }
      // Nothing written past the end of the row.
      const std::size_t row_end = static_cast<std::size_t>(r * q.ldq + q.layout.code_cols);
      ASSERT_TRUE(all_bytes_are(q.codes.data() + row_end, static_cast<std::size_t>(q.ldq - q.layout.code_cols),
                                kCodePoison, std::string(op) + ": codes padding of row " + std::to_string(r)));
    }
  };

  // quantize(): scales and codes from x.
  HostQuantized q(spec, rows, cols, shape.pad);
  quantize(x, spec, q.view(), Workspace{}, nullptr);
  expect_params(q, "quantize");
  if (::testing::Test::HasFatalFailure()) return;
  expect_codes(q, "quantize");
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_EQ(storage, storage_before) << "quantize modified its input";

  // compute_scales() alone: the same parameters, codes untouched.
  HostQuantized params(spec, rows, cols, shape.pad);
  compute_scales(x, spec, params.view(), Workspace{}, nullptr);
  expect_params(params, "compute_scales");
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_TRUE(all_bytes_are(params.codes.data(), params.codes.size(), kCodePoison, "compute_scales: codes"));

  // quantize_with_scales() alone, with the naive parameters.
  HostQuantized given(spec, rows, cols, shape.pad);
  given.scales = want.scales;
  if (int4) given.mins = want.mins;
  quantize_with_scales(x, spec, given.view(), nullptr);
  expect_codes(given, "quantize_with_scales");
  if (::testing::Test::HasFatalFailure()) return;

  // dequantize() into each output dtype, poisoned, with padded rows: exactly the
  // formats layer's decode of each code, rounded to the output dtype.
  for (const DType out_dtype : kFloatDTypes) {
    SCOPED_TRACE(std::string("dequantize to ") + dtype_name(out_dtype));
    std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * ld) * dtype_size(out_dtype), kFloatPoison);
    dequantize(q.view(), spec, TensorView::matrix(out.data(), out_dtype, Device::cpu, rows, cols, ld), nullptr);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * cols + c);
        const std::uint32_t got = read_bits(out.data(), static_cast<std::size_t>(r * ld + c), out_dtype);
        const std::uint32_t expected = storage_bits(out_dtype, want.decoded[i]);
        if (got != expected) {
          FAIL() << "row " << r << ", column " << c << ": got " << bits_value(out_dtype, got) << ", expected "
                 << bits_value(out_dtype, expected) << " (code " << want.codes[i] << ")";
        }
        if (out_dtype == DType::f32) {
          // The error bound of the format: half a step, plus the roundings of the
          // encode and the decode (a few ulps of x and of the minimum).
          const auto d = static_cast<std::size_t>(naive_domain(spec, cols, r, c));
          const double step = want.scales[d];
          const double offset = int4 ? std::fabs(want.mins[d]) : 0.0;
          const double error = std::fabs(static_cast<double>(want.decoded[i]) - seen[i]);
          const double bound = 0.5 * step * (1 + 1e-5) + std::ldexp(std::fabs(seen[i]) + offset, -22);
          if (!(error <= bound)) {
            FAIL() << "row " << r << ", column " << c << ": |x - dequant(x)| = " << error << " exceeds " << bound
                   << " (x = " << seen[i] << ", step " << step << ")";
          }
        }
      }
      const std::size_t pad_bytes = static_cast<std::size_t>(ld - cols) * dtype_size(out_dtype);
      ASSERT_TRUE(all_bytes_are(out.data() + static_cast<std::size_t>(r * ld + cols) * dtype_size(out_dtype), pad_bytes,
                                kFloatPoison, "dequantize: padding of row " + std::to_string(r)));
    }
  }
}

TEST_P(QuantReference, MatchesNaiveQuantizer) {
  const QuantSpec spec = GetParam();
  LOWBIT_TEST_RNG(rng);
  const std::vector<Shape> shapes = reference_shapes();
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    const Shape& shape = shapes[s];
    const Fill fill = static_cast<Fill>(s % 3);
    const std::vector<float> master = test_matrix(rng, fill, spec.scheme, shape.rows, shape.cols, shape.cols + shape.pad);
    for (const DType dtype : kFloatDTypes) {
      SCOPED_TRACE(spec_name(spec) + ", x " + dtype_name(dtype) + "[" + std::to_string(shape.rows) + "x" +
                   std::to_string(shape.cols) + "] row pad " + std::to_string(shape.pad) + ", fill " + fill_name(fill));
      check_case(spec, dtype, shape, master);
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSpecs, QuantReference, ::testing::ValuesIn(all_specs()),
                         [](const ::testing::TestParamInfo<QuantSpec>& info) { return spec_name(info.param); });

}  // namespace
}  // namespace lowbit::test
