// RoPE's rotation of one channel pair, shared by the append kernels and the decode
// attention that appends inside it, so that both store the same bits.
#pragma once

#include <cuda_fp16.h>

namespace lowbit::cuda::kv {

// (a, b) rotated by the angle whose cosine and sine are c and s: the pair's first value
// a c - b s and its second a s + b c, each rounded to f16 as a stored value is. Explicit
// roundings, no FMA contraction: the CPU's arithmetic to the bit.
__device__ __forceinline__ float rope_first(float a, float b, float c, float s) {
  return __half2float(__float2half_rn(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s))));
}
__device__ __forceinline__ float rope_second(float a, float b, float c, float s) {
  return __half2float(__float2half_rn(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c))));
}

}  // namespace lowbit::cuda::kv
