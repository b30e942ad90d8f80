// `lowbit bench kv-attention`: the decode attention of one layer (one query token over
// a cache of `context` positions) per policy and kernel (simt, mma): time, the bytes it
// must read (the visible cache as held, q and the output), and that against the copy
// ceiling measured in the same run. The two kernels' outputs are compared first.
// With rows > 1, the prefill form instead: a chunk of `rows` query rows ending at the
// context (kv_attention_rows), simt against tensor cores (mma; and for the full policy
// auto, the flash wgmma kernel on Hopper), in TFLOPS.
// With batches, the serving form instead: B sequences of `context` positions each in a
// paged pool, one launch for all (paged_kv_attention), per kernel, against the copy
// ceiling.
// With key_block > 0 (the decode form only), K per channel over blocks of key_block tokens
// (core/kv_layout.h): simt and mma_swap, the kernels that read them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::bench {

struct KvAttentionBenchOptions {
  std::int64_t n_heads = 32, kv_heads = 8, head_dim = 128;
  std::vector<std::int64_t> contexts{2048, 8192, 32768, 131072};
  std::vector<std::string> policies{"full", "selective8", "selective4", "int8", "int4"};
  std::int64_t sink = 16, window = 32;
  std::int64_t rows = 1;  // > 1: the prefill rows form, a chunk of this many rows
  std::vector<std::int64_t> batches;  // non-empty: the paged batch form at each B
  std::vector<std::int64_t> split_lens;  // decode and batch forms: the tensor-core kernels also at these split lengths
  // decode form: K per channel over blocks of this many tokens (KIVI; a multiple of 16) on the
  // policies with a body, timed on simt and mma_swap (the kernels that read key blocks); 0: per token
  std::int64_t key_block = 0;
  std::string json_path;
};

int run_kv_attention_bench(const KvAttentionBenchOptions& options);

}  // namespace lowbit::bench
