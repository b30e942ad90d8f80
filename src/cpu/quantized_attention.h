// CPU reference of quantized attention (include/lowbit/attention.h): the oracle of the
// GPU tests and the CPU path of the API. Weights go through the block formats' CPU
// decoder to f16 (the values every GPU variant multiplies with); everything after
// that is accumulated in double with no intermediate rounding, so the GPU's f16
// roundings of Q, K, V, P and O are the only differences the tests bound.
// Arguments arrive validated by src/api/attention.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "lowbit/quantized_attention.h"

namespace lowbit::cpu {

// Q for query rows [0, rows) and K, V for key rows [0, key_rows), row-major doubles.
struct AttentionProjections {
  std::int64_t rows = 0, key_rows = 0;
  std::vector<double> q;  // [rows x H*hd]
  std::vector<double> k;  // [key_rows x Hkv*hd]
  std::vector<double> v;  // [key_rows x Hkv*hd]
};

// The decoded weight, f16-rounded, as doubles [rows x cols].
std::vector<double> decoded_weight(const BlockQuantizedView& w, BlockFormat format, std::int64_t rows,
                                   std::int64_t cols);

// x: CPU f16 [L x d_model]. key_rows >= rows, or causal (query rows < key_rows only
// see keys < key_rows).
AttentionProjections attention_projections(const TensorView& x, const AttentionWeights& weights,
                                           const AttentionConfig& config, std::int64_t rows, std::int64_t key_rows);

// O [p.rows x H*hd] from the projections; needs p.key_rows == L unless causal.
std::vector<double> attention_core(const AttentionProjections& p, const AttentionConfig& config);

// O for query rows [0, rows): with causal attention only keys < rows are projected,
// which is what lets a benchmark check the first rows of a long sequence cheaply.
std::vector<double> attention_reference(const TensorView& x, const AttentionWeights& weights,
                                        const AttentionConfig& config, std::int64_t rows);

// The API's CPU path: all rows, rounded once to f16 into out.
void attention(const TensorView& x, const AttentionWeights& weights, const AttentionConfig& config,
               const TensorView& out);

}  // namespace lowbit::cpu
