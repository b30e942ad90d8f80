// The BatchEngine on the GPU: a step runs the rows of all its sequences in one forward
// pass (or a few, when they hold more than kPassRows tokens): one embedding lookup, each
// weight GEMM once at M = the pass's rows (so the weights are read once for all
// sequences), RMSNorm and SwiGLU over all rows; in each layer, RoPE + the KV
// append and the attention, every row at its own position with GpuSession's arithmetic:
// the one-token rows of ALL sequences in one paged append and one paged attention
// launch a layer (gpu_forward.h attend_decode_rows), a longer row per sequence in the
// paged chunk form, cut at multiples of 512 tokens from the row's start as GpuSession
// cuts a forward; then the final norm and the output head over the rows that sample, and
// the device sampler (cuda/model/sampling_cuda.h) with each row's parameters, so that
// greedy takes GpuSession's argmax.
//
// KV storage: the paged pool (core/kv_pages.h), one device allocation sized at
// construction from the KV budget (at most what the device has free, less headroom),
// pages of 16 tokens handed out per sequence as it grows (KvPageAllocator) and returned
// at free_sequence; window / selective also hold a fixed FP16 sink + window area a
// sequence slot (slots: up to 256, fewer where their fixed areas would take more than
// half the pool). kv_bytes_for(t) = t's whole pages (+ the fixed area) and kv_memory()
// counts the live sequences' pages and fixed areas against the pool's bytes; a step
// that needs more pages than are free, or more slots, is refused. The page tables live
// on the device; a step uploads the entries its sequences gained.
//
// What differs from GpuSession alone: a GEMM's rows depend on M (the weight-only kernels
// pick their kernel and split-K by M), so a row run beside others may differ from the
// same row alone by f32 rounding; the decode attention's split plan is the batch's (its
// rows' longest length rounded up to 256 positions, capped at max_sequence_tokens, and
// the batch size) where GpuSession's is that of its max_tokens alone. With one sequence,
// max_sequence_tokens equal to GpuSession's max_tokens and the sequence within 256
// positions of it (the rounding then reaches the cap: e.g. both 256), the plans match
// and the logits and tokens are GpuSession's bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/device_buffer.h"
#include "core/kv_pages.h"
#include "engine/batch_engine.h"
#include "engine/gpu_forward.h"
#include "engine/gpu_model.h"
#include "engine/kv_cache.h"

namespace lowbit::engine {

class GpuBatchEngine final : public BatchEngine {
 public:
  static constexpr std::int64_t kPassRows = 512;  // rows of one forward pass at most

  // model: borrowed, outlives the engine. kv_budget_bytes: what all sequences' caches
  // may hold together (> 0; the pool takes at most the device's free memory less
  // headroom). max_sequence_tokens: the model's context length when 0.
  // Throws lowbit::Error for a cache option the GPU lacks (check_gpu_kv_options).
  GpuBatchEngine(const GpuModel& model, KvCacheOptions cache, std::size_t kv_budget_bytes,
                 std::int64_t max_sequence_tokens = 0);
  ~GpuBatchEngine() override;
  GpuBatchEngine(const GpuBatchEngine&) = delete;
  GpuBatchEngine& operator=(const GpuBatchEngine&) = delete;

  std::int64_t vocab() const override { return model_->config().vocab; }
  std::int64_t max_sequence_tokens() const override { return max_sequence_tokens_; }
  void add_sequence(SequenceId seq, std::int64_t max_tokens) override;
  void free_sequence(SequenceId seq) override;
  std::int64_t sequence_length(SequenceId seq) const override;
  std::size_t live_sequences() const override { return sequences_.size(); }
  void step(std::span<const StepRow> rows, std::span<StepOutput> out) override;
  std::size_t kv_bytes_for(std::int64_t tokens) const override;
  KvMemory kv_memory() const override;
  std::string describe() const override;

 private:
  struct Sequence {
    std::int64_t max_tokens = 0, length = 0;
    std::int32_t slot = -1;  // the pool's sequence slot, -1 until the first step
  };
  // Tokens [begin, begin + count) of one row, at pass rows first.. (positions pos0..).
  struct Piece {
    std::size_t row = 0;
    Sequence* seq = nullptr;
    std::int64_t begin = 0, count = 0, pos0 = 0, first = 0;
    std::int64_t slot = -1;         // sampling slot of its last row, or -1
  };
  struct Pass {
    std::size_t piece_begin = 0, piece_end = 0;
    std::int64_t rows = 0, token_offset = 0;  // into the step's tokens
    std::int64_t samples = 0, slot0 = 0;      // its sampling rows: slots slot0..
    // Its one-token rows (its first rows): descriptors desc0.. of the step's, and the
    // batch's max_length.
    std::int64_t decode_rows = 0, desc0 = 0, max_length = 0;
  };

  Sequence& sequence(SequenceId seq);
  const Sequence& sequence(SequenceId seq) const;
  // Checks the rows (nothing changes on an error): pages and slots for them.
  void check_step(std::span<const StepRow> rows, std::span<StepOutput> out) const;
  // Opens the rows' new sequences and grows their pages; uploads the table entries gained.
  void grow_pages(std::span<const StepRow> rows);
  // tokens, descs: the step's, on the device; gather: the pass rows of the step's
  // sampling slots, on the host and the device.
  void run_pass(const Pass& pass, const std::vector<Piece>& pieces, const std::int32_t* tokens,
                const core::KvSeqDesc* descs, const std::int32_t* gather, const std::int32_t* device_gather);
  // Device buffers of at least `bytes` (grown, never shrunk).
  static void* reserve(core::DeviceBuffer& buffer, std::size_t bytes);

  const GpuModel* model_;
  KvCacheOptions cache_;
  bool hadamard_ = false;
  std::size_t budget_ = 0;
  std::int64_t max_sequence_tokens_ = 0;
  std::map<SequenceId, Sequence> sequences_;
  core::KvPageLayout layout_;
  std::unique_ptr<core::KvPageAllocator> pages_;
  core::DeviceBuffer pool_, tables_, status_;  // the pool, its page tables, the kernels' fault word
  std::vector<core::KvPagedLayer> layers_;
  GpuActivations act_;
  GpuRope rope_;
  GpuAttentionScratch scratch_;
  // The gathered sampling rows of a pass (x f32, proj f16), the logits of the step's
  // sampling rows (f16), the sampler's workspace, and the step's inputs and outputs.
  core::DeviceBuffer gathered_x_, gathered_proj_, logits_, sampler_ws_, inputs_, outputs_;
  core::DeviceBuffer decode_ws_;  // paged_kv_attention's; its counters zeroed before each pass
  std::vector<std::byte> host_inputs_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace lowbit::engine
