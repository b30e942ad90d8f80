// The body of POST /v1/completions and /v1/chat/completions, parsed and checked: every
// field OpenAI's API defines that lowbit serves, llama.cpp's sampling extras (top_k,
// min_p, repeat_penalty, repeat_last_n, ignore_eos), and a clear ApiError (400) naming
// the field for a wrong type or an out-of-range value. Unknown fields are ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling.h"
#include "engine/tokenizer/tokenizer.h"

namespace lowbit::serve {

enum class Endpoint { completions, chat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string model;                          // as sent; empty when absent
  std::string prompt;                         // completions, given as text
  std::vector<std::int32_t> prompt_tokens;    // completions, given as token ids
  bool prompt_is_tokens = false;
  std::vector<engine::ChatMessage> messages;  // chat
  std::optional<std::int64_t> max_tokens;     // absent: the server's default
  engine::SamplingParams sampling;            // the server's defaults, overridden by the request
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  int logprobs = -1;  // -1: none; else the number of alternatives per token (0..5 completions, 0..20 chat)
  bool ignore_eos = false;
};

// Throws ApiError (400) for malformed JSON, a body that is not an object, or any field
// of the wrong type or out of range.
ApiRequest parse_request(const std::string& body, Endpoint endpoint, const engine::SamplingParams& defaults);

}  // namespace lowbit::serve
