// Perplexity of a token sequence under a model and a KV-cache policy, over windows
// of `context` tokens C taken every `stride` tokens, each evaluated from an empty cache
// (as llama.cpp's perplexity tool does). Which predictions a window scores:
//   second_half (llama-perplexity's): tokens C/2 + 1 .. C - 1 of every window, each
//               seen with at least C/2 tokens of context (with a stride below C, only
//               the last min(stride, C - 1 - C/2) of them, so none is scored twice)
//   all         the first window every prediction it makes (tokens 1..C-1 of it),
//               later windows their last min(stride, C-1) tokens
// Only whole windows are used; a sequence shorter than the context is one window of
// all its tokens (scored as `all` when it has fewer than 4). The estimate's +- is
// llama-perplexity's: the standard error of the mean NLL over the scored tokens, times
// the perplexity (d exp(x) = exp(x) dx).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/session.h"

namespace lowbit::engine {

enum class PerplexityScoring { second_half, all };

struct PerplexityOptions {
  std::int64_t context = 512;
  PerplexityScoring scoring = PerplexityScoring::second_half;
  // When >= 0, the first token of every window is replaced by this id (llama-perplexity
  // puts BOS there for models that start a sequence with it); -1 keeps the text's.
  std::int32_t window_start_token = -1;
  std::int64_t stride = 0;       // 0 = context (non-overlapping windows)
  std::int64_t max_windows = 0;  // 0 = all
  KvCacheOptions cache;
  // Called after each window: windows done, windows total, perplexity so far.
  std::function<void(std::int64_t, std::int64_t, double)> progress;
};

struct PerplexityResult {
  double ppl = 0.0;
  double mean_nll = 0.0;  // natural log
  double nll_std_error = 0.0;  // standard error of mean_nll (0 for one scored token)
  double ppl_error = 0.0;      // ppl * nll_std_error
  std::vector<double> token_nlls;  // every scored token's NLL, in order (for paired comparisons)
  std::int64_t tokens_scored = 0;
  std::int64_t windows = 0;
};

// -log softmax(logits)[target], in double with the max subtracted first.
double token_nll(std::span<const float> logits, std::int32_t target);

// Throws lowbit::Error for fewer than 2 tokens, context < 2, stride outside
// 1..context, or token ids outside the vocabulary.
PerplexityResult perplexity(const Model& model, std::span<const std::int32_t> tokens,
                            const PerplexityOptions& options);
// The same on a session (CPU or GPU) sized for at least min(context, tokens) positions;
// options.cache is the session's business then. The session is reset per window.
PerplexityResult perplexity(Session& session, std::span<const std::int32_t> tokens, const PerplexityOptions& options);

// How much higher `policy`'s perplexity is than `reference`'s over the same scored
// tokens, as a ratio, and the standard error of that ratio from the per-token NLL
// differences (paired, so much tighter than either estimate's own +-). Throws unless
// both scored the same number of tokens.
struct PerplexityRatio {
  double ratio = 1.0, std_error = 0.0;
};
PerplexityRatio perplexity_ratio(const PerplexityResult& policy, const PerplexityResult& reference);

}  // namespace lowbit::engine
