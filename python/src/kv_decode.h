// One layer's decode KV cache (the device layout of src/cuda/engine/kv_cache_gpu.h) over
// caller-owned buffers, for the Python package: the buffers as TensorViews, validated at
// the boundary, then kv_append / decode_attention on the GPU, or their CPU twins here
// (the same layout and arithmetic: codes and f16 scales and mins from
// cpu::kv_quantize(), one group per head, equal to the kernel's bit for bit;
// attention in double over the values cpu::kv_dequantize() gives).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kv/kv_cuda.h"
#include "lowbit/tensor.h"

namespace lowbit::python {

using cuda::engine::KvLayerShape;

// One part (K or V): f16 [kv_heads, f16_slots, head_dim] (f16 or raw u16 bits as f16),
// codes [body_slots, kv_heads, code_bytes] (i8 for INT8, u8 for INT4), scales and mins
// [body_slots, kv_heads] f16. A part the shape does not have is an empty view.
struct KvPartViews {
  TensorView f16, codes, scales, mins;
};

struct KvLayerViews {
  KvPartViews k, v;
};

// The layer shape of a policy name ("full", "window", "selective", "int8", "int4").
KvLayerShape kv_shape(const char* policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
                      std::int64_t window, int kv_bits, std::int64_t max_tokens);

// Positions the cache can hold (the window policy's ring holds any number: -1).
std::int64_t kv_capacity(const KvLayerShape& shape);

// Bytes the cache's buffers hold (K and V).
std::size_t kv_buffer_bytes(const KvLayerShape& shape);

// Appends the token at `pos` (the cache's current length): k, v f16 [kv_heads, head_dim]
// (RoPE applied) on the buffers' device. CPU buffers: done here; CUDA: kv_append on `stream`.
void kv_append_views(const KvLayerShape& shape, const KvLayerViews& layer, std::int64_t pos, const TensorView& k,
                     const TensorView& v, cuda_stream_t stream);

// out (f32 or f16 [n_heads, head_dim]) = attention of q (f16 [n_heads, head_dim]) over
// what the query at position length - 1 sees. CUDA: decode_attention on `stream` with
// `workspace` (kv_attention_workspace_bytes); CPU: no workspace.
void kv_attention_views(const KvLayerShape& shape, const KvLayerViews& layer, std::int64_t length,
                        const TensorView& q, const TensorView& out, const TensorView& workspace,
                        cuda_stream_t stream);

// Workspace bytes of a CUDA kv_attention_views on the current device (0 in a CPU-only build).
std::size_t kv_attention_workspace_bytes(const KvLayerShape& shape, std::int64_t length, std::int64_t n_heads);

// The CUDA-graph forms: the position is an int32 [1] array on the buffers' device, read
// when the work runs (kv_append_at / decode_attention_at on the GPU), so that one captured
// graph serves every decode step. kv_append_at_views appends the token at *pos;
// kv_attention_at_views attends as the query at *pos (over positions 0..*pos), with the
// split plan of max_length positions; the caller keeps *pos < max_length <= the capacity
// (the GPU cannot check it; the CPU twin does).
void kv_append_at_views(const KvLayerShape& shape, const KvLayerViews& layer, const TensorView& pos,
                        const TensorView& k, const TensorView& v, cuda_stream_t stream);
void kv_attention_at_views(const KvLayerShape& shape, const KvLayerViews& layer, const TensorView& pos,
                           std::int64_t max_length, const TensorView& q, const TensorView& out,
                           const TensorView& workspace, cuda_stream_t stream);
// Workspace bytes of a CUDA kv_attention_at_views (0 in a CPU-only build).
std::size_t kv_attention_at_workspace_bytes(const KvLayerShape& shape, std::int64_t n_heads,
                                            std::int64_t max_length);

}  // namespace lowbit::python
