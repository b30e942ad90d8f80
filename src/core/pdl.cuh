// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl may be
// scheduled while its predecessor in the stream is still running, which hides the
// launch latency between the many small kernels of a decode step. Such a kernel calls
// pdl_wait() before it touches global memory (it returns once the predecessor has
// finished and its writes are visible: the same guarantee as ordinary stream order),
// and pdl_trigger() to let its own successor be scheduled early. Both are no-ops in a
// kernel launched the ordinary way, and below sm_90.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/device.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...) in clusters of `cluster_x` blocks along x
// (1: no cluster), with programmatic stream serialization allowed when `programmatic` (and
// core::programmatic_launch()) is on; checks the launch.
template <class... Params, class... Args>
void launch_cluster_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                           bool programmatic, unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (programmatic && core::programmatic_launch()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = cluster_x;
    attributes[count].val.clusterDim.y = 1;
    attributes[count++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  LOWBIT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  LOWBIT_CUDA_CHECK_LAUNCH();
}

// launch_cluster_kernel without clusters.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                   bool programmatic, Args&&... args) {
  launch_cluster_kernel(kernel, grid, block, smem, stream, programmatic, 1u, std::forward<Args>(args)...);
}

// launch_kernel with programmatic stream serialization allowed.
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_kernel(kernel, grid, block, smem, stream, true, std::forward<Args>(args)...);
}

}  // namespace lowbit::cuda
