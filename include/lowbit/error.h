// One error type for the whole library: every failed check throws lowbit::Error
// with a message that names the argument, the value it had and what was expected.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lowbit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

}  // namespace detail
}  // namespace lowbit

// LOWBIT_CHECK(cond, "x: expected rank 2, got ", x.rank) throws lowbit::Error when cond is false.
#define LOWBIT_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      ::lowbit::detail::throw_error(__FILE__, __LINE__, ::lowbit::detail::concat(__VA_ARGS__)); \
    }                                                                                    \
  } while (0)

#define LOWBIT_FAIL(...) \
  ::lowbit::detail::throw_error(__FILE__, __LINE__, ::lowbit::detail::concat(__VA_ARGS__))
