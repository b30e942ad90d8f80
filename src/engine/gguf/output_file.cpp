#include "engine/gguf/output_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

std::string directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::string error_text(int code) { return std::strerror(code); }

}  // namespace

void check_output_path(const std::string& path, bool overwrite, const std::string& option,
                       const std::string& overwrite_hint) {
  LOWBIT_CHECK(!path.empty(), option, ": expected a file path");
  const std::string dir = directory_of(path);
  std::error_code ec;
  LOWBIT_CHECK(std::filesystem::is_directory(dir, ec), option, ": the directory '", dir, "' of '", path,
               "' does not exist");
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  LOWBIT_CHECK(!std::filesystem::is_directory(status), option, ": '", path, "' is a directory");
  LOWBIT_CHECK(overwrite || !std::filesystem::exists(status), option, ": '", path, "' exists (", overwrite_hint, ")");
}

OutputFile::OutputFile(std::string path, bool overwrite) : path_(std::move(path)), overwrite_(overwrite) {
  check_output_path(path_, overwrite_, "output file", "refusing to overwrite it");
  const std::string name = std::filesystem::path(path_).filename().string();
  temp_path_ = (std::filesystem::path(directory_of(path_)) / ("." + name + ".partial-XXXXXX")).string();
  std::vector<char> pattern(temp_path_.begin(), temp_path_.end());
  pattern.push_back('\0');
  fd_ = ::mkstemp(pattern.data());
  LOWBIT_CHECK(fd_ >= 0, "output file '", path_, "': cannot create a temporary file beside it: ", error_text(errno));
  temp_path_ = pattern.data();
  if (::fchmod(fd_, 0644) != 0) {
    const int code = errno;
    discard();
    LOWBIT_FAIL("output file '", path_, "': cannot set the permissions of '", temp_path_, "': ", error_text(code));
  }
}

OutputFile::~OutputFile() {
  if (!committed_) discard();
}

void OutputFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

void OutputFile::write(std::span<const std::uint8_t> bytes) {
  LOWBIT_CHECK(fd_ >= 0 && !committed_, "output file '", path_, "': write after commit or failure");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t chunk = std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30);
    const ssize_t n = ::write(fd_, bytes.data() + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int code = n < 0 ? errno : EIO;
      LOWBIT_FAIL("output file '", path_, "': write failed after ", written_ + done, " bytes: ", error_text(code));
    }
    done += static_cast<std::size_t>(n);
  }
  written_ += done;
}

void OutputFile::write_zeros(std::uint64_t count) {
  static const std::vector<std::uint8_t> zeros(4096, 0);
  while (count > 0) {
    const std::uint64_t n = std::min<std::uint64_t>(count, zeros.size());
    write({zeros.data(), static_cast<std::size_t>(n)});
    count -= n;
  }
}

void OutputFile::commit() {
  LOWBIT_CHECK(fd_ >= 0 && !committed_, "output file '", path_, "': commit after commit or failure");
  LOWBIT_CHECK(::fsync(fd_) == 0, "output file '", path_, "': cannot sync ", written_, " bytes: ", error_text(errno));
  const int fd = fd_;
  fd_ = -1;
  LOWBIT_CHECK(::close(fd) == 0, "output file '", path_, "': cannot close: ", error_text(errno));
  if (overwrite_) {
    LOWBIT_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "output file '", path_, "': cannot rename '",
                 temp_path_, "' onto it: ", error_text(errno));
  } else if (::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) != 0) {
    // File systems without RENAME_NOREPLACE: a hard link fails just as surely on an existing target.
    LOWBIT_CHECK(errno == EINVAL || errno == ENOSYS, "output file '", path_, "': cannot rename '", temp_path_,
                 "' onto it: ", error_text(errno));
    LOWBIT_CHECK(::link(temp_path_.c_str(), path_.c_str()) == 0, "output file '", path_, "': cannot link '",
                 temp_path_, "' to it: ", error_text(errno));
    ::unlink(temp_path_.c_str());
  }
  temp_path_.clear();
  committed_ = true;
}

}  // namespace lowbit::engine
