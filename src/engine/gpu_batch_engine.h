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
// Decode-only steps (every row one token) run at the rows of a batch-size bucket
// (decode_bucket: powers of two up to 64, then multiples of 32 up to kMaxBucket), the
// idle rows' descriptors pos = -1 (the paged kernels skip them; their logits and
// draws are computed and ignored), with their inputs (tokens, descriptors, sampling
// parameters and penalty lists) at fixed places of a device buffer. With use_graphs
// (the default) such a step is one CUDA graph launch, captured at the first step of
// its (bucket, max_length) and replayed after: the decode attention's split plan
// depends on both. One graph per 256-position granule of max_length rather than one
// captured at the sequence cap: the cap's plan would give short batches long splits
// (fewer blocks than the device holds) and would change the launches' plan too, so the
// batch would no longer equal GpuSession; a new granule costs one capture every 256
// steps. Up to kMaxGraphs graphs are kept, the least recently used dropped. Without
// graphs the same launches are queued one by one, so graphs on and off give the same
// bits. A buffer a graph reads that must grow drops every graph (they hold its
// address). Steps with a prompt piece run eagerly at M = their rows.
// set_profiling times the parts of decode-only steps (gpu_step_profiler.h).
//
// What differs from GpuSession alone: a GEMM's rows depend on M (the weight-only kernels
// pick their kernel and split-K by M), so a row run beside others may differ from the
// same row alone by f32 rounding; the decode attention's split plan is the batch's (its
// rows' longest length rounded up to 256 positions, capped at max_sequence_tokens, and
// the bucket's rows) where GpuSession's is that of its max_tokens alone. With one sequence,
// max_sequence_tokens equal to GpuSession's max_tokens and the sequence within 256
// positions of it (the rounding then reaches the cap: e.g. both 256), the plans match
// and the logits and tokens are GpuSession's bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device_buffer.h"
#include "core/kv_pages.h"
#include "engine/batch_engine.h"
#include "engine/gpu_forward.h"
#include "engine/gpu_model.h"
#include "engine/gpu_step_profiler.h"
#include "engine/kv_cache.h"

namespace lowbit::engine {

class GpuBatchEngine final : public BatchEngine {
 public:
  static constexpr std::int64_t kPassRows = 512;   // rows of one forward pass at most
  static constexpr std::int64_t kMaxBucket = 256;  // the largest decode bucket (= the most sequence slots)
  static constexpr std::size_t kMaxGraphs = 32;    // captured decode graphs kept

  // The rows a decode-only step of `rows` rows (1..kMaxBucket) runs at.
  static std::int64_t decode_bucket(std::int64_t rows);

  // model: borrowed, outlives the engine. kv_budget_bytes: what all sequences' caches
  // may hold together (> 0; the pool takes at most the device's free memory less
  // headroom). max_sequence_tokens: the model's context length when 0. use_graphs =
  // false queues a decode-only step's launches one by one (for comparison).
  // Throws lowbit::Error for a cache option the GPU lacks (check_gpu_kv_options).
  GpuBatchEngine(const GpuModel& model, KvCacheOptions cache, std::size_t kv_budget_bytes,
                 std::int64_t max_sequence_tokens = 0, bool use_graphs = true);
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
  bool set_profiling(bool on) override;
  StepProfile step_profile() const override { return profile_; }

  // Decode graphs captured, and graph launches, since construction.
  std::int64_t graph_captures() const { return graph_captures_; }
  std::int64_t graph_launches() const { return graph_launches_; }

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
    // Where they are: consecutive pass rows from sample_row0 (read in place), or
    // scattered (gathered by the step's device gather list first).
    std::int64_t sample_row0 = 0;
    bool gather = false;
    // Its one-token rows (its first rows): descriptors desc0.. of the step's, and the
    // batch's max_length.
    std::int64_t decode_rows = 0, desc0 = 0, max_length = 0;
  };
  // The step's inputs on the host, uploaded as one blob (InputLayout).
  struct Inputs {
    std::vector<std::int32_t> tokens, gather;  // gather: the pass row of each sampling slot
    std::vector<core::KvSeqDesc> descs;        // the one-token rows', in pass order
    std::vector<formats::sampling::RowParams> params;  // a sampling slot's
    std::vector<std::int32_t> penalty_offsets{0}, penalty_ids, penalty_counts;
    void add_sample(const SampleSpec& spec);
  };
  // Byte offsets of the blob's sections, each 16-byte aligned.
  struct InputLayout {
    std::size_t tokens = 0, descs = 0, gather = 0, params = 0, offsets = 0, ids = 0, counts = 0, bytes = 0;
  };
  static InputLayout input_layout(std::size_t tokens, std::size_t descs, std::size_t gather, std::size_t samples,
                                  std::size_t penalties);
  // A row that sampled, and its sampling slot.
  struct Sampled {
    std::size_t row = 0;
    std::int64_t slot = 0;
  };
  struct GraphExecDelete {
    void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); }
  };
  using GraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDelete>;
  struct Graph {
    GraphExec exec;
    std::vector<StepPart> marks;  // the profiler's, when captured while profiling
    std::uint64_t used = 0;       // graph_clock_ at its last launch
  };
  class StepClock;  // the host's phases of a profiled step

  Sequence& sequence(SequenceId seq);
  const Sequence& sequence(SequenceId seq) const;
  // Checks the rows (nothing changes on an error): pages and slots for them.
  void check_step(std::span<const StepRow> rows, std::span<StepOutput> out) const;
  // Opens the rows' new sequences and grows their pages; uploads the table entries gained.
  void grow_pages(std::span<const StepRow> rows);
  // The paged attention's max_length for a decode row at position pos.
  std::int64_t decode_length(std::int64_t pos) const;
  // A step with a prompt piece: passes of up to kPassRows rows, queued eagerly.
  void mixed_step(std::span<const StepRow> rows, std::span<StepOutput> out, StepClock& clock);
  // A decode-only step at its bucket's rows: a graph launch, or the same launches.
  void decode_step(std::span<const StepRow> rows, std::span<StepOutput> out, StepClock& clock);
  // The graph of (bucket, max_length), captured from enqueue() when absent.
  const Graph& decode_graph(std::int64_t bucket, std::int64_t max_length, const std::function<void()>& enqueue);
  // tokens, descs: the step's, on the device; device_gather: the pass rows of the
  // step's sampling slots. mark: the profiler's, or empty.
  void run_pass(const Pass& pass, const std::vector<Piece>& pieces, const std::int32_t* tokens,
                const core::KvSeqDesc* descs, const std::int32_t* device_gather, const PartMark& mark);
  // Writes `in` at the layout's places and uploads it into `buffer`; returns the blob.
  const std::uint8_t* upload(const Inputs& in, const InputLayout& at, core::DeviceBuffer& buffer);
  // The logits, sampler workspace and outputs of `rows` sampling rows.
  void reserve_sampling(std::size_t rows);
  // The device sampler over the first `rows` logits rows, with the blob's parameters.
  void sample(std::int64_t rows, const std::uint8_t* inputs, const InputLayout& at);
  // Waits for the step (the draws of `slots` sampling slots back), checks the paged
  // kernels' status, then advances the sequences and fills the outputs.
  void finish(std::span<const StepRow> rows, std::span<StepOutput> out, const std::vector<Sampled>& sampled,
              std::size_t slots, StepClock& clock);
  // Device buffers of at least `bytes` (grown, never shrunk). Growing one drops the
  // captured graphs (they hold its address); never called while capturing.
  void* reserve(core::DeviceBuffer& buffer, std::size_t bytes);

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
  // Decode-only steps: their inputs (the layout of their bucket and penalty_capacity_
  // entries of penalty lists), their graphs by (bucket, max_length).
  bool use_graphs_ = true;
  core::DeviceBuffer decode_inputs_;
  std::size_t penalty_capacity_ = 0;
  std::map<std::pair<std::int64_t, std::int64_t>, Graph> graphs_;
  std::uint64_t graph_clock_ = 0;
  std::int64_t graph_captures_ = 0, graph_launches_ = 0;
  // While profiling: the device's events and the sums so far.
  std::unique_ptr<GpuStepProfiler> profiler_;
  StepProfile profile_;
};

}  // namespace lowbit::engine
