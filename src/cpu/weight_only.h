// Host side of the weight-only GEMM: the repacker (offline, host memory) and the CPU
// reference that reads the packed form through the same accessors as the kernels
// (src/formats/weight_pack.h). Arguments arrive validated by src/api/gemm.cpp.
#pragma once

#include "lowbit/weight_only.h"

namespace lowbit::cpu {

void pack_weights(const TensorView& codes, const TensorView& scales, const TensorView& mins,
                  const PackedWeights& out);

void weight_only_gemm(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out);

}  // namespace lowbit::cpu
