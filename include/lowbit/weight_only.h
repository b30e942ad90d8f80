// Weight-only matrix products (W4A16 / W8A16): FP16/BF16 activations times INT4/INT8
// weights with group-wise scales (and minimums), repacked once into the order the
// kernels read and dequantized in registers.
//
// Matrices are row-major with unit column stride; rows may be padded. CPU views run the
// CPU reference, CUDA views the kernels on `stream`. Arguments are validated first; a
// bad one throws lowbit::Error naming it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit {

// How a weight matrix W [N x K] (N output features, K input features: nn.Linear's
// layout) is quantized, group-wise along K:
//   bits 4, zero_point:  w = q * s + m,  q in 0..15  (GGUF Q4_1, AWQ-style)
//   bits 4, symmetric:   w = (q - 8) * s, q in 0..15 (GGUF Q4_0)
//   bits 8:              w = q * s,       q in -128..127
// s and m are stored in act_dtype (the activations' type, f16 or bf16), and the
// dequantized weight is round_to_act_dtype(exact value): one rounding, identical on
// the CPU and the GPU.
//
// GGML block forms (`blocks` other than none): the weights of a GGUF tensor of that
// type, its blocks repacked once (engine::repack_ggml_weights) into units that carry
// their own scales, so `scales` and `mins` are empty. The weight multiplied is f16:
//   Q5_0 (q - 16) * d and Q5_1 q * d + m, each one rounding of the exact value;
//   Q4_K / Q5_K / Q2_K (d * sc) * q - dmin * mn and Q6_K / Q3_K (d * sc) * (q - 32 / 4):
//   ggml's f32 value (the sub-block factors d * sc, dmin * mn exact in f32), rounded to f16.
// The spec of each is fixed (weight_blocks_spec): bits 5 / 5 / 4 / 5 / 6 / 3 / 2,
// group_size 32 / 32 / 256 / 256 / 256 / 256 / 256 (ggml's block or super-block),
// zero_point for Q5_1, Q4_K, Q5_K, Q2_K; f16 activations only. K must be a multiple of
// group_size.
enum class WeightBlocks : int { none = 0, q5_0 = 1, q5_1 = 2, q4_k = 3, q5_k = 4, q6_k = 5, q3_k = 6, q2_k = 7 };

struct WeightOnlySpec {
  int bits = 4;                    // 4 or 8 (block forms: their bits)
  std::int64_t group_size = 128;   // 32, 64 or 128; or K for one scale per output channel
  bool zero_point = true;          // bits 4 only (block forms: those with a min)
  DType act_dtype = DType::f16;    // f16 or bf16 (block forms: f16)
  WeightBlocks blocks = WeightBlocks::none;
};

// The spec of a GGML block form (blocks != none).
WeightOnlySpec weight_blocks_spec(WeightBlocks blocks);
const char* weight_blocks_name(WeightBlocks blocks);  // "Q5_0", ... ("none")

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

// Sizes (in elements of each view's dtype) of the packed form of an N x K matrix
// (block forms: scale_count and min_count 0).
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
// packed_weight_sizes(). Block forms are packed from their GGUF blocks (the engine's
// repack), not here: a spec with blocks set is an error.
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
