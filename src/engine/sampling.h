// Token sampling per request on the CPU: the oracle of the GPU kernel
// (cuda/model/sampling_cuda.h). The arithmetic is formats/sampling.h; this file holds a
// request's parameters (llama.cpp's meanings), its penalty window, and the sampler
// over one row of logits.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <vector>

#include "formats/sampling.h"

namespace lowbit::engine {

// What a request asks of the sampler. Defaults are llama.cpp's, except the temperature:
// 0 (greedy) unless the caller says otherwise.
struct SamplingParams {
  float temperature = 0.0f;        // <= 0: greedy (largest logit, lowest id on ties)
  std::int32_t top_k = 40;         // 0: off
  float top_p = 0.95f;             // 1: off
  float min_p = 0.05f;             // 0: off
  float repeat_penalty = 1.0f;     // 1: off
  float frequency_penalty = 0.0f;  // 0: off
  float presence_penalty = 0.0f;   // 0: off
  std::int32_t penalty_last_n = 64;  // generated tokens the penalties look back on; -1: all, 0: none
  std::uint64_t seed = 0;

  // Throws lowbit::Error naming the field: temperature < 0 or not finite, top_k < 0,
  // top_p outside (0, 1], min_p outside [0, 1], repeat_penalty <= 0 or not finite,
  // frequency / presence penalty outside [-2, 2], penalty_last_n < -1.
  void validate() const;
  bool greedy() const { return !(temperature > 0.0f); }
  bool penalized() const;
  // The row parameters of the draw-th token of the request.
  formats::sampling::RowParams row(std::uint64_t draw) const;
};

// A token of the penalty window and how often it occurs there.
struct TokenCount {
  std::int32_t id = 0, count = 0;
};

// The last `last_n` generated tokens of a request (-1: all of them) and their counts,
// which the penalties read.
class PenaltyWindow {
 public:
  explicit PenaltyWindow(std::int32_t last_n = 64) : last_n_(last_n) {}
  void accept(std::int32_t token);
  // Sorted by id, each id once, counts > 0.
  std::vector<TokenCount> counts() const;
  void clear();

 private:
  std::int32_t last_n_;
  std::deque<std::int32_t> recent_;
  std::map<std::int32_t, std::int32_t> count_;
};

// Throws lowbit::Error naming the entry unless `penalties` is sorted by id, each id
// once, inside 0..vocab-1, with counts > 0.
void check_penalties(std::span<const TokenCount> penalties, std::int64_t vocab);

// The token that formats/sampling.h defines for `logits` (one row, f32), `params` and
// `penalties` (sorted by id, each once, counts > 0). Throws lowbit::Error for empty
// logits, more than 2^31 - 1 of them, or a bad penalty list.
std::int32_t sample_token(std::span<const float> logits, const formats::sampling::RowParams& params,
                          std::span<const TokenCount> penalties);

// Log-probabilities of the model's distribution (log-softmax of the logits, NaN as
// -inf, in double): the chosen token's, and the `top` most likely tokens' (largest
// first, lowest id on ties).
struct TokenLogprob {
  std::int32_t id = 0;
  double logprob = 0.0;
};
struct Logprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};
Logprobs token_logprobs(std::span<const float> logits, std::int32_t chosen, int top);

}  // namespace lowbit::engine
