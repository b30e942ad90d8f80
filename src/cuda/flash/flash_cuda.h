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

// One sequence's chunk over a decode cache that quantizes or drops positions (core/
// kv_layout.h: the selective, window, int8 and int4 policies), with their exact
// semantics: the row at position t sees position s <= t as the cache held it at t:
//   FP16 from the sink's cache slots   s < sink (window, selective);
//   the quantized body                 body_base <= s <= t - window (selective: body_base
//                                      = sink; int8 / int4: 0 and window 0, every s <= t);
//   FP16 recent                        t - window < s, s >= sink (window, selective): from
//                                      the chunk's own K / V rows (s >= pos0) or the ring's
//                                      snapshot (s < pos0);
// nothing else (the window policy has no body). With key blocks (key_block B > 0: K per
// channel over blocks of B body positions, core/kv_layout.h) the row at t sees K of the
// body positions past its last complete block in FP16 (the open block: from the chunk,
// the ring's snapshot or the staging ring's snapshot), their V quantized as ever. The
// kernel walks one virtual key sequence of segments (sink, body, open, recent:
// core::KvFlashSegments), each masked by its rule, so every row sees each position once.
// f16; scale 1 / sqrt(head_dim). Element strides.
struct MixedCacheAttention {
  const void* q = nullptr;  // [rows][ldq], query head h at column h * head_dim
  std::int64_t ldq = 0;
  const void* chunk_k = nullptr;  // the chunk's K rows (after RoPE): KV head g at g * head_dim
  const void* chunk_v = nullptr;
  std::int64_t chunk_ld = 0;
  const void* snap_k = nullptr;  // the ring before the chunk: [kv_heads][window][head_dim], slot s % window
  const void* snap_v = nullptr;  // (read only where the chunk starts past the sink)
  const void* f16_k = nullptr;  // the cache's FP16 slots [kv_heads][f16_slots][head_dim]: the sink at slot s
  const void* f16_v = nullptr;
  std::int64_t f16_slots = 0;
  int body_bits = 0;  // 0 (window), 8 or 4
  const void* codes_k = nullptr;  // [s - body_base][kv_heads][code bytes: head_dim (8 bits), head_dim / 2 (4)]
  const void* codes_v = nullptr;
  const void* scales_k = nullptr;  // f16 [s - body_base][kv_heads]
  const void* scales_v = nullptr;
  const void* mins_k = nullptr;  // f16 [s - body_base][kv_heads], 4 bits only
  const void* mins_v = nullptr;
  // Key blocks: K's scales and mins are f16 [block][kv_heads][head_dim] instead; the
  // staging ring before the chunk [kv_heads][key_block][head_dim], body position s at
  // slot (s - body_base) % key_block (read for positions before the chunk only).
  std::int64_t key_block = 0;
  const void* snap_staged = nullptr;
  std::int64_t sink = 0, window = 0, body_base = 0;
  void* out = nullptr;  // [rows][ldo], laid out as q
  std::int64_t ldo = 0;
  std::int64_t rows = 0, pos0 = 0;
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

// Runs MixedCacheAttention on a wgmma kernel (flash_wgmma_cache.cu: the body dequantized
// into shared memory by the producer warpgroup); false (nothing launched) where it cannot:
// not this device or build, head_dim other than 64 / 128, or TMA refused q. Throws
// lowbit::Error naming a malformed argument (the loads' 16-byte alignment included).
bool flash_attention_over_mixed_cache(const MixedCacheAttention& c, cuda_stream_t stream);
// Whether flash_attention_over_mixed_cache would run c (the same checks, nothing launched):
// a caller that must choose its form before it writes the cache asks first.
bool flash_mixed_cache_takes(const MixedCacheAttention& c);
// The key blocks the kernel reads: the 4-bit body, B a multiple of 16 that divides the
// kernel's 128-key tile or that it divides.
bool flash_mixed_cache_key_block(int body_bits, std::int64_t key_block);

}  // namespace lowbit::cuda::flash
