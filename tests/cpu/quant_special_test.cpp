// Special cases of the CPU path: the seed's baseline equals the reference bit for bit,
// and all-zero domains give code 0 and exactly +0 back (never NaN).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/host_quant.h"
#include "common/inputs.h"
#include "common/random.h"
#include "common/specs.h"
#include "common/storage.h"
#include "cpu/quant_baseline.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

const QuantSpec kInt8Channel{QuantScheme::int8_symmetric, Granularity::per_channel, 0};

TEST(SeedBaseline, EqualsReferencePerChannelInt8) {
  LOWBIT_TEST_RNG(rng);
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1}, {3, 3}, {31, 33}, {33, 31}, {1000, 100}, {7, 1031}, {257, 130}};
  for (const auto& [rows, cols] : shapes) {
    for (const Fill fill : {Fill::zeros, Fill::constant, Fill::ties}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " fill " + fill_name(fill));
      std::vector<float> x = test_matrix(rng, fill, QuantScheme::int8_symmetric, rows, cols, cols);
      std::vector<float> base_scales(static_cast<std::size_t>(cols), float_poison());
      std::vector<std::int8_t> base_codes(x.size(), static_cast<std::int8_t>(kCodePoison));
      std::vector<float> base_out(x.size(), float_poison());
      cpu::baseline::compute_scales(x.data(), rows, cols, base_scales.data());
      cpu::baseline::quantize(x.data(), base_scales.data(), base_codes.data(), rows, cols);
      cpu::baseline::dequantize(base_codes.data(), base_scales.data(), base_out.data(), rows, cols);

      HostQuantized ref(kInt8Channel, rows, cols);
      std::vector<float> ref_out(x.size(), float_poison());
      quantize(TensorView::matrix(x.data(), DType::f32, Device::cpu, rows, cols), kInt8Channel, ref.view(), Workspace{},
               nullptr);
      dequantize(ref.view(), kInt8Channel, TensorView::matrix(ref_out.data(), DType::f32, Device::cpu, rows, cols),
                 nullptr);
      EXPECT_TRUE(bitwise_equal(base_scales.data(), ref.scales.data(), base_scales.size(), DType::f32, cols, "scales"));
      EXPECT_TRUE(bitwise_equal(base_codes.data(), ref.codes.data(), base_codes.size(), DType::i8, cols, "codes"));
      EXPECT_TRUE(bitwise_equal(base_out.data(), ref_out.data(), base_out.size(), DType::f32, cols, "dequantized"));
    }
  }
}

// Quantizes x (f32, rows x cols) with spec and dequantizes it to every output dtype.
struct RoundTrip {
  HostQuantized q;
  std::vector<std::vector<std::uint8_t>> out;  // one per kFloatDTypes entry
  RoundTrip(std::vector<float>& x, const QuantSpec& spec, std::int64_t rows, std::int64_t cols) : q(spec, rows, cols) {
    quantize(TensorView::matrix(x.data(), DType::f32, Device::cpu, rows, cols), spec, q.view(), Workspace{}, nullptr);
    for (const DType dtype : kFloatDTypes) {
      out.emplace_back(static_cast<std::size_t>(rows * cols) * dtype_size(dtype), kFloatPoison);
      dequantize(q.view(), spec, TensorView::matrix(out.back().data(), dtype, Device::cpu, rows, cols), nullptr);
    }
  }
  // Code 0 and exactly +0 (all bits zero) in every output dtype.
  ::testing::AssertionResult zero_at(std::int64_t r, std::int64_t c) const {
    if (q.code(r, c) != 0) return ::testing::AssertionFailure() << "code " << q.code(r, c);
    for (std::size_t k = 0; k < out.size(); ++k) {
      const std::uint32_t bits = read_bits(out[k].data(), static_cast<std::size_t>(r * q.cols + c), kFloatDTypes[k]);
      if (bits != 0) {
        return ::testing::AssertionFailure() << dtype_name(kFloatDTypes[k]) << " value " << bits_value(kFloatDTypes[k], bits)
                                             << " (bits 0x" << std::hex << bits << ")";
      }
    }
    return ::testing::AssertionSuccess();
  }
};

TEST(ZeroDomains, ZeroColumnGivesCodeZeroAndExactZero) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t rows = 40, cols = 9, zero_col = 4;
  std::vector<float> x = normal_matrix(rng, rows, cols, cols, Fill::constant);
  for (std::int64_t r = 0; r < rows; ++r) x[r * cols + zero_col] = (r % 3) ? 0.0f : -0.0f;
  for (const QuantScheme scheme : kAllSchemes) {
    const QuantSpec spec{scheme, Granularity::per_channel, 0};
    SCOPED_TRACE(spec_name(spec));
    RoundTrip rt(x, spec, rows, cols);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(rt.q.scales[zero_col]), 0u) << "scale " << rt.q.scales[zero_col];
    if (has_mins(spec)) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(rt.q.mins[zero_col]), 0u) << "min " << rt.q.mins[zero_col];
    }
    for (std::int64_t r = 0; r < rows; ++r) EXPECT_TRUE(rt.zero_at(r, zero_col)) << "row " << r;
  }
}

TEST(ZeroDomains, AllZeroInputGivesCodeZeroAndExactZeroEverywhere) {
  const std::int64_t rows = 5, cols = 70;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 2) ? -0.0f : 0.0f;
  for (const QuantSpec& spec : all_specs()) {
    SCOPED_TRACE(spec_name(spec));
    RoundTrip rt(x, spec, rows, cols);
    for (std::size_t i = 0; i < rt.q.scales.size(); ++i) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(rt.q.scales[i]), 0u) << "scale " << i;
      if (has_mins(spec)) {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(rt.q.mins[i]), 0u) << "min " << i;
      }
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) ASSERT_TRUE(rt.zero_at(r, c)) << "row " << r << ", column " << c;
    }
  }
}

}  // namespace
}  // namespace lowbit::test
