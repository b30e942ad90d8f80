#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "lowbit/error.h"

namespace lowbit::engine {

namespace fs = formats::sampling;

void SamplingParams::validate() const {
  LOWBIT_CHECK(std::isfinite(temperature) && temperature >= 0.0f, "temperature: expected a finite number >= 0, got ",
               temperature);
  LOWBIT_CHECK(top_k >= 0, "top_k: expected >= 0 (0: off), got ", top_k);
  LOWBIT_CHECK(top_p > 0.0f && top_p <= 1.0f, "top_p: expected a number in (0, 1], got ", top_p);
  LOWBIT_CHECK(min_p >= 0.0f && min_p <= 1.0f, "min_p: expected a number in [0, 1], got ", min_p);
  LOWBIT_CHECK(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f,
               "repeat_penalty: expected a finite number > 0 (1: off), got ", repeat_penalty);
  LOWBIT_CHECK(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
               "frequency_penalty: expected a number in [-2, 2], got ", frequency_penalty);
  LOWBIT_CHECK(presence_penalty >= -2.0f && presence_penalty <= 2.0f,
               "presence_penalty: expected a number in [-2, 2], got ", presence_penalty);
  LOWBIT_CHECK(penalty_last_n >= -1, "penalty_last_n: expected >= -1 (-1: all generated tokens), got ",
               penalty_last_n);
}

bool SamplingParams::penalized() const {
  return penalty_last_n != 0 && (repeat_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f);
}

fs::RowParams SamplingParams::row(std::uint64_t draw) const {
  fs::RowParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repeat_penalty = repeat_penalty;
  p.frequency_penalty = frequency_penalty;
  p.presence_penalty = presence_penalty;
  p.seed = seed;
  p.draw = draw;
  return p;
}

void PenaltyWindow::accept(std::int32_t token) {
  if (last_n_ == 0) return;
  recent_.push_back(token);
  ++count_[token];
  if (last_n_ > 0 && recent_.size() > static_cast<std::size_t>(last_n_)) {
    const auto old = count_.find(recent_.front());
    if (--old->second == 0) count_.erase(old);
    recent_.pop_front();
  }
}

std::vector<TokenCount> PenaltyWindow::counts() const {
  std::vector<TokenCount> out;
  out.reserve(count_.size());
  for (const auto& [id, count] : count_) out.push_back({id, count});
  return out;
}

void PenaltyWindow::clear() {
  recent_.clear();
  count_.clear();
}

void check_penalties(std::span<const TokenCount> penalties, std::int64_t vocab) {
  for (std::size_t j = 0; j < penalties.size(); ++j) {
    const TokenCount& pc = penalties[j];
    LOWBIT_CHECK(pc.id >= 0 && pc.id < vocab, "penalties[", j, "]: token id ", pc.id, " outside the vocabulary (0..",
                 vocab - 1, ")");
    LOWBIT_CHECK(pc.count > 0, "penalties[", j, "]: count ", pc.count, ", expected > 0");
    LOWBIT_CHECK(j == 0 || penalties[j - 1].id < pc.id, "penalties[", j, "]: ids must be sorted and unique (",
                 penalties[j - 1].id, " then ", pc.id, ")");
  }
}

std::int32_t sample_token(std::span<const float> logits, const fs::RowParams& params,
                          std::span<const TokenCount> penalties) {
  LOWBIT_CHECK(!logits.empty(), "sample_token: empty logits");
  LOWBIT_CHECK(logits.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
               "sample_token: ", logits.size(), " logits, expected at most 2^31 - 1");
  const auto vocab = static_cast<std::int64_t>(logits.size());
  std::vector<float> l(logits.size());
  for (std::size_t i = 0; i < l.size(); ++i) l[i] = fs::sanitize(logits[i]);
  check_penalties(penalties, vocab);
  for (const TokenCount& pc : penalties) {
    l[static_cast<std::size_t>(pc.id)] = fs::penalize(l[static_cast<std::size_t>(pc.id)], pc.count, params);
  }

  std::vector<std::uint64_t> keys(l.size());
  std::uint64_t best = 0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    keys[i] = fs::order_key(l[i], static_cast<std::int32_t>(i));
    best = std::max(best, keys[i]);
  }
  const float max_logit = fs::key_logit(best);
  if (fs::greedy(params) || max_logit == -INFINITY) return fs::key_id(best);

  // top-k: the k largest keys (unique, so the set is exact).
  if (fs::top_k_active(params, vocab)) {
    const auto k = static_cast<std::size_t>(params.top_k);
    std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k - 1), keys.end(),
                     std::greater<std::uint64_t>());
    keys.resize(k);
  }
  auto weight = [&](std::uint64_t key) {
    return fs::fixed_weight(fs::relative_probability(l[static_cast<std::size_t>(fs::key_id(key))], max_logit));
  };
  // top-p: the shortest prefix in key order whose weight reaches the target.
  if (fs::top_p_active(params)) {
    std::sort(keys.begin(), keys.end(), std::greater<std::uint64_t>());
    std::uint64_t mass = 0;
    for (const std::uint64_t key : keys) mass += weight(key);
    const std::uint64_t target = fs::top_p_target(mass, params.top_p);
    std::uint64_t cumulative = 0;
    for (std::size_t j = 0; j < keys.size(); ++j) {
      cumulative += weight(keys[j]);
      if (cumulative >= target) {
        keys.resize(j + 1);
        break;
      }
    }
  }
  // min-p, then the draw weights, in id order.
  std::vector<std::uint64_t> draw(l.size(), 0);
  for (const std::uint64_t key : keys) {
    const auto id = static_cast<std::size_t>(fs::key_id(key));
    if (fs::min_p_active(params) && !(fs::relative_probability(l[id], max_logit) >= params.min_p)) continue;
    draw[id] = fs::draw_weight(l[id], max_logit, params.temperature);
  }
  std::uint64_t total = 0;
  for (const std::uint64_t w : draw) total += w;
  const std::uint64_t r = fs::scale_draw(fs::splitmix64(params.seed, params.draw), total);
  std::uint64_t prefix = 0;
  for (std::size_t i = 0; i < draw.size(); ++i) {
    prefix += draw[i];
    if (prefix > r) return static_cast<std::int32_t>(i);
  }
  // Unreachable: the top token's weight is 2^36 > 0, so r < total.
  LOWBIT_CHECK(false, "sample_token: no token drawn (total weight ", total, ", r ", r, ")");
  return -1;
}

Logprobs token_logprobs(std::span<const float> logits, std::int32_t chosen, int top) {
  LOWBIT_CHECK(!logits.empty(), "token_logprobs: empty logits");
  LOWBIT_CHECK(chosen >= 0 && static_cast<std::size_t>(chosen) < logits.size(), "token_logprobs: chosen id ", chosen,
               " outside the vocabulary");
  LOWBIT_CHECK(top >= 0, "token_logprobs: top = ", top, ", expected >= 0");
  double max = -INFINITY;
  for (const float x : logits) {
    if (x == x) max = std::max(max, static_cast<double>(x));
  }
  double total = 0.0;
  for (const float x : logits) {
    if (x == x) total += std::exp(static_cast<double>(x) - max);
  }
  const double log_total = max + std::log(total);
  auto logprob = [&](std::int32_t id) {
    const float x = logits[static_cast<std::size_t>(id)];
    return x == x ? static_cast<double>(x) - log_total : -INFINITY;
  };
  Logprobs out;
  out.chosen = {chosen, logprob(chosen)};
  const std::size_t n = std::min(static_cast<std::size_t>(top), logits.size());
  std::vector<std::uint64_t> keys(logits.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = fs::order_key(fs::sanitize(logits[i]), static_cast<std::int32_t>(i));
  }
  std::partial_sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n), keys.end(),
                    std::greater<std::uint64_t>());
  for (std::size_t j = 0; j < n; ++j) out.top.push_back({fs::key_id(keys[j]), logprob(fs::key_id(keys[j]))});
  return out;
}

}  // namespace lowbit::engine
