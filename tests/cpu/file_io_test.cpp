// Whole-file writes and reads (core/file_io.h): a written file is complete or left as
// it was, and every failure is an error naming the path.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "core/file_io.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lowbit_file_io_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Names in the folder: a failed write leaves no temporary file behind.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : fs::directory_iterator(dir_)) out.push_back(entry.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

TEST_F(FileIo, WritesReplacesAndReadsBack) {
  const std::string file = path("out.json");
  write_file_atomically(file, "first");
  EXPECT_EQ(read_file(file), "first");
  write_file_atomically(file, std::string(100000, 'x'));
  EXPECT_EQ(read_file(file), std::string(100000, 'x'));
  write_file_atomically(file, "");
  EXPECT_EQ(read_file(file), "");
  EXPECT_EQ(names(), std::vector<std::string>{"out.json"});
}

TEST_F(FileIo, KeepsPermissionsAndReplacesTheTargetOfALink) {
  const std::string file = path("data.json"), link = path("link.json");
  write_file_atomically(file, "old");
  ::chmod(file.c_str(), 0640);
  fs::create_symlink(file, link);
  write_file_atomically(link, "new");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_file(file), "new");
  struct stat info {};
  ASSERT_EQ(::stat(file.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0640u);
}

// A write that fails part way (here: the process's file size limit) leaves the old
// file whole and no temporary file.
TEST_F(FileIo, FailedWriteLeavesTheOldFileWhole) {
  const std::string file = path("results.json");
  write_file_atomically(file, "complete old results");
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  EXPECT_LOWBIT_ERROR(write_file_atomically(file, std::string(10000, 'y')),
                      "output file '" + file + "': write failed after 0 bytes (10000 more to go; the file is left "
                      "as it was): File too large");
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(read_file(file), "complete old results");
  EXPECT_EQ(names(), std::vector<std::string>{"results.json"});
}

// A streamed file (OutputFile) without overwrite refuses an existing target, and one
// dropped before its commit leaves nothing behind.
TEST_F(FileIo, StreamedFileCommitsOrLeavesNothing) {
  const std::string file = path("model.gguf");
  {
    OutputFile out(file, /*overwrite=*/false);
    const std::uint8_t bytes[3] = {1, 2, 3};
    out.write(bytes);
    out.write_zeros(5000);
    EXPECT_EQ(out.bytes_written(), 5003u);
  }  // no commit
  EXPECT_TRUE(names().empty());
  {
    OutputFile out(file, /*overwrite=*/false);
    out.write_zeros(8);
    out.commit();
  }
  EXPECT_EQ(read_file(file), std::string(8, '\0'));
  EXPECT_LOWBIT_ERROR(OutputFile(file, /*overwrite=*/false), "output file: '" + file + "' exists (refusing");
  EXPECT_LOWBIT_ERROR(check_output_path(file, false, "--out", "pass --force"), "--out: '" + file + "' exists (pass --force)");
}

TEST_F(FileIo, ErrorsNameThePath) {
  EXPECT_LOWBIT_ERROR(write_file_atomically("/dev/full", "x"), "writing '/dev/full' failed: No space left on device");
  EXPECT_LOWBIT_ERROR(write_file_atomically(dir_.string(), "x"), "output file: '" + dir_.string() + "' is a directory");
  EXPECT_LOWBIT_ERROR(write_file_atomically(path("no/such/dir.json"), "x"),
                      "output file: the directory '" + path("no/such") + "' of '" + path("no/such/dir.json") +
                          "' does not exist");
  EXPECT_LOWBIT_ERROR(write_file_atomically("", "x"), "output file: expected a file path");
  EXPECT_LOWBIT_ERROR(read_file(dir_.string()), "cannot read '" + dir_.string() + "': it is a directory");
  EXPECT_LOWBIT_ERROR(read_file(path("absent.txt")), "cannot read '" + path("absent.txt") + "': No such file");
  EXPECT_TRUE(names().empty());
}

}  // namespace
}  // namespace lowbit
