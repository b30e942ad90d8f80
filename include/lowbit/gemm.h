// Integer matrix products: INT8 x INT8 and INT4 x INT4 with INT32 accumulation (INT32
// out, or a fused scale + bias + ReLU epilogue to a float type). Weight-only products
// (FP16/BF16 activations x INT4/INT8 weights) are in weight_only.h.
//
// All matrices are row-major with unit column stride; rows may be padded (row
// stride >= cols). Every function dispatches on the tensors' device: CPU views run
// the CPU reference, CUDA views run the production kernels on `stream`. Arguments
// are validated first; a bad one throws lowbit::Error naming it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit {

// How B [K x N] is stored.
enum class BLayout : std::uint8_t {
  k_by_n,  // [K x N] row-major: the seed's layout (B[k, n] at k * ldb + n)
  n_by_k,  // [N x K] row-major, "K-major": B[k, n] at n * ldb + k (nn.Linear weights,
           // what tensor cores read best)
};

const char* b_layout_name(BLayout layout);

// The epilogue of an integer GEMM with a float output, in FP32, per element:
//
//   v = fma((float(acc[m, n]) * scale_a[m]) * scale_b[n], scale_c, bias[n])
//   out[m, n] = round_to_out_dtype(relu ? max(v, 0) : v)
//
// scale_a is [1] (per tensor) or [M] (per row / token); scale_b is [1] or [N] (per
// column / channel); an empty view means 1. bias is [N] or empty (0). All f32, on the
// output's device. The order of operations is part of the contract: the CPU
// reference and the kernels evaluate it identically, so float outputs agree bit for
// bit. (The seed's C = (A*scale_a) @ (B*scale_b) * scale_c.)
struct GemmEpilogue {
  TensorView scale_a;
  TensorView scale_b;
  float scale_c = 1.0f;
  TensorView bias;
  bool relu = false;

  bool is_identity() const { return !scale_a.data && !scale_b.data && scale_c == 1.0f && !bias.data && !relu; }
};

// out [M x N] = A [M x K] (i8) @ B (i8, `b_layout`), accumulated in INT32 (exact: no
// overflow for K < 2^17). out is i32 (the epilogue must be the identity) or f32 /
// f16 / bf16 (the epilogue is applied). Any M, N, K >= 1.
void int8_gemm(const TensorView& a, const TensorView& b, BLayout b_layout, const TensorView& out,
               const GemmEpilogue& epilogue, cuda_stream_t stream);

// The same product for signed INT4 operands (two's complement nibbles, -8..7), packed
// two per byte along K, low nibble first (k even in bits 0..3, k + 1 in bits 4..7):
// a_packed u8 [M x ceil(K/2)]; b_packed u8 [ceil(K/2) x N] (k_by_n: byte (j, n) holds
// B[2j, n] and B[2j+1, n]) or [N x ceil(K/2)] (n_by_k). For odd K the last high
// nibble is padding and is ignored. K is passed explicitly because packing hides
// its parity.
void int4_gemm(const TensorView& a_packed, const TensorView& b_packed, BLayout b_layout, std::int64_t k,
               const TensorView& out, const GemmEpilogue& epilogue, cuda_stream_t stream);

}  // namespace lowbit
