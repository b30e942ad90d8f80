// The CPU path of flash_attention (include/lowbit/flash_attention.h) and the oracle of
// its GPU tests: scores, softmax and P V in double with no intermediate rounding, so the
// GPU's roundings (P to the input type, f32 sums, the output) are the only differences
// the tests bound. Arguments arrive validated by src/api/flash_attention.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lowbit/flash_attention.h"

namespace lowbit::cpu {

// out [cu_q.back() x heads * head_dim] in double.
std::vector<double> flash_attention_f64(const TensorView& q, const TensorView& k, const TensorView& v,
                                        std::span<const std::int32_t> cu_q, std::span<const std::int32_t> cu_k,
                                        const FlashAttentionParams& params);

// The API's CPU path: flash_attention_f64 rounded once to out's dtype.
void flash_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     std::span<const std::int32_t> cu_q, std::span<const std::int32_t> cu_k,
                     const FlashAttentionParams& params);

}  // namespace lowbit::cpu
