// CPU reference of the block formats (include/lowbit/block_formats.h): the oracle of
// the GPU tests and the CPU path of the API. OpenMP over rows; every value goes
// through the formats layer (src/formats/nf4.h, mxfp4.h, nvfp4.h), as in the kernels.
// Arguments arrive validated by src/api/block_formats.cpp.
#pragma once

#include "lowbit/block_formats.h"

namespace lowbit::cpu {

// Throws lowbit::Error naming the first NaN/Inf element of x (row-major order)
// before writing anything.
void block_encode(const TensorView& x, BlockFormat format, const BlockQuantizedView& out);
void block_decode(const BlockQuantizedView& in, BlockFormat format, const TensorView& out);

}  // namespace lowbit::cpu
