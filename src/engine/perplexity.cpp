#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "engine/cpu_session.h"
#include "lowbit/error.h"

namespace lowbit::engine {

double token_nll(std::span<const float> logits, std::int32_t target) {
  LOWBIT_CHECK(target >= 0 && static_cast<std::size_t>(target) < logits.size(), "perplexity: target token ", target,
               " is outside the vocabulary (", logits.size(), " logits)");
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return std::log(sum) + mx - static_cast<double>(logits[static_cast<std::size_t>(target)]);
}

PerplexityResult perplexity(const Model& model, std::span<const std::int32_t> tokens,
                            const PerplexityOptions& options) {
  const std::int64_t n = std::max<std::int64_t>(1, std::min(options.context, static_cast<std::int64_t>(tokens.size())));
  CpuSession session(model, options.cache, n);
  return perplexity(session, tokens, options);
}

PerplexityResult perplexity(Session& session, std::span<const std::int32_t> tokens, const PerplexityOptions& options) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  LOWBIT_CHECK(n >= 2, "perplexity: need at least 2 tokens, got ", n);
  LOWBIT_CHECK(options.context >= 2, "perplexity: context = ", options.context, ", expected >= 2");
  const std::int64_t stride = options.stride == 0 ? options.context : options.stride;
  LOWBIT_CHECK(stride >= 1 && stride <= options.context, "perplexity: stride = ", options.stride,
               ", expected 1..context (", options.context, ")");
  LOWBIT_CHECK(options.max_windows >= 0, "perplexity: max_windows = ", options.max_windows, ", expected >= 0");
  const std::int64_t ctx = std::min(options.context, n);
  std::int64_t windows = 1 + (n - ctx) / stride;
  if (options.max_windows > 0) windows = std::min(windows, options.max_windows);

  LOWBIT_CHECK(session.max_tokens() >= ctx, "perplexity: the session holds ", session.max_tokens(),
               " tokens, the context needs ", ctx);
  const std::int64_t vocab = session.vocab();
  LOWBIT_CHECK(options.window_start_token < vocab, "perplexity: window_start_token = ", options.window_start_token,
               " is outside the vocabulary (", vocab, ")");
  // Predictions scored per window: position i's logits predict token i + 1.
  const std::int64_t later_first = ctx - 1 - std::min(stride, ctx - 1);
  const bool half = options.scoring == PerplexityScoring::second_half && ctx >= 4;
  auto first_scored = [&](std::int64_t w) {
    if (half) return w == 0 ? ctx / 2 : std::max(ctx / 2, later_first);
    return w == 0 ? std::int64_t{0} : later_first;
  };
  PerplexityResult result;
  double total = 0.0, total_sq = 0.0;
  std::vector<std::int32_t> window(static_cast<std::size_t>(ctx));
  for (std::int64_t w = 0; w < windows; ++w) {
    const std::int64_t start = w * stride;
    std::copy_n(tokens.begin() + start, ctx, window.begin());
    if (options.window_start_token >= 0) window[0] = options.window_start_token;
    session.reset();
    const std::vector<float> logits = session.forward(window, true);
    for (std::int64_t i = first_scored(w); i < ctx - 1; ++i) {
      const double nll = token_nll(std::span<const float>(logits.data() + i * vocab, static_cast<std::size_t>(vocab)),
                                   tokens[static_cast<std::size_t>(start + i + 1)]);
      total += nll;
      total_sq += nll * nll;
      result.token_nlls.push_back(nll);
      ++result.tokens_scored;
    }
    result.windows = w + 1;
    if (options.progress) options.progress(w + 1, windows, std::exp(total / static_cast<double>(result.tokens_scored)));
  }
  const auto count = static_cast<double>(result.tokens_scored);
  result.mean_nll = total / count;
  result.ppl = std::exp(result.mean_nll);
  const double variance = total_sq / count - result.mean_nll * result.mean_nll;
  if (result.tokens_scored > 1 && variance > 0) {
    result.nll_std_error = std::sqrt(variance / (count - 1));
    result.ppl_error = result.ppl * result.nll_std_error;
  }
  return result;
}

PerplexityRatio perplexity_ratio(const PerplexityResult& policy, const PerplexityResult& reference) {
  LOWBIT_CHECK(policy.token_nlls.size() == reference.token_nlls.size() && !policy.token_nlls.empty(),
               "perplexity_ratio: ", policy.token_nlls.size(), " and ", reference.token_nlls.size(),
               " scored tokens; expected the same tokens on both sides");
  const auto n = static_cast<double>(policy.token_nlls.size());
  double mean = 0, sq = 0;
  for (std::size_t i = 0; i < policy.token_nlls.size(); ++i) mean += policy.token_nlls[i] - reference.token_nlls[i];
  mean /= n;
  for (std::size_t i = 0; i < policy.token_nlls.size(); ++i) {
    const double d = policy.token_nlls[i] - reference.token_nlls[i] - mean;
    sq += d * d;
  }
  PerplexityRatio r;
  r.ratio = std::exp(mean);
  r.std_error = n > 1 ? r.ratio * std::sqrt(sq / (n - 1) / n) : 0.0;
  return r;
}

}  // namespace lowbit::engine
