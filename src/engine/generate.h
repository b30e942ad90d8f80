// Greedy generation on a Session (CPU or GPU): the prompt as one prefill, then one decode step
// per token (argmax of the logits, lowest id on ties), stopping at max_new tokens or
// at an end-of-generation token. Times the two phases and records the KV-cache bytes
// after every step (the seed's Figure 2: memory against generated tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

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

}  // namespace lowbit::engine
