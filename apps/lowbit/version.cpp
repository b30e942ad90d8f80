#include "version.h"

#include "build_info.h"

namespace lowbit::cli {

std::string version_line() {
  std::string line = std::string("lowbit ") + LOWBIT_VERSION + " (commit " + LOWBIT_GIT_COMMIT + ", ";
#if LOWBIT_WITH_CUDA
  line += "CUDA " LOWBIT_CUDA_ARCHITECTURES;
#else
  line += "CPU only";
#endif
  return line + ")";
}

}  // namespace lowbit::cli
