// Logits are checked where a session produces them: a NaN or Inf there (an activation
// that overflowed, or a NaN met on the way) is an error naming the position, instead
// of an argmax that silently picks token 0 (end of text) or a perplexity of nan.
#pragma once

#include <cstdint>
#include <span>

namespace lowbit::engine {

// logits: rows of `vocab` values, the first at sequence position first_position.
// Throws lowbit::Error naming the position, the token id and the value.
void check_finite_logits(std::span<const float> logits, std::int64_t vocab, std::int64_t first_position);

// What a session says when its device found a non-finite logit at `position` without
// the values on the host (a GPU argmax). Always throws lowbit::Error.
[[noreturn]] void fail_non_finite_logits(std::int64_t position);

}  // namespace lowbit::engine
