// Inputs of flash_attention tests (include/lowbit/flash_attention.h): a batch of
// sequences of given query / key lengths, random f16 or bf16 Q, K, V in host buffers
// with padded row strides, their prefix sums, and host views of them.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "formats/float16.h"
#include "lowbit/flash_attention.h"

namespace lowbit::test {

struct FlashInputs {
  FlashAttentionParams params;
  DType dtype = DType::f16;
  std::vector<std::int32_t> cu_q{0}, cu_k{0};
  std::int64_t ldq = 0, ldk = 0, ldo = 0;  // row strides (elements): the columns + 8
  std::vector<std::uint16_t> q, k, v;      // bits of dtype

  // One sequence per (q_len, k_len) pair; values N(0, 1) times `gain` (q), 1 (k, v).
  FlashInputs(std::mt19937& rng, FlashAttentionParams p, DType type,
              const std::vector<std::pair<std::int32_t, std::int32_t>>& lengths, float gain = 1.0f)
      : params(p), dtype(type) {
    for (const auto& [q_len, k_len] : lengths) {
      cu_q.push_back(cu_q.back() + q_len);
      cu_k.push_back(cu_k.back() + k_len);
    }
    ldq = ldo = p.heads * p.head_dim + 8;
    ldk = p.kv_heads * p.head_dim + 8;
    q = random_bits(rng, rows_q() * ldq, gain);
    k = random_bits(rng, rows_k() * ldk, 1.0f);
    v = random_bits(rng, rows_k() * ldk, 1.0f);
  }
  std::int64_t rows_q() const { return cu_q.back(); }
  std::int64_t rows_k() const { return cu_k.back(); }
  std::int64_t q_cols() const { return params.heads * params.head_dim; }
  std::int64_t kv_cols() const { return params.kv_heads * params.head_dim; }

  TensorView view(std::vector<std::uint16_t>& data, std::int64_t rows, std::int64_t cols, std::int64_t ld) const {
    return TensorView::matrix(data.data(), dtype, Device::cpu, rows, cols, ld);
  }
  // Multiplies K's row `row` (every KV head) by `factor`, rounded back to the dtype.
  void scale_key(std::int64_t row, float factor) {
    for (std::int64_t c = 0; c < kv_cols(); ++c) {
      auto& b = k[static_cast<std::size_t>(row * ldk + c)];
      const float x = static_cast<float>(value(b)) * factor;
      b = dtype == DType::bf16 ? formats::float_to_bf16(x).bits : formats::float_to_half(x).bits;
    }
  }
  double value(std::uint16_t bits) const {
    return dtype == DType::bf16 ? formats::bf16_to_float(formats::BFloat16{bits})
                                : formats::half_to_float(formats::Half{bits});
  }

 private:
  std::vector<std::uint16_t> random_bits(std::mt19937& rng, std::int64_t n, float gain) const {
    std::normal_distribution<float> normal(0.0f, gain);
    std::vector<std::uint16_t> out(static_cast<std::size_t>(n));
    for (auto& b : out) {
      const float x = normal(rng);
      b = dtype == DType::bf16 ? formats::float_to_bf16(x).bits : formats::float_to_half(x).bits;
    }
    return out;
  }
};

}  // namespace lowbit::test
