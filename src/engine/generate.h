// Generation on a Session (CPU or GPU): the prompt as one prefill, then one decode step
// per token, stopping at max_new tokens or where is_stop says. Greedy takes the argmax
// of the logits (lowest id on ties); sampled generation draws through sampling.h.
// Times the two phases and records the KV-cache bytes after every step (the seed's
// Figure 2: memory against generated tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampling.h"
#include "engine/session.h"

namespace lowbit::engine {

struct GenerationResult {
  std::vector<std::int32_t> tokens;       // generated (the stop token excluded)
  bool stopped = false;                   // an end-of-generation token ended it
  double prefill_seconds = 0, decode_seconds = 0;
  std::int64_t decode_steps = 0;          // forward calls after the prefill
  double decode_device_seconds = 0;       // of decode_seconds, the device's span (GPU sessions)
  std::vector<std::size_t> kv_bytes;      // after the prefill, then after each generated token
  double decode_tokens_per_second() const {
    return decode_seconds > 0 ? static_cast<double>(decode_steps) / decode_seconds : 0.0;
  }
};

// `is_stop(id)`: ends generation without emitting id (may be empty: never stop).
// `on_token(id)`: called for each generated token as it is chosen (streaming).
// The session must be empty and sized for prompt + max_new tokens.
GenerationResult generate_greedy(Session& session, std::span<const std::int32_t> prompt, std::int64_t max_new,
                                 const std::function<bool(std::int32_t)>& is_stop,
                                 const std::function<void(std::int32_t)>& on_token);

// Generation through the sampler. Greedy without penalties is generate_greedy (on a GPU
// session, its run-ahead decode); otherwise each step's logits come to the host and the
// i-th generated token is draw i of the request's random stream (penalties over the
// tokens generated so far). `sampling` must be valid (SamplingParams::validate).
GenerationResult generate(Session& session, std::span<const std::int32_t> prompt, std::int64_t max_new,
                          const SamplingParams& sampling, const std::function<bool(std::int32_t)>& is_stop,
                          const std::function<void(std::int32_t)>& on_token);

}  // namespace lowbit::engine
