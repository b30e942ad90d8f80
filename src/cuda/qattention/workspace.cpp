// The workspace regions of each variant (see attention_cuda.h).
#include "cuda/qattention/qattention_cuda.h"

namespace lowbit::cuda::attention {
namespace {
std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }
}  // namespace

WorkspaceLayout workspace_layout(const AttentionConfig& c, AttentionVariant variant) {
  const auto cols = static_cast<std::size_t>(attention_qkv_cols(c));
  const auto l = static_cast<std::size_t>(c.seq_len);
  WorkspaceLayout w;
  const bool dequant = variant != AttentionVariant::fused_two_kernel;
  const bool scores = variant == AttentionVariant::naive_sequential || variant == AttentionVariant::tiled_sequential;
  w.weights_bytes = dequant ? cols * static_cast<std::size_t>(c.d_model) * 2 : 0;
  w.qkv_bytes = l * cols * 2;
  w.scores_bytes = scores ? static_cast<std::size_t>(c.heads) * l * l * 4 : 0;
  w.weights = 0;
  w.qkv = align256(w.weights_bytes);
  w.scores = w.qkv + align256(w.qkv_bytes);
  w.total = w.scores + align256(w.scores_bytes);
  return w;
}

}  // namespace lowbit::cuda::attention
