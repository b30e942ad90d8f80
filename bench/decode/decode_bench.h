// `lowbit bench decode`: the engine's batch-1 decode speed on the GPU after a prompt of
// each context length, per KV-cache policy: tokens/s and device ms a token (median of
// several runs, min and max), the bytes a token reads (weights + the cache as held) and
// what share of the copy ceiling measured in the same run that makes, the prompt's
// prefill speed, and the device memory in use. The prompt is random token ids: speed
// does not depend on the text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::bench {

struct DecodeBenchOptions {
  std::string model_path;                    // a GGUF file (lowbit model synth writes real shapes)
  std::vector<std::int64_t> contexts{2048};  // prompt lengths
  std::vector<std::string> policies{"full"};  // full, window, selective8, selective4, int8, int4
  std::int64_t steps = 128;                  // decode steps a run
  int runs = 3;                              // runs a (context, policy), back to back
  // The session's capacity, as a generate or serve session is sized for its whole request
  // (0: what the runs need). The graph's plans follow it.
  std::int64_t max_tokens = 0;
  std::int64_t sink = 16, window = 32;
  std::int64_t kv_key_block = 0;    // keys per channel over blocks of this many tokens (KIVI; 0: per token)
  bool programmatic_launch = true;  // off: the kernels launch without programmatic dependent launch
  std::string json_path;
};

// Decode speed of one (context, policy).
struct DecodeRow {
  std::int64_t context = 0;
  std::string policy;
  std::vector<double> tokens_per_s;     // wall time of each run
  std::vector<double> device_ms;        // device span a token of each run
  double prefill_s = 0;                 // the prompt, chunked as the engine does it
  double weight_bytes = 0, kv_bytes = 0;  // read a token at the context (the cache as held)
  double memory_gb = 0;                 // device memory in use with the session allocated
};

int run_decode_bench(const DecodeBenchOptions& options);

}  // namespace lowbit::bench
