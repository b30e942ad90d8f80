// Ours' kernel 1 on Hopper's wgmma (cuda/qattention/qkv_fused_wgmma.cu): Q|K|V = X
// [Wq|Wk|Wv]^T + bias against the CPU projections (FP64 over the same f16-rounded
// decoded weights) and against the mma.sync kernel 1, for every block format, L 1, 63,
// 65, 257, 1000 (partial 256-row activation tiles), Q|K|V widths that leave a block's
// second warpgroup empty and blocks that straddle Wq / Wk, GQA and MHA, head_dim 64 and
// 128, biases or none, d_model from 1 to 9 K steps of 64 (past the 5-stage ring). The
// API takes d_model only as a multiple of 64, the kernel's K step, so no d_model leaves
// a partial step. Fresh random inputs; the workspace poisoned with NaN bytes first, its
// tail past Q|K|V and its guards checked. Skipped on GPUs other than compute capability
// 9.0; on one, a build without the kernel's sm_90a image fails the suite. Bad kernel-1
// requests: AttentionGpu.BadDeviceInput (quantized_attention_gpu_test.cpp).
//
// Tolerances, per element with S = sum_k |x_k w_k| + |b| (u = 2^-11, f16's unit roundoff):
// both kernels multiply by exactly the reference's weights and sum in f32, then round
// once to f16, so
//   vs the CPU:      |got - ref| <= u |ref| + 2^-17 S
//   wgmma vs mma:    |a - b| <= u (|a| + |b|) + 2^-16 S
// 2^-17 S stands for the f32 sums (d_model <= 576 terms here: worst case 576 x 2^-24 S
// < 2^-14 S, typical sqrt(576) x 2^-24 S < 2^-19 S) while a single wrong weight (|x w| ~
// S / d_model >= 2^-10 S) or a wrong block scale fails it.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/attention_inputs.h"
#include "common/device_attention.h"
#include "common/gpu.h"
#include "common/poison.h"
#include "common/random.h"
#include "core/device_buffer.h"
#include "cpu/quantized_attention.h"
#include "cuda/qattention/qattention_cuda.h"
#include "lowbit/cuda_check.h"
#include "lowbit/quantized_attention.h"

namespace lowbit::test {
namespace {

namespace qa = cuda::attention;

constexpr double kU = 1.0 / 2048.0;

class QkvWgmmaGpu : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (qa::qkv_wgmma_available()) return;
    int device = 0, major = 0, minor = 0;
    LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    // On a Hopper GPU the kernel must run (the project builds 90a for it).
    ASSERT_FALSE(major == 9 && minor == 0) << "a compute capability 9.0 GPU, but the wgmma kernel 1 is not "
                                              "available: is CMAKE_CUDA_ARCHITECTURES missing 90a?";
    GTEST_SKIP() << "the wgmma kernel 1 needs a compute capability 9.0 GPU (this one is " << major << "." << minor
                 << ")";
  }
};

// The CPU's Q|K|V [L x cols] and S per element (see the tolerances above).
struct QkvReference {
  std::vector<double> qkv, s;
};

QkvReference reference(HostAttention& h) {
  const AttentionConfig& c = h.config;
  const cpu::AttentionProjections p = cpu::attention_projections(h.x_view(), h.weights(), c, c.seq_len, c.seq_len);
  const std::int64_t nq = c.heads * c.head_dim, nkv = c.kv_heads * c.head_dim, cols = nq + 2 * nkv;
  const std::int64_t l = c.seq_len, k = c.d_model;
  std::vector<double> w;  // decoded Wq | Wk | Wv, [cols x d_model]
  for (auto* hw : {&h.wq, &h.wk, &h.wv}) {
    const std::vector<double> part = cpu::decoded_weight(hw->view(), c.format, hw->rows, k);
    w.insert(w.end(), part.begin(), part.end());
  }
  std::vector<double> bias(static_cast<std::size_t>(cols), 0.0);
  if (!h.bq.empty()) {
    std::int64_t at = 0;
    for (auto* b : {&h.bq, &h.bk, &h.bv}) {
      for (formats::Half v : *b) bias[static_cast<std::size_t>(at++)] = formats::half_to_float(v);
    }
  }
  std::vector<double> x(static_cast<std::size_t>(l * k));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::abs(formats::half_to_float(h.x[i]));
  QkvReference r;
  r.qkv.resize(static_cast<std::size_t>(l * cols));
  r.s.resize(r.qkv.size());
  for (std::int64_t i = 0; i < l; ++i) {
    for (std::int64_t n = 0; n < cols; ++n) {
      const std::size_t at = static_cast<std::size_t>(i * cols + n);
      r.qkv[at] = n < nq ? p.q[i * nq + n] : n < nq + nkv ? p.k[i * nkv + n - nq] : p.v[i * nkv + n - nq - nkv];
      double s = std::abs(bias[static_cast<std::size_t>(n)]);
      for (std::int64_t j = 0; j < k; ++j) s += x[i * k + j] * std::abs(w[n * k + j]);
      r.s[at] = s;
    }
  }
  return r;
}

// Kernel 1 alone (`kernel`) into a NaN-poisoned, guarded workspace: Q|K|V as floats;
// expects the workspace's padding past Q|K|V untouched.
std::vector<float> run_kernel1(DeviceAttention& d, const AttentionConfig& c, qa::QkvKernel kernel) {
  const qa::WorkspaceLayout layout = qa::workspace_layout(c, AttentionVariant::fused_two_kernel);
  GuardedBuffer ws(layout.total);
  ws.poison(kFloatPoison);
  qa::run_qkv_kernel(d.x, d.w, c, Workspace{ws.data(), layout.total}, nullptr, kernel);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<std::uint8_t> bytes = ws.download_bytes();
  EXPECT_TRUE(ws.guards_intact("workspace"));
  EXPECT_TRUE(std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(layout.qkv + layout.qkv_bytes), bytes.end(),
                          [](std::uint8_t b) { return b == kFloatPoison; }))
      << "kernel 1 wrote past Q|K|V";
  std::vector<float> out(layout.qkv_bytes / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t at = layout.qkv + 2 * i;
    out[i] = formats::half_to_float(formats::Half{static_cast<std::uint16_t>(bytes[at] | (bytes[at + 1] << 8))});
  }
  return out;
}

std::string describe(const AttentionConfig& c, bool bias) {
  return std::string(block_format_name(c.format)) + " L " + std::to_string(c.seq_len) + " d_model " +
         std::to_string(c.d_model) + " H " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " hd " +
         std::to_string(c.head_dim) + (bias ? " bias" : "");
}

void check_case(Rng& rng, const AttentionConfig& c, bool bias) {
  SCOPED_TRACE(describe(c, bias));
  HostAttention h(rng, c, bias);
  const QkvReference ref = reference(h);
  DeviceAttention d(h);
  const std::vector<float> wgmma = run_kernel1(d, c, qa::QkvKernel::wgmma);
  const std::vector<float> mma = run_kernel1(d, c, qa::QkvKernel::mma);
  ASSERT_EQ(wgmma.size(), ref.qkv.size());
  const std::int64_t cols = attention_qkv_cols(c);
  std::size_t bad_ref = 0, bad_mma = 0, first_ref = 0, first_mma = 0;
  for (std::size_t i = 0; i < ref.qkv.size(); ++i) {
    const double a = wgmma[i], b = mma[i];
    if (!(std::abs(a - ref.qkv[i]) <= kU * std::abs(ref.qkv[i]) + std::ldexp(ref.s[i], -17))) {
      if (bad_ref++ == 0) first_ref = i;
    }
    if (!(std::abs(a - b) <= kU * (std::abs(a) + std::abs(b)) + std::ldexp(ref.s[i], -16))) {
      if (bad_mma++ == 0) first_mma = i;
    }
  }
  EXPECT_EQ(bad_ref, 0u) << bad_ref << " of " << wgmma.size() << " off the CPU; first at row " << first_ref / cols
                         << ", column " << first_ref % cols << ": got " << wgmma[first_ref] << ", reference "
                         << ref.qkv[first_ref] << " (S " << ref.s[first_ref] << ")";
  EXPECT_EQ(bad_mma, 0u) << bad_mma << " of " << wgmma.size() << " off the mma.sync kernel; first at row "
                         << first_mma / cols << ", column " << first_mma % cols << ": wgmma " << wgmma[first_mma]
                         << ", mma " << mma[first_mma];
}

TEST_F(QkvWgmmaGpu, MatchesCpuAndMmaKernel) {
  LOWBIT_TEST_RNG(rng);
  for (BlockFormat f : {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4}) {
    for (std::int64_t l : sanitizer_subset<std::int64_t>({1, 63, 65, 257, 1000}, {0, 3})) {
      check_case(rng, {l, 576, 8, 2, 64, true, f}, true);    // GQA 4: 768 columns (6 blocks), 9 K steps
      check_case(rng, {l, 128, 3, 1, 64, true, f}, false);   // 320 columns: a block straddles Wq / Wk, a half block
      check_case(rng, {l, 320, 2, 2, 128, true, f}, true);   // MHA head_dim 128, 5 K steps (one ring)
    }
    check_case(rng, {33, 64, 1, 1, 64, true, f}, true);      // the smallest: one K step, one warpgroup's rows
    check_case(rng, {300, 256, 16, 2, 64, true, f}, false);  // GQA 8
  }
}

// automatic picks the wgmma kernel 1 where it runs: the same bits as naming it, through
// the whole pipeline (kernel 2 included).
TEST_F(QkvWgmmaGpu, AutomaticPicksWgmma) {
  LOWBIT_TEST_RNG(rng);
  const AttentionConfig c{130, 256, 4, 2, 64, true, BlockFormat::nvfp4};
  HostAttention h(rng, c, true);
  DeviceAttention d(h);
  const std::int64_t n = c.heads * c.head_dim;
  core::DeviceBuffer ws(attention_workspace_bytes(c, AttentionVariant::fused_two_kernel));
  std::vector<std::vector<std::uint8_t>> outs;
  for (qa::QkvKernel k : {qa::QkvKernel::automatic, qa::QkvKernel::wgmma}) {
    GuardedBuffer out(static_cast<std::size_t>(c.seq_len * n) * 2);
    out.poison(kFloatPoison);
    qa::run(d.x, d.w, c, AttentionVariant::fused_two_kernel,
            TensorView::matrix(out.data(), DType::f16, Device::cuda, c.seq_len, n), Workspace{ws.data(), ws.bytes()},
            nullptr, k);
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    outs.push_back(out.download_bytes());
    EXPECT_TRUE(out.guards_intact("out"));
  }
  EXPECT_TRUE(outs[0] == outs[1]) << "automatic and wgmma gave different outputs";
}

}  // namespace
}  // namespace lowbit::test
