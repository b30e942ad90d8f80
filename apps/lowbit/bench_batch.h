// `lowbit bench batch`: offline batched generation on a BatchEngine, as
// llama-batched-bench measures it: for each KV-cache policy, prompt length PP,
// generation length TG and batch size B, B sequences prefill PP tokens each in one
// step, then decode TG steps of B rows; prompt and generation throughput.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "engine_setup.h"

namespace lowbit::cli {

struct BatchBenchCase {
  std::string policy;  // "full", "window", "selective8", "selective4", "int8", "int4"
  engine::KvCacheOptions cache;
};

struct BatchBenchOptions {
  std::vector<BatchBenchCase> policies;
  std::vector<std::int64_t> prompt_tokens, generated_tokens, batch_sizes;
  std::string json_path;
};

struct BatchBenchRow {
  std::string policy;
  std::int64_t pp = 0, tg = 0, b = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  std::size_t kv_bytes = 0;  // all B sequences' caches at the end
  double prefill_tokens_per_second() const { return static_cast<double>(b * pp) / prefill_seconds; }
  double decode_tokens_per_second() const { return static_cast<double>(b * tg) / decode_seconds; }
};

// Runs every case on the CPU batch engine, prints a Markdown table (and JSON when
// asked); returns the rows.
std::vector<BatchBenchRow> run_bench_batch(const LoadedModel& model, const BatchBenchOptions& options);

}  // namespace lowbit::cli
