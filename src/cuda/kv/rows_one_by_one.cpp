// The prefill of a chunk row by row: each row's append, then its decode attention, on
// the stream in order. What the rows form (kv_append_rows + kv_attention_rows) computes
// at once, for caches that have no rows form: with key blocks a row must read the FP16
// keys of a block that a later row of the chunk completes (and so quantizes), which only
// the order of one-at-a-time appends gives. Launches: two or three a row.
#include "cuda/kv/kv_cuda.h"

namespace lowbit::cuda::kv {

namespace {
constexpr std::int64_t kFallbackSplit = 512;  // the rows form's split: its workspace holds a row's partials
}  // namespace

void kv_attend_rows_one_by_one(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                               std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                               std::size_t workspace_bytes, cuda_stream_t stream) {
  check_chunk_rows(shape, chunk, "kv_attend_rows_one_by_one");
  LOWBIT_CHECK(n_heads > 0 && n_heads % shape.kv_heads == 0 && chunk.k_col >= n_heads * shape.head_dim,
               "kv_attend_rows_one_by_one: ", n_heads, " query heads (a multiple of ", shape.kv_heads,
               ", before k_col ", chunk.k_col, ")");
  LOWBIT_CHECK(out != nullptr && out_ld >= n_heads * shape.head_dim, "kv_attend_rows_one_by_one: out_ld ", out_ld,
               " < ", n_heads * shape.head_dim);
  for (std::int64_t r = 0; r < chunk.rows; ++r) {
    const std::uint16_t* row = static_cast<const std::uint16_t*>(chunk.base) + r * chunk.ld;
    const std::int64_t pos = chunk.pos0 + r;
    kv_append(shape, layer, pos, row + chunk.k_col, row + chunk.v_col, stream);
    const DecodeSpan span = decode_span(shape, pos + 1);
    // The device's plan where the workspace holds its partials, else the rows form's
    // split length (kv_attention_rows_workspace's bytes a row hold those).
    const std::int64_t splits = kv_attention_plan(shape, span, n_heads).splits;
    const bool fits = decode_workspace_bytes(n_heads, shape.head_dim, splits) <= workspace_bytes;
    kv_attention(shape, layer, span, row, n_heads, static_cast<std::uint16_t*>(out) + r * out_ld, DType::f16, workspace,
                 workspace_bytes, stream, AttentionKernel::automatic, fits ? 0 : kFallbackSplit);
  }
}

}  // namespace lowbit::cuda::kv
