#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lowbit/error.h"

namespace lowbit {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Writes all of `bytes` to fd, retrying short writes and interrupted calls.
bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// A device or pipe: written where it is (a rename would replace the node itself).
void write_in_place(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  LOWBIT_CHECK(fd >= 0, "cannot open '", path, "' for writing: ", errno_text());
  const bool written = write_all(fd, bytes);
  const std::string cause = errno_text();
  const bool closed = ::close(fd) == 0;
  LOWBIT_CHECK(written, "writing '", path, "' failed: ", cause);
  LOWBIT_CHECK(closed, "writing '", path, "' failed (on close): ", errno_text());
}

// A name for the temporary file beside `target` that no other writer picks.
std::string temporary_name(const std::filesystem::path& target) {
  static std::atomic<unsigned> counter{0};
  std::string name = ".";  // appended, not operator+: GCC 12 warns (falsely, -Wrestrict) about the latter
  name.append(target.filename().string())
      .append(".tmp.")
      .append(std::to_string(::getpid()))
      .append(".")
      .append(std::to_string(counter++));
  return (target.parent_path() / name).string();
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  LOWBIT_CHECK(!path.empty(), "cannot write a file with an empty path");
  std::filesystem::path target(path);
  struct stat existing {};
  const bool exists = ::stat(path.c_str(), &existing) == 0;
  if (exists) {
    LOWBIT_CHECK(!S_ISDIR(existing.st_mode), "cannot write '", path, "': it is a directory");
    if (!S_ISREG(existing.st_mode)) {
      write_in_place(path, bytes);
      return;
    }
    LOWBIT_CHECK(::access(path.c_str(), W_OK) == 0, "cannot write '", path, "': ", errno_text());
    // A symbolic link: the file it names is replaced, not the link.
    std::error_code error;
    const std::filesystem::path resolved = std::filesystem::canonical(target, error);
    if (!error) target = resolved;
  } else {
    LOWBIT_CHECK(errno == ENOENT, "cannot write '", path, "': ", errno_text());
  }
  if (target.parent_path().empty()) target = std::filesystem::path(".") / target;
  std::error_code dir_error;
  LOWBIT_CHECK(std::filesystem::is_directory(target.parent_path(), dir_error), "cannot write '", path,
               "': its directory '", target.parent_path().string(), "' does not exist");

  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temp = temporary_name(target);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  LOWBIT_CHECK(fd >= 0, "cannot write '", path, "': creating '", temp, "' failed: ", errno_text());
  bool ok = write_all(fd, bytes);
  std::string cause = ok ? "" : errno_text();
  if (ok && exists && ::fchmod(fd, existing.st_mode & 07777) != 0) {
    ok = false;
    cause = "keeping its permissions: " + errno_text();
  }
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    cause = "flushing to disk: " + errno_text();
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    cause = "closing: " + errno_text();
  }
  if (ok && ::rename(temp.c_str(), target.c_str()) != 0) {
    ok = false;
    cause = "renaming '" + temp + "' over it: " + errno_text();
  }
  if (!ok) {
    ::unlink(temp.c_str());
    LOWBIT_FAIL("writing '", path, "' failed (", bytes.size(), " bytes; the file is left as it was): ", cause);
  }
}

std::string read_file(const std::string& path) {
  struct stat info {};
  LOWBIT_CHECK(::stat(path.c_str(), &info) == 0, "cannot read '", path, "': ", errno_text());
  LOWBIT_CHECK(!S_ISDIR(info.st_mode), "cannot read '", path, "': it is a directory, expected a file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOWBIT_CHECK(fd >= 0, "cannot read '", path, "': ", errno_text());
  std::string out;
  if (S_ISREG(info.st_mode)) out.reserve(static_cast<std::size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string cause = errno_text();
      ::close(fd);
      LOWBIT_CHECK(n == 0, "reading '", path, "' failed: ", cause);
      return out;
    }
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

}  // namespace lowbit
