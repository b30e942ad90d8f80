#include "eval/rouge.h"

#include <algorithm>
#include <unordered_map>

namespace lowbit::eval {

std::size_t lcs_length(std::span<const std::int32_t> a, std::span<const std::int32_t> b) {
  // One row over the shorter side: memory is O(min(n, m)).
  if (a.size() < b.size()) std::swap(a, b);
  if (b.empty()) return 0;
  std::vector<std::size_t> row(b.size() + 1, 0);
  for (const std::int32_t x : a) {
    std::size_t diagonal = 0;  // row[j - 1] of the previous row
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = (x == b[j - 1]) ? diagonal + 1 : std::max(above, row[j - 1]);
      diagonal = above;
    }
  }
  return row[b.size()];
}

RougeL rouge_l(std::span<const std::int32_t> candidate, std::span<const std::int32_t> reference) {
  if (candidate.empty() || reference.empty()) return {};
  const double lcs = static_cast<double>(lcs_length(candidate, reference));
  RougeL out;
  out.precision = lcs / static_cast<double>(candidate.size());
  out.recall = lcs / static_cast<double>(reference.size());
  const double sum = out.precision + out.recall;
  out.f1 = sum > 0.0 ? 2.0 * out.precision * out.recall / sum : 0.0;
  return out;
}

std::vector<std::string> rouge_tokenize(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 'A' && c <= 'Z') {
      word.push_back(static_cast<char>(c - 'A' + 'a'));
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      word.push_back(static_cast<char>(c));
    } else if (c == 0xE2 && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x84 &&
               static_cast<unsigned char>(text[i + 2]) == 0xAA) {
      // Python's str.lower() maps the Kelvin sign (U+212A) to ASCII 'k'.
      word.push_back('k');
      i += 2;
    } else if (c == 0xC4 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0xB0) {
      // ... and capital dotted I (U+0130) to 'i' plus a combining dot (a separator).
      word.push_back('i');
      flush();
      i += 1;
    } else {
      // Every other character, UTF-8 bytes included, is not in [a-z0-9] after lower().
      flush();
    }
  }
  flush();
  return words;
}

RougeL rouge_l_words(std::string_view candidate, std::string_view reference) {
  // Map words to ids shared by both sides, then score the id sequences.
  std::unordered_map<std::string, std::int32_t> ids;
  auto encode = [&](std::string_view text) {
    std::vector<std::int32_t> out;
    for (std::string& w : rouge_tokenize(text)) {
      const auto next = static_cast<std::int32_t>(ids.size());
      out.push_back(ids.try_emplace(std::move(w), next).first->second);
    }
    return out;
  };
  const std::vector<std::int32_t> c = encode(candidate);
  const std::vector<std::int32_t> r = encode(reference);
  return rouge_l(c, r);
}

}  // namespace lowbit::eval
