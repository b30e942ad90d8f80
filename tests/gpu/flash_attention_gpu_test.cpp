// flash_attention on the GPU against its CPU path in double (src/cpu/flash_attention.h),
// each kernel (the mma.sync kernel, and the wgmma kernel where the device runs it; the
// public entry picks one) on fresh random inputs: f16 and bf16, head_dim 64 and 128, GQA groups 1, 3, 4 and 8,
// causal and not; single sequences of 1, 63, 65, 130 and 4097 queries (around the
// kernel's 128-row and 64-key tiles), a batch of mixed lengths (blocks of short sequences
// exit, long ones take several tiles), causal chunks at the end of longer keys
// (chunked prefill), and loud keys whose scores jump past the running max late (the lazy
// max's rescaling); rows with padded strides, outputs poisoned (the padding and guards
// must stay so).
// Tolerance per element (Vmax: the largest |v| its row reads; Smax: the largest
// scale * sum |q_d k_d| over those keys): P rounded to the dtype for the P V product,
// relative u a weight (f16 2^-11, bf16 2^-8): u Vmax; the scores' f32 sums, (D + 4) 2^-24
// Smax, move the output by twice that times Vmax; other f32 rounding 2^-15 Vmax; the
// output's rounding u |o|. Twice the sum is allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/flash_inputs.h"
#include "common/gpu.h"
#include "common/poison.h"
#include "common/random.h"
#include "core/device_buffer.h"
#include "cpu/flash_attention.h"
#include "cuda/flash/flash_cuda.h"
#include "lowbit/flash_attention.h"

namespace lowbit::test {
namespace {

class FlashAttentionGpu : public GpuTest {};

using cuda::flash::FlashKernel;

// The kernels to check on this device: mma.sync always, wgmma where it runs.
std::vector<FlashKernel> kernels_here() {
  std::vector<FlashKernel> kernels{FlashKernel::mma};
  if (cuda::flash::flash_wgmma_available()) kernels.push_back(FlashKernel::wgmma);
  return kernels;
}

const char* kernel_name(FlashKernel kernel) { return kernel == FlashKernel::wgmma ? "wgmma" : "mma.sync"; }

using Lengths = std::vector<std::pair<std::int32_t, std::int32_t>>;

// Runs one case; returns the worst error as a fraction of its tolerance.
// kernel automatic: through the public entry (validation, the prefix sums' upload);
// else the named kernel through cuda::flash::flash_attention.
// loud_keys: keys (rows of K) multiplied by 10, whose scores jump past the running max.
double check_case(std::mt19937& rng, const FlashAttentionParams& p, DType dtype, const Lengths& lengths,
                  FlashKernel kernel, const std::vector<std::int64_t>& loud_keys = {}) {
  FlashInputs in(rng, p, dtype, lengths, 1.5f);
  for (const std::int64_t key : loud_keys) in.scale_key(key, 10.0f);
  const std::vector<double> want = cpu::flash_attention_f64(
      in.view(in.q, in.rows_q(), in.q_cols(), in.ldq), in.view(in.k, in.rows_k(), in.kv_cols(), in.ldk),
      in.view(in.v, in.rows_k(), in.kv_cols(), in.ldk), in.cu_q, in.cu_k, p);
  core::DeviceBuffer q(in.q.size() * 2), k(in.k.size() * 2), v(in.v.size() * 2);
  LOWBIT_CUDA_CHECK(cudaMemcpy(q.data(), in.q.data(), q.bytes(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(k.data(), in.k.data(), k.bytes(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(v.data(), in.v.data(), v.bytes(), cudaMemcpyHostToDevice));
  GuardedBuffer out(static_cast<std::size_t>(in.rows_q() * in.ldo) * 2);
  out.poison(kFloatPoison);
  const std::int64_t batch = static_cast<std::int64_t>(lengths.size());
  core::DeviceBuffer ws(flash_attention_workspace_bytes(batch));
  auto matrix = [&](const core::DeviceBuffer& b, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    return TensorView::matrix(b.data(), dtype, Device::cuda, rows, cols, ld);
  };
  const TensorView out_view = TensorView::matrix(out.data(), dtype, Device::cuda, in.rows_q(), in.q_cols(), in.ldo);
  if (kernel == FlashKernel::automatic) {
    flash_attention(matrix(q, in.rows_q(), in.q_cols(), in.ldq), matrix(k, in.rows_k(), in.kv_cols(), in.ldk),
                    matrix(v, in.rows_k(), in.kv_cols(), in.ldk), out_view, in.cu_q, in.cu_k, p,
                    Workspace{ws.data(), ws.bytes()}, nullptr);
  } else {
    auto* cu = static_cast<std::int32_t*>(ws.data());
    LOWBIT_CUDA_CHECK(cudaMemcpy(cu, in.cu_q.data(), in.cu_q.size() * 4, cudaMemcpyHostToDevice));
    LOWBIT_CUDA_CHECK(cudaMemcpy(cu + in.cu_q.size(), in.cu_k.data(), in.cu_k.size() * 4, cudaMemcpyHostToDevice));
    std::int32_t longest = 0;
    for (std::size_t b = 0; b < lengths.size(); ++b) longest = std::max(longest, in.cu_q[b + 1] - in.cu_q[b]);
    cuda::flash::flash_attention(matrix(q, in.rows_q(), in.q_cols(), in.ldq),
                                 matrix(k, in.rows_k(), in.kv_cols(), in.ldk),
                                 matrix(v, in.rows_k(), in.kv_cols(), in.ldk), out_view, cu, cu + in.cu_q.size(), batch,
                                 longest, p, nullptr, kernel);
  }
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(out.guards_intact("out"));
  const auto got = download<std::uint16_t>(out.data(), static_cast<std::size_t>(in.rows_q() * in.ldo));

  const double u = dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
  const std::int64_t hd = p.head_dim, group = p.heads / p.kv_heads;
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  double worst = 0;
  int bad = 0;
  for (std::size_t b = 0; b + 1 < in.cu_q.size(); ++b) {
    const std::int64_t q0 = in.cu_q[b], nq = in.cu_q[b + 1] - q0, k0 = in.cu_k[b], nk = in.cu_k[b + 1] - k0;
    for (std::int64_t i = 0; i < nq; ++i) {
      const std::int64_t row = q0 + i, seen = p.causal ? nk - nq + i + 1 : nk;
      for (std::int64_t col = in.q_cols(); col < in.ldo; ++col) {
        EXPECT_EQ(got[static_cast<std::size_t>(row * in.ldo + col)], static_cast<std::uint16_t>(0x0101u * kFloatPoison))
            << "row " << row << " padding";
      }
      for (std::int64_t h = 0; h < p.heads; ++h) {
        const std::int64_t g = h / group;
        double vmax = 0, smax = 0;
        for (std::int64_t j = 0; j < seen; ++j) {
          double mag = 0;
          for (std::int64_t d = 0; d < hd; ++d) {
            mag += std::fabs(in.value(in.q[static_cast<std::size_t>(row * in.ldq + h * hd + d)]) *
                             in.value(in.k[static_cast<std::size_t>((k0 + j) * in.ldk + g * hd + d)]));
            vmax = std::max(vmax, std::fabs(in.value(in.v[static_cast<std::size_t>((k0 + j) * in.ldk + g * hd + d)])));
          }
          smax = std::max(smax, mag * scale);
        }
        for (std::int64_t d = 0; d < hd; ++d) {
          const double o = want[static_cast<std::size_t>(row * in.q_cols() + h * hd + d)];
          const double x = in.value(got[static_cast<std::size_t>(row * in.ldo + h * hd + d)]);
          const double tol =
              2.0 * (vmax * (u + 2.0 * static_cast<double>(hd + 4) * 0x1p-24 * smax + 0x1p-15) + u * std::fabs(o)) +
              1e-6;
          const double err = std::fabs(x - o);
          if (!(err <= tol) && bad++ < 5) {
            ADD_FAILURE() << "sequence " << b << " query " << i << " head " << h << " channel " << d << ": got " << x
                          << ", want " << o << " (tolerance " << tol << ")";
          }
          if (err == err) worst = std::max(worst, err / tol);
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "elements out of tolerance";
  return worst;
}

TEST_F(FlashAttentionGpu, MatchesTheCpuInDouble) {
  LOWBIT_TEST_RNG(rng);
  const std::vector<Lengths> shapes = {
      {{1, 1}},     {{63, 63}},   {{65, 65}},  {{130, 130}},
      {{1, 129}, {70, 300}},                                // causal chunks at the end of their keys
      {{7, 7}, {200, 200}, {1, 1}, {65, 80}, {129, 129}},   // a batch of mixed lengths
  };
  for (FlashKernel kernel : kernels_here()) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (std::int64_t hd : {64, 128}) {
      for (auto [heads, kv] : {std::pair{8, 8}, std::pair{9, 3}, std::pair{16, 4}, std::pair{16, 2}}) {
        for (bool causal : {true, false}) {
          double worst = 0;
          for (const Lengths& lengths : shapes) {
            SCOPED_TRACE(std::string(kernel_name(kernel)) + " " + dtype_name(dtype) + " D " + std::to_string(hd) + " heads " +
                         std::to_string(heads) + "/" + std::to_string(kv) + (causal ? " causal" : " non-causal") +
                         " sequences " + std::to_string(lengths.size()) + " first " + std::to_string(lengths[0].first) +
                         "/" + std::to_string(lengths[0].second));
            const FlashAttentionParams p{heads, kv, hd, causal, 0.0f};
            worst = std::max(worst, check_case(rng, p, dtype, lengths, kernel));
            if (HasFailure()) return;
          }
          std::printf("flash_attention %s %s D %lld heads %d/%d %s: worst error %.3f of tolerance\n",
                      kernel_name(kernel), dtype_name(dtype), static_cast<long long>(hd), heads, kv,
                      causal ? "causal" : "non-causal", worst);
        }
      }
    }
  }
  }
}

// Scores that rise far above the running max late in the keys (two loud keys, in the third
// and fifth 128-key tiles): the wgmma kernel's lazy max (head_dim 128) keeps O's scale
// until a row's max jumps by more than 2^8, then rescales; every other tile skips it.
TEST_F(FlashAttentionGpu, ScoresThatRiseLate) {
  LOWBIT_TEST_RNG(rng);
  for (FlashKernel kernel : kernels_here()) {
    SCOPED_TRACE(kernel_name(kernel));
    for (DType dtype : {DType::f16, DType::bf16}) {
      for (std::int64_t hd : {64, 128}) {
        for (bool causal : {true, false}) {
          SCOPED_TRACE(std::string(dtype == DType::bf16 ? "bf16" : "f16") + " head_dim " + std::to_string(hd) +
                       (causal ? " causal" : " non-causal"));
          const FlashAttentionParams p{8, 2, hd, causal, 0.0f};
          check_case(rng, p, dtype, {{200, 700}}, kernel, {300, 600});
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The public entry (validation, the prefix sums uploaded from the host, the kernel it
// picks) on a batch of mixed lengths with causal chunks.
TEST_F(FlashAttentionGpu, PublicEntry) {
  LOWBIT_TEST_RNG(rng);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const FlashAttentionParams p{12, 4, 128, true, 0.0f};
    check_case(rng, p, dtype, {{5, 300}, {129, 129}, {1, 1}, {250, 260}}, FlashKernel::automatic);
    if (HasFailure()) return;
  }
}

// A long sequence (4097 queries: a partial last tile of 128 and of 64 keys) and a given
// scale, fewer configurations: the CPU reference is quadratic.
TEST_F(FlashAttentionGpu, LongSequenceAndGivenScale) {
  LOWBIT_TEST_RNG(rng);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const FlashAttentionParams p{4, 1, 128, true, 0.05f};
    for (FlashKernel kernel : kernels_here()) {
      SCOPED_TRACE(kernel_name(kernel));
      check_case(rng, p, dtype, {{4097, 4097}}, kernel);
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace lowbit::test
