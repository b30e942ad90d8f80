// GPU driver of `lowbit eval attention`: uploads a problem once, then per variant (and
// the predequantized peer) allocates its workspace, checks the output rows against the
// FP64 reference and times it (CUDA-event median of back-to-back runs, bench/common/timing.h).
#if LOWBIT_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attention_eval.h"
#include "bench/common/timing.h"
#include "bench/gemm/peers.h"
#include "cuda/qattention/qattention_cuda.h"
#include "core/device_buffer.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cli {
namespace {

struct Uploads {
  std::vector<core::DeviceBuffer> buffers;
  void* put(const void* data, std::size_t bytes) {
    buffers.emplace_back(bytes);
    LOWBIT_CUDA_CHECK(cudaMemcpy(buffers.back().data(), data, bytes, cudaMemcpyHostToDevice));
    return buffers.back().data();
  }
  BlockQuantizedView weight(EncodedWeight& w, BlockFormat format) {
    BlockQuantizedView v = w.view(format);
    for (TensorView* t : {&v.codes, &v.scales, &v.global_scale}) {
      if (!t->data) continue;
      t->data = put(t->data, t->span_bytes());
      t->device = Device::cuda;
    }
    return v;
  }
  TensorView vec(std::vector<formats::Half>& b) {
    if (b.empty()) return {};
    return TensorView::vector(put(b.data(), b.size() * 2), DType::f16, Device::cuda, static_cast<std::int64_t>(b.size()));
  }
};

// The largest error of the first rows of `out` against the reference, absolute and
// relative to the reference's largest magnitude (inf when a NaN was written).
void check_rows(const core::DeviceBuffer& out, const std::vector<double>& reference, std::int64_t rows, std::int64_t n,
                VariantResult& r) {
  std::vector<formats::Half> got(static_cast<std::size_t>(rows * n));
  LOWBIT_CUDA_CHECK(cudaMemcpy(got.data(), out.data(), got.size() * 2, cudaMemcpyDeviceToHost));
  double max_abs = 0.0, max_ref = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(formats::half_to_float(got[i]) - reference[i]);
    max_abs = e == e ? std::max(max_abs, e) : INFINITY;
    max_ref = std::max(max_ref, std::abs(reference[i]));
  }
  r.max_abs_error = max_abs;
  r.max_rel_error = max_ref > 0 ? max_abs / max_ref : max_abs;
}

// kPredequantizedPeer. Its memory: the f16 weights (kept between calls), Q|K|V and out.
VariantResult run_predequantized_peer(const AttentionProblem& p, const TensorView& x, const AttentionWeights& w,
                                      core::DeviceBuffer& out, const TensorView& o,
                                      const std::vector<double>& reference, const GpuEvalOptions& options,
                                      cudaStream_t stream) {
  const AttentionConfig& c = p.config;
  VariantResult r;
  r.name = kPredequantizedPeer;
  const cuda::attention::WorkspaceLayout decode = cuda::attention::workspace_layout(c, AttentionVariant::tiled_fused);
  const std::size_t qkv_bytes = attention_workspace_bytes(c, AttentionVariant::fused_two_kernel);
  r.peak_bytes = decode.weights_bytes + qkv_bytes + o.span_bytes();
  r.bytes_moved = 0;  // (not counted: cuBLAS's traffic is its own)
  std::size_t free_bytes = 0, total = 0;
  LOWBIT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  if (!p.bq.empty() || !p.bk.empty() || !p.bv.empty()) {
    r.skipped = "biases (the peer adds none)";
  } else if (decode.total + qkv_bytes + (256u << 20) > free_bytes) {
    r.skipped = "workspace does not fit";
  }
  if (!r.skipped.empty()) {
    std::fprintf(stderr, "    %-16s skipped: %s\n", r.name.c_str(), r.skipped.c_str());
    return r;
  }
  // Once: the weights dequantized by tiled_fused's first kernel, kept as f16.
  core::DeviceBuffer weights(decode.weights_bytes);
  {
    core::DeviceBuffer ws(decode.total);
    quantized_attention(x, w, c, AttentionVariant::tiled_fused, o, Workspace{ws.data(), ws.bytes()}, stream);
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(weights.data(), static_cast<const std::uint8_t*>(ws.data()) + decode.weights,
                                      decode.weights_bytes, cudaMemcpyDeviceToDevice, stream));
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  core::DeviceBuffer qkv(qkv_bytes);  // fused_two_kernel's layout: Q|K|V at offset 0
  const Workspace workspace{qkv.data(), qkv.bytes()};
  bench::CublasPeers blas(stream);
  auto call = [&] {
    blas.float_gemm(DType::f16, x.data, weights.data(), qkv.data(), c.seq_len, attention_qkv_cols(c), c.d_model);
    cuda::attention::run_attention_kernel(c, AttentionVariant::fused_two_kernel, o, workspace, stream);
  };
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));  // NaN until written
  call();
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (options.ref_rows > 0) check_rows(out, reference, options.ref_rows, c.heads * c.head_dim, r);
  r.ms = bench::gpu_median_ms([&](int) { call(); }, stream, 15);
  r.attention_ms = bench::gpu_median_ms(
      [&](int) { cuda::attention::run_attention_kernel(c, AttentionVariant::fused_two_kernel, o, workspace, stream); },
      stream, 15);
  r.qkv_ms = bench::gpu_median_ms(
      [&](int) {
        blas.float_gemm(DType::f16, x.data, weights.data(), qkv.data(), c.seq_len, attention_qkv_cols(c), c.d_model);
      },
      stream, 15);
  r.qkv_kernel = "cuBLAS";
  r.ran = true;
  std::fprintf(stderr, "    %-16s %10.3f ms  max |err| %.3g\n", r.name.c_str(), r.ms, r.max_abs_error);
  return r;
}

// Kernel 1 of ours alone (`kernel`), into the workspace's Q|K|V.
double time_qkv(const TensorView& x, const AttentionWeights& w, const AttentionConfig& c, const Workspace& workspace,
                cuda::attention::QkvKernel kernel, cudaStream_t stream) {
  return bench::gpu_median_ms([&](int) { cuda::attention::run_qkv_kernel(x, w, c, workspace, stream, kernel); },
                              stream, 15);
}

// kOursMma: ours' row `ours` again with the mma.sync kernel 1 (same workspace and memory).
VariantResult run_ours_mma(const VariantResult& ours, const AttentionConfig& c, const TensorView& x, const AttentionWeights& w,
                           core::DeviceBuffer& out, const TensorView& o, const Workspace& workspace,
                           const std::vector<double>& reference, const GpuEvalOptions& options, cudaStream_t stream) {
  VariantResult r = ours;
  r.name = kOursMma;
  const auto call = [&] {
    cuda::attention::run(x, w, c, AttentionVariant::fused_two_kernel, o, workspace, stream,
                         cuda::attention::QkvKernel::mma);
  };
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));  // NaN until written
  call();
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (options.ref_rows > 0) check_rows(out, reference, options.ref_rows, c.heads * c.head_dim, r);
  r.ms = bench::gpu_median_ms([&](int) { call(); }, stream, 15);
  r.qkv_kernel = "mma";
  r.bytes_moved = counted_bytes(c, AttentionVariant::fused_two_kernel, 128);
  r.qkv_ms = time_qkv(x, w, c, workspace, cuda::attention::QkvKernel::mma, stream);
  std::fprintf(stderr, "    %-16s %10.3f ms  max |err| %.3g\n", r.name.c_str(), r.ms, r.max_abs_error);
  return r;
}

}  // namespace

std::vector<VariantResult> run_gpu_variants(AttentionProblem& p, const std::vector<double>& reference,
                                            const GpuEvalOptions& options) {
  const AttentionConfig& c = p.config;
  Uploads up;
  up.buffers.reserve(16);
  const TensorView x = TensorView::matrix(up.put(p.x.data(), p.x.size() * 2), DType::f16, Device::cuda, c.seq_len,
                                          c.d_model);
  AttentionWeights w{up.weight(p.wq, c.format), up.weight(p.wk, c.format), up.weight(p.wv, c.format),
                     up.vec(p.bq), up.vec(p.bk), up.vec(p.bv)};
  const std::int64_t n = c.heads * c.head_dim;
  core::DeviceBuffer out(static_cast<std::size_t>(c.seq_len * n) * 2);
  const TensorView o = TensorView::matrix(out.data(), DType::f16, Device::cuda, c.seq_len, n);
  cudaStream_t stream = nullptr;
  LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream));

  std::vector<VariantResult> results;
  for (AttentionVariant v : kAttentionVariants) {
    VariantResult r;
    r.variant = v;
    r.name = attention_variant_name(v);
    r.bytes_moved = counted_bytes(c, v);
    const std::size_t ws_bytes = attention_workspace_bytes(c, v);
    r.peak_bytes = ws_bytes + o.span_bytes();
    const bool naive = v == AttentionVariant::naive_sequential;
    const bool sequential = naive || v == AttentionVariant::tiled_sequential;
    std::size_t free_bytes = 0, total = 0;
    LOWBIT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    if (naive && c.seq_len > options.max_naive_l) {
      r.skipped = "L > --max-naive-l";
    } else if (sequential && c.seq_len > options.max_sequential_l) {
      r.skipped = "L > --max-sequential-l";
    } else if (ws_bytes + (256u << 20) > free_bytes) {
      r.skipped = "workspace does not fit";
    }
    if (!r.skipped.empty()) {
      std::fprintf(stderr, "    %-16s skipped: %s\n", attention_variant_name(v), r.skipped.c_str());
      results.push_back(r);
      continue;
    }
    core::DeviceBuffer ws(ws_bytes);
    const Workspace workspace{ws.data(), ws.bytes()};
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));  // NaN until written
    quantized_attention(x, w, c, v, o, workspace, stream);
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (options.ref_rows > 0) check_rows(out, reference, options.ref_rows, n, r);
    const int samples = sequential ? 5 : 15;
    r.ms = bench::gpu_median_ms([&](int) { quantized_attention(x, w, c, v, o, workspace, stream); }, stream, samples);
    if (!sequential) {  // the Q|K|V of the last run is still in the workspace
      r.attention_ms = bench::gpu_median_ms(
          [&](int) { cuda::attention::run_attention_kernel(c, v, o, workspace, stream); }, stream, samples);
    }
    r.ran = true;
    std::fprintf(stderr, "    %-16s %10.3f ms  max |err| %.3g\n", attention_variant_name(v), r.ms, r.max_abs_error);
    if (v == AttentionVariant::fused_two_kernel) {
      const bool wgmma = cuda::attention::qkv_wgmma_available();
      r.qkv_kernel = wgmma ? "wgmma" : "mma";
      r.bytes_moved = counted_bytes(c, v, wgmma ? 256 : 128);
      r.qkv_ms = time_qkv(x, w, c, workspace, cuda::attention::QkvKernel::automatic, stream);
      results.push_back(r);
      if (wgmma) results.push_back(run_ours_mma(r, c, x, w, out, o, workspace, reference, options, stream));
      continue;
    }
    results.push_back(r);
  }
  results.push_back(run_predequantized_peer(p, x, w, out, o, reference, options, stream));
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
  return results;
}

}  // namespace lowbit::cli
#endif
