#include "write_file.h"

#include <cstdio>
#include <fstream>

#include "lowbit/error.h"

namespace lowbit::cli {

void write_whole_file(const std::string& option, const std::string& path, const std::string& text) {
  const std::string partial = path + ".partial";
  {
    std::ofstream file(partial, std::ios::binary | std::ios::trunc);
    LOWBIT_CHECK(file.good(), option, ": cannot write '", partial, "'");
    file << text;
    file.close();
    LOWBIT_CHECK(file.good(), option, ": writing '", partial, "' failed");
  }
  LOWBIT_CHECK(std::rename(partial.c_str(), path.c_str()) == 0, option, ": cannot rename '", partial, "' to '", path,
               "'");
}

}  // namespace lowbit::cli
