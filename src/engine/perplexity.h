// Perplexity of a token sequence under a model and a KV-cache policy, over windows
// of `context` tokens taken every `stride` tokens, each evaluated from an empty cache
// (as llama.cpp's perplexity tool does). The first window scores every prediction it
// makes (tokens 1..C-1 of it); later windows score only their last min(stride, C-1)
// tokens, so that with stride < context every scored token has at least C - stride
// tokens of context. Only whole windows are used; a sequence shorter than the context
// is one window of all its tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/session.h"

namespace lowbit::engine {

struct PerplexityOptions {
  std::int64_t context = 512;
  std::int64_t stride = 0;       // 0 = context (non-overlapping windows)
  std::int64_t max_windows = 0;  // 0 = all
  KvCacheOptions cache;
  // Called after each window: windows done, windows total, perplexity so far.
  std::function<void(std::int64_t, std::int64_t, double)> progress;
};

struct PerplexityResult {
  double ppl = 0.0;
  double mean_nll = 0.0;  // natural log
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

}  // namespace lowbit::engine
