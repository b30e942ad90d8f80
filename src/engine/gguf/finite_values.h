// Finding NaN and Inf in decoded weights and logits, so that a bad value is reported
// where it first appears (naming the tensor), not later as a silent end of text or a
// perplexity of nan.
#pragma once

#include <cstdint>
#include <span>

namespace lowbit::engine {

// Index of the first NaN or Inf in `values`, or values.size() when all are finite.
std::int64_t first_non_finite(std::span<const float> values);

}  // namespace lowbit::engine
