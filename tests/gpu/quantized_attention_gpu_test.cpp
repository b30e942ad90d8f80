// Every attention variant on the GPU against the CPU FP64 reference: the three block
// formats, causal and not, odd L (1, 7, 33, 130 and a 300-row case with several
// query and key tiles), GQA (H 8 / Hkv 2, H 3 / Hkv 1) and MHA, head_dim 64 and 128,
// biases, fresh random inputs, outputs poisoned first (NaN), guard bytes checked. Ours
// runs its automatic kernel 1 here (wgmma on Hopper; both kernels 1 by name:
// qkv_wgmma_gpu_test.cpp).
//
// Tolerance, per output element o[i, h, d] (u = 2^-11, f16's unit roundoff). The
// weights are exactly the reference's (both use the f16-rounded decode), so the GPU
// differs only by roundings after the f32 accumulations:
//   - q and k rounded to f16: each score s_ij = scale q.k moves by at most
//     e_ij = 2u scale sum_d |q_d k_d| (plus f32 accumulation over d_model terms,
//     d_model 2^-24 relative, < u/8 here);
//   - a perturbation of the scores by at most E = max_j e_ij moves the softmax by
//     |dp_j| <= 2 E p_j (first order), so o moves by <= 2 E Vmax, Vmax = max |v_jd|
//     over the visible keys;
//   - p rounded to f16 before the P V product (ours), v rounded to f16: <= 2u Vmax;
//   - o rounded to f16: u |o|.
// The bound used is u |o| + 2 Vmax (2 E + 2u) + 1e-6: twice the first-order
// estimate, which covers the second-order terms and the f32 accumulations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/attention_inputs.h"
#include "common/device_attention.h"
#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/poison.h"
#include "common/random.h"
#include "cpu/quantized_attention.h"
#include "core/device_buffer.h"
#include "cuda/qattention/qattention_cuda.h"
#include "lowbit/quantized_attention.h"

namespace lowbit::test {
namespace {

constexpr double kU = 1.0 / 2048.0;

struct Reference {
  std::vector<double> o, tol;
};

Reference reference_with_tolerance(HostAttention& h) {
  const AttentionConfig& c = h.config;
  const cpu::AttentionProjections p = cpu::attention_projections(h.x_view(), h.weights(), c, c.seq_len, c.seq_len);
  Reference r;
  r.o = cpu::attention_core(p, c);
  r.tol.resize(r.o.size());
  const std::int64_t hd = c.head_dim, nq = c.heads * hd, nkv = c.kv_heads * hd, group = c.heads / c.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (std::int64_t i = 0; i < c.seq_len; ++i) {
    for (std::int64_t hh = 0; hh < c.heads; ++hh) {
      const std::int64_t g = hh / group, keys = c.causal ? i + 1 : c.seq_len;
      double e = 0.0, vmax = 0.0;
      for (std::int64_t j = 0; j < keys; ++j) {
        double dot = 0.0;
        for (std::int64_t d = 0; d < hd; ++d) {
          dot += std::abs(p.q[i * nq + hh * hd + d] * p.k[j * nkv + g * hd + d]);
          vmax = std::max(vmax, std::abs(p.v[j * nkv + g * hd + d]));
        }
        e = std::max(e, 2.0 * kU * scale * dot);
      }
      for (std::int64_t d = 0; d < hd; ++d) {
        const std::size_t at = static_cast<std::size_t>(i * nq + hh * hd + d);
        r.tol[at] = kU * std::abs(r.o[at]) + 2.0 * vmax * (2.0 * e + 2.0 * kU) + 1e-6;
      }
    }
  }
  return r;
}

std::string describe(const AttentionConfig& c, AttentionVariant v) {
  return std::string(attention_variant_name(v)) + " " + block_format_name(c.format) + " L " +
         std::to_string(c.seq_len) + " d_model " + std::to_string(c.d_model) + " H " + std::to_string(c.heads) +
         "/" + std::to_string(c.kv_heads) + " hd " + std::to_string(c.head_dim) + (c.causal ? " causal" : "");
}

void check_case(Rng& rng, const AttentionConfig& c, bool bias) {
  HostAttention h(rng, c, bias);
  const Reference ref = reference_with_tolerance(h);
  DeviceAttention d(h);
  const std::int64_t n = c.heads * c.head_dim;
  for (AttentionVariant v : kAttentionVariants) {
    SCOPED_TRACE(describe(c, v));
    GuardedBuffer out(static_cast<std::size_t>(c.seq_len * n) * 2);
    out.poison(kFloatPoison);
    core::DeviceBuffer ws(attention_workspace_bytes(c, v));
    if (ws.bytes()) LOWBIT_CUDA_CHECK(cudaMemset(ws.data(), 0xff, ws.bytes()));  // NaN intermediates if unwritten
    quantized_attention(d.x, d.w, c, v, TensorView::matrix(out.data(), DType::f16, Device::cuda, c.seq_len, n),
                        Workspace{ws.data(), ws.bytes()}, nullptr);
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<formats::Half> got = download<formats::Half>(out.data(), static_cast<std::size_t>(c.seq_len * n));
    std::size_t bad = 0, first = 0;
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double g = formats::half_to_float(got[i]);
      const double err = std::abs(g - ref.o[i]);
      if (!(err <= ref.tol[i])) {
        if (bad++ == 0) first = i;
      }
      if (err == err) worst = std::max(worst, err / ref.tol[i]);
    }
    EXPECT_EQ(bad, 0u) << bad << " of " << got.size() << " outputs off; first at row " << first / n << ", column "
                       << first % n << ": got " << formats::half_to_float(got[first]) << ", reference "
                       << ref.o[first] << ", tolerance " << ref.tol[first] << " (worst error / tolerance " << worst
                       << ")";
    EXPECT_TRUE(out.guards_intact("out"));
  }
}

class AttentionGpu : public GpuTest {};

TEST_F(AttentionGpu, EveryVariantFormatMaskAndOddLength) {
  LOWBIT_TEST_RNG(rng);
  for (BlockFormat f : {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4}) {
    for (bool causal : {false, true}) {
      for (std::int64_t l : sanitizer_subset<std::int64_t>({1, 7, 33, 130}, {1, 3})) {
        check_case(rng, {l, 128, 8, 2, 64, causal, f}, true);    // GQA, head_dim 64
        check_case(rng, {l, 256, 2, 2, 128, causal, f}, false);  // MHA, head_dim 128
      }
    }
  }
}

TEST_F(AttentionGpu, SeveralTilesAndRaggedColumnTiles) {
  LOWBIT_TEST_RNG(rng);
  for (BlockFormat f : {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4}) {
    for (bool causal : sanitizer_subset<bool>({false, true}, {1})) {
      check_case(rng, {300, 512, 4, 4, 128, causal, f}, true);  // 3 query tiles, 5 key tiles, 8 K steps
      check_case(rng, {200, 192, 3, 1, 64, causal, f}, true);   // Q|K|V = 320 columns: 2.5 column tiles
    }
  }
}

TEST_F(AttentionGpu, BadDeviceInput) {
  LOWBIT_TEST_RNG(rng);
  const AttentionConfig c{8, 64, 2, 1, 64, true, BlockFormat::nf4};
  HostAttention h(rng, c, false);
  DeviceAttention d(h);
  GuardedBuffer out(8 * 128 * 2);
  const TensorView o = TensorView::matrix(out.data(), DType::f16, Device::cuda, 8, 128);
  core::DeviceBuffer ws(attention_workspace_bytes(c, AttentionVariant::tiled_fused));
  EXPECT_LOWBIT_ERROR(quantized_attention(d.x, d.w, c, AttentionVariant::tiled_fused, o, Workspace{ws.data(), 256},
                                          nullptr),
                      "workspace: expected at least");
  EXPECT_LOWBIT_ERROR(quantized_attention(d.x, d.w, c, AttentionVariant::fused_two_kernel, o, Workspace{}, nullptr),
                      "workspace: data pointer is null");
  GuardedBuffer shifted(8 * 64 * 2, 2);
  TensorView x = d.x;
  x.data = shifted.data();
  EXPECT_LOWBIT_ERROR(quantized_attention(x, d.w, c, AttentionVariant::fused_two_kernel, o,
                                          Workspace{ws.data(), ws.bytes()}, nullptr),
                      "x: the GPU kernels need 16-byte aligned rows");
  // Kernel 1's choice (cuda/qattention/qattention_cuda.h): only ours has one; the wgmma
  // kernel named where it cannot run; kernel 1 alone with too small a workspace.
  namespace qa = cuda::attention;
  EXPECT_LOWBIT_ERROR(qa::run(d.x, d.w, c, AttentionVariant::tiled_fused, o, Workspace{ws.data(), ws.bytes()},
                              nullptr, qa::QkvKernel::wgmma),
                      "only ours");
  EXPECT_LOWBIT_ERROR(qa::run_qkv_kernel(d.x, d.w, c, Workspace{ws.data(), 256}, nullptr), "expected a workspace of");
  if (!qa::qkv_wgmma_available()) {
    EXPECT_LOWBIT_ERROR(qa::run_qkv_kernel(d.x, d.w, c, Workspace{ws.data(), ws.bytes()}, nullptr,
                                           qa::QkvKernel::wgmma),
                        "Hopper and an sm_90a image needed");
  }
  EXPECT_TRUE(out.guards_intact("out"));
}

}  // namespace
}  // namespace lowbit::test
