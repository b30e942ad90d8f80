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

// Which kernel 1 ours (fused_two_kernel) runs: the wgmma one where it runs (Hopper and an
// sm_90a image), else the mma.sync one; or one of them by name (tests and benchmarks;
// wgmma throws where it cannot run). The baselines have no choice: they take automatic.
enum class QkvKernel { automatic, mma, wgmma };

const char* qkv_kernel_name(QkvKernel kernel);  // "automatic", "mma", "wgmma"

// Whether the wgmma kernel 1 runs on the current device.
bool qkv_wgmma_available();

void run(const TensorView& x, const AttentionWeights& weights, const AttentionConfig& config,
         AttentionVariant variant, const TensorView& out, const Workspace& workspace, cuda_stream_t stream,
         QkvKernel kernel = QkvKernel::automatic);

// Only ours' kernel 1: Q|K|V [L x (H + 2 Hkv) hd] f16 into `workspace` at
// workspace_layout(config, fused_two_kernel).qkv (for tests and for timing the kernel
// alone). Arguments as quantized_attention() validates them.
void run_qkv_kernel(const TensorView& x, const AttentionWeights& weights, const AttentionConfig& config,
                    const Workspace& workspace, cuda_stream_t stream, QkvKernel kernel = QkvKernel::automatic);

// Only the attention kernel of `variant` (tiled_fused: the SIMT flash kernel; ours:
// the tensor-core one) over the Q|K|V already in `workspace` (left there by a full
// run of the same variant): for timing the kernel alone.
void run_attention_kernel(const AttentionConfig& config, AttentionVariant variant, const TensorView& out,
                          const Workspace& workspace, cuda_stream_t stream);

}  // namespace lowbit::cuda::attention
