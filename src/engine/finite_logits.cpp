#include "engine/finite_logits.h"

#include "engine/gguf/finite_values.h"
#include "lowbit/error.h"

namespace lowbit::engine {

void check_finite_logits(std::span<const float> logits, std::int64_t vocab, std::int64_t first_position) {
  const std::int64_t bad = first_non_finite(logits);
  LOWBIT_CHECK(bad == static_cast<std::int64_t>(logits.size()), "logits at position ", first_position + bad / vocab,
               ": token ", bad % vocab, " has logit ", logits[static_cast<std::size_t>(bad)],
               " (the forward pass produced a non-finite value: an activation overflowed, or met a NaN)");
}

void fail_non_finite_logits(std::int64_t position) {
  LOWBIT_FAIL("logits at position ", position,
              ": NaN or Inf (the forward pass produced a non-finite value: an activation overflowed, or met a NaN)");
}

}  // namespace lowbit::engine
