#include "serve/request_channel.h"

namespace lowbit::serve {

RequestChannel::RequestChannel(const engine::Tokenizer& tokenizer, std::vector<std::string> stops)
    : tokenizer_(&tokenizer), text_(std::move(stops)) {}

bool RequestChannel::on_token(std::int32_t token, const engine::Logprobs* logprobs) {
  Piece piece;
  piece.text = text_.push(tokenizer_->token_bytes(token));
  piece.token = token;
  if (logprobs) piece.logprobs = *logprobs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!first_token_) first_token_ = std::chrono::steady_clock::now();
    pieces_.push_back(std::move(piece));
  }
  ready_.notify_all();
  return !text_.stopped();
}

void RequestChannel::on_finish(const engine::RequestSummary& summary) {
  Piece rest;
  rest.text = text_.finish();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!rest.text.empty()) pieces_.push_back(std::move(rest));
    summary_ = summary;
  }
  ready_.notify_all();
}

RequestChannel::Taken RequestChannel::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !pieces_.empty() || summary_.has_value(); });
  Taken out;
  out.pieces.assign(std::make_move_iterator(pieces_.begin()), std::make_move_iterator(pieces_.end()));
  pieces_.clear();
  out.finished = summary_;
  return out;
}

std::optional<std::chrono::steady_clock::time_point> RequestChannel::first_token_time() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return first_token_;
}

}  // namespace lowbit::serve
