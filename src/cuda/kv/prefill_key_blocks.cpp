// Prefill of a cache with key blocks (kv_cuda.h, kv_prefill_key_blocks). Where the flash
// kernel takes the chunk: kv_append_rows (a snapshot of the ring and the staging ring,
// the rows in parallel, then the blocks they complete), one attention that reads each
// row's open block in FP16 from the chunk or the snapshot. Else the chunk in pieces that
// end where a row's append completes a block, each piece's rows appended in order (one
// launch) and attended at once (the simt rows form): within a piece no block is
// quantized before its last row, so every row reads the open block's FP16 keys from the
// staging ring, as it would one token at a time; the piece's last row reads the block it
// completed quantized.
#include <algorithm>

#include "cuda/kv/kv_cuda.h"

namespace lowbit::cuda::kv {

void kv_prefill_key_blocks(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                           void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                           std::size_t workspace_bytes, cuda_stream_t stream, AttentionKernel kernel) {
  check_chunk_rows(shape, chunk, "kv_prefill_key_blocks");
  check_key_blocks(shape, layer, false, "kv_prefill_key_blocks");
  LOWBIT_CHECK(shape.key_block > 0, "kv_prefill_key_blocks: the cache has no key blocks (kv_append_rows)");
  LOWBIT_CHECK(kernel == AttentionKernel::automatic || kernel == AttentionKernel::simt,
               "kv_prefill_key_blocks: the kernel is automatic (flash where it runs) or simt");
  if (kernel == AttentionKernel::automatic &&
      kv_attention_rows_flash(shape, layer, chunk, snapshot, n_heads, out, out_ld)) {
    kv_append_rows(shape, layer, chunk, snapshot, stream);
    kv_attention_rows(shape, layer, chunk, snapshot, n_heads, out, out_ld, workspace, workspace_bytes, stream);
    return;
  }
  for (std::int64_t first = 0; first < chunk.rows;) {
    // The piece ends at the first row that completes a block, or at the chunk's end.
    const std::int64_t last = std::min(shape.next_block_completion(chunk.pos0 + first) - chunk.pos0, chunk.rows - 1);
    ChunkRows piece = chunk;
    piece.base = static_cast<std::uint16_t*>(chunk.base) + first * chunk.ld;
    piece.rows = last - first + 1;
    piece.pos0 = chunk.pos0 + first;
    kv_snapshot_ring(shape, layer, snapshot, stream);  // the ring before the piece (the rows kernel reads it)
    kv_append_rows_in_order(shape, layer, piece, stream);
    kv_attention_rows(shape, layer, piece, snapshot, n_heads, static_cast<std::uint16_t*>(out) + first * out_ld,
                      out_ld, workspace, workspace_bytes, stream, AttentionKernel::simt);
    first = last + 1;
  }
}

}  // namespace lowbit::cuda::kv
