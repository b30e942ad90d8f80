// Bad arguments that only the GPU path can see: host pointers in cuda views (the
// workspace's too), workspaces that are missing or too small, mixed devices.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/gpu_quant.h"
#include "common/specs.h"
#include "common/storage.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

class GpuBadInput : public GpuTest {};

constexpr std::int64_t kRows = 64, kCols = 32;
const QuantSpec kInt8Channel{QuantScheme::int8_symmetric, Granularity::per_channel, 0};
const QuantSpec kInt4Token{QuantScheme::int4_asymmetric, Granularity::per_token, 0};

std::vector<std::uint8_t> ones() { return to_storage(std::vector<float>(kRows * kCols, 1.0f), DType::f32); }

TEST_F(GpuBadInput, HostPointerInCudaViewIsNamed) {
  for (const QuantSpec& spec : {kInt8Channel, kInt4Token}) {
    SCOPED_TRACE(spec_name(spec));
    DeviceQuantized g(ones(), DType::f32, spec, kRows, kCols);
    std::vector<float> host(kRows * kCols, 1.0f);
    std::vector<std::uint8_t> host_bytes(kRows * kCols);
    TensorView x = g.xv;
    x.data = host.data();
    EXPECT_LOWBIT_ERROR(quantize(x, spec, g.q, g.ws, nullptr), "x: the view says cuda but");
    EXPECT_LOWBIT_ERROR(compute_scales(x, spec, g.q, g.ws, nullptr), "x: the view says cuda but");
    EXPECT_LOWBIT_ERROR(quantize_with_scales(x, spec, g.q, nullptr), "x: the view says cuda but");
    QuantizedView q = g.q;
    q.codes.data = host_bytes.data();
    EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, q, g.ws, nullptr), "codes: the view says cuda but");
    EXPECT_LOWBIT_ERROR(dequantize(q, spec, g.xv, nullptr), "codes: the view says cuda but");
    q = g.q;
    q.scales.data = host.data();
    EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, q, g.ws, nullptr), "scales: the view says cuda but");
    if (has_mins(spec)) {
      q = g.q;
      q.mins.data = host.data() + 100;
      EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, q, g.ws, nullptr), "mins: the view says cuda but");
    }
    std::vector<char> host_workspace(g.ws.bytes);
    EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, Workspace{host_workspace.data(), host_workspace.size()}, nullptr),
                        "workspace: the view says cuda but");
    EXPECT_LOWBIT_ERROR(compute_scales(g.xv, spec, g.q, Workspace{host_workspace.data(), host_workspace.size()}, nullptr),
                        "workspace: the view says cuda but");
    quantize(g.xv, spec, g.q, g.ws, nullptr);
    TensorView out = TensorView::matrix(host.data(), DType::f32, Device::cuda, kRows, kCols);
    EXPECT_LOWBIT_ERROR(dequantize(g.q, spec, out, nullptr), "out: the view says cuda but");
  }
}

TEST_F(GpuBadInput, WorkspaceMissingOrTooSmall) {
  for (const QuantSpec& spec : {kInt8Channel, kInt4Token}) {
    SCOPED_TRACE(spec_name(spec));
    DeviceQuantized g(ones(), DType::f32, spec, kRows, kCols);
    ASSERT_GT(g.ws.bytes, 0u);
    Workspace small = g.ws;
    small.bytes -= 1;
    EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, small, nullptr), "workspace: expected at least");
    EXPECT_LOWBIT_ERROR(compute_scales(g.xv, spec, g.q, small, nullptr), "workspace: expected at least");
    EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, Workspace{}, nullptr), "workspace: expected at least");
    EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, Workspace{nullptr, g.ws.bytes}, nullptr), "workspace: data pointer is null");
    EXPECT_LOWBIT_ERROR(check_quantize_status(Workspace{}, nullptr), "workspace: data pointer is null");
    EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr));
  }
}

TEST_F(GpuBadInput, MixedDevicesAreNamed) {
  DeviceQuantized g(ones(), DType::f32, kInt8Channel, kRows, kCols);
  QuantizedView q = g.q;
  q.scales.device = Device::cpu;
  EXPECT_LOWBIT_ERROR(quantize(g.xv, kInt8Channel, q, g.ws, nullptr), "scales: on cpu but the input is on cuda");
  q = g.q;
  q.codes.device = Device::cpu;
  EXPECT_LOWBIT_ERROR(quantize(g.xv, kInt8Channel, q, g.ws, nullptr), "codes: on cpu but the input is on cuda");
}

}  // namespace
}  // namespace lowbit::test
