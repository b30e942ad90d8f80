// Math by the special-function unit alone, where the libdevice form's extra steps buy
// nothing for the caller.
#pragma once

namespace lowbit::cuda {

// 2^x by the MUFU alone: ex2.approx.ftz flushes results below 2^-126 to 0, which a
// softmax weight (x <= 0, against a maximum weight of 1) may be without changing any sum;
// exp2f's fix-up for subnormal results takes 4 more instructions. Its error (2 ulp) is far
// below the f16 / bf16 rounding of the weights.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace lowbit::cuda
