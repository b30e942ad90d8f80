// SwiGLU's product for one channel, from the gate and up values as rounded to the
// activation dtype: silu(g) u = g / (1 + e^-g) u in f32. One definition for the
// separate kernel (cuda/model) and the gate|up GEMV's fused epilogue (cuda/weight_only),
// so that both paths give the same bits.
#pragma once

namespace lowbit::cuda {

__device__ __forceinline__ float swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }

}  // namespace lowbit::cuda
