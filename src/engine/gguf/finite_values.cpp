#include "engine/gguf/finite_values.h"

#include <cmath>

namespace lowbit::engine {

std::int64_t first_non_finite(std::span<const float> values) {
  bool all_finite = true;  // one branch-free (vectorized) pass; the position only when needed
  for (const float v : values) all_finite &= std::isfinite(v);
  if (all_finite) return static_cast<std::int64_t>(values.size());
  std::int64_t i = 0;
  while (std::isfinite(values[static_cast<std::size_t>(i)])) ++i;
  return i;
}

}  // namespace lowbit::engine
