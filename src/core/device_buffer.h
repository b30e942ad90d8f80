// Owning device allocation for tests, benchmarks and apps (the library's entry
// points never allocate; their callers do, through this).
#pragma once

#include <cstddef>
#include <utility>

#include "lowbit/cuda_check.h"

namespace lowbit::core {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes_) LOWBIT_CUDA_CHECK(cudaMalloc(&data_, bytes_));
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);  // never throws from a destructor
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace lowbit::core
