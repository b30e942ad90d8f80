#include "lowbit/error.h"

#include <cstring>

namespace lowbit::detail {

[[noreturn]] void throw_error(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Error("lowbit: " + message + " [" + (base ? base + 1 : file) + ":" + std::to_string(line) + "]");
}

}  // namespace lowbit::detail
