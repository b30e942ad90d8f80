// FP32 building blocks of the CPU forward pass (OpenMP over output rows, SIMD inner
// loops). The matrix product uses explicit FMA intrinsics where the target has them:
// the library builds with -ffp-contract=off (for bit-exact quantization), so plain
// loops would not fuse, and floating-point sums are not vectorized without them.
#pragma once

#include <cstdint>

namespace lowbit::engine::cpu_kernels {

// y[n x m] = x[n x k] * w[m x k]^T (w rows contiguous over k, as GGUF stores them).
// Blocked: tiles of 4 tokens x 4 output rows, token blocks kept in cache while
// every thread sweeps its share of w's rows.
void matmul_nt(const float* x, std::int64_t n, std::int64_t k, const float* w, std::int64_t m, float* y);

float dot(const float* a, const float* b, std::int64_t n);

// y = x / sqrt(mean(x^2) + eps) * weight, for n rows of d.
void rms_norm(const float* x, const float* weight, std::int64_t n, std::int64_t d, float eps, float* y);

}  // namespace lowbit::engine::cpu_kernels
