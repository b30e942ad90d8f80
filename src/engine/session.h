// What generation and perplexity need from a forward pass, on any device: one
// sequence, its KV cache, tokens in and logits out. CpuSession (forward_cpu.h) is the
// FP32 oracle; GpuSession (engine/gpu_session.h) runs lowbit's kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace lowbit::engine {

class Session {
 public:
  virtual ~Session() = default;

  // Appends `tokens` at position() and returns f32 logits: [n x vocab] for every
  // appended position (all_logits) or [vocab] for the last one. Throws lowbit::Error
  // for an empty batch, an id outside the vocabulary, or more tokens than max_tokens()
  // allows (the session is unchanged then), and for a NaN or Inf logit
  // (finite_logits.h; decode_greedy and decode_greedy_run too).
  virtual std::vector<float> forward(std::span<const std::int32_t> tokens, bool all_logits) = 0;

  // One greedy decode step: appends `token` and returns the argmax of the next logits
  // (lowest id on ties). A GPU session keeps the logits on the device.
  virtual std::int32_t decode_greedy(std::int32_t token);
  // Greedy decoding from `token`: appends it and then each token it produces, `steps`
  // steps at most; keep(t) sees each produced token in order (position() counts its
  // step) and returns false to stop there (t is not appended). Returns the steps taken.
  // The default calls decode_greedy; a GPU session queues the next step before the host
  // has read the current one's token, and takes back the one step it ran ahead.
  virtual std::int64_t decode_greedy_run(std::int32_t token, std::int64_t steps,
                                         const std::function<bool(std::int32_t)>& keep);

  virtual std::int64_t position() const = 0;
  virtual std::int64_t max_tokens() const = 0;
  virtual std::int64_t vocab() const = 0;
  virtual std::size_t kv_bytes() const = 0;  // what the cache stores now (KvCache::bytes)
  // Device time spanned by the decode_greedy steps so far (0 where there is no device):
  // against the wall time, what the host adds per token.
  virtual double decode_device_seconds() const { return 0.0; }
  virtual void reset() = 0;                  // back to an empty sequence
};

// Index of the largest logit, the lowest one on ties.
std::int32_t argmax(std::span<const float> logits);

}  // namespace lowbit::engine
