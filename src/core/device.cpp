#include "core/device.h"

#include <array>
#include <atomic>

#include "lowbit/cuda_check.h"

namespace lowbit::core {

int current_device() {
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

int multiprocessor_count() {
  static std::array<std::atomic<int>, 64> cached{};
  const int device = current_device();
  const auto slot = static_cast<std::size_t>(device) % cached.size();
  int count = cached[slot].load(std::memory_order_relaxed);
  if (count == 0) {
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    cached[slot].store(count, std::memory_order_relaxed);
  }
  return count;
}

namespace {
std::atomic<bool> programmatic_launch_on{true};
}  // namespace

void set_programmatic_launch(bool on) { programmatic_launch_on.store(on, std::memory_order_relaxed); }
bool programmatic_launch() { return programmatic_launch_on.load(std::memory_order_relaxed); }

void check_device_pointer(const void* ptr, const char* what) {
  cudaPointerAttributes attributes{};
  LOWBIT_CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  const bool device_visible =
      attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  LOWBIT_CHECK(device_visible, what, ": the view says cuda but ", ptr,
               " is not device memory (allocate it with cudaMalloc, or pass a cpu view)");
}

}  // namespace lowbit::core
