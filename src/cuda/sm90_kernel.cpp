#include "cuda/sm90_kernel.h"

#include <cuda_runtime_api.h>

namespace lowbit::cuda {

bool sm90a_kernel_runs(const void* kernel, std::size_t marker_bytes, int dynamic_smem_bytes) {
  int device = 0, major = 0, minor = 0;
  cudaFuncAttributes attributes{};
  const bool runs = cudaGetDevice(&device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                    major == 9 && minor == 0 && cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
                    attributes.binaryVersion == 90 && attributes.sharedSizeBytes >= marker_bytes &&
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_smem_bytes) ==
                        cudaSuccess;
  (void)cudaGetLastError();  // a failed query leaves nothing behind for the next launch check
  return runs;
}

bool Sm90KernelReady::operator()(const void* kernel, std::size_t marker_bytes, int dynamic_smem_bytes) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  std::atomic<int>& slot = cached_[static_cast<std::size_t>(device) % cached_.size()];
  int state = slot.load(std::memory_order_acquire);
  if (state == 0) {
    state = sm90a_kernel_runs(kernel, marker_bytes, dynamic_smem_bytes) ? 1 : 2;
    slot.store(state, std::memory_order_release);
  }
  return state == 1;
}

}  // namespace lowbit::cuda
