// All-zero domains on the GPU (zeros of both signs): scale +0 (and min +0), codes 0,
// and exactly +0 back in every output dtype, as on the CPU.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/gpu.h"
#include "common/gpu_quant.h"
#include "common/host_quant.h"
#include "common/inputs.h"
#include "common/random.h"
#include "common/specs.h"
#include "common/storage.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

class ZeroDomains : public GpuTest {};

// x with column `zero_col` and row `zero_row` all zeros of alternating sign.
void check_zeros(const QuantSpec& spec, DType dtype, std::int64_t rows, std::int64_t cols, Rng& rng) {
  const std::int64_t zero_col = cols / 2 + 1, zero_row = rows / 2;
  SCOPED_TRACE(spec_name(spec) + " " + dtype_name(dtype) + " [" + std::to_string(rows) + "x" + std::to_string(cols) + "]");
  std::vector<float> x = normal_matrix(rng, rows, cols, cols, Fill::constant);
  for (std::int64_t r = 0; r < rows; ++r) x[r * cols + zero_col] = (r % 2) ? -0.0f : 0.0f;
  for (std::int64_t c = 0; c < cols; ++c) x[zero_row * cols + c] = (c % 3) ? 0.0f : -0.0f;
  const std::vector<std::uint8_t> storage = to_storage(x, dtype);

  DeviceQuantized g(storage, dtype, spec, rows, cols);
  quantize(g.xv, spec, g.q, g.ws, nullptr);
  HostQuantized got(spec, rows, cols);
  got.codes = download<std::uint8_t>(g.codes.data(), got.codes.size());
  got.scales = download<float>(g.scales.data(), got.scales.size());
  if (has_mins(spec)) got.mins = download<float>(g.mins.data(), got.mins.size());

  // Same parameters as the CPU path, bit for bit.
  HostQuantized ref(spec, rows, cols);
  std::vector<std::uint8_t> cpu_x = storage;
  quantize(TensorView::matrix(cpu_x.data(), dtype, Device::cpu, rows, cols), spec, ref.view(), Workspace{}, nullptr);
  ASSERT_TRUE(bitwise_equal(got.scales.data(), ref.scales.data(), ref.scales.size(), DType::f32, ref.layout.scale_cols, "scales"));
  if (has_mins(spec)) {
    ASSERT_TRUE(bitwise_equal(got.mins.data(), ref.mins.data(), ref.mins.size(), DType::f32, ref.layout.scale_cols, "mins"));
  }

  const bool zero_domain_is_column = spec.granularity == Granularity::per_channel;
  for (const DType out_dtype : kFloatDTypes) {
    core::DeviceBuffer out(static_cast<std::size_t>(rows * cols) * dtype_size(out_dtype));
    LOWBIT_CUDA_CHECK(cudaMemset(out.data(), kFloatPoison, out.bytes()));
    dequantize(g.q, spec, TensorView::matrix(out.data(), out_dtype, Device::cuda, rows, cols), nullptr);
    const auto values = download<std::uint8_t>(out.data(), out.bytes());
    const std::int64_t n = zero_domain_is_column ? rows : cols;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t r = zero_domain_is_column ? i : zero_row, c = zero_domain_is_column ? zero_col : i;
      ASSERT_EQ(got.code(r, c), 0) << "row " << r << ", column " << c;
      const std::uint32_t bits = read_bits(values.data(), static_cast<std::size_t>(r * cols + c), out_dtype);
      ASSERT_EQ(bits, 0u) << dtype_name(out_dtype) << " value at row " << r << ", column " << c << ": "
                          << bits_value(out_dtype, bits);
    }
  }
  const std::size_t domain = zero_domain_is_column ? static_cast<std::size_t>(zero_col)
                                                   : static_cast<std::size_t>(zero_row * ref.layout.scale_cols);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(got.scales[domain]), 0u) << "scale of the zero domain: " << got.scales[domain];
  if (has_mins(spec)) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got.mins[domain]), 0u) << "min of the zero domain";
  }
}

TEST_F(ZeroDomains, ZeroColumnAndZeroRow) {
  LOWBIT_TEST_RNG(rng);
  for (const QuantScheme scheme : kAllSchemes) {
    // per_channel: the zero column; per_token and per_group: the zero row (tiled
    // kernel for 64 columns, one block per row for 1000 columns or G = 48).
    for (const QuantSpec spec : {QuantSpec{scheme, Granularity::per_channel, 0}, QuantSpec{scheme, Granularity::per_token, 0},
                                 QuantSpec{scheme, Granularity::per_group, 16}, QuantSpec{scheme, Granularity::per_group, 48}}) {
      for (const DType dtype : kFloatDTypes) {
        for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{500, 64}, {33, 1000}}) {
          check_zeros(spec, dtype, rows, cols, rng);
          if (HasFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lowbit::test
