// The batched decode step over the paged KV cache (layout: core/kv_pages.h): the append
// of one new token for each of B sequences, and the attention of their newest queries,
// each in one launch a layer. The kernels are kv_cuda.h's, compiled a second time with
// the paged address map (one kernel body, two maps): a sequence's output is bit for bit
// kv_attention_at's on a contiguous cache with the same values and the same split
// length (kv_attention_at's split_len argument), its cache bytes kv_append_at's.
// Positions, slots and page tables are read from device memory when the kernels run,
// so that one captured CUDA graph serves every step of a batch-size bucket.
// Arguments arrive as the host knows them; what only the device knows (descriptors,
// tables) the kernels check as they read it: a bad row is skipped (no read or write out
// of the pool) and flagged in batch.status, which paged_kv_check_status turns into a
// lowbit::Error. check_paged_batch (core/kv_pages.h) checks host copies before upload.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/kv_pages.h"
#include "cuda/kv/kv_cuda.h"
#include "lowbit/tensor.h"

namespace lowbit::cuda::kv {

using core::KvPageLayout;
using core::KvPagedLayer;
using core::KvSeqDesc;

// The step's sequences, on the device.
struct PagedBatch {
  const KvSeqDesc* descs = nullptr;      // [batch]: each row's position and slot
  const std::int32_t* tables = nullptr;  // [max_seqs][table_stride] page ids (KvPageAllocator::tables())
  std::int64_t batch = 0;                // rows, 1..65535
  // Every active row has pos + 1 <= max_length <= layout.max_tokens: the attention's
  // split plan is that of max_length positions for the batch (rows shorter than it run
  // fewer splits; splits past a row's length exit at once).
  std::int64_t max_length = 0;
  // Optional int32 on the device, zero before the first call: the kernels OR in a
  // PagedFault bit for each bad row they skipped.
  std::int32_t* status = nullptr;
};

// What a kernel found wrong in a row (bits of *status).
enum PagedFault : std::int32_t {
  kPagedBadSlot = 1,      // slot outside [0, max_seqs)
  kPagedBadPosition = 2,  // pos + 1 > max_length (or > max_tokens)
  kPagedBadPage = 4,      // a table entry the row needs outside [0, pages)
};

// The step's rows as the QKV GEMM writes them: f16 [batch][ld], row b's n_heads query
// heads at column 0, its K at k_col and V at v_col (kv_heads x head_dim each). 16-byte
// aligned (base, ld, k_col, v_col multiples of 8 halves).
struct BatchRows {
  void* base = nullptr;
  std::int64_t ld = 0, k_col = 0, v_col = 0;
};

// Appends each active row's K and V at its position: kv_append_at's work for each row
// (its FP16 slot in a page or the fixed area; selective quantizes the token leaving the
// window into its body page; int8 / int4 quantize the new token), in one launch. With
// `rope`, K and the row's n_heads query heads (in place in rows) are rotated by the
// angles of the row's position as kv_append_at does (rope->q and rope->n_heads are not
// used: the rows' query heads are). The pages a row writes must be in its table
// (KvPageAllocator::grow(slot, pos + 1) before the step). history_complete: as
// kv_append_at's (selective: the token leaving the window is quantized before the
// wait for the previous kernel).
void paged_kv_append(const KvPageLayout& layout, const KvPagedLayer& layer, const PagedBatch& batch,
                     const BatchRows& rows, std::int64_t n_heads, cuda_stream_t stream,
                     const AppendRope* rope = nullptr, bool history_complete = false);

// out row b (f16 or f32 [n_heads x head_dim] at out + b * out_ld elements) = the
// attention of row b's query over the pos + 1 positions of its sequence, for every
// active row, in one launch: grid (splits, head blocks, batch), flash-decoding splits
// of the batch's plan per row, the combine fused into each row's last split (its
// workspace (paged_kv_attention_workspace) zeroed once before the first call; every
// call leaves it ready for the next). kernel: as kv_attention's (mma / mma_swap take
// GQA groups of up to 16 / 8 query heads). history_complete, split_len: as kv_attention_at's
// (a forced split length's splits of max_length must fit the workspace: a benchmark's sweep).
void paged_kv_attention(const KvPageLayout& layout, const KvPagedLayer& layer, const PagedBatch& batch,
                        const BatchRows& rows, std::int64_t n_heads, void* out, std::int64_t out_ld, DType out_dtype,
                        void* workspace, std::size_t workspace_bytes, cuda_stream_t stream,
                        bool history_complete = false, AttentionKernel kernel = AttentionKernel::automatic,
                        std::int64_t split_len = 0);

// The split plan of a batch on the current device: split lengths chosen so that the
// batch's blocks fill the device at max_length (the same for every row).
DecodeSplitPlan paged_kv_attention_plan(const KvPageLayout& layout, std::int64_t n_heads, std::int64_t batch,
                                        std::int64_t max_length, AttentionKernel kernel = AttentionKernel::automatic);
// Workspace bytes of paged_kv_attention for up to `batch` rows of up to max_length
// positions, under any kernel choice.
std::size_t paged_kv_attention_workspace(const KvPageLayout& layout, std::int64_t n_heads, std::int64_t batch,
                                         std::int64_t max_length);

// The prefill rows form (kv_cuda.h: rope_rows, then these two) for ONE sequence on the
// paged pool: the sequence in slot `slot` (its fixed area, and its page table at
// tables + slot * table_stride in device memory, holding every page positions
// [0, chunk.pos0 + chunk.rows) need: KvPageAllocator::grow first). The same semantics
// and the same kernels as kv_append_rows / kv_attention_rows (compiled with the paged
// map): the pool's bytes are what the contiguous form writes in a contiguous cache, and
// each row's output (a row at position t sees each older token as the cache held it at
// t; the ring's from the chunk or the snapshot) is the contiguous form's bit for bit. A
// page the table lacks is flagged in *status (optional, as PagedBatch's) and skipped.
void paged_kv_append_rows(const KvPageLayout& layout, const KvPagedLayer& layer, std::int32_t slot,
                          const std::int32_t* tables, const ChunkRows& chunk, void* snapshot, cuda_stream_t stream,
                          std::int32_t* status = nullptr);
void paged_kv_attention_rows(const KvPageLayout& layout, const KvPagedLayer& layer, std::int32_t slot,
                             const std::int32_t* tables, const ChunkRows& chunk, const void* snapshot,
                             std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                             std::size_t workspace_bytes, cuda_stream_t stream, std::int32_t* status = nullptr,
                             AttentionKernel kernel = AttentionKernel::automatic);
// The checks of a paged cache with key blocks (nothing without them): a body, B a multiple
// of 16 and pages of B tokens (core::kv_page_layout's rule, which puts each block's first
// position in a page of its own, where its parameters live). The appends, the decode
// attention (mma_swap) and the prefill (the tensor-core rows kernel, or simt pieces) take them.
inline void check_paged_key_blocks(const KvPageLayout& layout, const char* what) {
  const KvLayerShape& s = layout.shape;
  if (s.key_block == 0) return;
  LOWBIT_CHECK(s.key_blocks() && s.key_block % 16 == 0 && layout.page_tokens == s.key_block, what,
               ": key blocks of ", s.key_block, " on a quantizing policy need pages of as many tokens (a multiple of "
               "16), got pages of ", layout.page_tokens);
}
// Prefill of a paged cache with key blocks (prefill_key_blocks.cpp), after rope_rows:
// automatic / mma (where rows_mma_takes): the whole chunk appended (paged_kv_append_rows)
// and attended by the tensor-core rows kernel, each row reading its open block's FP16 keys
// from the chunk or the snapshot; simt: the chunk in pieces that end where a row's append
// completes a block, each piece appended and attended by the simt rows form, so that every
// row reads the open block's FP16 keys from the staging ring, as one token at a time would.
void paged_kv_prefill_key_blocks(const KvPageLayout& layout, const KvPagedLayer& layer, std::int32_t slot,
                                 const std::int32_t* tables, const ChunkRows& chunk, void* snapshot,
                                 std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                                 std::size_t workspace_bytes, cuda_stream_t stream, std::int32_t* status = nullptr,
                                 AttentionKernel kernel = AttentionKernel::automatic);
// The checks both make of the pool, the slot and the table (the chunk: check_chunk_rows).
inline void check_paged_rows_call(const KvPageLayout& layout, const KvPagedLayer& layer, std::int32_t slot,
                                  const std::int32_t* tables, const ChunkRows& chunk, const char* what) {
  LOWBIT_CHECK(slot >= 0 && slot < layout.max_seqs, what, ": slot ", slot, ", expected 0..", layout.max_seqs - 1);
  LOWBIT_CHECK((tables || !layout.has_pages()) && (layer.pages || !layout.has_pages()) &&
                   (layer.fixed || layout.fixed_bytes() == 0),
               what, ": the pool's pages, fixed areas or page tables are missing");
  LOWBIT_CHECK(chunk.pos0 + chunk.rows <= layout.max_tokens, what, ": positions up to ", chunk.pos0 + chunk.rows - 1,
               " past the ", layout.max_tokens, " a sequence holds");
}

// Waits for the stream, reads *status, resets it to 0, and throws lowbit::Error naming
// the faults when it was not 0.
void paged_kv_check_status(std::int32_t* status, cuda_stream_t stream);

}  // namespace lowbit::cuda::kv
