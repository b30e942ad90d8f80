// GPU test helpers: a fixture that skips when there is no CUDA device, and device
// buffers with poisoned guard bytes on both sides of the tensor, so that a kernel
// writing before or past its tensor is caught without a sanitizer.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/compare.h"
#include "core/device_buffer.h"
#include "lowbit/cuda_check.h"

namespace lowbit::test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
      (void)cudaGetLastError();  // clear the error the query left behind
      GTEST_SKIP() << "no CUDA device: "
                   << (status != cudaSuccess ? cudaGetErrorString(status) : "cudaGetDeviceCount found none")
                   << " (GPU tests run on a GPU machine: scripts/gpu-check.sh)";
    }
  }
  void TearDown() override {
    if (!IsSkipped()) LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// Set (LOWBIT_TEST_SANITIZER, by `scripts/gpu-check.sh --sanitize`) when the tests run
// under compute-sanitizer: the tests that sweep many shapes then take a subset, each
// kernel they cover still launched, at fewer shapes and sizes (racecheck tracks each
// shared-memory access, 100x and more the plain run: the full sweeps took over 5 minutes
// a test). The plain runs keep the full sweeps.
inline bool under_sanitizer() {
  static const bool set = std::getenv("LOWBIT_TEST_SANITIZER") != nullptr;
  return set;
}

// `all`, or under the sanitizer the entries at `picks` (indices into `all`).
template <class T>
std::vector<T> sanitizer_subset(const std::vector<T>& all, const std::vector<std::size_t>& picks) {
  if (!under_sanitizer()) return all;
  std::vector<T> out;
  for (std::size_t i : picks) out.push_back(all.at(i));
  return out;
}

template <class T>
std::vector<T> download(const void* device, std::size_t count) {
  std::vector<T> host(count);
  if (count) LOWBIT_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// `bytes` of device memory at data(), `shift` bytes past a 256-byte boundary (shift 1
// or one element: a misaligned tensor), between two guard regions.
class GuardedBuffer {
 public:
  static constexpr std::size_t kGuard = 256;

  explicit GuardedBuffer(std::size_t bytes, std::size_t shift = 0)
      : buffer_(kGuard + shift + bytes + kGuard), bytes_(bytes), offset_(kGuard + shift) {}

  void* data() const { return static_cast<char*>(buffer_.data()) + offset_; }
  std::size_t bytes() const { return bytes_; }

  // Fills the whole allocation, guards included.
  void poison(std::uint8_t byte) {
    LOWBIT_CUDA_CHECK(cudaMemset(buffer_.data(), byte, buffer_.bytes()));
    poison_ = byte;
  }
  void upload(const void* host, std::size_t bytes) {
    EXPECT_LE(bytes, bytes_);
    LOWBIT_CUDA_CHECK(cudaMemcpy(data(), host, bytes, cudaMemcpyHostToDevice));
  }
  std::vector<std::uint8_t> download_bytes() const { return download<std::uint8_t>(data(), bytes_); }

  // The guards still hold the last poison: nothing was written outside the tensor.
  ::testing::AssertionResult guards_intact(const std::string& what) const {
    const auto* base = static_cast<const char*>(buffer_.data());
    const std::vector<std::uint8_t> before = download<std::uint8_t>(base, offset_);
    const std::vector<std::uint8_t> after = download<std::uint8_t>(base + offset_ + bytes_, kGuard);
    ::testing::AssertionResult ok = all_bytes_are(before.data(), before.size(), poison_, what + ": guard before the tensor");
    if (ok) ok = all_bytes_are(after.data(), after.size(), poison_, what + ": guard after the tensor");
    return ok;
  }

 private:
  core::DeviceBuffer buffer_;
  std::size_t bytes_, offset_;
  std::uint8_t poison_ = 0;
};

}  // namespace lowbit::test
