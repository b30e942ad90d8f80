// The seed's four GPU kernels against the seed's CPU baseline, bit for bit, on fresh
// random fp32 matrices; outputs poisoned first and guarded on both sides.
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/gpu.h"
#include "common/inputs.h"
#include "common/poison.h"
#include "common/random.h"
#include "cpu/quant_baseline.h"
#include "cuda/quant/baselines.h"

namespace lowbit::test {
namespace {

class SeedVariants : public GpuTest {};

TEST_F(SeedVariants, FourVariantsInTheSeedsOrder) {
  const auto variants = cuda::seed::variants();
  ASSERT_EQ(variants.size(), 4u);
  const char* names[] = {"naive", "tiled", "coarsened", "vectorized"};
  for (std::size_t i = 0; i < variants.size(); ++i) {
    EXPECT_STREQ(variants[i].name, names[i]);
    EXPECT_NE(variants[i].quantize, nullptr);
    EXPECT_NE(variants[i].dequantize, nullptr);
  }
}

TEST_F(SeedVariants, MatchBaselineExactly) {
  LOWBIT_TEST_RNG(rng);
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1},       {3, 3},     {31, 33},   {33, 31}, {1000, 1000},
                                                          {17, 4099},   {257, 130}, {2, 5},     {1, 4097}, {70000, 3}};
  for (std::size_t s = 0; s < std::size(shapes); ++s) {
    const auto [rows, cols] = shapes[s];
    const Fill fill = static_cast<Fill>(s % 3);
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + ", fill " + fill_name(fill));
    const std::vector<float> x = test_matrix(rng, fill, QuantScheme::int8_symmetric, rows, cols, cols);
    std::vector<float> scales(static_cast<std::size_t>(cols));
    std::vector<std::int8_t> ref_codes(x.size());
    std::vector<float> ref_out(x.size());
    cpu::baseline::compute_scales(x.data(), rows, cols, scales.data());
    cpu::baseline::quantize(x.data(), scales.data(), ref_codes.data(), rows, cols);
    cpu::baseline::dequantize(ref_codes.data(), scales.data(), ref_out.data(), rows, cols);

    GuardedBuffer x_dev(x.size() * 4), scales_dev(scales.size() * 4), codes(x.size()), out(x.size() * 4);
    x_dev.poison(0);
    scales_dev.poison(0);
    x_dev.upload(x.data(), x.size() * 4);
    scales_dev.upload(scales.data(), scales.size() * 4);
    for (const cuda::seed::Variant& v : cuda::seed::variants()) {
      SCOPED_TRACE(v.name);
      codes.poison(kCodePoison);
      out.poison(kFloatPoison);
      v.quantize(static_cast<const float*>(x_dev.data()), static_cast<const float*>(scales_dev.data()),
                 static_cast<std::int8_t*>(codes.data()), rows, cols, nullptr);
      LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      const auto got_codes = codes.download_bytes();
      ASSERT_TRUE(bitwise_equal(got_codes.data(), ref_codes.data(), x.size(), DType::i8, cols, "codes"));
      ASSERT_TRUE(codes.guards_intact("codes"));
      // Dequantize the baseline's codes, so that this checks dequantize alone.
      codes.upload(ref_codes.data(), ref_codes.size());
      v.dequantize(static_cast<const std::int8_t*>(codes.data()), static_cast<const float*>(scales_dev.data()),
                   static_cast<float*>(out.data()), rows, cols, nullptr);
      LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      const auto got_out = out.download_bytes();
      ASSERT_TRUE(bitwise_equal(got_out.data(), ref_out.data(), x.size(), DType::f32, cols, "dequantized"));
      ASSERT_TRUE(out.guards_intact("out"));
    }
  }
}

}  // namespace
}  // namespace lowbit::test
