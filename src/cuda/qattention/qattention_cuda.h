// The GPU side of include/lowbit/attention.h: the workspace layout (plain C++, also
// compiled without CUDA, since attention_workspace_bytes() answers there too) and
// the one entry the API calls. Arguments arrive validated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/quantized_attention.h"

namespace lowbit::cuda::attention {

// Byte offsets into the workspace; a region a variant does not use has size 0.
struct WorkspaceLayout {
  std::size_t weights = 0, weights_bytes = 0;  // f16 [(H + 2 Hkv) hd x d_model]: Wq | Wk | Wv decoded
  std::size_t qkv = 0, qkv_bytes = 0;          // f16 [L x (H + 2 Hkv) hd]
  std::size_t scores = 0, scores_bytes = 0;    // f32 [H x L x L]
  std::size_t total = 0;
};

WorkspaceLayout workspace_layout(const AttentionConfig& config, AttentionVariant variant);

void run(const TensorView& x, const AttentionWeights& weights, const AttentionConfig& config,
         AttentionVariant variant, const TensorView& out, const Workspace& workspace, cuda_stream_t stream);

// Only the attention kernel of `variant` (tiled_fused: the SIMT flash kernel; ours:
// the tensor-core one) over the Q|K|V already in `workspace` (left there by a full
// run of the same variant): for timing the kernel alone.
void run_attention_kernel(const AttentionConfig& config, AttentionVariant variant, const TensorView& out,
                          const Workspace& workspace, cuda_stream_t stream);

}  // namespace lowbit::cuda::attention
