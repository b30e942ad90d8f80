// Writes a result file whole or not at all: the text goes to PATH.partial, which is
// renamed to PATH once complete.
#pragma once

#include <string>

namespace lowbit::cli {

// Throws lowbit::Error naming `option` and the path when it cannot be written.
void write_whole_file(const std::string& option, const std::string& path, const std::string& text);

}  // namespace lowbit::cli
