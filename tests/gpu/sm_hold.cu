#include "gpu/sm_hold.h"

#include <chrono>
#include <thread>

#include "lowbit/cuda_check.h"

namespace lowbit::test {
namespace {

__global__ void hold_sm(const volatile int* release, int* started) {
  if (threadIdx.x != 0) return;
  atomicAdd_system(started, 1);
  while (*release == 0) __nanosleep(20000);
}

}  // namespace

SmHold::SmHold(int free_sms) {
  int device = 0, sms = 0, smem = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int blocks = sms - free_sms;
  LOWBIT_CUDA_CHECK(cudaHostAlloc(&flags_, 2 * sizeof(int), cudaHostAllocMapped));
  flags_[0] = flags_[1] = 0;
  int* device_flags = nullptr;
  LOWBIT_CUDA_CHECK(cudaHostGetDevicePointer(&device_flags, flags_, 0));
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (blocks <= 0) {
    holding_ = true;
    return;
  }
  LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(hold_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  hold_sm<<<blocks, 32, smem, stream_>>>(device_flags, device_flags + 1);
  LOWBIT_CUDA_CHECK(cudaGetLastError());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const volatile int* started = flags_ + 1;
  while (*started < blocks && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  holding_ = *started == blocks;
}

void SmHold::release() {
  if (released_) return;
  released_ = true;
  *static_cast<volatile int*>(flags_) = 1;
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

SmHold::~SmHold() {
  if (!released_) {
    *static_cast<volatile int*>(flags_) = 1;
    (void)cudaStreamSynchronize(stream_);  // no throw from a destructor
  }
  (void)cudaStreamDestroy(stream_);
  (void)cudaFreeHost(flags_);
}

}  // namespace lowbit::test
