#include "core/file_io.h"

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

namespace lowbit {
namespace {

std::string directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::string error_text(int code) { return std::strerror(code); }

// All of `bytes` into fd, retrying short writes and interrupted calls; the errno of a
// failure (EIO for a write of nothing), else 0.
int write_all(int fd, const std::uint8_t* bytes, std::size_t count) {
  while (count > 0) {
    const ssize_t n = ::write(fd, bytes, std::min<std::size_t>(count, std::size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    bytes += n;
    count -= static_cast<std::size_t>(n);
  }
  return 0;
}

// A device or pipe: written where it is.
void write_in_place(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  LOWBIT_CHECK(fd >= 0, "cannot open '", path, "' for writing: ", error_text(errno));
  const int code = write_all(fd, reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  const bool closed = ::close(fd) == 0;
  LOWBIT_CHECK(code == 0, "writing '", path, "' failed: ", error_text(code));
  LOWBIT_CHECK(closed, "writing '", path, "' failed (on close): ", error_text(errno));
}

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
  target_ = path_;
  mode_t mode = 0644;
  struct stat existing {};
  if (::stat(path_.c_str(), &existing) == 0) {  // overwrite: replace what a link names, keep the mode
    LOWBIT_CHECK(::access(path_.c_str(), W_OK) == 0, "output file '", path_, "': ", error_text(errno));
    std::error_code ec;
    const std::filesystem::path resolved = std::filesystem::canonical(path_, ec);
    if (!ec) target_ = resolved.string();
    mode = existing.st_mode & 07777;
  }
  const std::string name = std::filesystem::path(target_).filename().string();
  temp_path_ = (std::filesystem::path(directory_of(target_)) / ("." + name + ".partial-XXXXXX")).string();
  std::vector<char> pattern(temp_path_.begin(), temp_path_.end());
  pattern.push_back('\0');
  fd_ = ::mkstemp(pattern.data());
  LOWBIT_CHECK(fd_ >= 0, "output file '", path_, "': cannot create a temporary file beside it: ", error_text(errno));
  temp_path_ = pattern.data();
  if (::fchmod(fd_, mode) != 0) {
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
  const int code = write_all(fd_, bytes.data(), bytes.size());
  LOWBIT_CHECK(code == 0, "output file '", path_, "': write failed after ", written_, " bytes (", bytes.size(),
               " more to go; the file is left as it was): ", error_text(code));
  written_ += bytes.size();
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
    LOWBIT_CHECK(::rename(temp_path_.c_str(), target_.c_str()) == 0, "output file '", path_, "': cannot rename '",
                 temp_path_, "' onto it: ", error_text(errno));
  } else if (::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE) != 0) {
    // File systems without RENAME_NOREPLACE: a hard link fails just as surely on an existing target.
    LOWBIT_CHECK(errno == EINVAL || errno == ENOSYS, "output file '", path_, "': cannot rename '", temp_path_,
                 "' onto it: ", error_text(errno));
    LOWBIT_CHECK(::link(temp_path_.c_str(), target_.c_str()) == 0, "output file '", path_, "': cannot link '",
                 temp_path_, "' to it: ", error_text(errno));
    ::unlink(temp_path_.c_str());
  }
  temp_path_.clear();
  committed_ = true;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  struct stat existing {};
  if (!path.empty() && ::stat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode) &&
      !S_ISDIR(existing.st_mode)) {
    write_in_place(path, bytes);
    return;
  }
  OutputFile file(path, /*overwrite=*/true);
  file.write({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
  file.commit();
}

std::string read_file(const std::string& path) {
  struct stat info {};
  LOWBIT_CHECK(::stat(path.c_str(), &info) == 0, "cannot read '", path, "': ", error_text(errno));
  LOWBIT_CHECK(!S_ISDIR(info.st_mode), "cannot read '", path, "': it is a directory, expected a file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOWBIT_CHECK(fd >= 0, "cannot read '", path, "': ", error_text(errno));
  std::string out;
  if (S_ISREG(info.st_mode)) out.reserve(static_cast<std::size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int code = errno;
      ::close(fd);
      LOWBIT_CHECK(n == 0, "reading '", path, "' failed: ", error_text(code));
      return out;
    }
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

}  // namespace lowbit
