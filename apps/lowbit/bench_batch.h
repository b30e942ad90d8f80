// `lowbit bench batch`: offline batched generation on a BatchEngine, as
// llama-batched-bench measures it: for each KV-cache policy, prompt length PP,
// generation length TG and batch size B, B sequences prefill PP tokens each in one
// step (a skewed batch: one of them a longer prompt, in a step of its own before), then
// decode TG steps of B rows; prompt and generation throughput, min / median
// / max over repeated runs (after one short warm-up run of the engine). With profile,
// one more run of each case with the engine's step profiling on (engine/step_profile.h:
// the GPU engine's per-part times of its decode steps), printed after the table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/step_profile.h"
#include "engine_session.h"
#include "engine_setup.h"

namespace lowbit::cli {

struct BatchBenchCase {
  std::string policy;  // "full", "window", "selective8", "selective4", "int8", "int4"
  engine::KvCacheOptions cache;
};

struct BatchBenchOptions {
  std::vector<BatchBenchCase> policies;
  std::vector<std::int64_t> prompt_tokens, generated_tokens, batch_sizes;
  // > 0: a skewed batch: its first sequence prefills this many prompt tokens (in a step of
  // its own, before the others' prompt step), the other B - 1 the case's PP.
  std::int64_t long_prompt = 0;
  std::int64_t repeats = 3;
  bool profile = false;  // also a profiled run of each case (the engine must support it)
  bool programmatic_launch = true;  // recorded in the JSON (set_programmatic_launch sets it)
  std::string json_path;
};

struct BatchBenchRow {
  std::string policy;
  std::int64_t pp = 0, tg = 0, b = 0, long_pp = 0;  // long_pp: BatchBenchOptions::long_prompt
  std::vector<double> prefill_seconds, decode_seconds;  // one a run, sorted
  std::size_t kv_bytes = 0;  // all B sequences' caches at the end
  // With BatchBenchOptions::profile: the profiled run's decode steps, and its decode
  // time (slower than the unprofiled runs': the events cost).
  std::optional<engine::StepProfile> profile;
  double profiled_decode_seconds = 0;
  double median_prefill() const { return prefill_seconds[prefill_seconds.size() / 2]; }
  double median_decode() const { return decode_seconds[decode_seconds.size() / 2]; }
  std::int64_t prompt_tokens() const { return long_pp > 0 ? (b - 1) * pp + long_pp : b * pp; }
  double prefill_tokens_per_second(double seconds) const { return static_cast<double>(prompt_tokens()) / seconds; }
  double decode_tokens_per_second(double seconds) const { return static_cast<double>(b * tg) / seconds; }
};

// Runs every case on the maker's batch engine, prints a Markdown table (and JSON when
// asked); returns the rows.
std::vector<BatchBenchRow> run_bench_batch(const LoadedModel& model, SessionMaker& maker,
                                           const BatchBenchOptions& options);

}  // namespace lowbit::cli
