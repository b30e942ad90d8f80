// Generated tokens' bytes to the text a client sees, with stop strings: the text
// before the first occurrence of any stop string is the output, and nothing of a stop
// string is ever shown. While streaming, a tail that could still become a stop string,
// or an incomplete UTF-8 sequence, is held back until the next token decides it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lowbit::engine {

class TextStream {
 public:
  // Throws lowbit::Error for an empty stop string.
  explicit TextStream(std::vector<std::string> stops = {});

  // Appends one token's bytes (nothing after a stop); returns the text that became
  // final with them (possibly empty).
  std::string push(std::string_view bytes);
  // At the end of generation: the held-back rest (empty after a stop).
  std::string finish();

  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }  // everything returned so far

 private:
  std::string take(std::size_t n);

  std::vector<std::string> stops_;
  std::string pending_, text_;
  bool stopped_ = false;
};

// Bytes at the end of `s` that start a UTF-8 sequence without completing it (0 to 3).
std::size_t incomplete_utf8_tail(std::string_view s);

}  // namespace lowbit::engine
