// The seed's four GPU kernels against the seed's CPU baseline, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "common/gpu.h"
#include "common/random.h"
#include "cpu/kvquant_baseline.h"
#include "cuda/quant/seed_variants.h"

namespace lowbit::test {
namespace {

class SeedVariants : public GpuTest {};

TEST_F(SeedVariants, MatchBaselineExactly) {
  LOWBIT_TEST_RNG(rng);
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1},     {3, 3},     {31, 33},  {33, 31},
                                                          {1000, 1000}, {17, 4099}, {257, 130}, {2, 5}};
  for (const auto& [rows, cols] : shapes) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    const std::vector<float> x = random_matrix(rng, rows, cols);
    std::vector<float> scales(static_cast<std::size_t>(cols));
    std::vector<std::int8_t> ref_codes(x.size());
    std::vector<float> ref_out(x.size());
    cpu::baseline::compute_scales(x.data(), rows, cols, scales.data());
    cpu::baseline::quantize(x.data(), scales.data(), ref_codes.data(), rows, cols);
    cpu::baseline::dequantize(ref_codes.data(), scales.data(), ref_out.data(), rows, cols);

    const cuda::DeviceBuffer x_dev = upload(x), scales_dev = upload(scales);
    cuda::DeviceBuffer codes(x.size()), out(x.size() * 4);
    for (const cuda::seed::Variant& v : cuda::seed::variants()) {
      SCOPED_TRACE(v.name);
      poison(codes, 0x5a);
      poison(out, 0xff);
      v.quantize(x_dev.as<float>(), scales_dev.as<float>(), codes.as<std::int8_t>(), rows, cols, nullptr);
      v.dequantize(codes.as<std::int8_t>(), scales_dev.as<float>(), out.as<float>(), rows, cols, nullptr);
      LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(download<std::int8_t>(codes.data(), x.size()), ref_codes);
      const auto got = download<float>(out.data(), x.size());
      EXPECT_EQ(std::memcmp(got.data(), ref_out.data(), x.size() * 4), 0);
    }
  }
}

}  // namespace
}  // namespace lowbit::test
