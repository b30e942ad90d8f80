// The GPU side of include/lowbit/flash_attention.h: the one launch the API calls.
// Arguments arrive validated; no CUDA headers here.
#pragma once

#include <cstdint>

#include "lowbit/flash_attention.h"

namespace lowbit::cuda::flash {

// Which kernel runs: the wgmma kernel where the device and the operands allow it (else
// the mma.sync kernel), or one of them by name (tests and benchmarks; wgmma throws where
// it cannot run).
enum class FlashKernel { automatic, mma, wgmma };

// Whether the wgmma kernel runs on the current device.
bool flash_wgmma_available();

// The batch's prefix sums are on the device (uploaded by the API into its workspace);
// max_q_len: the longest sequence's queries (the grid's query tiles). cu_q and cu_k null:
// one sequence, q's rows and k's rows (batch 1, max_q_len q.rows()).
void flash_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const std::int32_t* cu_q, const std::int32_t* cu_k, std::int64_t batch, std::int64_t max_q_len,
                     const FlashAttentionParams& params, cuda_stream_t stream,
                     FlashKernel kernel = FlashKernel::automatic);

// One sequence's causal attention over keys held per KV head, as the decode cache's full
// policy holds them (core/kv_layout.h: [kv_heads][slots][D], slot = position): the chunk's
// `rows` queries, at positions pos0 .. pos0 + rows - 1, each attend to positions [0, its
// own] (flash's causal chunk: q_len rows, k_len pos0 + rows). f16 throughout; scale
// 1 / sqrt(head_dim). Pointers and strides (in elements) as the caller's buffers lie.
struct CacheAttention {
  const void* q = nullptr;  // [rows][ldq], query head h at column h * head_dim
  std::int64_t ldq = 0;
  const void* k = nullptr;  // KV head g's position s at g * head_stride + s * key_stride
  const void* v = nullptr;  // the same layout as k
  std::int64_t key_stride = 0, head_stride = 0;
  void* out = nullptr;  // [rows][ldo], laid out as q
  std::int64_t ldo = 0;
  std::int64_t rows = 0, pos0 = 0;
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

// Runs CacheAttention on the wgmma kernel; false (nothing launched) where that kernel
// cannot: not this device or build, head_dim other than 64 / 128, or TMA refused the
// operands (pointers and strides must be multiples of 16 bytes), so the caller runs
// another kernel. Throws lowbit::Error naming a malformed argument.
bool flash_attention_over_cache(const CacheAttention& c, cuda_stream_t stream);

}  // namespace lowbit::cuda::flash
