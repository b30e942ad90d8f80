// A file written whole or not at all: bytes go to a temporary file beside the target
// (same directory, so the final rename cannot cross file systems), every write is
// checked, and commit() syncs it and renames it onto the target. Destroyed without a
// commit (an exception on the way), it removes the temporary file; the target is
// never touched then. Every error names the target path.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace lowbit::engine {

class OutputFile {
 public:
  // Throws lowbit::Error when the directory of `path` does not exist or the temporary
  // file cannot be created, and when `path` exists and !overwrite.
  OutputFile(std::string path, bool overwrite);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::span<const std::uint8_t> bytes);
  void write_zeros(std::uint64_t count);
  // Syncs, closes and renames onto the target (without overwrite: fails if a file
  // appeared there meanwhile). After it, the destructor leaves the file alone.
  void commit();

  const std::string& path() const { return path_; }
  std::uint64_t bytes_written() const { return written_; }

 private:
  void discard() noexcept;

  std::string path_, temp_path_;
  bool overwrite_;
  int fd_ = -1;
  bool committed_ = false;
  std::uint64_t written_ = 0;
};

// Throws lowbit::Error naming `option` when `path` cannot be a new output: its
// directory does not exist, or it exists and !overwrite (then the message says
// how to overwrite: `overwrite_hint`). For checks before any work starts.
void check_output_path(const std::string& path, bool overwrite, const std::string& option,
                       const std::string& overwrite_hint);

}  // namespace lowbit::engine
