// The JSON lowbit serve answers with, in OpenAI's shapes: completions and chat
// completions (whole, or as server-sent-event chunks), usage, logprobs, errors, the
// model list.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "engine/tokenizer/tokenizer.h"
#include "serve/api_error.h"
#include "serve/openai_request.h"
#include "serve/request_channel.h"

namespace lowbit::serve {

// What every response of one request shares.
struct ResponseHead {
  Endpoint endpoint = Endpoint::completions;
  std::string id;           // "cmpl-..." / "chatcmpl-..."
  std::int64_t created = 0;  // Unix seconds
  std::string model;
};

struct Usage {
  std::int64_t prompt_tokens = 0, completion_tokens = 0;
};

// JSON text, invalid UTF-8 (a token cut inside a character) replaced by U+FFFD.
std::string dump(const nlohmann::json& value);

nlohmann::json error_json(const ApiError& error);
nlohmann::json usage_json(const Usage& usage);
// "stop" or "length" (an ended request that was not cancelled or failed).
const char* finish_reason(engine::FinishReason reason);

// The whole answer of a non-streaming request: its text, pieces (for logprobs) and end.
nlohmann::json completion_json(const ResponseHead& head, const std::string& text, const std::vector<Piece>& pieces,
                               const engine::Tokenizer& tokenizer, bool logprobs, const char* finish,
                               const Usage& usage);
// One streaming chunk: text (and the logprobs of its pieces), or the end (finish set).
// The first chat chunk also carries the assistant role. text_offset: the length of the
// text streamed before this chunk (completions' logprobs count offsets from the start).
nlohmann::json chunk_json(const ResponseHead& head, const std::string& text, const std::vector<Piece>& pieces,
                          const engine::Tokenizer& tokenizer, bool logprobs, const char* finish, bool first,
                          std::size_t text_offset = 0);
// The last chunk when stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk_json(const ResponseHead& head, const Usage& usage);

nlohmann::json models_json(const std::string& model, std::int64_t created);

}  // namespace lowbit::serve
