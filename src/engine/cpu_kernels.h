// FP32 building blocks of the CPU forward pass (single-threaded: cpu_matmul.h splits
// the rows over the engine's threads; SIMD inner loops). The matrix product uses
// explicit FMA intrinsics where the target has them: the library builds with -ffp-contract=off (for bit-exact quantization), so plain
// loops would not fuse, and floating-point sums are not vectorized without them.
#pragma once

#include <cstdint>

namespace lowbit::engine::cpu_kernels {

// y[t * ldy + o] = x[t] . w[o] for n rows x of k and m rows w of k (w rows contiguous
// over k, as GGUF stores them). Tiles of 4 tokens x 4 output rows. Each output is one
// chain of FMAs whatever the tiling, so any split of the rows gives the same bits.
void matmul_nt(const float* x, std::int64_t n, std::int64_t k, const float* w, std::int64_t m, float* y,
               std::int64_t ldy);

float dot(const float* a, const float* b, std::int64_t n);
// dot(a, b[j], n) for four vectors b[j] at once (a loaded once), the same bits as dot().
void dot4(const float* a, const float* const b[4], std::int64_t n, float out[4]);

// y = x / sqrt(mean(x^2) + eps) * weight, for n rows of d.
void rms_norm(const float* x, const float* weight, std::int64_t n, std::int64_t d, float eps, float* y);

}  // namespace lowbit::engine::cpu_kernels
