// GGUF weight matrices in lowbit's weight-only GEMM format, without dequantizing:
// ggml's Q4_1 (w = q * d + m), Q4_0 (w = (q - 8) * d) and Q8_0 (w = q * d) blocks of
// 32 along K are exactly WeightOnlySpec {4, 32, zero point}, {4, 32, symmetric} and
// {8, 32}, with d and m already f16. Only the byte order changes (ggml keeps elements
// j and j + 16 of a block in one byte; lowbit's input takes 2i and 2i + 1), and then
// pack_weights puts it in the kernels' order. Done once, on the host, at load time.
//
// Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K become the weight-only GGML block forms
// (WeightBlocks, formats/weight_pack.h): each code's bits, each sub-block's integer
// scale (and min) and each super-block's f16 d (and dmin) moved, unchanged, into the
// kernels' units; nothing is dequantized or rounded.
//
// Q4_K can instead become the grouped INT4 form of Q4_1 (KQuantPacking::groups, what the
// GPU engine loads): its sub-blocks of 32 are groups, with scale f16(d sc) and min
// f16(-dmin mn), so w = q s + m rounded once, as Q4_1's. d sc and dmin mn are exact in f32
// and rounded to f16 once here, so each weight can move a few f16 ulps from ggml's value
// (the block form's f16 of it); the grouped kernels read it 1.3x faster at decode
// (bench/notes/weight_only.md, session 32). A tensor whose factors leave f16's normal
// range keeps the block form.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/gguf/reader.h"
#include "lowbit/weight_only.h"

namespace lowbit::engine {

// A packed weight in host memory that owns its bytes.
struct HostPackedWeights {
  WeightOnlySpec spec;
  std::int64_t n = 0, k = 0;
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> scales, mins;  // act_dtype bits

  PackedWeights view();  // host views of the vectors above
};

// Whether a GGUF type has a weight-only form (Q4_1, Q4_0, Q8_0, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K).
bool has_weight_only_form(GgmlType type);

// How Q4_K tensors are packed (the header comment): the block form, or the grouped form.
enum class KQuantPacking { blocks, groups };

// The 2-D tensor `t` (dims[0] = K, the contiguous input dimension; dims[1] = N)
// repacked for weight_only_gemm with f16 activations. Throws lowbit::Error naming
// the tensor when its type has no weight-only form or it is not 2-D.
HostPackedWeights repack_ggml_weight(const GgufTensor& t, KQuantPacking k_quants = KQuantPacking::blocks);

// The order of the stacked tensors' rows: all of the first, then the next... (Q | K | V),
// or, for two tensors of equal rows, a multiple of 8 (gate and up), alternating tiles of
// 8 rows: gate 0-7, up 0-7, gate 8-15, ... (the GEMV's SwiGLU epilogue, Params::swiglu).
enum class RowOrder { stacked, swiglu_tiles };

// Several such tensors of one type and one K stacked along N into one packed matrix:
// Q | K | V, or gate | up, as one GEMM.
HostPackedWeights repack_ggml_weights(std::span<const GgufTensor* const> parts, RowOrder order = RowOrder::stacked,
                                      KQuantPacking k_quants = KQuantPacking::blocks);

}  // namespace lowbit::engine
