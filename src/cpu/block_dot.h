// Matrix products on weight blocks of 32 values (cpu/weight_blocks.h: ggml's Q4_0,
// Q4_1, Q8_0 as a GGUF file stores them, and the blocks that hold the other ggml types
// exactly) with the activations quantized per block of 32 to 8 bits, the way
// llama.cpp's CPU backend computes them: the integer dot product of a weight block and
// an activation block is exact, and each block's scale(s) and offset are applied to it
// in f32.
//
//   q4_0      d_w * d_x * sum(q_w * q_x) - 8 * d_w * (d_x * sum(q_x))     q_w in 0..15
//   q4_1      d_w * d_x * sum(q_w * q_x) + m_w * (d_x * sum(q_x))         q_w in 0..15
//   q8_0      d_w * d_x * sum(q_w * q_x)                                   q_w in -128..127
//   q4_f32    as q4_1 (f32 d_w and m_w)
//   q5_f32    as q4_1, q_w in 0..31
//   q6_f32x2  d0_w * d_x * sum over values 0-15 + d1_w * d_x * sum over 16-31, q_w in -32..31
//   q2_f16x2  as q6_f32x2, q_w in 0..3, minus dmin * mn_h * (d_x * sum of q_x over half h)
//             (the half sums from the activation codes, in the kernel)
//   q3_f16x2  as q6_f32x2 with d_h = d * sc_h, q_w - 4 in -4..3 (SIMD: sum(q_w * q_x) - 4 *
//             sum(q_x), in the integer dot product)
//   q4_f16    as q4_f32 with d_w = d * sc, m_w = -(dmin * mn)
//   q6_f16x2  as q6_f32x2 with d_h = d * sc_h, q_w - 32 in -32..31 (SIMD: sum(q_w * q_x) - 32 *
//             sum(q_x))
//
// q4_f16 and q6_f16x2 (and q3_f16x2) form the f32 factors the f32 forms hold and compute
// the same integer dot products, so their products are q4_f32's and q6_f32x2's, bit for
// bit, on every path.
//
// Activations: d_x = max|x| / 127 over the block, q_x = round-to-nearest-even(x / d_x)
// (as x * (1 / d_x)), in -127..127; a block of zeros has d_x = 0 and codes 0.
//
// The kernels use AVX-512 VNNI or AVX-VNNI (u8 x s8 dot products), else AVX2, else
// plain C++, chosen when the library is compiled (-march). Every path computes the
// same integer dot products; only the order of the f32 sums over blocks differs.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/weight_blocks.h"

namespace lowbit::cpu {

// `rows` rows of k values (k a multiple of 32), quantized per block of 32.
struct QuantizedActivations {
  std::int64_t rows = 0, k = 0;
  std::vector<std::int8_t> q;  // [rows x k] codes
  std::vector<float> d;        // [rows x k / 32] scales
  std::vector<float> dsum;     // [rows x k / 32] d * sum(codes of the block)

  // Sizes the buffers for rows x k. Throws unless k is a positive multiple of 32.
  void resize(std::int64_t rows, std::int64_t k);
};

// Quantizes rows [first, first + count) of x (rows of out.k values, contiguous) into
// the same rows of `out`, which resize() has sized. Rows are independent: threads
// may quantize disjoint ranges at once.
void quantize_activation_rows(const float* x, std::int64_t first, std::int64_t count, QuantizedActivations& out);
// All rows at once: resize(rows, k), then every row.
void quantize_activations(const float* x, std::int64_t rows, std::int64_t k, QuantizedActivations& out);

// y[t * ldy + r] = row r of w (rows of k / 32 blocks, row_bytes apart, the first
// at w) dotted with activation row t, for r in [0, rows) and every row t of x.
void block_matmul(WeightBlockType type, const std::uint8_t* w, std::int64_t row_bytes, std::int64_t rows,
                  const QuantizedActivations& x, float* y, std::int64_t ldy);
// The same in plain C++ (the reference of the tests; every build has it).
void block_matmul_scalar(WeightBlockType type, const std::uint8_t* w, std::int64_t row_bytes, std::int64_t rows,
                         const QuantizedActivations& x, float* y, std::int64_t ldy);

// The instruction set block_matmul was compiled for: "AVX-512 VNNI", "AVX-VNNI",
// "AVX2" or "scalar".
const char* block_matmul_isa();

}  // namespace lowbit::cpu
