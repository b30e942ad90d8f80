// One error type for the whole library: every failed check throws lowbit::Error
// with a message that names the argument, the value it had and what was expected.
#pragma once

#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace lowbit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

// Numbers are formatted with std::to_chars, as an ostream would print them by
// default (integers in decimal, floating point as %g), but without iostreams and
// locales: an extension module with a statically linked libstdc++ may use them before
// they are initialized (seen with GCC 13: a segfault on the first number formatted).
template <class T>
void append(std::string& out, const T& value) {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, char> || std::is_same_v<U, signed char> || std::is_same_v<U, unsigned char>) {
    out += static_cast<char>(value);
  } else if constexpr (std::is_same_v<U, bool>) {
    out += value ? '1' : '0';
  } else if constexpr (std::is_enum_v<U>) {
    append(out, static_cast<std::underlying_type_t<U>>(value));
  } else if constexpr (std::is_integral_v<U>) {
    char buffer[32];
    const auto r = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, r.ptr);
  } else if constexpr (std::is_floating_point_v<U>) {
    char buffer[64];
    const auto r = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, 6);
    out.append(buffer, r.ptr);
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(value);
  } else {
    std::ostringstream stream;
    stream << value;
    out += stream.str();
  }
}

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::string out;
  (append(out, parts), ...);
  return out;
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
