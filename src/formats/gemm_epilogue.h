// The epilogue of an integer GEMM with a float output (see include/lowbit/gemm.h):
//
//   v = fma((float(acc) * scale_a) * scale_b, scale_c, bias);  relu ? max(v, 0) : v
//
// then one rounding to the output type (RNE). float(acc) rounds to nearest even on
// both sides (cvt.rn.f32.s32 on the GPU). The multiplies are written as __fmul_rn on
// the device so that nvcc cannot contract them into the fma; host code is built with
// -ffp-contract=off. The CPU reference and every kernel call this function, so float
// outputs agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "formats/hd.h"

namespace lowbit::formats {


LOWBIT_HD float apply_epilogue(std::int32_t acc, float scale_a, float scale_b, float scale_c, float bias,
                               bool relu) {
#if defined(__CUDA_ARCH__)
  const float scaled = __fmul_rn(__fmul_rn(__int2float_rn(acc), scale_a), scale_b);
  const float v = __fmaf_rn(scaled, scale_c, bias);
#else
  const float scaled = (static_cast<float>(acc) * scale_a) * scale_b;
  const float v = std::fma(scaled, scale_c, bias);
#endif
  // NaN passes through ReLU unchanged (v > 0 is false for NaN, so test v < 0).
  return (relu && v < 0.0f) ? 0.0f : v;
}

}  // namespace lowbit::formats
