// y = x W^T for the CPU forward pass, on the engine's thread pool (cpu/thread_pool.h):
// f32 matrices with the FP32 tiles (cpu_kernels.h); block matrices with 8-bit
// activations (cpu/block_dot.h) for fewer than kBatchTokens rows of x (decode), and for
// longer batches (prefill) row groups decoded to f32 and the FP32 tiles, which gives
// the FP32 reference's results. Matrices that read the same input (Q | K | V, gate |
// up) are one parallel region, with one quantization of the input.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "cpu/block_dot.h"
#include "engine/weight_matrix.h"

namespace lowbit::engine {

inline constexpr std::int64_t kBatchTokens = 32;

struct MatmulTarget {
  const WeightMatrix* w;
  float* y;  // [n x w->rows()]
};

// x is [n x k] (rows contiguous); every target's matrix has k columns (checked).
// `scratch` holds the quantized input between calls (no allocation once it is big
// enough).
void matmul(const float* x, std::int64_t n, std::int64_t k, std::initializer_list<MatmulTarget> targets,
            cpu::QuantizedActivations& scratch);

}  // namespace lowbit::engine
