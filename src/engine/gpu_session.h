// One sequence on the GPU: the forward pass on lowbit's kernels (weight-only GEMMs on
// the GGUF's own 4-bit blocks, RMSNorm, RoPE, SwiGLU, decode attention over the mixed
// KV cache read in place) with the KV-cache policies of the CPU reference.
//
// Per layer: add + RMSNorm -> h; QKV = h Wqkv^T (+ qwen2's Q / K / V biases, in the
// GEMM's epilogue: f16 biases, one f16 rounding of the sum, where the CPU adds f32 ones);
// append K, V to the cache (RoPE on K and Q in the model's style, consecutive pairs or
// qwen2's NEOX pairs, by the CPU reference's angle table) and attend, every row at its
// own position (so that a batch equals one-at-a-time decoding, as on the CPU: the query
// at t sees each older token as the cache held it at t); O = att Wo^T; add + RMSNorm;
// gate | up = h Wgu^T; silu(gate) * up; down. The residual stream is f32, GEMM inputs
// and outputs f16 (W4A16), attention in f32 with f16 in and out.
//
// decode_greedy runs one CUDA graph per step (captured at the first call, replayed
// with the position and token in device memory; decode attention combines its splits
// in its last block): the 9 launches of each layer cost one launch of host time, and
// the logits stay on the device (argmax there, which also feeds the next step: it
// writes its token as the next input and advances the position). decode_greedy_run
// keeps one step queued ahead of the host, so the device does not wait for the host's
// round trip per token; the step run ahead of a stop is taken back.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/device_buffer.h"
#include "core/kv_layout.h"
#include "engine/gpu_forward.h"
#include "engine/gpu_kv_storage.h"
#include "engine/gpu_model.h"
#include "engine/kv_cache.h"
#include "engine/session.h"

namespace lowbit::engine {

using core::DeviceBuffer;

class GpuSession final : public Session {
 public:
  // max_tokens: the most positions the sequence may hold (the cache is sized for it).
  // use_graphs = false makes decode_greedy launch kernel by kernel (for comparison).
  // Throws lowbit::Error for a cache option the GPU layout lacks (kv_group other than
  // one scale per token per head, --kv-rotate kv, --kv-symmetric on) or a head_dim other
  // than 64 / 128. --kv-rotate k rotates K and Q after RoPE (cuda/kv/kv_cuda.h, AppendRope).
  GpuSession(const GpuModel& model, KvCacheOptions cache, std::int64_t max_tokens,
             bool use_graphs = true);
  ~GpuSession() override;
  GpuSession(const GpuSession&) = delete;
  GpuSession& operator=(const GpuSession&) = delete;

  std::vector<float> forward(std::span<const std::int32_t> tokens, bool all_logits) override;
  std::int32_t decode_greedy(std::int32_t token) override;
  std::int64_t decode_greedy_run(std::int32_t token, std::int64_t steps,
                                 const std::function<bool(std::int32_t)>& keep) override;

  std::int64_t position() const override { return position_; }
  std::int64_t max_tokens() const override { return max_tokens_; }
  std::int64_t vocab() const override { return model_->config().vocab; }
  std::size_t kv_bytes() const override;
  double decode_device_seconds() const override { return decode_device_ms_ / 1e3; }
  void reset() override { position_ = 0; }

 private:
  // Where a chunk's rows get their position: from the host (pos0) or device memory.
  struct Where {
    std::int64_t pos0 = 0;
    const std::int32_t* device_pos = nullptr;
  };
  void check_tokens(std::span<const std::int32_t> tokens) const;
  // The layers over n rows whose embeddings are in x_; leaves the final norm of the
  // last `rows` rows in h_ (at row 0).
  void run_layers(std::int64_t n, Where where, std::int64_t rows);
  // Copies the logits of `rows` rows (positions first_position..) and checks them.
  void logits_to_host(std::int64_t rows, float* out, std::int64_t first_position);
  // Enqueues one decode step (step_: token, non-finite flag, position -> the next token
  // in step_[0], the flag set if a logit was NaN or Inf, position + 1), replaying the
  // captured graph when graphs are on.
  void run_decode_step();
  // Puts token, a cleared flag and position() into step_ (through host_step_).
  void set_step_input(std::int32_t token);
  // Takes back the step at position() that ran ahead and was not wanted (its
  // appends: selective restores the ring slots they overwrote).
  void take_back_step();

  const GpuModel* model_;
  KvCacheOptions options_;
  bool hadamard_ = false;  // keys (and queries) rotated after RoPE: --kv-rotate k on a quantizing policy
  std::int64_t max_tokens_ = 0, position_ = 0;
  bool use_graphs_ = true;
  GpuKvStorage kv_;         // sized for max_tokens
  std::int64_t chunk_ = 0;  // rows a forward chunk takes at most
  GpuActivations act_;
  GpuRope rope_;
  DeviceBuffer logits_, tokens_, step_;
  GpuAttentionScratch scratch_;
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t graph_ = nullptr;
  // Pinned and mapped: {token, flag, position} going in; from kStepOut, {next token,
  // flag} of the two steps in flight, slot position % 2, written by the argmax kernel
  // itself (host_step_device_: the same memory as the device addresses it).
  static constexpr std::size_t kStepOut = 4, kHostStepInts = kStepOut + 4;
  std::int32_t* host_step_ = nullptr;
  std::int32_t* host_step_device_ = nullptr;
  // Around the kernels of each decode_greedy step (event-record nodes of its graph),
  // around a decode_greedy_run, and the tokens of decode_greedy_run's two steps in flight.
  cudaEvent_t step_begin_ = nullptr, step_end_ = nullptr, run_begin_ = nullptr, run_end_ = nullptr;
  cudaEvent_t token_ready_[2] = {nullptr, nullptr};
  DeviceBuffer ring_backup_;  // selective: per layer, the ring slots the last step overwrote
  double decode_device_ms_ = 0;
};

}  // namespace lowbit::engine
