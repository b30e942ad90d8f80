// `lowbit serve` and `lowbit bench serve` in a build configured with -DLOWBIT_SERVER=OFF.
#include "commands.h"
#include "lowbit/error.h"

namespace lowbit::cli {

int cmd_serve(const Args&) {
  LOWBIT_FAIL("lowbit serve: this lowbit was built without the HTTP server (-DLOWBIT_SERVER=OFF); install "
              "libcpp-httplib-dev and nlohmann-json3-dev (scripts/setup.sh) and configure again");
}

int cmd_bench_serve(const Args&) {
  LOWBIT_FAIL("lowbit bench serve: this lowbit was built without the HTTP client (-DLOWBIT_SERVER=OFF); install "
              "libcpp-httplib-dev and nlohmann-json3-dev (scripts/setup.sh) and configure again");
}

}  // namespace lowbit::cli
