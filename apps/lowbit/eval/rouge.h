// ROUGE-L (Lin 2004): precision, recall and F1 from the longest common subsequence
// of a candidate and a reference, on token ids or on words.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit::eval {

struct RougeL {
  double precision = 0.0;  // LCS / candidate length
  double recall = 0.0;     // LCS / reference length
  double f1 = 0.0;         // 2PR / (P + R): beta = 1, what rouge-score reports as fmeasure
};

// Length of the longest common subsequence; O(n*m) time, O(min(n, m)) memory.
std::size_t lcs_length(std::span<const std::int32_t> a, std::span<const std::int32_t> b);

// All zeros when either side is empty.
RougeL rouge_l(std::span<const std::int32_t> candidate, std::span<const std::int32_t> reference);

// rouge-score's default tokenizer (no stemming): lowercase, every run of characters
// other than [a-z0-9] separates words.
std::vector<std::string> rouge_tokenize(std::string_view text);

RougeL rouge_l_words(std::string_view candidate, std::string_view reference);

}  // namespace lowbit::eval
