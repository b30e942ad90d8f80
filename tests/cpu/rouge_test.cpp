// ROUGE-L: hand-computed LCS examples, the empty / identical / disjoint edges, the
// word tokenizer, and numbers from the rouge-score Python package.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "eval/rouge.h"

namespace lowbit::eval {
namespace {

using Ids = std::vector<std::int32_t>;

// Textbook full-table LCS, independent of the one-row version under test.
std::size_t lcs_table(const Ids& a, const Ids& b) {
  std::vector<std::vector<std::size_t>> t(a.size() + 1, std::vector<std::size_t>(b.size() + 1, 0));
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j)
      t[i][j] = a[i - 1] == b[j - 1] ? t[i - 1][j - 1] + 1 : std::max(t[i - 1][j], t[i][j - 1]);
  return t[a.size()][b.size()];
}

TEST(RougeL, CatSatVsCatLay) {
  // LCS "the cat on the mat" = 5 of 6 words on each side.
  const RougeL r = rouge_l_words("the cat sat on the mat", "the cat lay on the mat");
  EXPECT_DOUBLE_EQ(r.precision, 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(r.recall, 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(r.f1, 5.0 / 6.0);
}

TEST(RougeL, UnequalLengthsOnIds) {
  // candidate 1 2 3 4 (4), reference 1 9 3 8 4 7 (6): LCS 1 3 4 = 3.
  const Ids cand{1, 2, 3, 4};
  const Ids ref{1, 9, 3, 8, 4, 7};
  const RougeL r = rouge_l(cand, ref);
  EXPECT_DOUBLE_EQ(r.precision, 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(r.recall, 3.0 / 6.0);
  EXPECT_DOUBLE_EQ(r.f1, 2.0 * 0.75 * 0.5 / 1.25);  // = 0.6
}

TEST(RougeL, EmptySidesScoreZero) {
  const Ids some{1, 2, 3};
  const Ids none;
  for (const RougeL& r : {rouge_l(none, some), rouge_l(some, none), rouge_l(none, none)}) {
    EXPECT_EQ(r.precision, 0.0);
    EXPECT_EQ(r.recall, 0.0);
    EXPECT_EQ(r.f1, 0.0);
  }
  // Punctuation only tokenizes to nothing.
  EXPECT_EQ(rouge_l_words("?!  ...", "the cat").f1, 0.0);
  EXPECT_EQ(rouge_l_words("", "").f1, 0.0);
}

TEST(RougeL, IdenticalIsOneDisjointIsZero) {
  const Ids a{5, 6, 7, 5, 6};
  const RougeL same = rouge_l(a, a);
  EXPECT_EQ(same.precision, 1.0);
  EXPECT_EQ(same.recall, 1.0);
  EXPECT_EQ(same.f1, 1.0);
  const Ids b{1, 2, 3};
  const RougeL disjoint = rouge_l(a, b);
  EXPECT_EQ(disjoint.precision, 0.0);
  EXPECT_EQ(disjoint.recall, 0.0);
  EXPECT_EQ(disjoint.f1, 0.0);
  EXPECT_EQ(rouge_l_words("Hello, World!", "hello world").f1, 1.0);
}

TEST(RougeL, TokenizerMatchesRougeScoreDefault) {
  EXPECT_EQ(rouge_tokenize("It's 3.14, KV-cache!"), (std::vector<std::string>{"it", "s", "3", "14", "kv", "cache"}));
  // Non-ASCII letters are not in [a-z0-9] after lower(): they split words.
  EXPECT_EQ(rouge_tokenize("caf\xC3\xA9 na\xC3\xAFve"), (std::vector<std::string>{"caf", "na", "ve"}));
  // Python lowers the Kelvin sign to 'k' and dotted capital I to 'i' + combining dot.
  EXPECT_EQ(rouge_tokenize("5\xE2\x84\xAA \xC4\xB0x"), (std::vector<std::string>{"5k", "i", "x"}));
  EXPECT_TRUE(rouge_tokenize("  \t\n").empty());
}

TEST(RougeL, OneRowLcsMatchesFullTable) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 200; ++trial) {
    Ids a(rng() % 40), b(rng() % 40);
    const int alphabet = 1 + static_cast<int>(rng() % 6);
    for (auto& v : a) v = static_cast<std::int32_t>(rng() % alphabet);
    for (auto& v : b) v = static_cast<std::int32_t>(rng() % alphabet);
    ASSERT_EQ(lcs_length(a, b), lcs_table(a, b)) << "trial " << trial;
    ASSERT_EQ(lcs_length(b, a), lcs_table(a, b)) << "trial " << trial;
  }
}

// Expected numbers printed by rouge-score 0.1.2 (pip install rouge-score):
//   rouge_scorer.RougeScorer(['rougeL']).score(reference, candidate)['rougeL']
// (default tokenizer, no stemmer; note score() takes the target first), with
// "%.17g" % (precision, recall, fmeasure).
TEST(RougeL, MatchesRougeScorePackage) {
  struct Case {
    const char* candidate;
    const char* reference;
    double precision, recall, f1;
  };
  const Case cases[] = {
      {"The quick brown fox jumps over the lazy dog.", "A quick brown dog jumps over the lazy fox!",
       0.66666666666666663, 0.66666666666666663, 0.66666666666666663},
      {"KV-cache memory grows linearly with generated tokens",
       "the kv cache grows linearly in the number of generated tokens", 0.75, 0.54545454545454541,
       0.63157894736842102},
      {"police killed the gunman", "the gunman killed police", 0.5, 0.5, 0.5},
      {"It's 3.14159, isn't it? Yes: 42%", "its 3 14159 isnt it yes 42", 0.55555555555555558, 0.7142857142857143,
       0.62500000000000011},
      {"H\xC3\xA9llo w\xC3\xB6rld, na\xC3\xAFve caf\xC3\xA9", "hello world naive cafe", 0.0, 0.0, 0.0},
      {"a b c d e f g", "g f e d c b a", 0.14285714285714285, 0.14285714285714285, 0.14285714285714285},
  };
  for (const Case& c : cases) {
    const RougeL r = rouge_l_words(c.candidate, c.reference);
    EXPECT_DOUBLE_EQ(r.precision, c.precision) << c.candidate;
    EXPECT_DOUBLE_EQ(r.recall, c.recall) << c.candidate;
    EXPECT_DOUBLE_EQ(r.f1, c.f1) << c.candidate;
  }
}

}  // namespace
}  // namespace lowbit::eval
