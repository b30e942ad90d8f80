// Scaled-dot-product attention over f16 / bf16 Q, K and V (the op FlashAttention and
// PyTorch's scaled_dot_product_attention compute), for a batch of sequences of
// different lengths in one call:
//
//   out[i, h] = softmax(scale * q[i, h] . K_g^T (+ causal mask)) V_g,  g = h / (heads / kv_heads)
//
// Sequence b's queries are rows [cu_q[b], cu_q[b + 1]) of q and out, its keys and
// values rows [cu_k[b], cu_k[b + 1]) of k and v (cu_q, cu_k: int32 prefix sums, batch + 1
// of them, starting at 0, on the host). A row holds heads (q, out) or kv_heads (k, v)
// vectors of head_dim values, head h at column h * head_dim.
// Causal: the q_len queries of a sequence are its last q_len positions of k_len
// (q_len <= k_len): query i sits at position k_len - q_len + i and sees the keys up to
// it. With q_len == k_len that is the usual mask; with q_len < k_len, a chunk of a
// prompt attending to the cache before it and to itself (chunked prefill).
//
// Arithmetic: in f32 on the GPU, with P rounded to the input type for the P V product
// (FlashAttention's practice) and out rounded once; in double on the CPU (the oracle the
// GPU tests compare with), out rounded once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "lowbit/tensor.h"

namespace lowbit {

struct FlashAttentionParams {
  std::int64_t heads = 0, kv_heads = 0;  // heads a multiple of kv_heads (grouped-query attention)
  std::int64_t head_dim = 0;             // 64 or 128
  bool causal = true;
  float scale = 0.0f;  // > 0, or 0 for 1 / sqrt(head_dim)
};

// Device scratch of a GPU call with `batch` sequences (the prefix sums, uploaded); 0 for
// CPU calls.
std::size_t flash_attention_workspace_bytes(std::int64_t batch);

// q, out: [cu_q[batch] x heads * head_dim]; k, v: [cu_k[batch] x kv_heads * head_dim];
// all f16 or all bf16, on one device, rows at any stride (16-byte aligned rows on the
// GPU: pointer and row stride multiples of 16 bytes). Every sequence has q_len >= 1 and
// k_len >= 1 (k_len >= q_len when causal). GPU calls run on `stream` and never
// synchronize; the workspace holds flash_attention_workspace_bytes(batch).
void flash_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     std::span<const std::int32_t> cu_q, std::span<const std::int32_t> cu_k,
                     const FlashAttentionParams& params, const Workspace& workspace, cuda_stream_t stream);

}  // namespace lowbit
