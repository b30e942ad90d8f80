// The CPU forward pass of a llama-family model, on the model's weights in the form it
// was loaded with (weight_matrix.h): the FP32 reference (every matrix decoded at load),
// or the file's blocks with 8-bit activations (Q4_0 / Q4_1 / Q8_0 as they are, Q5_0,
// Q5_1 and the K-quants but Q2_K repacked exactly at load, cpu/weight_blocks.h); Q2_K,
// F16 / BF16 and the vectors in f32. Its threads are the engine pool's (cpu/thread_pool.h). RMSNorm, Q/K/V
// biases where the model has them (qwen2), RoPE (ggml's "normal" rotation of
// consecutive pairs (2i, 2i + 1), which is what GGUF llama Q/K weights are permuted
// for, or NEOX's pairs (i, i + rope_dims / 2)), grouped-query attention that reads the
// KV cache as its policy dictates, SwiGLU, final norm and the (possibly tied) output head.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/block_dot.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/session.h"

namespace lowbit::engine {

// One sequence: the model (borrowed; it must outlive the session) and its KV cache.
class CpuSession final : public Session {
 public:
  // max_tokens: the most positions this sequence may hold (the cache is sized for it).
  CpuSession(const Model& model, KvCacheOptions cache, std::int64_t max_tokens);
  // Waits until no pool thread still computes a late copy of one of this session's
  // matmul tasks (they read the model's weights: cpu/thread_pool.h, run_backed).
  ~CpuSession() override;
  CpuSession(const CpuSession&) = delete;
  CpuSession& operator=(const CpuSession&) = delete;

  // Appends `tokens` at position() (a prefill when many, a decode step when one) and
  // returns logits: [n x vocab] for every appended position (all_logits) or [vocab]
  // for the last one. A batch gives the same result as feeding its tokens one at a
  // time: the query at position t sees each older token as the cache holds it at
  // time t. Throws lowbit::Error for an empty batch, a token id outside the
  // vocabulary, or more tokens than max_tokens allows (the session is unchanged then).
  std::vector<float> forward(std::span<const std::int32_t> tokens, bool all_logits) override;

  std::int64_t position() const override { return position_; }
  std::int64_t max_tokens() const override { return cache_.max_tokens(); }
  std::int64_t vocab() const override { return model_->config().vocab; }
  std::size_t kv_bytes() const override { return cache_.bytes(); }
  const KvCache& cache() const { return cache_; }
  const Model& model() const { return *model_; }
  void reset() override;

 private:
  void attend(std::int64_t layer, std::int64_t pos, std::int64_t head, const float* q, float* out,
              float* scores) const;
  void rope(float* x, std::int64_t n, std::int64_t heads, std::int64_t pos0) const;

  const Model* model_;
  KvCache cache_;
  std::int64_t position_ = 0;
  std::vector<float> rope_cos_, rope_sin_;  // [max_tokens x rope_dims / 2]
  cpu::QuantizedActivations activations_;   // the current matmul input, quantized
};

}  // namespace lowbit::engine
