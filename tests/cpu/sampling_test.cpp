// The sampler (engine/sampling.h over formats/sampling.h): its arithmetic against
// independent computations, each filter's set and the draw's distribution against
// their definitions, greedy against argmax, seeds, penalties and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "common/expect_error.h"
#include "common/random.h"
#include "engine/generate.h"
#include "engine/sampling.h"
#include "formats/sampling.h"

namespace lowbit::test {
namespace {

namespace fs = formats::sampling;
using engine::PenaltyWindow;
using engine::sample_token;
using engine::SamplingParams;
using engine::TokenCount;

__extension__ using u128 = unsigned __int128;

std::vector<float> random_logits(Rng& rng, std::size_t n, float spread = 4.0f) {
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

fs::RowParams sampled(float temperature = 1.0f) {
  fs::RowParams p;
  p.temperature = temperature;
  return p;
}

// Draw frequencies over `draws` seeds.
std::map<std::int32_t, int> histogram(const std::vector<float>& logits, fs::RowParams p, int draws,
                                      std::span<const TokenCount> penalties = {}) {
  std::map<std::int32_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    p.seed = 1000003ull * static_cast<std::uint64_t>(i) + 17;
    p.draw = static_cast<std::uint64_t>(i % 7);
    ++counts[sample_token(logits, p, penalties)];
  }
  return counts;
}

TEST(Sampling, ExpNonpositiveIsAccurate) {
  EXPECT_EQ(fs::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(fs::exp_nonpositive(-INFINITY), 0.0f);
  EXPECT_EQ(fs::exp_nonpositive(NAN), 0.0f);
  EXPECT_EQ(fs::exp_nonpositive(-87.0f), 0.0f);
  double worst = 0.0;
  for (float x = -86.0f; x < 0.0f; x += 0.00731f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(fs::exp_nonpositive(x) - want) / want);
  }
  EXPECT_LT(worst, 4e-7);  // a few float ulps
  for (const float x : {-1e-30f, -1e-7f, -0.34657f, -0.34658f, -0.5f, -1.0f, -10.0f, -85.9f}) {
    EXPECT_NEAR(fs::exp_nonpositive(x) / std::exp(static_cast<double>(x)), 1.0, 4e-7) << x;
  }
}

TEST(Sampling, FixedPointAndWideArithmetic) {
  EXPECT_EQ(fs::fixed_weight(1.0f), std::uint64_t{1} << 36);
  EXPECT_EQ(fs::fixed_weight(0.5f), std::uint64_t{1} << 35);
  EXPECT_EQ(fs::fixed_weight(0.0f), 0u);
  LOWBIT_TEST_RNG(rng);
  std::uniform_int_distribution<std::uint64_t> any;
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t a = any(rng), b = any(rng);
    const u128 want = static_cast<u128>(a) * b;
    const fs::U128 got = fs::mul_wide(a, b);
    ASSERT_EQ(got.hi, static_cast<std::uint64_t>(want >> 64));
    ASSERT_EQ(got.lo, static_cast<std::uint64_t>(want));
    ASSERT_EQ(fs::scale_draw(a, b), static_cast<std::uint64_t>(want >> 64));
  }
}

TEST(Sampling, TopPTargetIsTheExactCeiling) {
  LOWBIT_TEST_RNG(rng);
  std::uniform_int_distribution<std::uint64_t> mass_dist(1, std::uint64_t{1} << 60);
  std::uniform_real_distribution<float> p_dist(0.0f, 1.0f);
  auto exact = [](std::uint64_t mass, float p) {
    // p = m * 2^e exactly (frexp), so mass * p = mass * m / 2^-e.
    int e = 0;
    const double frac = std::frexp(static_cast<double>(p), &e);
    const auto m = static_cast<std::uint64_t>(std::ldexp(frac, 24));  // p = m * 2^(e - 24)
    const int shift = 24 - e;
    const u128 product = static_cast<u128>(mass) * m;
    if (shift >= 128) return static_cast<std::uint64_t>(product != 0);
    const u128 q = product >> shift;
    return static_cast<std::uint64_t>(q + ((q << shift) != product ? 1 : 0));
  };
  for (int i = 0; i < 5000; ++i) {
    const std::uint64_t mass = mass_dist(rng);
    float p = p_dist(rng);
    if (i % 5 == 0) p = std::ldexp(1.0f, -static_cast<int>(i % 140) - 1);  // powers of two, subnormals too
    if (!(p > 0.0f && p < 1.0f)) continue;
    ASSERT_EQ(fs::top_p_target(mass, p), exact(mass, p)) << "mass " << mass << " p " << p;
  }
  EXPECT_EQ(fs::top_p_target(100, 0.5f), 50u);
  EXPECT_EQ(fs::top_p_target(101, 0.5f), 51u);
  EXPECT_EQ(fs::top_p_target(1, 1e-30f), 1u);
}

TEST(Sampling, SplitMix64MatchesItsPublishedOutputs) {
  // SplitMix64 seeded with 0: 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f;
  // seeded with 1234567: 6457827717110365317 first.
  EXPECT_EQ(fs::splitmix64(0, 0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(fs::splitmix64(0, 1), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(fs::splitmix64(0, 2), 0x06c45d188009454full);
  EXPECT_EQ(fs::splitmix64(1234567, 0), 6457827717110365317ull);
}

TEST(Sampling, OrderKeysOrderByLogitThenId) {
  LOWBIT_TEST_RNG(rng);
  std::vector<float> values = random_logits(rng, 200, 50.0f);
  values.insert(values.end(), {0.0f, -0.0f, FLT_MAX, -FLT_MAX, -INFINITY, 1e-40f, -1e-40f, 3.0f, 3.0f});
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float a = fs::sanitize(values[i]);
    const std::uint64_t ka = fs::order_key(a, static_cast<std::int32_t>(i));
    EXPECT_EQ(fs::key_id(ka), static_cast<std::int32_t>(i));
    EXPECT_EQ(formats::float_to_bits(fs::key_logit(ka)), formats::float_to_bits(a));
    for (std::size_t j = 0; j < values.size(); ++j) {
      const float b = fs::sanitize(values[j]);
      const bool a_first = a > b || (a == b && i < j);
      if (i != j) {
        ASSERT_EQ(ka > fs::order_key(b, static_cast<std::int32_t>(j)), a_first) << a << " vs " << b;
      }
    }
  }
  EXPECT_EQ(fs::sanitize(NAN), -INFINITY);
  EXPECT_EQ(fs::sanitize(INFINITY), FLT_MAX);
  EXPECT_EQ(formats::float_to_bits(fs::sanitize(-0.0f)), 0u);
}

TEST(Sampling, GreedyIsArgmaxLowestIdOnTies) {
  LOWBIT_TEST_RNG(rng);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits = random_logits(rng, 1 + rng() % 3000);
    if (trial % 3 == 0) {
      for (float& x : logits) x = std::round(x);  // many ties
    }
    fs::RowParams p;  // temperature 0
    p.top_k = 5, p.top_p = 0.3f, p.min_p = 0.5f;  // irrelevant to greedy
    EXPECT_EQ(sample_token(logits, p, {}), engine::argmax(logits));
  }
  // NaN never wins; +inf does; all -inf: the lowest id.
  EXPECT_EQ(sample_token(std::vector<float>{NAN, 1.0f, 2.0f}, fs::RowParams{}, {}), 2);
  EXPECT_EQ(sample_token(std::vector<float>{1.0f, INFINITY, 2.0f}, fs::RowParams{}, {}), 1);
  EXPECT_EQ(sample_token(std::vector<float>{-INFINITY, -INFINITY}, sampled(), {}), 0);
  EXPECT_EQ(sample_token(std::vector<float>{NAN, NAN, NAN}, sampled(), {}), 0);
}

TEST(Sampling, PenaltiesFollowLlamaCpp) {
  fs::RowParams p;
  p.repeat_penalty = 1.5f, p.frequency_penalty = 0.25f, p.presence_penalty = 0.5f;
  // Positive logits are divided, non-positive multiplied; then count * f + presence off.
  EXPECT_FLOAT_EQ(fs::penalize(3.0f, 2, p), 3.0f / 1.5f - (2 * 0.25f + 0.5f));
  EXPECT_FLOAT_EQ(fs::penalize(-2.0f, 1, p), -2.0f * 1.5f - (0.25f + 0.5f));
  EXPECT_FLOAT_EQ(fs::penalize(0.0f, 3, p), 0.0f - (0.75f + 0.5f));
  // A penalty that demotes the argmax changes the greedy choice.
  const std::vector<float> logits{1.0f, 2.0f, 1.9f};
  fs::RowParams greedy;
  greedy.repeat_penalty = 1.2f;
  const std::vector<TokenCount> seen{{1, 1}};
  EXPECT_EQ(sample_token(logits, greedy, seen), 2);
  EXPECT_EQ(sample_token(logits, fs::RowParams{}, {}), 1);
  // A negative presence penalty promotes.
  fs::RowParams promote;
  promote.presence_penalty = -2.0f;
  const std::vector<TokenCount> zero{{0, 1}};
  EXPECT_EQ(sample_token(logits, promote, zero), 0);
}

TEST(Sampling, SameSeedAndDrawSameToken) {
  LOWBIT_TEST_RNG(rng);
  const std::vector<float> logits = random_logits(rng, 4097, 2.0f);
  fs::RowParams p = sampled(0.9f);
  p.top_k = 50, p.top_p = 0.9f, p.min_p = 0.01f;
  std::set<std::int32_t> seen;
  for (std::uint64_t draw = 0; draw < 64; ++draw) {
    p.seed = 42, p.draw = draw;
    const std::int32_t t = sample_token(logits, p, {});
    EXPECT_EQ(sample_token(logits, p, {}), t);
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 3u) << "64 draws of a flat distribution gave almost one token";
}

TEST(Sampling, DrawFollowsTheSoftmax) {
  const std::vector<float> logits{1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  for (const float temperature : {1.0f, 0.5f, 2.0f}) {
    SCOPED_TRACE(temperature);
    fs::RowParams p = sampled(temperature);
    const int draws = 40000;
    const auto counts = histogram(logits, p, draws);
    double total = 0.0;
    for (const float l : logits) total += std::exp(l / temperature);
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const double prob = std::exp(logits[i] / temperature) / total;
      const double expected = prob * draws, sigma = std::sqrt(draws * prob * (1 - prob));
      const int got = counts.contains(static_cast<std::int32_t>(i)) ? counts.at(static_cast<std::int32_t>(i)) : 0;
      EXPECT_NEAR(got, expected, 5 * sigma + 1) << "token " << i;
    }
  }
}

TEST(Sampling, TopKKeepsTheKLargestLowestIdsOnTies) {
  // Ties at the boundary: ids 1, 3, 4 share the third-largest logit; k = 4 keeps ids 0, 2
  // (larger) and the two lowest tied ids, 1 and 3.
  const std::vector<float> logits{5.0f, 1.0f, 6.0f, 1.0f, 1.0f, -3.0f};
  fs::RowParams p = sampled(50.0f);  // nearly flat
  p.top_k = 4;
  const auto counts = histogram(logits, p, 4000);
  EXPECT_EQ(counts.size(), 4u);
  for (const std::int32_t id : {0, 1, 2, 3}) EXPECT_TRUE(counts.contains(id)) << id;
  p.top_k = 1;
  EXPECT_EQ(histogram(logits, p, 200).size(), 1u);
  EXPECT_TRUE(histogram(logits, p, 200).contains(2));
}

TEST(Sampling, TopPKeepsTheShortestPrefixReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 (logits are log2 steps): p = 0.7 needs the
  // first two (0.75 >= 0.7); p = 0.75 too (exactly reached); p = 0.76 three.
  const float l2 = std::log(2.0f);
  const std::vector<float> logits{3 * l2, 2 * l2, 1 * l2, 1 * l2};
  for (const auto& [top_p, kept] : std::vector<std::pair<float, std::size_t>>{{0.7f, 2}, {0.75f, 2}, {0.76f, 3},
                                                                              {0.3f, 1}, {1.0f, 4}}) {
    SCOPED_TRACE(top_p);
    fs::RowParams p = sampled(20.0f);
    p.top_p = top_p;
    const auto counts = histogram(logits, p, 3000);
    EXPECT_EQ(counts.size(), kept);
    for (std::size_t id = 0; id < kept; ++id) EXPECT_TRUE(counts.contains(static_cast<std::int32_t>(id)));
  }
}

TEST(Sampling, MinPDropsTokensBelowAFractionOfTheTop) {
  // Relative probabilities 1, 0.5, 0.25, 0.125: min_p = 0.3 keeps the first two.
  const float l2 = std::log(2.0f);
  const std::vector<float> logits{0.0f, -l2, -2 * l2, -3 * l2};
  fs::RowParams p = sampled(10.0f);
  p.min_p = 0.3f;
  const auto counts = histogram(logits, p, 3000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_TRUE(counts.contains(0) && counts.contains(1));
}

TEST(Sampling, FiltersComposeInLlamaCppOrder) {
  // top-k 3 of 5, then top-p over those three only (renormalized), then min-p.
  const std::vector<float> logits{2.0f, 1.9f, 1.8f, 1.7f, 0.0f};
  fs::RowParams p = sampled(1.0f);
  p.top_k = 3, p.top_p = 0.99f;
  auto counts = histogram(logits, p, 3000);
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_FALSE(counts.contains(3));
  p.min_p = 0.95f;  // exp(-0.1) = 0.905 < 0.95: only the top token
  counts = histogram(logits, p, 500);
  EXPECT_EQ(counts.size(), 1u);
}

TEST(Sampling, TinyTemperatureIsGreedy) {
  LOWBIT_TEST_RNG(rng);
  const std::vector<float> logits = random_logits(rng, 1000);
  fs::RowParams p = sampled(1e-20f);
  p.top_k = 0, p.top_p = 1.0f;
  for (std::uint64_t s = 0; s < 20; ++s) {
    p.seed = s;
    EXPECT_EQ(sample_token(logits, p, {}), engine::argmax(logits));
  }
}

TEST(Sampling, PenaltyWindowCountsTheLastN) {
  PenaltyWindow w(3);
  for (const std::int32_t t : {5, 7, 5, 9, 5}) w.accept(t);  // last three: 5, 9, 5
  const std::vector<TokenCount> counts = w.counts();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].id, 5);
  EXPECT_EQ(counts[0].count, 2);
  EXPECT_EQ(counts[1].id, 9);
  EXPECT_EQ(counts[1].count, 1);
  PenaltyWindow all(-1);
  for (const std::int32_t t : {5, 7, 5, 9, 5}) all.accept(t);
  EXPECT_EQ(all.counts().size(), 3u);
  EXPECT_EQ(all.counts()[0].count, 3);
  PenaltyWindow none(0);
  none.accept(5);
  EXPECT_TRUE(none.counts().empty());
}

TEST(Sampling, BadInputGetsClearErrors) {
  const std::vector<float> logits{1.0f, 2.0f};
  EXPECT_LOWBIT_ERROR(sample_token(std::vector<float>{}, fs::RowParams{}, {}), "empty logits");
  const std::vector<TokenCount> outside{{2, 1}};
  EXPECT_LOWBIT_ERROR(sample_token(logits, fs::RowParams{}, outside), "penalties[0]: token id 2 outside");
  const std::vector<TokenCount> unsorted{{1, 1}, {0, 1}};
  EXPECT_LOWBIT_ERROR(sample_token(logits, fs::RowParams{}, unsorted), "penalties[1]: ids must be sorted");
  const std::vector<TokenCount> zero{{1, 0}};
  EXPECT_LOWBIT_ERROR(sample_token(logits, fs::RowParams{}, zero), "penalties[0]: count 0");
  auto with = [](auto edit) {
    SamplingParams s;
    edit(s);
    return s;
  };
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.temperature = -1; }).validate(), "temperature: expected");
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.temperature = NAN; }).validate(), "temperature: expected");
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.top_k = -1; }).validate(), "top_k: expected >= 0");
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.top_p = 0; }).validate(), "top_p: expected a number in (0, 1]");
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.min_p = 1.5f; }).validate(), "min_p: expected");
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.repeat_penalty = 0; }).validate(), "repeat_penalty: expected");
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.frequency_penalty = 3; }).validate(),
                      "frequency_penalty: expected a number in [-2, 2]");
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.presence_penalty = -3; }).validate(), "presence_penalty");
  EXPECT_LOWBIT_ERROR(with([](SamplingParams& s) { s.penalty_last_n = -2; }).validate(), "penalty_last_n");
}

TEST(Sampling, LogprobsAreTheLogSoftmax) {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f, 3.0f};
  const engine::Logprobs lp = engine::token_logprobs(logits, 2, 3);
  double total = 0.0;
  for (const float l : logits) total += std::exp(static_cast<double>(l));
  EXPECT_NEAR(lp.chosen.logprob, 2.0 - std::log(total), 1e-12);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].id, 1);  // ties: lowest id first
  EXPECT_EQ(lp.top[1].id, 3);
  EXPECT_EQ(lp.top[2].id, 2);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - std::log(total), 1e-12);
}

}  // namespace
}  // namespace lowbit::test
