#include "engine/text_stream.h"

#include <algorithm>

#include "lowbit/error.h"

namespace lowbit::engine {

std::size_t incomplete_utf8_tail(std::string_view s) {
  // Look back over at most 3 continuation bytes for a lead byte.
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte
    const std::size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    LOWBIT_CHECK(!stops_[i].empty(), "stop[", i, "]: empty stop string");
  }
}

std::string TextStream::take(std::size_t n) {
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  text_ += out;
  return out;
}

std::string TextStream::push(std::string_view bytes) {
  if (stopped_) return {};
  pending_ += bytes;
  // The earliest stop string in the pending text (a shown text never ends with the
  // start of one, so no match begins before pending_).
  std::size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = take(first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of a stop string.
  std::size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (std::size_t len = std::min(stop.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  hold = std::max(hold, incomplete_utf8_tail(pending_));
  return take(pending_.size() - hold);
}

std::string TextStream::finish() {
  if (stopped_) return {};
  return take(pending_.size());
}

}  // namespace lowbit::engine
