// Named barriers: a subset of a block's threads meet (id 0 is __syncthreads'). A producer
// that only signals arrives; the threads that bar.sync on the id wait for both.
#pragma once

namespace lowbit::cuda {

// Waits until `threads` threads (this one included) have reached barrier `id`.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives on barrier `id` without waiting: the threads that bar.sync on it wait for these
// arrivals too (`threads` counts both); when the barrier completes, this thread's earlier
// memory accesses are performed for them (PTX ISA, barrier).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace lowbit::cuda
