// `lowbit bench serve`: a load generator against a running lowbit serve (or any
// OpenAI-compatible server): at each concurrency level, that many clients send
// streaming completions back to back (prompts of random token ids of a given length,
// greedy, ignore_eos so that each generates max_tokens), and the run reports requests/s,
// generated tokens/s, time to first token and inter-token latency (p50 / p99), and,
// from lowbit serve's /metrics, the engine steps that made the latency.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::serve {

struct LoadOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::int64_t> concurrency{1, 8};
  std::int64_t requests = 0;  // per level; 0: 4 x the concurrency
  std::int64_t prompt_tokens = 128, max_tokens = 64;
  std::string model;          // empty: the first of GET /v1/models
  double timeout_seconds = 600;
};

struct LoadResult {
  std::int64_t concurrency = 0, requests = 0, failed = 0, generated_tokens = 0;
  double seconds = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0;
  // The server's engine steps during the level (lowbit serve's GET /metrics; absent from
  // other servers): decode-only steps and steps with prompt tokens, their mean ms.
  bool has_steps = false;
  double decode_steps = 0, decode_step_ms = 0, prompt_steps = 0, prompt_step_ms = 0;
  std::string first_error;  // of the failed requests, the first one's
  double requests_per_second() const { return seconds > 0 ? static_cast<double>(requests - failed) / seconds : 0; }
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(generated_tokens) / seconds : 0; }
};

// Throws lowbit::Error when the server cannot be reached or lists no model.
std::vector<LoadResult> run_load(const LoadOptions& options);

// The q-quantile (0 < q <= 1) of `samples` by the nearest-rank rule; 0 when empty.
double percentile(std::vector<double> samples, double q);

}  // namespace lowbit::serve
