// Sums and products of sizes (element counts, strides, byte counts), checked: a result
// that does not fit std::int64_t throws lowbit::Error naming what was being computed,
// instead of wrapping to a small or negative size that later checks would accept.
#pragma once

#include <cstdint>

#include "lowbit/error.h"

namespace lowbit::core {

namespace detail {

// The result of `a op b`, or the error when it overflowed.
template <class... What>
std::int64_t fitting(bool overflowed, std::int64_t result, std::int64_t a, const char* op, std::int64_t b,
                     const What&... what) {
  LOWBIT_CHECK(!overflowed, what..., ": ", a, op, b, " does not fit in a 64-bit size");
  return result;
}

}  // namespace detail

// `what...` is the start of the message (the quantity and its operands); it is only
// formatted when the result does not fit.
template <class... What>
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const What&... what) {
  std::int64_t result = 0;
  const bool overflowed = __builtin_mul_overflow(a, b, &result);  // before `result` is read
  return detail::fitting(overflowed, result, a, " x ", b, what...);
}

template <class... What>
std::int64_t checked_add(std::int64_t a, std::int64_t b, const What&... what) {
  std::int64_t result = 0;
  const bool overflowed = __builtin_add_overflow(a, b, &result);  // before `result` is read
  return detail::fitting(overflowed, result, a, " + ", b, what...);
}

}  // namespace lowbit::core
