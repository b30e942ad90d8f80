// Prefill of a cache with key blocks (kv_cuda.h, kv_prefill_key_blocks). Where the flash
// kernel or the tensor-core rows kernel takes the chunk: kv_append_rows (a snapshot of
// the ring and the staging ring, the rows in parallel, then the blocks they complete),
// one attention that reads each row's open block in FP16 from the chunk or the snapshot.
// Else (simt) the chunk in pieces that end where a row's append completes a block, each
// piece's rows appended in order (one launch) and attended at once (the simt rows form):
// within a piece no block is quantized before its last row, so every row reads the open
// block's FP16 keys from the staging ring, as it would one token at a time; the piece's
// last row reads the block it completed quantized.
#include <algorithm>

#include "cuda/kv/kv_cuda.h"
#include "cuda/kv/paged_kv_cuda.h"

namespace lowbit::cuda::kv {
namespace {

// fn(piece, first) for each piece of the chunk: rows [first, last], where last is the
// first row from first on whose append completes a block, or the chunk's last row.
template <class Fn>
void for_each_key_block_piece(const KvLayerShape& shape, const ChunkRows& chunk, Fn&& fn) {
  for (std::int64_t first = 0; first < chunk.rows;) {
    const std::int64_t last = std::min(shape.next_block_completion(chunk.pos0 + first) - chunk.pos0, chunk.rows - 1);
    ChunkRows piece = chunk;
    piece.base = static_cast<std::uint16_t*>(chunk.base) + first * chunk.ld;
    piece.rows = last - first + 1;
    piece.pos0 = chunk.pos0 + first;
    fn(piece, first);
    first = last + 1;
  }
}

}  // namespace

void kv_prefill_key_blocks(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                           void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                           std::size_t workspace_bytes, cuda_stream_t stream, AttentionKernel kernel) {
  check_chunk_rows(shape, chunk, "kv_prefill_key_blocks");
  check_key_blocks(shape, layer, "kv_prefill_key_blocks");
  LOWBIT_CHECK(shape.key_block > 0, "kv_prefill_key_blocks: the cache has no key blocks (kv_append_rows)");
  LOWBIT_CHECK(kernel == AttentionKernel::automatic || kernel == AttentionKernel::mma ||
                   kernel == AttentionKernel::simt,
               "kv_prefill_key_blocks: the kernel is automatic (flash, else mma where they run), mma or simt");
  LOWBIT_CHECK(kernel != AttentionKernel::mma || rows_mma_takes(shape, n_heads),
               "kv_prefill_key_blocks: the mma kernel takes key blocks of 16 or more and GQA groups of up to 64, got ",
               shape.key_block, " and ", n_heads / shape.kv_heads);
  const bool whole = kernel == AttentionKernel::automatic
                         ? kv_attention_rows_flash(shape, layer, chunk, snapshot, n_heads, out, out_ld) ||
                               rows_mma_takes(shape, n_heads)
                         : kernel == AttentionKernel::mma;
  if (whole) {
    kv_append_rows(shape, layer, chunk, snapshot, stream);
    kv_attention_rows(shape, layer, chunk, snapshot, n_heads, out, out_ld, workspace, workspace_bytes, stream,
                      kernel);
    return;
  }
  for_each_key_block_piece(shape, chunk, [&](const ChunkRows& piece, std::int64_t first) {
    kv_snapshot_ring(shape, layer, snapshot, stream);  // the ring before the piece (the rows kernel reads it)
    kv_append_rows_in_order(shape, layer, piece, stream);
    kv_attention_rows(shape, layer, piece, snapshot, n_heads, static_cast<std::uint16_t*>(out) + first * out_ld,
                      out_ld, workspace, workspace_bytes, stream, AttentionKernel::simt);
  });
}

void paged_kv_prefill_key_blocks(const KvPageLayout& layout, const KvPagedLayer& layer, std::int32_t slot,
                                 const std::int32_t* tables, const ChunkRows& chunk, void* snapshot,
                                 std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                                 std::size_t workspace_bytes, cuda_stream_t stream, std::int32_t* status,
                                 AttentionKernel kernel) {
  check_chunk_rows(layout.shape, chunk, "paged_kv_prefill_key_blocks");
  check_paged_key_blocks(layout, "paged_kv_prefill_key_blocks");
  LOWBIT_CHECK(layout.shape.key_block > 0, "paged_kv_prefill_key_blocks: the cache has no key blocks");
  LOWBIT_CHECK(kernel == AttentionKernel::automatic || kernel == AttentionKernel::mma ||
                   kernel == AttentionKernel::simt,
               "paged_kv_prefill_key_blocks: the kernel is automatic (mma where it runs), mma or simt");
  const bool takes = rows_mma_takes(layout.shape, n_heads);
  LOWBIT_CHECK(kernel != AttentionKernel::mma || takes,
               "paged_kv_prefill_key_blocks: the mma kernel takes GQA groups of up to 64, got ",
               n_heads / layout.shape.kv_heads);
  if (kernel != AttentionKernel::simt && takes) {  // the whole chunk, then the tensor-core rows kernel
    paged_kv_append_rows(layout, layer, slot, tables, chunk, snapshot, stream, status);
    paged_kv_attention_rows(layout, layer, slot, tables, chunk, snapshot, n_heads, out, out_ld, workspace,
                            workspace_bytes, stream, status, AttentionKernel::mma);
    return;
  }
  // A piece's rows appended in parallel: each is its staging slot's last writer (a piece
  // holds at most one block's rows), and the block its last row completes is quantized
  // from the piece and the snapshot, which the append takes first.
  for_each_key_block_piece(layout.shape, chunk, [&](const ChunkRows& piece, std::int64_t first) {
    paged_kv_append_rows(layout, layer, slot, tables, piece, snapshot, stream, status);
    paged_kv_attention_rows(layout, layer, slot, tables, piece, snapshot, n_heads,
                            static_cast<std::uint16_t*>(out) + first * out_ld, out_ld, workspace, workspace_bytes,
                            stream, status, AttentionKernel::simt);
  });
}

}  // namespace lowbit::cuda::kv
