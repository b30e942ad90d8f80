// `lowbit bench attention`: flash_attention (include/lowbit/flash_attention.h) at prefill
// shapes: one sequence of L tokens, per kernel (mma.sync; wgmma where it runs), dtype,
// head_dim and mask; min / median / max ms and
// TFLOPS at the median. PyTorch's scaled_dot_product_attention, the peer, runs in
// `python -m lowbit.bench_attention` (the same shapes, both in one process).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::bench {

struct FlashBenchOptions {
  std::int64_t seq_len = 8192, heads = 32, kv_heads = 32;
  std::vector<std::int64_t> head_dims{128, 64};
  std::vector<std::string> dtypes{"f16", "bf16"};
  // Every case measured this many times in one process, each time over freshly allocated
  // inputs that a spacer allocation places at other addresses: whether a run's speed
  // follows where its buffers lie (bench/notes/flash.md, the non-causal modes).
  std::int64_t repeat = 1;
  // The host sleeps this long before each timed sample: 1 ms lets an H200 come back to
  // its full SM clock between samples (bench/notes/flash.md, the SM clock's modes).
  double idle_ms = 0.0;
  // Launches back to back until a sample lasts this long: 1 ms takes one or two launches
  // between host syncs; 20 ms holds the GPU busy as a long prefill does (and, where the
  // board is at its power limit, at the clock that load settles to).
  double sample_ms = 1.0;
  std::string json_path;
};

int run_flash_bench(const FlashBenchOptions& options);

}  // namespace lowbit::bench
