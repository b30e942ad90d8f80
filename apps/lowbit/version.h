// lowbit's version as `--version` prints it: the project version (CMake), the git
// commit it was built from, and what the build holds (CUDA architectures or CPU only).
#pragma once

#include <string>

namespace lowbit::cli {

std::string version_line();

}  // namespace lowbit::cli
