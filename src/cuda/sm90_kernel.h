// Whether a Hopper-only (sm_90a) kernel runs on the current device: compute capability
// 9.0, an image of the kernel with its sm_90a body (such bodies declare static shared
// memory, the marker: an image built from compute_90 PTX or for another target has
// none), and the dynamic shared memory it asks for opted in. Answered once per device
// and kernel: callers keep one Sm90KernelReady per kernel instantiation.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>

namespace lowbit::cuda {

// The checks above for `kernel` (a __global__ function's address), uncached.
bool sm90a_kernel_runs(const void* kernel, std::size_t marker_bytes, int dynamic_smem_bytes);

class Sm90KernelReady {
 public:
  bool operator()(const void* kernel, std::size_t marker_bytes, int dynamic_smem_bytes);

 private:
  std::array<std::atomic<int>, 64> cached_{};  // per device: 0 not known, 1 ready, 2 not
};

}  // namespace lowbit::cuda
