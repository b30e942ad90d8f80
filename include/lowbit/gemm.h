// Quantized matrix products: INT8 x INT8 and INT4 x INT4 with INT32 accumulation
// (INT32 out, or a fused scale + bias + ReLU epilogue to a float type), and
// weight-only products (FP16/BF16 activations x INT4/INT8 weights with group-wise
// scales, dequantized in registers).
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

// ---- Weight-only GEMM (W4A16 / W8A16) ---------------------------------------------

// How a weight matrix W [N x K] (N output features, K input features: nn.Linear's
// layout) is quantized, group-wise along K:
//   bits 4, zero_point:  w = q * s + m,  q in 0..15  (GGUF Q4_1, AWQ-style)
//   bits 4, symmetric:   w = (q - 8) * s, q in 0..15 (GGUF Q4_0)
//   bits 8:              w = q * s,       q in -128..127
// s and m are stored in act_dtype (the activations' type, f16 or bf16), and the
// dequantized weight is round_to_act_dtype(exact value): one rounding, identical on
// the CPU and the GPU.
struct WeightOnlySpec {
  int bits = 4;                    // 4 or 8
  std::int64_t group_size = 128;   // 32, 64 or 128; or K for one scale per output channel
  bool zero_point = true;          // bits 4 only
  DType act_dtype = DType::f16;    // f16 or bf16
};

// Weights repacked once (offline, on the host) into the order the kernels read.
// All views are contiguous and on one device; upload a host-packed set with
// cudaMemcpy into buffers of the same sizes and build a cuda view with the same
// fields. The byte order inside `codes`, `scales` and `mins` is private to lowbit.
struct PackedWeights {
  WeightOnlySpec spec;
  std::int64_t n = 0, k = 0;   // the logical shape of W
  TensorView codes;            // u8
  TensorView scales;           // act_dtype
  TensorView mins;             // act_dtype; zero_point only, else empty
};

// Sizes (in elements of each view's dtype) of the packed form of an N x K matrix.
struct PackedWeightSizes {
  std::int64_t code_bytes = 0, scale_count = 0, min_count = 0;
};
PackedWeightSizes packed_weight_sizes(const WeightOnlySpec& spec, std::int64_t n, std::int64_t k);

// Repacks W's quantized form on the host. `codes` is [N x K] i8 for bits 8, or
// [N x ceil(K/2)] u8 with two 4-bit codes per byte, low nibble first (the layout of
// lowbit::quantize with int4_asymmetric); `scales` and `mins` are f32 [N x ceil(K/G)]
// (mins: zero_point only). With group_size == K they are [N]. quantize() with
// per_group (or per_token for one group) granularity on W produces exactly this
// input for the int8 and zero-point forms. `out` views are host memory of
// packed_weight_sizes().
void pack_weights(const TensorView& codes, const TensorView& scales, const TensorView& mins,
                  const PackedWeights& out);

// out [M x N] = X [M x K] @ W^T (+ bias [N]), X and out in spec.act_dtype, FP32
// accumulation, the weights dequantized in registers. M >= 1 (a GEMV-style kernel
// for M <= 16, tensor cores above). bias: act_dtype [N] or empty.
// The M <= 16 kernel uses programmatic dependent launch: it starts loading the packed
// weights while the previous kernel on the stream may still run (X, bias and out only
// after it finished). So the weights must not be written by the kernel launched just
// before this call on the same stream (cudaMemcpy uploads and anything earlier are fine).
void weight_only_gemm(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out,
                      cuda_stream_t stream);

}  // namespace lowbit
