// The four variants as sequences of launches on one stream (see attention.h).
#include <cmath>

#include "cuda/qattention/qattention_cuda.h"
#include "cuda/qattention/kernels.h"
#include "cuda/block_formats/block_formats_cuda.h"
#include "cuda/flash/flash_cuda.h"
#include "lowbit/error.h"

namespace lowbit::cuda::attention {
namespace {

FusedSegment segment(const BlockQuantizedView& w, const TensorView& bias, std::int64_t rows) {
  FusedSegment s;
  s.codes = w.codes.ptr<const std::uint8_t>();
  s.code_stride = w.codes.row_stride();
  s.scales = w.scales.data;
  s.global = w.global_scale.ptr<const float>();
  s.bias = static_cast<const __half*>(bias.data);
  s.rows = static_cast<int>(rows);
  return s;
}

// Ours' attention: flash_attention's tensor-core kernel (cuda/flash/flash_cuda.h) on the
// Q, K and V column blocks of the Q|K|V matrix, one sequence.
void flash_on_qkv(const AttnArgs& a, cudaStream_t stream) {
  auto block = [&](std::int64_t col, std::int64_t heads) {
    return TensorView::matrix(const_cast<__half*>(a.qkv) + col, DType::f16, Device::cuda, a.seq_len,
                              heads * a.head_dim, a.ld);
  };
  const FlashAttentionParams p{a.heads, a.kv_heads, a.head_dim, a.causal, a.scale};
  const TensorView out = TensorView::matrix(a.out, DType::f16, Device::cuda, a.seq_len, a.heads * a.head_dim, a.ldo);
  cuda::flash::flash_attention(block(a.q_col(0), a.heads), block(a.k_col(0), a.kv_heads), block(a.v_col(0), a.kv_heads),
                               out, nullptr, nullptr, 1, a.seq_len, p, stream);
}

// Ours' kernel 1, the one `kernel` names (qattention_cuda.h).
void ours_qkv(const ProjectionArgs& p, BlockFormat format, QkvKernel kernel, cudaStream_t stream) {
  if (kernel != QkvKernel::mma && qkv_wgmma_available()) return qkv_fused_wgmma(p, format, stream);
  LOWBIT_CHECK(kernel != QkvKernel::wgmma, "quantized_attention: the wgmma kernel 1 was asked for, but this device "
                                           "or build does not run it (Hopper and an sm_90a image needed)");
  qkv_fused(p, format, stream);
}

// X, the three weights and Q|K|V in the workspace, as kernel 1 of every variant reads them.
ProjectionArgs projection_args(const TensorView& x, const AttentionWeights& w, const AttentionConfig& c,
                               const WorkspaceLayout& layout, std::uint8_t* base) {
  const std::int64_t nq = c.heads * c.head_dim, nkv = c.kv_heads * c.head_dim;
  const std::int64_t cols = attention_qkv_cols(c);
  ProjectionArgs p;
  p.x = x.ptr<const __half>();
  p.ldx = x.row_stride();
  p.m = static_cast<int>(c.seq_len);
  p.k = static_cast<int>(c.d_model);
  p.n = static_cast<int>(cols);
  p.seg[0] = segment(w.wq, w.bq, nq);
  p.seg[1] = segment(w.wk, w.bk, nkv);
  p.seg[2] = segment(w.wv, w.bv, nkv);
  p.out = reinterpret_cast<__half*>(base + layout.qkv);
  p.ldo = cols;
  return p;
}

}  // namespace

const char* qkv_kernel_name(QkvKernel kernel) {
  switch (kernel) {
    case QkvKernel::automatic: return "automatic";
    case QkvKernel::mma: return "mma";
    case QkvKernel::wgmma: return "wgmma";
  }
  return "unknown";
}

static AttnArgs attention_args(const AttentionConfig& c, const WorkspaceLayout& layout, std::uint8_t* base,
                        const TensorView& out) {
  AttnArgs a;
  a.qkv = reinterpret_cast<const __half*>(base + layout.qkv);
  a.ld = attention_qkv_cols(c);
  a.seq_len = static_cast<int>(c.seq_len);
  a.heads = static_cast<int>(c.heads);
  a.kv_heads = static_cast<int>(c.kv_heads);
  a.head_dim = static_cast<int>(c.head_dim);
  a.causal = c.causal;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  a.out = out.ptr<__half>();
  a.ldo = out.row_stride();
  a.scores = reinterpret_cast<float*>(base + layout.scores);
  return a;
}

void run_attention_kernel(const AttentionConfig& c, AttentionVariant variant, const TensorView& out,
                          const Workspace& workspace, cuda_stream_t stream) {
  const AttnArgs a = attention_args(c, workspace_layout(c, variant), static_cast<std::uint8_t*>(workspace.data), out);
  if (variant == AttentionVariant::fused_two_kernel) {
    flash_on_qkv(a, stream);
  } else {
    flash_simt(a, stream);
  }
}

void run_qkv_kernel(const TensorView& x, const AttentionWeights& w, const AttentionConfig& c,
                    const Workspace& workspace, cuda_stream_t stream, QkvKernel kernel) {
  const WorkspaceLayout layout = workspace_layout(c, AttentionVariant::fused_two_kernel);
  LOWBIT_CHECK(workspace.data != nullptr && workspace.bytes >= layout.total, "run_qkv_kernel: expected a workspace of ",
               layout.total, " bytes, got ", workspace.bytes);
  ours_qkv(projection_args(x, w, c, layout, static_cast<std::uint8_t*>(workspace.data)), c.format, kernel, stream);
}

void run(const TensorView& x, const AttentionWeights& w, const AttentionConfig& c, AttentionVariant variant,
         const TensorView& out, const Workspace& workspace, cuda_stream_t stream, QkvKernel kernel) {
  LOWBIT_CHECK(kernel == QkvKernel::automatic || variant == AttentionVariant::fused_two_kernel,
               "quantized_attention: kernel 1 \"", qkv_kernel_name(kernel), "\" was asked for ",
               attention_variant_name(variant), ", but only ours (fused_two_kernel) has a choice of kernel 1");
  const WorkspaceLayout layout = workspace_layout(c, variant);
  auto* base = static_cast<std::uint8_t*>(workspace.data);
  const std::int64_t nq = c.heads * c.head_dim, nkv = c.kv_heads * c.head_dim;
  ProjectionArgs p = projection_args(x, w, c, layout, base);
  const AttnArgs a = attention_args(c, layout, base, out);

  if (variant == AttentionVariant::fused_two_kernel) {
    ours_qkv(p, c.format, kernel, stream);
    flash_on_qkv(a, stream);
    return;
  }
  // Baselines: kernel 1 decodes Wq | Wk | Wv to f16 in global memory (the block
  // formats' decoder, one launch per matrix).
  auto* wdec = reinterpret_cast<__half*>(base + layout.weights);
  p.w = wdec;
  std::int64_t row0 = 0;
  for (const auto& [view, rows] : {std::pair{&w.wq, nq}, std::pair{&w.wk, nkv}, std::pair{&w.wv, nkv}}) {
    cuda::block_decode(*view, c.format,
                 TensorView::matrix(wdec + row0 * c.d_model, DType::f16, Device::cuda, rows, c.d_model), stream);
    row0 += rows;
  }
  switch (variant) {
    case AttentionVariant::naive_sequential:
      for (int s = 0; s < 3; ++s) naive_matmul(p, s, stream);
      naive_scores(a, stream);
      naive_scale_mask(a, stream);
      naive_softmax(a, stream);
      naive_pv(a, stream);
      break;
    case AttentionVariant::tiled_sequential:
      for (int s = 0; s < 3; ++s) tiled_matmul(p, s, stream);
      tiled_scores(a, stream);
      tiled_scale_mask(a, stream);
      tiled_softmax(a, stream);
      tiled_pv(a, stream);
      break;
    case AttentionVariant::tiled_fused:
      qkv_wmma(p, stream);
      flash_simt(a, stream);
      break;
    case AttentionVariant::fused_two_kernel: break;
  }
}

}  // namespace lowbit::cuda::attention
