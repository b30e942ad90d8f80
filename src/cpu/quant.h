// CPU reference of every quantization op: the oracle of the GPU tests and the fast
// CPU path (OpenMP over rows, branch-free inner loops over columns that the compiler
// vectorizes). Arguments arrive validated by src/api/quant.cpp.
#pragma once

#include "lowbit/quant.h"

namespace lowbit::cpu {

// Throws lowbit::Error naming the first NaN/Inf element it finds.
void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out);
void quantize_with_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out);
void dequantize(const QuantizedView& in, const QuantSpec& spec, const TensorView& out);

}  // namespace lowbit::cpu
