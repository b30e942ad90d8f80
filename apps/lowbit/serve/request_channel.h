// What one HTTP request hears from the scheduler: the engine thread turns each token
// into text (stop strings applied, engine/text_stream.h) and queues it; the request's
// HTTP thread takes the pieces as they come (streaming) or waits for the end. Never
// blocks the engine thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "engine/text_stream.h"
#include "engine/tokenizer/tokenizer.h"

namespace lowbit::serve {

struct Piece {
  std::string text;            // may be empty (held back, or the token is part of a stop string)
  std::int32_t token = -1;     // -1: text released at the end, no token of its own
  std::optional<engine::Logprobs> logprobs;
};

class RequestChannel final : public engine::RequestSink {
 public:
  RequestChannel(const engine::Tokenizer& tokenizer, std::vector<std::string> stops);

  // Engine thread.
  bool on_token(std::int32_t token, const engine::Logprobs* logprobs) override;
  void on_finish(const engine::RequestSummary& summary) override;

  // HTTP thread: the pieces queued since the last call, after waiting up to `timeout`
  // for one (or the end); `finished` is set once the request has ended and every piece
  // has been taken.
  struct Taken {
    std::vector<Piece> pieces;
    std::optional<engine::RequestSummary> finished;
  };
  Taken take(std::chrono::milliseconds timeout);
  // Time of the first token, for the statistics (nullopt before it).
  std::optional<std::chrono::steady_clock::time_point> first_token_time() const;

 private:
  const engine::Tokenizer* tokenizer_;
  engine::TextStream text_;  // engine thread only
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Piece> pieces_;
  std::optional<engine::RequestSummary> summary_;
  std::optional<std::chrono::steady_clock::time_point> first_token_;
};

}  // namespace lowbit::serve
