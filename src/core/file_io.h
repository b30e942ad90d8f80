// Whole files in and out, with errors that name the path. A written file is complete
// or absent: its bytes go to a temporary file beside the target (same directory, so the
// final rename cannot cross file systems), every write is checked, and only a commit
// syncs it to disk and renames it onto the target.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace lowbit {

// A file being written (streamed: any number of writes, then commit()). Destroyed
// without a commit (an exception on the way), it removes the temporary file; the target
// is never touched then. An existing target that is a symbolic link has the file it
// names replaced, not the link, and an existing target's permissions are kept (a new
// file gets 0644).
class OutputFile {
 public:
  // Throws lowbit::Error when the directory of `path` does not exist, `path` is a
  // directory, the temporary file cannot be created, or `path` exists and !overwrite.
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

  std::string path_, target_, temp_path_;
  bool overwrite_;
  int fd_ = -1;
  bool committed_ = false;
  std::uint64_t written_ = 0;
};

// Throws lowbit::Error naming `option` when `path` cannot be a new output: it is empty
// or a directory, its directory does not exist, or it exists and !overwrite (then the
// message says how to overwrite: `overwrite_hint`). For checks before any work starts.
void check_output_path(const std::string& path, bool overwrite, const std::string& option,
                       const std::string& overwrite_hint);

// `bytes` into `path` through an OutputFile that may overwrite. A path that is not a
// regular file (a device such as /dev/full or /dev/stdout, a pipe) is written in place,
// every write checked: a rename would replace the device node itself.
void write_file_atomically(const std::string& path, std::string_view bytes);

// The whole content of `path`. Throws lowbit::Error naming the path when it is absent,
// a directory, unreadable, or a read fails.
std::string read_file(const std::string& path);

}  // namespace lowbit
