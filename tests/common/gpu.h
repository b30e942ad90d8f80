// GPU test helpers: a fixture that skips without a device, and typed copies.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "cuda/device_buffer.h"
#include "lowbit/cuda_check.h"

namespace lowbit::test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device: GPU tests run on a GPU machine (scripts/gpu-check.sh)";
    }
  }
};

template <class T>
cuda::DeviceBuffer upload(const std::vector<T>& host, std::size_t extra_bytes = 0) {
  cuda::DeviceBuffer buffer(host.size() * sizeof(T) + extra_bytes);
  LOWBIT_CUDA_CHECK(cudaMemcpy(buffer.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buffer;
}

template <class T>
std::vector<T> download(const void* device, std::size_t count) {
  std::vector<T> host(count);
  LOWBIT_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

inline void poison(const cuda::DeviceBuffer& buffer, int byte) {
  if (buffer.bytes()) LOWBIT_CUDA_CHECK(cudaMemset(buffer.data(), byte, buffer.bytes()));
}

}  // namespace lowbit::test
