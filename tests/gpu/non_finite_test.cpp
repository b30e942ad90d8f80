// NaN and Inf in x on the GPU: found by the pass that computes the scales, reported
// as lowbit::Error naming where (row and column for row-local domains, the column for
// per_channel), at once or, with NonFiniteCheck::deferred, by check_quantize_status;
// or, with a sticky NonFiniteStatus, by the first check after any number of calls.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/gpu_quant.h"
#include "common/inputs.h"
#include "common/random.h"
#include "common/specs.h"
#include "common/storage.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

class NonFinite : public GpuTest {};

struct Planted {
  std::int64_t rows, cols, row, col;
};

std::string expected_location(const QuantSpec& spec, const Planted& p) {
  switch (spec.granularity) {
    case Granularity::per_tensor: return "x: contains NaN or Inf";
    case Granularity::per_channel: return "x: contains NaN or Inf in column " + std::to_string(p.col);
    default: return "x: contains NaN or Inf at row " + std::to_string(p.row) + ", column " + std::to_string(p.col);
  }
}

TEST_F(NonFinite, ReportedWithTheirLocation) {
  LOWBIT_TEST_RNG(rng);
  const float bads[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  // 700 columns: per_token takes the one-block-per-row kernel; 300: the tiled one.
  const Planted planted[] = {{300, 700, 211, 517}, {40, 300, 17, 250}, {5, 33, 4, 32}};
  for (const Planted& p : planted) {
    const std::vector<float> clean = normal_matrix(rng, p.rows, p.cols, p.cols, Fill::constant);
    for (const DType dtype : kFloatDTypes) {
      for (const QuantSpec& spec : specs_with_groups({std::begin(kAllSchemes), std::end(kAllSchemes)}, {32, 48})) {
        const std::vector<std::uint8_t> clean_storage = to_storage(clean, dtype);
        DeviceQuantized g(clean_storage, dtype, spec, p.rows, p.cols);
        for (const float bad : bads) {
          SCOPED_TRACE(spec_name(spec) + " " + dtype_name(dtype) + " [" + std::to_string(p.rows) + "x" +
                       std::to_string(p.cols) + "] " + std::to_string(bad));
          std::vector<float> dirty = clean;
          dirty[static_cast<std::size_t>(p.row * p.cols + p.col)] = bad;
          g.set_x(to_storage(dirty, dtype));
          const std::string where = expected_location(spec, p);
          EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, g.ws, nullptr), where);
          EXPECT_LOWBIT_ERROR(compute_scales(g.xv, spec, g.q, g.ws, nullptr), where);
          // Deferred: no throw (and no synchronization) at the call; the status says it.
          EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr, NonFiniteCheck::deferred));
          EXPECT_LOWBIT_ERROR(check_quantize_status(g.ws, nullptr), where);
          EXPECT_NO_THROW(compute_scales(g.xv, spec, g.q, g.ws, nullptr, NonFiniteCheck::deferred));
          EXPECT_LOWBIT_ERROR(check_quantize_status(g.ws, nullptr), where);
          // A clean input afterwards resets the status.
          g.set_x(clean_storage);
          EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr));
          EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr, NonFiniteCheck::deferred));
          EXPECT_NO_THROW(check_quantize_status(g.ws, nullptr));
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The sticky status: nothing reported or synchronized at the call; the first report
// survives later clean calls (on another stream too) and is raised once; results equal
// the workspace-status form's; per_token / per_group need no workspace.
TEST_F(NonFinite, StickyStatusKeepsTheFirstReport) {
  LOWBIT_TEST_RNG(rng);
  const Planted p{40, 300, 17, 250};
  const std::vector<float> clean = normal_matrix(rng, p.rows, p.cols, p.cols, Fill::constant);
  std::vector<float> dirty = clean;
  dirty[static_cast<std::size_t>(p.row * p.cols + p.col)] = std::numeric_limits<float>::quiet_NaN();
  core::DeviceBuffer word(non_finite_status_bytes());
  LOWBIT_CUDA_CHECK(cudaMemset(word.data(), 0, word.bytes()));
  const NonFiniteStatus status{word.data()};
  cudaStream_t other = nullptr;
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  for (const QuantSpec& spec : specs_with_groups({std::begin(kAllSchemes), std::end(kAllSchemes)}, {32})) {
    SCOPED_TRACE(spec_name(spec));
    const std::vector<std::uint8_t> clean_storage = to_storage(clean, DType::f32);
    DeviceQuantized g(clean_storage, DType::f32, spec, p.rows, p.cols);
    const std::size_t bytes = quantize_workspace_bytes_without_status(spec, p.rows, p.cols);
    const bool row_local = spec.granularity == Granularity::per_token || spec.granularity == Granularity::per_group;
    EXPECT_EQ(bytes == 0, row_local);
    const Workspace ws{bytes ? g.ws.data : nullptr, bytes};
    quantize(g.xv, spec, g.q, g.ws, nullptr);
    const std::vector<std::uint8_t> want_codes = download<std::uint8_t>(g.q.codes.data, g.codes.bytes());
    const std::vector<std::uint8_t> want_scales = download<std::uint8_t>(g.q.scales.data, g.scales.bytes());

    g.set_x(to_storage(dirty, DType::f32));
    EXPECT_NO_THROW(quantize(g.xv, spec, g.q, ws, status, nullptr));
    g.set_x(clean_storage);  // cudaMemcpy: after the call above, before the ones below
    // A pageable cudaMemcpy may return before its DMA lands, and `other` (non-blocking)
    // does not wait for the legacy stream.
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_NO_THROW(quantize(g.xv, spec, g.q, ws, status, other));
    EXPECT_NO_THROW(compute_scales(g.xv, spec, g.q, ws, status, other));
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(other));
    EXPECT_EQ(download<std::uint8_t>(g.q.codes.data, g.codes.bytes()), want_codes);
    EXPECT_EQ(download<std::uint8_t>(g.q.scales.data, g.scales.bytes()), want_scales);
    EXPECT_LOWBIT_ERROR(check_quantize_status(status, nullptr),
                        expected_location(spec, p) + " (reported by a quantize since the status was last checked)");
    EXPECT_NO_THROW(check_quantize_status(status, nullptr));  // raised once
    if (HasFailure()) break;
  }
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(other));
}

TEST_F(NonFinite, StickyStatusArgumentsAreChecked) {
  const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_token, 0};
  const std::vector<std::uint8_t> x = to_storage(std::vector<float>(64, 1.0f), DType::f32);
  DeviceQuantized g(x, DType::f32, spec, 4, 16);
  std::vector<char> host(non_finite_status_bytes());
  EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, Workspace{}, NonFiniteStatus{}, nullptr),
                      "status: data pointer is null");
  EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, Workspace{}, NonFiniteStatus{host.data()}, nullptr),
                      "status: the view says cuda but");
  EXPECT_LOWBIT_ERROR(check_quantize_status(NonFiniteStatus{}, nullptr), "status: data pointer is null");
  const QuantSpec channel{QuantScheme::int8_symmetric, Granularity::per_channel, 0};
  DeviceQuantized c(x, DType::f32, channel, 4, 16);
  core::DeviceBuffer word(non_finite_status_bytes());
  LOWBIT_CUDA_CHECK(cudaMemset(word.data(), 0, word.bytes()));
  EXPECT_LOWBIT_ERROR(quantize(c.xv, channel, c.q, Workspace{}, NonFiniteStatus{word.data()}, nullptr),
                      "(see quantize_workspace_bytes_without_status)");
}

}  // namespace
}  // namespace lowbit::test
