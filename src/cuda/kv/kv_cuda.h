// The decode KV cache's kernels (include/lowbit/kv_cache.h; layout: core/kv_layout.h):
// the append, the attention of the newest query (flash-decoding over the mixed cache,
// read in place), and the forms the engine's decode graph and prefill use. Arguments
// arrive validated; no CUDA headers here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/kv_layout.h"
#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit::cuda::kv {

using core::DecodeSpan;
using core::DecodeSplitPlan;
using core::KvBody;
using core::KvLayerBuffers;
using core::KvLayerShape;
using core::KvPart;
using core::decode_heads_per_block;
using core::decode_plan_of_length;
using core::decode_span;
using core::decode_span_unchecked;
using core::decode_workspace_bytes;
using core::kv_positions_held;
using core::plan_decode_splits;

// Device entry points (append.cu, kv_attention.cu), on `stream`.
// Appends the token at `pos` (= the current length): k, v are f16 [kv_heads x head_dim]
// on the device, RoPE applied. Writes its FP16 slot; selective quantizes the token
// leaving the window (pos - window) from its FP16 value first; int8 / int4 quantize the
// new token's f16 values. Codes, scales and mins equal cpu::kv_quantize() on the CPU.
// With `rope`, the engine's decode step fuses RoPE into the append: k is rotated (pairs
// (2i, 2i + 1), i < rope_dims / 2, by the angles of its position, rounded to f16; with
// rope.neox, qwen2's pairs (i, i + rope_dims / 2)) before it is stored or quantized, and
// the n_heads query heads at rope.q are rotated in place. The style is a template
// argument of the kernels: the normal pairs' kernels are the same code as without it.
// With `hadamard` (the engine's --kv-rotate k), each K head and each query head is then
// rotated by the normalized Walsh-Hadamard transform (formats/hadamard.h: the same
// butterflies as the CPU, across the warp's lanes by shuffles) and rounded to f16 again,
// so the cache holds rotated keys and q . k is unchanged: the attention kernels read
// them as they are (V is never rotated here).
struct AppendRope {
  const float* cos = nullptr;  // f32 [positions x rope_dims / 2]
  const float* sin = nullptr;
  std::int64_t rope_dims = 0;  // even, <= head_dim
  void* q = nullptr;           // f16 [n_heads x head_dim]
  std::int64_t n_heads = 0;    // a multiple of kv_heads
  bool hadamard = false;
  bool neox = false;  // pair i is (i, i + rope_dims / 2) (NEOX, qwen2), not (2i, 2i + 1)
};
void kv_append(const KvLayerShape& shape, const KvLayerBuffers& layer, std::int64_t pos, const void* k, const void* v,
               cuda_stream_t stream, const AppendRope* rope = nullptr);

// The decode attention's kernels: simt (f32 on the CUDA cores; every form, and the one
// the rows form runs), mma (tensor cores, attention_mma.cu: the decode forms, GQA groups
// of up to 16 query heads), mma_swap (its variant with the positions as the mma's M and P
// in f16 only; GQA groups of up to 8, larger ones run mma). automatic picks mma_swap, then
// mma, where they take the shape (H100: mma_swap 2-20% faster than mma, bench/notes/decode.md).
enum class AttentionKernel : int { automatic, simt, mma, mma_swap };
// The GQA groups (query heads a KV head) the tensor-core decode kernels take: mma all of a
// KV head's query heads in one block's m16 rows, mma_swap in its n8 columns.
constexpr int kMmaMaxGroup = 16;
constexpr int kMmaSwapMaxGroup = 8;

// out[h] = softmax(q[h] . K^T / sqrt(D)) V over the span's positions of KV head
// h / (n_heads / kv_heads). q: f16 [n_heads x D]; out: [n_heads x D] f32 or f16.
// workspace: decode_workspace_bytes(n_heads, D, splits of the plan) or more, 16-byte
// aligned (every form's). q and the FP16 / code buffers 16-byte aligned. Two launches
// (splits, then combine); no sync.
// split_len > 0 replaces the plan's split length, as kv_attention_at's (a benchmark's sweep).
void kv_attention(const KvLayerShape& shape, const KvLayerBuffers& layer, const DecodeSpan& span, const void* q,
                  std::int64_t n_heads, void* out, DType out_dtype, void* workspace, std::size_t workspace_bytes,
                  cuda_stream_t stream, AttentionKernel kernel = AttentionKernel::automatic,
                  std::int64_t split_len = 0);
// The plan kv_attention uses on the current device (for `kernel`).
DecodeSplitPlan kv_attention_plan(const KvLayerShape& shape, const DecodeSpan& span, std::int64_t n_heads,
                                  AttentionKernel kernel = AttentionKernel::automatic);

// The CUDA-graph forms of the two calls above: the new token's position is read from
// device memory (*device_pos, int32) when the kernels run, so that one captured graph
// serves every decode step. kv_append_at writes position *device_pos; kv_attention_at
// attends over the first *device_pos + 1 positions with the split plan of max_length
// positions (splits past the current length exit at once; the combine takes the others).
// The caller keeps *device_pos < max_length <= the cache's capacity. kv_attention_at
// combines the splits in the split kernel (its last block per head group; one launch):
// its workspace (kv_attention_workspace_bound) must be zeroed once before the first
// call, and every call leaves it ready for the next, whatever its max_length (the
// counters sit at the workspace's start: caches of different capacities may share it).
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
void kv_append_at(const KvLayerShape& shape, const KvLayerBuffers& layer, const std::int32_t* device_pos,
                  const void* k, const void* v, cuda_stream_t stream, const AppendRope* rope = nullptr,
                  bool history_complete = false, void* ring_backup = nullptr);
std::size_t ring_backup_bytes(const KvLayerShape& shape);
void kv_restore_ring_slot(const KvLayerShape& shape, const KvLayerBuffers& layer, std::int64_t pos,
                          const void* ring_backup, cuda_stream_t stream);
// split_len > 0 replaces the plan's split length (a multiple of 16, at most the kernel's
// longest: kMaxSplit for simt, kMaxMmaSplit for the tensor-core kernels; the
// workspace must then hold the splits of max_length at that length): the paged kernels'
// tests compare a batch row with this form at the batch's plan.
void kv_attention_at(const KvLayerShape& shape, const KvLayerBuffers& layer, const std::int32_t* device_pos,
                     std::int64_t max_length, const void* q, std::int64_t n_heads, void* out, DType out_dtype,
                     void* workspace, std::size_t workspace_bytes, cuda_stream_t stream, bool history_complete = false,
                     AttentionKernel kernel = AttentionKernel::automatic, std::int64_t split_len = 0);
// Prefill: a chunk of tokens at positions pos0 .. pos0 + rows - 1 in three or four
// launches and a copy (rope_rows; kv_append_rows, which snapshots the window's ring
// first; kv_attention_rows, and a combine where it splits the positions), with the
// results of `rows` one-at-a-time kv_append + kv_attention calls: the same cache bytes,
// and each row's attention over what that row would see at its position (up to the
// kernels' rounding: f16 P and f16 body values on the tensor cores, the combine's). The chunk's rows as the QKV GEMM writes them: f16 [rows][ld], the
// n_heads query heads at column 0, K at k_col and V at v_col (kv_heads x head_dim each).
struct ChunkRows {
  void* base = nullptr;
  std::int64_t rows = 0, ld = 0, k_col = 0, v_col = 0;
  std::int64_t pos0 = 0;
};
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
// The checks of a contiguous cache with key blocks (shape.key_block > 0; nothing for 0;
// the paged pool's: check_paged_key_blocks): a body, an even size up to 1024, and K's
// staging ring and parameters set. `what` names the caller.
inline void check_key_blocks(const KvLayerShape& s, const KvLayerBuffers& layer, const char* what) {
  if (s.key_block == 0) return;
  LOWBIT_CHECK(s.key_blocks() && s.key_block % 2 == 0 && s.key_block <= 1024, what, ": key_block ", s.key_block,
               ", expected an even 2..1024 on a quantizing policy");
  auto aligned = [](const void* p) { return p && reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool blocks = s.key_param_count() > 0;  // a cache shorter than a block has no parameters
  LOWBIT_CHECK(aligned(layer.k.staged) && (!blocks || aligned(layer.k.scales)) &&
                   (!blocks || !s.has_mins() || aligned(layer.k.mins)),
               what, ": key blocks need K's staging ring, scales and mins (16-byte aligned: the kernel's loads)");
}
// Rotates every row's query heads and K in place by the angles of its position (then by
// the Hadamard transform, with rope.hadamard).
void rope_rows(const KvLayerShape& shape, const ChunkRows& chunk, const AppendRope& rope, cuda_stream_t stream);
// Bytes of the ring snapshot (window and selective; key blocks; 0 for the other forms):
// the ring's FP16 slots of K and V as they were before the chunk, f16 [2][kv_heads]
// [window][D], then with key blocks K's staging ring, f16 [kv_heads][key_block][D].
std::size_t ring_snapshot_bytes(const KvLayerShape& shape);
// Copies the ring's slots and the staging ring (as they are before a chunk) into the
// snapshot; nothing for a cache without either.
void kv_snapshot_ring(const KvLayerShape& shape, const KvLayerBuffers& layer, void* snapshot, cuda_stream_t stream);
// Snapshots the ring, then writes every row's slot (the ring's last writers only) and,
// under selective, quantizes each token that leaves the window from its FP16 value (in
// the chunk or the snapshot); int8 / int4 quantize every row. K must be rotated already.
// Key blocks (contiguous cache): K's body tokens are staged where they are their slot's
// last writer, and each block the chunk completes is quantized from its FP16 values (the
// chunk's, the ring's snapshot or the staging ring's): the bytes of the rows' appends in
// order. A chunk attended whole after it needs the flash kernel (kv_attention_rows_flash);
// kv_prefill_key_blocks chooses.
void kv_append_rows(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk, void* snapshot,
                    cuda_stream_t stream);
// Each row's attention at its position, after kv_append_rows: the sink and the body from
// the cache, the recent FP16 positions from the chunk (>= pos0) or the snapshot (< pos0).
// out: f16 [rows][out_ld] (out_ld even), a row's n_heads x head_dim at column 0.
// kernel: automatic / mma run the tensor-core kernel (attention_rows_mma.cu: GQA groups
// up to 64; P and the quantized positions' values rounded to f16 for the mma), which uses
// the workspace for split-K partials where it holds them (any size, none included);
// automatic on the full policy's contiguous cache runs flash's Hopper wgmma kernel over
// the FP16 slots instead where it runs (cuda/flash flash_attention_over_cache: P rounded
// to f16 as well; no workspace), and on the other policies' contiguous cache its form
// over the sink, the body and the recent keys (cuda/flash
// flash_attention_over_mixed_cache: the same semantics and roundings as the mma kernel;
// with key blocks (4 bits, the blocks it takes) over any chunk appended in order after
// the snapshot: kv_attention_rows_flash says where), else the mma kernel where it takes
// the shape (rows_mma_takes; paged_kv_attention_rows: always), with key blocks over any
// chunk appended after the snapshot;
// simt runs the decode kernel row by row (f32 throughout; the reference), whose
// workspace takes kv_attention_rows_workspace(..., r) bytes for r rows at a time.
void kv_attention_rows(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                       const void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                       std::size_t workspace_bytes, cuda_stream_t stream,
                       AttentionKernel kernel = AttentionKernel::automatic);
// Whether kv_attention_rows' tensor-core kernel (mma; attention_rows_mma.cu) takes the
// shape: head_dim 64 or 128, GQA groups up to 64, key blocks of 16 or more (over any chunk
// appended after the snapshot: its rows read an open block's K from the chunk or the
// snapshot).
bool rows_mma_takes(const KvLayerShape& shape, std::int64_t n_heads);
// Whether kv_attention_rows (automatic) runs this chunk of a contiguous cache on the
// flash kernel (nothing launched): with key blocks, a chunk that crosses block
// completions can then be appended whole before its attention.
bool kv_attention_rows_flash(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                             const void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld);
// Prefill of a cache with key blocks (prefill_key_blocks.cpp), after rope_rows: the
// appends and attention of kv_append_rows + kv_attention_rows, the same results. Where
// the flash kernel takes the chunk (kv_attention_rows_flash; kernel automatic) or the
// tensor-core rows kernel does (rows_mma_takes; automatic or mma): those two over the
// whole chunk, each row reading the FP16 keys of its open block from the chunk or the
// snapshot. Else (simt) a row must read the FP16 keys of a block that a later row completes
// from the staging ring, so the chunk is cut after each row whose append completes a
// block (core next_block_completion); a piece's rows are appended in order after a
// snapshot, then attended at once (kv_attention_rows, simt). Its workspace and snapshot:
// kv_attention_rows_workspace of one row or more, ring_snapshot_bytes.
// kv_append_rows_in_order: a chunk's rows appended one after the other in one launch
// (a warp per head and part), the bytes of `rows` kv_append calls; key blocks only.
void kv_append_rows_in_order(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                             cuda_stream_t stream);
void kv_prefill_key_blocks(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                           void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                           std::size_t workspace_bytes, cuda_stream_t stream,
                           AttentionKernel kernel = AttentionKernel::automatic);
std::size_t kv_attention_rows_workspace(const KvLayerShape& shape, std::int64_t n_heads, std::int64_t rows,
                                            std::int64_t max_length);
// Workspace bytes enough for kv_attention / kv_attention_at at any length up to
// max_length.
std::size_t kv_attention_workspace_bound(const KvLayerShape& shape, std::int64_t n_heads,
                                             std::int64_t max_length);

// The values the query at span.end - 1 reads, in position order, as f16
// [visible][kv_heads][head_dim] into k_out and v_out (kv_read of kv_cache.h).
void kv_read(const KvLayerShape& shape, const KvLayerBuffers& layer, const DecodeSpan& span, void* k_out, void* v_out,
             cuda_stream_t stream);

}  // namespace lowbit::cuda::kv
