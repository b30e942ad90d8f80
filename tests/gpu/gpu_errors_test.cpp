// GPU-side bad input: NaN/Inf found by the scale pass, host pointers in cuda views,
// too-small workspaces; and zero columns.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/random.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

class GpuErrors : public GpuTest {};

struct GpuQuantized {
  cuda::DeviceBuffer x, codes, scales, mins, workspace;
  TensorView xv;
  QuantizedView q;
  Workspace ws;

  GpuQuantized(const std::vector<float>& host_x, const QuantSpec& spec, std::int64_t rows, std::int64_t cols)
      : x(upload(host_x)) {
    const QuantLayout layout = quant_layout(spec, rows, cols);
    const bool int4 = spec.scheme == QuantScheme::int4_asymmetric;
    codes = cuda::DeviceBuffer(static_cast<std::size_t>(rows * layout.code_cols));
    scales = cuda::DeviceBuffer(static_cast<std::size_t>(layout.scale_count()) * 4);
    mins = cuda::DeviceBuffer(int4 ? scales.bytes() : 0);
    workspace = cuda::DeviceBuffer(quantize_workspace_bytes(spec, rows, cols));
    xv = TensorView::matrix(x.data(), DType::f32, Device::cuda, rows, cols);
    q = QuantizedView{TensorView::matrix(codes.data(), int4 ? DType::u8 : DType::i8, Device::cuda, rows, layout.code_cols),
                      TensorView::vector(scales.data(), DType::f32, Device::cuda, layout.scale_count()),
                      int4 ? TensorView::vector(mins.data(), DType::f32, Device::cuda, layout.scale_count()) : TensorView{}};
    ws = Workspace{workspace.data(), workspace.bytes()};
  }
};

TEST_F(GpuErrors, NonFiniteInputIsReported) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t rows = 300, cols = 700;
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    for (const QuantScheme scheme : {QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric}) {
      for (const QuantSpec spec : {QuantSpec{scheme, Granularity::per_tensor, 0}, QuantSpec{scheme, Granularity::per_channel, 0},
                                   QuantSpec{scheme, Granularity::per_token, 0}, QuantSpec{scheme, Granularity::per_group, 32},
                                   QuantSpec{scheme, Granularity::per_group, 48}}) {
        SCOPED_TRACE(std::string(scheme_name(scheme)) + " " + granularity_name(spec.granularity) + " " + std::to_string(bad));
        std::vector<float> x = random_matrix(rng, rows, cols);
        x[211 * cols + 517] = bad;
        GpuQuantized g(x, spec, rows, cols);
        const char* where = spec.granularity == Granularity::per_channel ? "in column 517"
                            : spec.granularity == Granularity::per_tensor ? "NaN or Inf"
                                                                          : "at row 211, column 517";
        EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, g.ws, nullptr), where);
        // Deferred: no throw at the call, the status says it later.
        EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr, NonFiniteCheck::deferred));
        EXPECT_LOWBIT_ERROR(check_quantize_status(g.ws, nullptr), "NaN or Inf");
        // A clean input afterwards resets the status.
        x[211 * cols + 517] = 1.0f;
        LOWBIT_CUDA_CHECK(cudaMemcpy(g.x.data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr));
      }
    }
  }
}

TEST_F(GpuErrors, HostPointerInCudaViewIsRejected) {
  std::vector<float> host(64 * 32, 1.0f);
  const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_channel, 0};
  GpuQuantized g(host, spec, 64, 32);
  TensorView x = g.xv;
  x.data = host.data();
  EXPECT_LOWBIT_ERROR(quantize(x, spec, g.q, g.ws, nullptr), "x: the view says cuda but");
  QuantizedView q = g.q;
  std::vector<float> host_scales(32);
  q.scales.data = host_scales.data();
  EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, q, g.ws, nullptr), "scales: the view says cuda but");
  std::vector<float> host_out(64 * 32);
  EXPECT_LOWBIT_ERROR(dequantize(g.q, spec, TensorView::matrix(host_out.data(), DType::f32, Device::cuda, 64, 32), nullptr),
                      "out: the view says cuda but");
  std::vector<char> host_workspace(g.ws.bytes);
  EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, Workspace{host_workspace.data(), host_workspace.size()}, nullptr),
                      "workspace: the view says cuda but");
}

TEST_F(GpuErrors, WorkspaceTooSmall) {
  std::vector<float> host(64 * 32, 1.0f);
  const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_channel, 0};
  GpuQuantized g(host, spec, 64, 32);
  Workspace small = g.ws;
  small.bytes -= 4;
  EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, small, nullptr), "workspace: expected at least");
  EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, Workspace{}, nullptr), "workspace: expected at least");
}

TEST_F(GpuErrors, MixedDevicesAreRejected) {
  std::vector<float> host(64 * 32, 1.0f);
  const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_channel, 0};
  GpuQuantized g(host, spec, 64, 32);
  QuantizedView q = g.q;
  q.scales.device = Device::cpu;
  EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, q, g.ws, nullptr), "scales: on cpu but the input is on cuda");
}

TEST_F(GpuErrors, ZeroColumnDequantizesToExactZero) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t rows = 500, cols = 64;
  std::vector<float> x = random_matrix(rng, rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) x[r * cols + 13] = 0.0f;
  for (const QuantScheme scheme : {QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric}) {
    const QuantSpec spec{scheme, Granularity::per_channel, 0};
    GpuQuantized g(x, spec, rows, cols);
    quantize(g.xv, spec, g.q, g.ws, nullptr);
    cuda::DeviceBuffer out(x.size() * 4);
    poison(out, 0xff);
    dequantize(g.q, spec, TensorView::matrix(out.data(), DType::f32, Device::cuda, rows, cols), nullptr);
    const auto values = download<float>(out.data(), x.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(values[r * cols + 13], 0.0f);
      ASSERT_FALSE(std::signbit(values[r * cols + 13]));
    }
  }
}

}  // namespace
}  // namespace lowbit::test
