// cp.async (sm_80+): 16-byte copies global -> shared that bypass L1 and registers, in
// commit groups a thread waits for; bytes past src_bytes (0..16) are zero-filled.
#pragma once

#include <cstdint>

namespace lowbit::cuda {

__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  cp_async16(smem_address(dst), src, src_bytes);
}
// 4 bytes (src and dst 4-byte aligned) through L1.
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_address(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's newest groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace lowbit::cuda
