// (a & kMask) | kOr in one LOP3. The compiler splits a mask-and-or with two immediates
// into two LOP3s (one immediate each), which made the INT4 decodes ALU-bound (the
// weight-only GEMV's and the quantized KV cache's).
#pragma once

#include <cstdint>

namespace lowbit::cuda {

template <std::uint32_t kMask, std::uint32_t kOr>
__device__ __forceinline__ std::uint32_t and_or(std::uint32_t a) {
  std::uint32_t out;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(out) : "r"(a), "n"(kMask), "n"(kOr));
  return out;
}

}  // namespace lowbit::cuda
