// The device layout of one layer's KV cache for decode, as the decode-attention kernel
// reads it (issue 5). Plain pointers and sizes, no ownership; host-only helpers here
// (no CUDA headers), so that the CPU tests check the arithmetic.
//
// Per layer, K and V each have (H = kv_heads, D = head_dim):
//   f16    [H][f16_slots][D] FP16 bits. Slots [0, sink) hold positions 0..sink-1;
//          slots sink + (pos % window) are the window's ring buffer. Per KV head, so
//          that one head's positions are contiguous for the kernel's 16-byte loads.
//          full: f16_slots = max_tokens, slot = pos (sink = max_tokens, no ring).
//   codes  [body_pos][H][code_bytes] quantized body by position (body_pos = pos -
//          body_base): D bytes (INT8 symmetric, i8) or D/2 (INT4 asymmetric, low
//          nibble first): the codes of cpu::kv_quantize() over a [H x D] token
//          matrix (one group per head), i.e. exactly what KvCache stores.
//   scales [body_pos][H] f16, mins [body_pos][H] f16 (INT4 only): formats::HalfParams,
//          the f32 scale / min rounded to f16, the codes encoded with the rounded values.
// Only the default group (one scale (+ min) per token per KV head) is laid out here.
//
// A query at the last position sees (DecodeSpan, as KvCache::Visible but split by form):
//   [0, sink_end)              FP16, slot = pos
//   [sink_end, recent_begin)   the quantized body (selective, int8, int4), or dropped
//                              (window)
//   [recent_begin, end)        FP16 ring slots (window, selective)
// full: sink_end = recent_begin = end; int8 / int4: sink_end = 0, recent_begin = end.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "engine/kv_cache.h"
#include "formats/hd.h"
#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit::cuda::engine {

using lowbit::engine::KvPolicy;

enum class KvBody : int { none = 0, int4 = 4, int8 = 8 };

// Sizes of one layer's cache; the same for K and V. (LOWBIT_HD: the kernels use these.)
struct KvLayerShape {
  std::int64_t kv_heads = 0, head_dim = 0;
  std::int64_t sink = 0, window = 0;  // FP16 slots: sink + window (full: sink = max_tokens)
  KvBody body = KvBody::none;
  std::int64_t body_base = 0;   // first quantized position (selective: sink)
  std::int64_t body_slots = 0;  // positions the body holds

  LOWBIT_HD std::int64_t f16_slots() const { return sink + window; }
  LOWBIT_HD std::int64_t code_bytes() const { return body == KvBody::int4 ? head_dim / 2 : head_dim; }
  LOWBIT_HD bool has_mins() const { return body == KvBody::int4; }
  LOWBIT_HD bool drops() const { return body == KvBody::none && window > 0; }  // window policy
  LOWBIT_HD std::int64_t slot(std::int64_t pos) const { return pos < sink ? pos : sink + pos % window; }

  std::size_t f16_bytes() const { return static_cast<std::size_t>(kv_heads * f16_slots() * head_dim * 2); }
  std::size_t code_bytes_total() const {
    return body == KvBody::none ? 0 : static_cast<std::size_t>(body_slots * kv_heads * code_bytes());
  }
  std::size_t param_count() const {
    return body == KvBody::none ? 0 : static_cast<std::size_t>(body_slots * kv_heads);
  }
  static constexpr std::size_t kParamBytes = 2;  // f16 scales and mins
  std::size_t param_bytes_total() const { return param_count() * kParamBytes * (has_mins() ? 2 : 1); }
};

// One part (K or V) of one layer on the device.
struct KvPart {
  std::uint16_t* f16 = nullptr;  // FP16 bits
  std::uint8_t* codes = nullptr;
  std::uint16_t* scales = nullptr;  // f16 bits
  std::uint16_t* mins = nullptr;    // f16 bits, INT4 only
};

struct KvLayerDevice {
  KvPart k, v;
};

// The positions the newest query (at end - 1) reads, by form.
struct DecodeSpan {
  std::int64_t sink_end = 0, recent_begin = 0, end = 0;
  // Positions the kernel reads: the quantized body counts unless the policy drops it.
  LOWBIT_HD std::int64_t visible(const KvLayerShape& s) const {
    return sink_end + (s.drops() ? 0 : recent_begin - sink_end) + (end - recent_begin);
  }
};

// The layer shape of a KvCache policy, for caches of up to max_tokens tokens.
inline KvLayerShape kv_layer_shape(KvPolicy policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
                                   std::int64_t window, int kv_bits, std::int64_t max_tokens) {
  LOWBIT_CHECK(kv_heads > 0 && max_tokens > 0, "kv layer: kv_heads ", kv_heads, ", max_tokens ", max_tokens,
               " must be positive");
  LOWBIT_CHECK(head_dim == 64 || head_dim == 128, "kv layer: head_dim = ", head_dim, ", expected 64 or 128");
  KvLayerShape s;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  switch (policy) {
    case KvPolicy::full: s.sink = max_tokens; break;
    case KvPolicy::window:
    case KvPolicy::selective:
      LOWBIT_CHECK(sink >= 0 && window >= 1, "kv layer: sink ", sink, " (>= 0), window ", window, " (>= 1)");
      s.sink = sink;
      s.window = window;
      if (policy == KvPolicy::selective) {
        LOWBIT_CHECK(kv_bits == 8 || kv_bits == 4, "kv layer: kv_bits = ", kv_bits, ", expected 8 or 4");
        s.body = kv_bits == 8 ? KvBody::int8 : KvBody::int4;
        s.body_base = sink;
        s.body_slots = std::max<std::int64_t>(0, max_tokens - sink - window);
      }
      break;
    case KvPolicy::int8:
    case KvPolicy::int4:
      s.body = policy == KvPolicy::int8 ? KvBody::int8 : KvBody::int4;
      s.body_slots = max_tokens;
      break;
  }
  return s;
}

// What the query at the last of `length` (>= 1) positions reads; unchecked, for kernels
// that read the length from device memory.
LOWBIT_HD DecodeSpan decode_span_unchecked(const KvLayerShape& s, std::int64_t length) {
  DecodeSpan span;
  span.end = length;
  if (s.window == 0 && s.body == KvBody::none) {  // full
    span.sink_end = span.recent_begin = length;
  } else if (s.window == 0) {  // int8 / int4
    span.sink_end = 0;
    span.recent_begin = length;
  } else {  // window / selective: the ring holds the last `window` positions
    span.sink_end = s.sink < length ? s.sink : length;
    span.recent_begin = span.sink_end > length - s.window ? span.sink_end : length - s.window;
  }
  return span;
}

// The checked form.
inline DecodeSpan decode_span(const KvLayerShape& s, std::int64_t length) {
  LOWBIT_CHECK(length >= 1, "decode span: length = ", length, ", expected >= 1");
  return decode_span_unchecked(s, length);
}

// Flash-decoding split over the visible positions: enough blocks to fill the device
// (target ~2 per SM), at least kMinSplit positions a split (a block has work to amortize
// its combine record), at most kMaxSplit (the split's scores live in shared memory).
struct DecodeSplitPlan {
  static constexpr std::int64_t kMinSplit = 64, kMaxSplit = 1024, kAlign = 32;
  std::int64_t splits = 0, split_len = 0;
};

inline DecodeSplitPlan plan_decode_splits(std::int64_t visible, std::int64_t blocks_per_split, int sm_count) {
  LOWBIT_CHECK(visible >= 1 && blocks_per_split >= 1 && sm_count >= 1, "decode split plan: visible ", visible,
               ", blocks_per_split ", blocks_per_split, ", sm_count ", sm_count);
  using P = DecodeSplitPlan;
  const std::int64_t want = std::max<std::int64_t>(1, (2 * sm_count + blocks_per_split - 1) / blocks_per_split);
  std::int64_t len = (visible + want - 1) / want;
  len = std::clamp<std::int64_t>((len + P::kAlign - 1) / P::kAlign * P::kAlign, P::kMinSplit, P::kMaxSplit);
  return P{(visible + len - 1) / len, len};
}

// Query heads per block: the largest of 4, 3, 2, 1 dividing the GQA group, so that a
// block reads its KV head once for all of them (a group of 8 takes two blocks).
inline int decode_heads_per_block(std::int64_t group) {
  for (int g : {4, 3, 2}) {
    if (group % g == 0) return g;
  }
  return 1;
}

// Scratch floats of the split partials: per query head and split, max, sum and head_dim
// accumulators.
inline std::size_t decode_workspace_bytes(std::int64_t n_heads, std::int64_t head_dim, std::int64_t max_splits) {
  return static_cast<std::size_t>(n_heads * max_splits * (head_dim + 2)) * sizeof(float);
}

// Device entry points (src/cuda/engine/*.cu), on `stream`.
// Appends the token at `pos` (= the current length): k, v are f16 [kv_heads x head_dim]
// on the device, RoPE applied. Writes its FP16 slot; selective quantizes the token
// leaving the window (pos - window) from its FP16 value first; int8 / int4 quantize the
// new token's f16 values. Codes, scales and mins equal cpu::kv_quantize() on the CPU.
// With `rope`, the engine's decode step fuses RoPE into the append: k is rotated (pairs
// (2i, 2i + 1), i < rope_dims / 2, by the angles of its position, rounded to f16) before
// it is stored or quantized, and the n_heads query heads at rope.q are rotated in place.
struct AppendRope {
  const float* cos = nullptr;  // f32 [positions x rope_dims / 2]
  const float* sin = nullptr;
  std::int64_t rope_dims = 0;  // even, <= head_dim
  void* q = nullptr;           // f16 [n_heads x head_dim]
  std::int64_t n_heads = 0;    // a multiple of kv_heads
};
void kv_append(const KvLayerShape& shape, const KvLayerDevice& layer, std::int64_t pos, const void* k, const void* v,
               cuda_stream_t stream, const AppendRope* rope = nullptr);

// out[h] = softmax(q[h] . K^T / sqrt(D)) V over the span's positions of KV head
// h / (n_heads / kv_heads). q: f16 [n_heads x D]; out: [n_heads x D] f32 or f16.
// workspace: decode_workspace_bytes(n_heads, D, splits of the plan) or more. q and the
// FP16 / code buffers 16-byte aligned. Two launches (splits, then combine); no sync.
void decode_attention(const KvLayerShape& shape, const KvLayerDevice& layer, const DecodeSpan& span, const void* q,
                      std::int64_t n_heads, void* out, DType out_dtype, void* workspace, std::size_t workspace_bytes,
                      cuda_stream_t stream);
// The plan decode_attention uses on the current device.
DecodeSplitPlan decode_attention_plan(const KvLayerShape& shape, const DecodeSpan& span, std::int64_t n_heads);

// The CUDA-graph forms of the two calls above: the new token's position is read from
// device memory (*device_pos, int32) when the kernels run, so that one captured graph
// serves every decode step. kv_append_at writes position *device_pos; decode_attention_at
// attends over the first *device_pos + 1 positions with the split plan of max_length
// positions (splits past the current length do no work; the combine weighs them 0).
// The caller keeps *device_pos < max_length <= the cache's capacity. decode_attention_at
// combines the splits in the split kernel (its last block per head group; one launch):
// its workspace (decode_attention_workspace_bound) must be zeroed once before the first
// call, and every call leaves it ready for the next.
// history_complete: the caller guarantees that *device_pos and every cache row except the
// ones kv_append_at writes at *device_pos (the new token; under selective also the token
// leaving the window) were written by work that completed before the first kernel of
// this launch chain (the engine: each decode step's graph starts after the previous
// step's host sync). The kernels then do what does not need their predecessor's output
// before they wait for it (programmatic dependent launch), off the step's critical path:
// the append quantizes the token leaving the window, the attention loads the older rows.
// Without the guarantee (e.g. appends of several positions back to back) pass false.
// ring_backup (selective; ring_backup_bytes): where the append keeps the FP16 values of
// the ring slot it overwrites, so that kv_restore_ring_slot can take the append back (a
// decode step run ahead and not wanted; the other forms need nothing taken back: the
// next append at that position rewrites what this one wrote).
void kv_append_at(const KvLayerShape& shape, const KvLayerDevice& layer, const std::int32_t* device_pos,
                  const void* k, const void* v, cuda_stream_t stream, const AppendRope* rope = nullptr,
                  bool history_complete = false, void* ring_backup = nullptr);
std::size_t ring_backup_bytes(const KvLayerShape& shape);
void kv_restore_ring_slot(const KvLayerShape& shape, const KvLayerDevice& layer, std::int64_t pos,
                          const void* ring_backup, cuda_stream_t stream);
void decode_attention_at(const KvLayerShape& shape, const KvLayerDevice& layer, const std::int32_t* device_pos,
                         std::int64_t max_length, const void* q, std::int64_t n_heads, void* out, DType out_dtype,
                         void* workspace, std::size_t workspace_bytes, cuda_stream_t stream,
                         bool history_complete = false);
// Prefill: a chunk of tokens at positions pos0 .. pos0 + rows - 1 in four launches and a
// copy (rope_rows; kv_append_rows, which snapshots the window's ring first;
// decode_attention_rows: split and combine), with the results of `rows` one-at-a-time
// kv_append + decode_attention calls: the same cache bytes, and each row's attention
// over what that row would see at its position (up to the combine's rounding: the split
// plan differs). The chunk's rows as the QKV GEMM writes them: f16 [rows][ld], the
// n_heads query heads at column 0, K at k_col and V at v_col (kv_heads x head_dim each).
struct ChunkRows {
  void* base = nullptr;
  std::int64_t rows = 0, ld = 0, k_col = 0, v_col = 0;
  std::int64_t pos0 = 0;
};
// Positions a cache can be appended at: the window policy's ring never fills (any); every
// other form holds max_tokens.
inline std::int64_t kv_positions_held(const KvLayerShape& shape) {
  if (shape.body == KvBody::none && shape.window > 0) return std::numeric_limits<std::int64_t>::max();
  return shape.window == 0 && shape.body != KvBody::none ? shape.body_slots
                                                         : shape.sink + shape.window + shape.body_slots;
}
// The checks every rows-form call makes of a chunk: its layout, its positions, the
// kernels' 16-byte loads. `what` names the caller in the message.
inline void check_chunk_rows(const KvLayerShape& shape, const ChunkRows& c, const char* what) {
  const std::int64_t d = shape.head_dim;
  LOWBIT_CHECK(d == 64 || d == 128, what, ": head_dim = ", d, ", expected 64 or 128");
  LOWBIT_CHECK(c.base && c.rows >= 1 && c.rows < 65536 && c.pos0 >= 0 && c.k_col >= 0 && c.v_col >= 0 &&
                   c.ld >= c.k_col + shape.kv_heads * d && c.ld >= c.v_col + shape.kv_heads * d,
               what, ": chunk of ", c.rows, " rows (1..65535) at ", c.pos0, ", ld ", c.ld, ", k_col ", c.k_col,
               ", v_col ", c.v_col);
  const std::int64_t capacity = kv_positions_held(shape);
  LOWBIT_CHECK(c.pos0 + c.rows <= capacity, what, ": positions ", c.pos0, "..", c.pos0 + c.rows - 1,
               " outside the cache (", capacity, " tokens)");
  auto aligned = [](std::int64_t halves) { return halves % 8 == 0; };  // 16 bytes
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(c.base) % 16 == 0 && aligned(c.ld) && aligned(c.k_col) &&
                   aligned(c.v_col),
               what, ": chunk rows and their K / V columns must be 16-byte aligned");
}
// Rotates every row's query heads and K in place by the angles of its position.
void rope_rows(const KvLayerShape& shape, const ChunkRows& chunk, const AppendRope& rope, cuda_stream_t stream);
// Bytes of the ring snapshot (window and selective; 0 for the other forms): the ring's
// FP16 slots of K and V as they were before the chunk, f16 [2][kv_heads][window][D].
std::size_t ring_snapshot_bytes(const KvLayerShape& shape);
// Snapshots the ring, then writes every row's slot (the ring's last writers only) and,
// under selective, quantizes each token that leaves the window from its FP16 value (in
// the chunk or the snapshot); int8 / int4 quantize every row. K must be rotated already.
void kv_append_rows(const KvLayerShape& shape, const KvLayerDevice& layer, const ChunkRows& chunk, void* snapshot,
                    cuda_stream_t stream);
// Each row's attention at its position, after kv_append_rows: the sink and the body from
// the cache, the recent FP16 positions from the chunk (>= pos0) or the snapshot (< pos0).
// out: f16 [rows][out_ld], a row's n_heads x head_dim at column 0. The workspace takes
// decode_attention_rows_workspace(..., r) bytes for r rows at a time (>= 1 row).
void decode_attention_rows(const KvLayerShape& shape, const KvLayerDevice& layer, const ChunkRows& chunk,
                           const void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld,
                           void* workspace, std::size_t workspace_bytes, cuda_stream_t stream);
std::size_t decode_attention_rows_workspace(const KvLayerShape& shape, std::int64_t n_heads, std::int64_t rows,
                                            std::int64_t max_length);
// Workspace bytes enough for decode_attention / decode_attention_at at any length up to
// max_length.
std::size_t decode_attention_workspace_bound(const KvLayerShape& shape, std::int64_t n_heads,
                                             std::int64_t max_length);

}  // namespace lowbit::cuda::engine
