// Quantized attention prefill: projections whose weights are stored in a
// block-wise 4-bit format, then scaled-dot-product attention.
//
//   Q = X Wq^T + bq    [L x H*hd]       X  f16 [L x d_model]
//   K = X Wk^T + bk    [L x Hkv*hd]     Wq [H*hd x d_model], Wk, Wv [Hkv*hd x d_model],
//   V = X Wv^T + bv    [L x Hkv*hd]        all three in `format` (block_formats.h)
//   O[:, h] = softmax(Q_h K_g^T / sqrt(hd) (+ causal mask)) V_g,   g = h / (H / Hkv)
//   O  f16 [L x H*hd]
//
// The weights are the block format's decoded values rounded once to f16 (what
// block_decode() to f16 gives); everything else accumulates in f32 on the GPU (f64 in
// the CPU reference) and Q, K, V, the probabilities fed to the P V product and O are
// rounded to f16. Biases are optional f16 vectors (pass empty views for none).
//
// Variants (the seed's four pipelines, all kept and verified):
//   naive_sequential   6 kernels: dequantize W to f16; Q, K, V matmuls; Q K^T; scale +
//                      mask; softmax; P V; one thread per output, scores f32 in memory
//   tiled_sequential   the same six with shared-memory tiled matmuls and a chunk-wise
//                      (two-pass) softmax
//   tiled_fused        3 kernels: dequantize; one tensor-core (WMMA) matmul writing
//                      Q|K|V; a flash-style (online softmax) attention kernel in FP32
//   fused_two_kernel   "ours", 2 kernels: the block decode fused into a multistage
//                      tensor-core matmul (wgmma on Hopper with an sm_90a build, else
//                      mma.sync; weights never written to memory), then the
//                      flash_attention kernel
// CPU views run the CPU reference whatever the variant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/block_formats.h"
#include "lowbit/tensor.h"

namespace lowbit {

enum class AttentionVariant : std::uint8_t { naive_sequential, tiled_sequential, tiled_fused, fused_two_kernel };

inline constexpr AttentionVariant kAttentionVariants[] = {
    AttentionVariant::naive_sequential, AttentionVariant::tiled_sequential, AttentionVariant::tiled_fused,
    AttentionVariant::fused_two_kernel};

const char* attention_variant_name(AttentionVariant variant);  // "naive_sequential" ... "ours"

struct AttentionConfig {
  std::int64_t seq_len = 0;    // L >= 1
  std::int64_t d_model = 0;    // a multiple of 64 (the block sizes and the kernels' K step)
  std::int64_t heads = 0;      // H
  std::int64_t kv_heads = 0;   // Hkv, H % Hkv == 0 (grouped-query attention when < H)
  std::int64_t head_dim = 0;   // 64 or 128; the softmax scale is 1 / sqrt(head_dim)
  bool causal = true;          // key j is masked for query i when j > i
  BlockFormat format = BlockFormat::nf4;
};

struct AttentionWeights {
  BlockQuantizedView wq, wk, wv;  // [H*hd x d_model], [Hkv*hd x d_model] x 2
  TensorView bq, bk, bv;          // f16 [H*hd], [Hkv*hd] x 2, or empty views
};

// Throws lowbit::Error naming the field unless the config is one the op takes.
void check_attention_config(const AttentionConfig& config);

// Columns of the Q|K|V intermediate: (H + 2 Hkv) * hd.
std::int64_t attention_qkv_cols(const AttentionConfig& config);

// Device scratch of a GPU call: the intermediates of the variant (dequantized weights
// f16 [(H + 2 Hkv) hd x d_model], Q|K|V f16 [L x (H + 2 Hkv) hd], scores f32
// [H x L x L] for the sequential ones), each 256-byte aligned. 0 for CPU calls.
std::size_t attention_workspace_bytes(const AttentionConfig& config, AttentionVariant variant);

// out (f16 [L x H*hd], row stride >= H*hd) = the attention above. x: f16 [L x d_model]
// with 16-byte aligned rows on the GPU; weights and out on x's device. GPU calls run
// on `stream` and never synchronize; `workspace` holds attention_workspace_bytes().
void quantized_attention(const TensorView& x, const AttentionWeights& weights, const AttentionConfig& config,
                         AttentionVariant variant, const TensorView& out, const Workspace& workspace,
                         cuda_stream_t stream);

}  // namespace lowbit
