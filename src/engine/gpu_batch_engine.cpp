#include "engine/gpu_batch_engine.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <sstream>

#include "cuda/kv/paged_kv_cuda.h"
#include "cuda/model/model_cuda.h"
#include "cuda/model/sampling_cuda.h"
#include "engine/finite_logits.h"
#include "engine/gpu_kv_storage.h"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::engine {

namespace {

constexpr std::int64_t kPieceTokens = 512;  // GpuSession's forward chunk: a row is cut at its multiples
constexpr std::int64_t kPageTokens = 16;
// Sequence slots at most: a decode-only step has at most this many rows, so every one
// fits a bucket.
constexpr std::int64_t kMaxSlots = GpuBatchEngine::kMaxBucket;
constexpr std::int64_t kLengthGranule = 256;  // a decode batch's max_length is rounded up to it

KvCacheSpec spec_of(const ModelConfig& c, const KvCacheOptions& cache, std::int64_t max_tokens) {
  return KvCacheSpec{cache.policy, c.n_kv_heads, c.head_dim, cache.sink, cache.window, cache.kv_bits, max_tokens};
}

// The pool's layout: at most the budget, and at most the device's free memory less
// headroom (the step's other buffers; a budget of "all of it" must leave them room);
// slots up to kMaxSlots while their fixed areas take at most half of it.
core::KvPageLayout pool_layout(const ModelConfig& c, const KvCacheOptions& cache, std::int64_t max_tokens,
                               std::size_t budget) {
  std::size_t free = 0, total = 0;
  LOWBIT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const std::size_t headroom = std::max<std::size_t>(std::size_t{2} << 30, free / 16);
  LOWBIT_CHECK(free > headroom, "gpu batch engine: ", free, " bytes free on the device, less than the ", headroom,
               " the engine keeps besides its KV pool");
  const std::size_t bytes = std::min(budget, free - headroom);
  const KvCacheSpec spec = spec_of(c, cache, max_tokens);
  // Key blocks: pages of a block (core/kv_pages.h), each holding its block's parameters.
  const std::int64_t page_tokens = cache.kv_key_block > 0 ? cache.kv_key_block : kPageTokens;
  const core::KvPageLayout probe =
      core::kv_page_layout(spec, c.n_layers, std::size_t{1} << 60, 1, page_tokens, cache.kv_key_block);
  const auto per_slot = static_cast<std::size_t>(probe.layers * probe.fixed_bytes());
  std::int64_t slots = kMaxSlots;
  if (per_slot > 0) {
    const std::size_t share = probe.has_pages() ? bytes / 2 : bytes;
    slots = std::clamp<std::int64_t>(static_cast<std::int64_t>(share / per_slot), 1, kMaxSlots);
  }
  return core::kv_page_layout(spec, c.n_layers, bytes, slots, page_tokens, cache.kv_key_block);
}

// Sections of the step's input blob, each 16-byte aligned.
std::size_t section(std::size_t& offset, std::size_t bytes) {
  const std::size_t at = offset;
  offset += (bytes + 15) / 16 * 16;
  return at;
}

}  // namespace

GpuBatchEngine::GpuBatchEngine(const GpuModel& model, KvCacheOptions cache, std::size_t kv_budget_bytes,
                               std::int64_t max_sequence_tokens, bool use_graphs)
    : model_(&model),
      cache_(cache),
      hadamard_(check_gpu_kv_options(model.config(), cache, "gpu batch engine", /*paged=*/true)),
      budget_(kv_budget_bytes),
      max_sequence_tokens_(max_sequence_tokens > 0 ? max_sequence_tokens : model.config().context_length),
      act_(model.config(), kPassRows),
      rope_(model.config(), std::max<std::int64_t>(max_sequence_tokens_, 1)),
      scratch_(core::with_key_block(
                   core::kv_layer_shape(spec_of(model.config(), cache, std::max<std::int64_t>(max_sequence_tokens_, 1))),
                   cache.kv_key_block),
               model.config().n_heads, std::max<std::int64_t>(max_sequence_tokens_, 1), kPassRows),
      use_graphs_(use_graphs) {
  LOWBIT_CHECK(kv_budget_bytes > 0, "kv budget: expected > 0 bytes");
  LOWBIT_CHECK(max_sequence_tokens >= 0, "max_sequence_tokens: expected >= 0 (0: the model's context), got ",
               max_sequence_tokens);
  LOWBIT_CHECK(max_sequence_tokens_ > 0, "max_sequence_tokens: the model states no context length; pass one");
  LOWBIT_CHECK(max_sequence_tokens_ <= (std::int64_t{1} << 28), "max_sequence_tokens: ", max_sequence_tokens_,
               ", expected at most 2^28");
  const ModelConfig& c = model.config();
  layout_ = pool_layout(c, cache, max_sequence_tokens_, kv_budget_bytes);
  pages_ = std::make_unique<core::KvPageAllocator>(layout_);
  pool_ = core::DeviceBuffer(layout_.pool_bytes());
  for (std::int64_t l = 0; l < c.n_layers; ++l) layers_.push_back(core::kv_paged_layer(layout_, pool_.data(), l));
  tables_ = core::DeviceBuffer(pages_->tables().size() * 4);
  status_ = core::DeviceBuffer(sizeof(std::int32_t));
  LOWBIT_CUDA_CHECK(cudaMemset(status_.data(), 0, status_.bytes()));
  const auto d = static_cast<std::size_t>(c.d_model);
  gathered_x_ = core::DeviceBuffer(static_cast<std::size_t>(kPassRows) * d * 4);
  gathered_proj_ = core::DeviceBuffer(static_cast<std::size_t>(kPassRows) * d * 2);
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // The model's uploads and the memsets above ran on the legacy stream, which stream_
  // (non-blocking) does not wait for; a pageable cudaMemcpy may return before it lands.
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
}

GpuBatchEngine::~GpuBatchEngine() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  graphs_.clear();  // before the profiler's events, which their event nodes name
}

GpuBatchEngine::Sequence& GpuBatchEngine::sequence(SequenceId seq) {
  const auto it = sequences_.find(seq);
  LOWBIT_CHECK(it != sequences_.end(), "sequence ", seq, ": unknown (not added, or freed)");
  return it->second;
}

const GpuBatchEngine::Sequence& GpuBatchEngine::sequence(SequenceId seq) const {
  const auto it = sequences_.find(seq);
  LOWBIT_CHECK(it != sequences_.end(), "sequence ", seq, ": unknown (not added, or freed)");
  return it->second;
}

void GpuBatchEngine::add_sequence(SequenceId seq, std::int64_t max_tokens) {
  LOWBIT_CHECK(!sequences_.contains(seq), "sequence ", seq, ": already live");
  LOWBIT_CHECK(max_tokens >= 1 && max_tokens <= max_sequence_tokens_, "sequence ", seq, ": max_tokens ", max_tokens,
               ", expected 1..", max_sequence_tokens_);
  sequences_.emplace(seq, Sequence{max_tokens, 0, -1});
}

void GpuBatchEngine::free_sequence(SequenceId seq) {
  const auto it = sequences_.find(seq);
  LOWBIT_CHECK(it != sequences_.end(), "sequence ", seq, ": unknown (not added, or freed)");
  // Work on the stream may still read the pages only inside a step, which ends synced.
  if (it->second.slot >= 0) pages_->close(it->second.slot);
  sequences_.erase(it);
}

std::int64_t GpuBatchEngine::sequence_length(SequenceId seq) const { return sequence(seq).length; }

std::size_t GpuBatchEngine::kv_bytes_for(std::int64_t tokens) const {
  LOWBIT_CHECK(tokens >= 0, "kv_bytes_for: ", tokens, " tokens, expected >= 0");
  if (tokens == 0) return 0;
  return static_cast<std::size_t>(layout_.layers *
                                  (layout_.pages_for(tokens) * layout_.page_bytes() + layout_.fixed_bytes()));
}

KvMemory GpuBatchEngine::kv_memory() const {
  KvMemory m;
  m.budget = layout_.pool_bytes();
  m.used = static_cast<std::size_t>(layout_.layers * (pages_->used_pages() * layout_.page_bytes() +
                                                       pages_->open_sequences() * layout_.fixed_bytes()));
  return m;
}

void* GpuBatchEngine::reserve(core::DeviceBuffer& buffer, std::size_t bytes) {
  if (buffer.bytes() < bytes) {
    graphs_.clear();  // they read the old address
    buffer = core::DeviceBuffer(std::max(bytes, buffer.bytes() * 3 / 2));
  }
  return buffer.data();
}

void GpuBatchEngine::check_step(std::span<const StepRow> rows, std::span<StepOutput> out) const {
  check_step_rows(rows, out.size(), vocab(), [this](SequenceId id) {
    const Sequence& s = sequence(id);
    return SequenceState{s.length, s.max_tokens};
  });
  std::int64_t pages = 0, slots = 0;
  for (const StepRow& row : rows) {
    const Sequence& s = sequence(row.seq);
    slots += s.slot < 0;
    pages += layout_.pages_for(s.length + static_cast<std::int64_t>(row.tokens.size())) - layout_.pages_for(s.length);
  }
  LOWBIT_CHECK(slots <= layout_.max_seqs - pages_->open_sequences(), "step: ", slots,
               " new sequences, the KV pool has ", layout_.max_seqs - pages_->open_sequences(), " free slots of ",
               layout_.max_seqs);
  const std::size_t planned =
      kv_memory().used + static_cast<std::size_t>(layout_.layers * (pages * layout_.page_bytes() +
                                                                    slots * layout_.fixed_bytes()));
  LOWBIT_CHECK(pages <= pages_->free_pages(), "step: the rows' KV caches would hold ", planned,
               " bytes, over the budget of ", layout_.pool_bytes(), " (", pages, " more pages, ",
               pages_->free_pages(), " free)");
}

void GpuBatchEngine::grow_pages(std::span<const StepRow> rows) {
  for (const StepRow& row : rows) {
    Sequence& s = sequence(row.seq);
    if (s.slot < 0) s.slot = pages_->open();
    const std::int64_t held = pages_->pages_held(s.slot);
    pages_->grow(s.slot, s.length + static_cast<std::int64_t>(row.tokens.size()));
    const std::int64_t gained = pages_->pages_held(s.slot) - held;
    if (gained == 0) continue;
    // From pageable memory: the call returns once the source is read; the stream is idle
    // here (the last step ended synced), so nothing waits.
    const std::int32_t* host = pages_->table(s.slot) + held;
    std::int32_t* device = tables_.as<std::int32_t>() + s.slot * layout_.table_stride + held;
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(device, host, static_cast<std::size_t>(gained) * 4, cudaMemcpyHostToDevice,
                                      stream_));
  }
}

std::int64_t GpuBatchEngine::decode_length(std::int64_t pos) const {
  return std::min((pos + kLengthGranule) / kLengthGranule * kLengthGranule, max_sequence_tokens_);
}

std::int64_t GpuBatchEngine::decode_bucket(std::int64_t rows) {
  LOWBIT_CHECK(rows >= 1 && rows <= kMaxBucket, "decode bucket: ", rows, " rows, expected 1..", kMaxBucket);
  // Powers of two while the GEMMs are bound by the weights' bytes (padding is nearly
  // free); past 64 rows their cost grows with M, so finer steps.
  if (rows <= 64) return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(rows)));
  return (rows + 31) / 32 * 32;
}

void GpuBatchEngine::Inputs::add_sample(const SampleSpec& spec) {
  params.push_back(spec.params);
  for (const TokenCount& tc : spec.penalties) {
    penalty_ids.push_back(tc.id);
    penalty_counts.push_back(tc.count);
  }
  penalty_offsets.push_back(static_cast<std::int32_t>(penalty_ids.size()));
}

GpuBatchEngine::InputLayout GpuBatchEngine::input_layout(std::size_t tokens, std::size_t descs, std::size_t gather,
                                                         std::size_t samples, std::size_t penalties) {
  InputLayout at;
  std::size_t size = 0;
  at.tokens = section(size, tokens * 4);
  at.descs = section(size, descs * sizeof(core::KvSeqDesc));
  at.gather = section(size, gather * 4);
  at.params = section(size, samples * sizeof(formats::sampling::RowParams));
  at.offsets = section(size, (samples + 1) * 4);
  at.ids = section(size, penalties * 4 + 4);  // never empty: non-null pointers
  at.counts = section(size, penalties * 4 + 4);
  at.bytes = size;
  return at;
}

const std::uint8_t* GpuBatchEngine::upload(const Inputs& in, const InputLayout& at, core::DeviceBuffer& buffer) {
  host_inputs_.assign(at.bytes, std::byte{0});
  auto put = [&](std::size_t offset, const auto& values) {
    if (!values.empty()) std::memcpy(host_inputs_.data() + offset, values.data(), values.size() * sizeof(values[0]));
  };
  put(at.tokens, in.tokens);
  put(at.descs, in.descs);
  put(at.gather, in.gather);
  put(at.params, in.params);
  put(at.offsets, in.penalty_offsets);
  put(at.ids, in.penalty_ids);
  put(at.counts, in.penalty_counts);
  auto* device = static_cast<std::uint8_t*>(reserve(buffer, at.bytes));
  // From pageable memory: the call returns once the source is read.
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(device, host_inputs_.data(), at.bytes, cudaMemcpyHostToDevice, stream_));
  return device;
}

void GpuBatchEngine::reserve_sampling(std::size_t rows) {
  const ModelConfig& c = model_->config();
  reserve(logits_, rows * static_cast<std::size_t>(c.vocab) * 2);
  reserve(sampler_ws_, cuda::model::sample_rows_workspace_bytes(static_cast<std::int64_t>(rows), c.vocab));
  reserve(outputs_, rows * 2 * 4);
}

void GpuBatchEngine::run_pass(const Pass& pass, const std::vector<Piece>& pieces, const std::int32_t* tokens,
                              const core::KvSeqDesc* descs, const std::int32_t* device_gather, const PartMark& mark) {
  const ModelConfig& c = model_->config();
  const std::int64_t ld = c.q_dim() + 2 * c.kv_dim();
  auto begin = [&](StepPart part) {
    if (mark) mark(part);
  };
  begin(StepPart::embed);
  cuda::model::embed_rows(model_->embedding(), tokens + pass.token_offset, pass.rows, c.d_model, act_.x.as<float>(),
                          stream_);
  if (pass.decode_rows > 0) {
    // The fused combine's counters sit at the workspace's start (reserved for this
    // pass by the step), their count set by the batch size: zero them for this pass's
    // batch (its layers leave them zero).
    begin(StepPart::attention);
    const std::size_t counters =
        std::min(decode_ws_.bytes(), static_cast<std::size_t>(pass.decode_rows * c.n_heads) * 4 + 16);
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(decode_ws_.data(), 0, counters, stream_));
  }
  auto attend = [&](std::int64_t l) {
    const core::KvPagedLayer& layer = layers_[static_cast<std::size_t>(l)];
    if (pass.decode_rows > 0) {
      // Every one-token row at once: their histories were written by earlier steps,
      // which ended synced (history_complete).
      attend_decode_rows(c, layout_, layer, descs + pass.desc0, tables_.as<std::int32_t>(), status_.as<std::int32_t>(),
                         pass.decode_rows, pass.max_length, rope_, hadamard_, act_.qkv.as<std::uint16_t>(),
                         act_.att.as<std::uint16_t>(), decode_ws_.data(), decode_ws_.bytes(), true, stream_);
    }
    for (std::size_t i = pass.piece_begin; i < pass.piece_end; ++i) {
      const Piece& p = pieces[i];
      if (p.first < pass.decode_rows) continue;  // a one-token row: done above
      const PagedSequenceLayer s{layout_,   layer, p.seq->slot, tables_.as<std::int32_t>(), status_.as<std::int32_t>(),
                                 rope_,     hadamard_};
      attend_chunk_paged(c, s, act_.qkv.as<std::uint16_t>() + p.first * ld, p.count, p.pos0,
                         act_.att.as<std::uint16_t>() + p.first * c.q_dim(), scratch_.snapshot.data(),
                         scratch_.rows.data(), scratch_.rows.bytes(), stream_);
    }
  };
  run_gpu_layers(*model_, act_, pass.rows, attend, stream_, mark);
  if (pass.samples == 0) return;
  // The sampling rows' residual and final norm: in place when they are consecutive (a
  // decode step's), else gathered first.
  begin(StepPart::head);
  const std::int64_t d = c.d_model;
  float* x = act_.x.as<float>() + pass.sample_row0 * d;
  std::uint16_t* proj = act_.proj.as<std::uint16_t>() + pass.sample_row0 * d;
  if (pass.gather) {
    const std::int32_t* device_rows = device_gather + pass.slot0;
    const auto row_f32 = static_cast<std::size_t>(d) * 4, row_f16 = static_cast<std::size_t>(d) * 2;
    cuda::model::gather_rows(act_.x.data(), row_f32, row_f32, device_rows, pass.samples, gathered_x_.data(), stream_);
    cuda::model::gather_rows(act_.proj.data(), row_f16, row_f16, device_rows, pass.samples, gathered_proj_.data(),
                             stream_);
    x = gathered_x_.as<float>();
    proj = gathered_proj_.as<std::uint16_t>();
  }
  gpu_output_logits(*model_, x, proj, pass.samples, act_.h.as<std::uint16_t>(),
                    logits_.as<std::uint16_t>() + pass.slot0 * c.vocab, stream_);
}

void GpuBatchEngine::sample(std::int64_t rows, const std::uint8_t* inputs, const InputLayout& at) {
  const ModelConfig& c = model_->config();
  cuda::model::SamplingBatch batch;
  batch.logits_f16 = logits_.as<std::uint16_t>();
  batch.rows = rows;
  batch.vocab = c.vocab;
  batch.logits_stride = c.vocab;
  batch.params = reinterpret_cast<const formats::sampling::RowParams*>(inputs + at.params);
  batch.penalty_offsets = reinterpret_cast<const std::int32_t*>(inputs + at.offsets);
  batch.penalty_ids = reinterpret_cast<const std::int32_t*>(inputs + at.ids);
  batch.penalty_counts = reinterpret_cast<const std::int32_t*>(inputs + at.counts);
  batch.tokens = outputs_.as<std::int32_t>();
  batch.non_finite = outputs_.as<std::int32_t>() + rows;
  cuda::model::sample_rows(batch, sampler_ws_.data(), sampler_ws_.bytes(), stream_);
}

// The host's phases of a profiled step, by the host's clock: lap(part) gives `part`
// the time since the last lap. Null profile: nothing is measured.
class GpuBatchEngine::StepClock {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StepClock(StepProfile* profile) : profile_(profile), start_(Clock::now()), last_(start_) {}
  bool on() const { return profile_ != nullptr; }
  void lap(StepPart part) {
    if (!profile_) return;
    const Clock::time_point now = Clock::now();
    (*profile_)[part] += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }
  // The step's wall time, from the clock's start.
  void stop() {
    if (profile_) profile_->wall_ms += std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }

 private:
  StepProfile* profile_;
  Clock::time_point start_, last_;
};

void GpuBatchEngine::step(std::span<const StepRow> rows, std::span<StepOutput> out) {
  const bool decode_only = !rows.empty() && static_cast<std::int64_t>(rows.size()) <= kMaxBucket &&
                           std::all_of(rows.begin(), rows.end(), [](const StepRow& r) { return r.tokens.size() == 1; });
  StepProfile timed;
  StepClock clock(profiler_ && decode_only ? &timed : nullptr);
  check_step(rows, out);
  for (StepOutput& o : out) o = StepOutput{};
  if (rows.empty()) return;
  clock.lap(StepPart::other);
  grow_pages(rows);
  clock.lap(StepPart::pages);
  if (decode_only) {
    decode_step(rows, out, clock);
  } else {
    mixed_step(rows, out, clock);
  }
  if (!clock.on()) return;
  clock.stop();
  profiler_->collect(timed);  // after the wall time: reading the events is the profiler's cost
  timed.steps = 1;
  profile_ += timed;
}

void GpuBatchEngine::mixed_step(std::span<const StepRow> rows, std::span<StepOutput> out, StepClock& clock) {
  // Pieces in pass order: one-token rows first (they share the first pass and sample
  // from consecutive rows), then the longer rows, each cut at multiples of
  // kPieceTokens from its start; a pass takes pieces while they fit in kPassRows.
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return rows[i].tokens.size() == 1; });
  std::vector<Piece> pieces;
  std::vector<Pass> passes;
  Inputs in;
  std::vector<std::size_t> slot_row;  // the row of each sampling slot
  Pass pass;
  auto close_pass = [&] {
    if (pass.rows == 0) return;
    pass.piece_end = pieces.size();
    if (pass.samples > 0) {
      const std::int32_t* gathered = in.gather.data() + pass.slot0;
      pass.sample_row0 = gathered[0];
      for (std::int64_t j = 1; j < pass.samples; ++j) pass.gather |= gathered[j] != gathered[0] + j;
    }
    passes.push_back(pass);
    pass = Pass{};
    pass.piece_begin = pass.piece_end = pieces.size();
    pass.token_offset = static_cast<std::int64_t>(in.tokens.size());
    pass.slot0 = static_cast<std::int64_t>(slot_row.size());
    pass.desc0 = static_cast<std::int64_t>(in.descs.size());
  };
  for (const std::size_t r : order) {
    const StepRow& row = rows[r];
    Sequence& s = sequence(row.seq);
    const auto n = static_cast<std::int64_t>(row.tokens.size());
    for (std::int64_t begin = 0; begin < n; begin += kPieceTokens) {
      const std::int64_t count = std::min(kPieceTokens, n - begin);
      if (pass.rows + count > kPassRows) close_pass();
      Piece p{r, &s, begin, count, s.length + begin, pass.rows, -1};
      for (std::int64_t t = 0; t < count; ++t) in.tokens.push_back(row.tokens[static_cast<std::size_t>(begin + t)]);
      if (n == 1) {  // one-token rows lead the pass: rows 0..decode_rows-1
        in.descs.push_back(core::KvSeqDesc{static_cast<std::int32_t>(p.pos0), s.slot});
        ++pass.decode_rows;
        pass.max_length = std::max(pass.max_length, decode_length(p.pos0));
      }
      if (row.sample && begin + count == n) {
        p.slot = static_cast<std::int64_t>(slot_row.size());
        slot_row.push_back(r);
        in.gather.push_back(static_cast<std::int32_t>(pass.rows + count - 1));
        ++pass.samples;
      }
      pass.rows += count;
      pieces.push_back(p);
    }
  }
  close_pass();

  const std::size_t samples = slot_row.size();
  std::vector<Sampled> sampled;
  for (std::size_t j = 0; j < samples; ++j) {
    in.add_sample(rows[slot_row[j]].sampling);
    sampled.push_back(Sampled{slot_row[j], static_cast<std::int64_t>(j)});
  }
  const InputLayout at = input_layout(in.tokens.size(), in.descs.size(), in.gather.size(), samples,
                                      in.penalty_ids.size());
  const std::uint8_t* device = upload(in, at, inputs_);
  if (samples > 0) reserve_sampling(samples);
  const ModelConfig& c = model_->config();
  for (const Pass& p : passes) {
    if (p.decode_rows > 0) {
      reserve(decode_ws_, cuda::kv::paged_kv_attention_workspace(layout_, c.n_heads, p.decode_rows, p.max_length));
    }
  }
  clock.lap(StepPart::inputs);

  const auto* d_tokens = reinterpret_cast<const std::int32_t*>(device + at.tokens);
  const auto* d_descs = reinterpret_cast<const core::KvSeqDesc*>(device + at.descs);
  const auto* d_gather = reinterpret_cast<const std::int32_t*>(device + at.gather);
  for (const Pass& p : passes) run_pass(p, pieces, d_tokens, d_descs, d_gather, {});
  if (samples > 0) sample(static_cast<std::int64_t>(samples), device, at);
  clock.lap(StepPart::launch);
  finish(rows, out, sampled, samples, clock);
}

void GpuBatchEngine::decode_step(std::span<const StepRow> rows, std::span<StepOutput> out, StepClock& clock) {
  const ModelConfig& c = model_->config();
  const auto n = static_cast<std::int64_t>(rows.size());
  const std::int64_t bucket = decode_bucket(n);
  // Row i of the step is bucket row i; the idle rows after them embed token 0, skip the
  // attention (pos = -1) and draw greedily, unread.
  Inputs in;
  in.tokens.assign(static_cast<std::size_t>(bucket), 0);
  in.descs.assign(static_cast<std::size_t>(bucket), core::KvSeqDesc{});
  std::int64_t max_length = 0;
  std::vector<Sampled> sampled;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Sequence& s = sequence(rows[i].seq);
    in.tokens[i] = rows[i].tokens[0];
    in.descs[i] = core::KvSeqDesc{static_cast<std::int32_t>(s.length), s.slot};
    max_length = std::max(max_length, decode_length(s.length));
    if (rows[i].sample) sampled.push_back(Sampled{i, static_cast<std::int64_t>(i)});
    in.add_sample(rows[i].sample ? rows[i].sampling : SampleSpec{});
  }
  for (std::int64_t i = n; i < bucket; ++i) in.add_sample(SampleSpec{});
  // The penalty lists' room is part of the layout the graphs read: more moves the
  // counts' section, so the graphs go (rarely: room for 4096 entries at first, then
  // doubled).
  if (in.penalty_ids.size() > penalty_capacity_) {
    penalty_capacity_ = std::max({in.penalty_ids.size(), 2 * penalty_capacity_, std::size_t{4096}});
    graphs_.clear();
  }
  const auto slots = static_cast<std::size_t>(bucket);
  const InputLayout at = input_layout(slots, slots, 0, slots, penalty_capacity_);
  const std::uint8_t* device = upload(in, at, decode_inputs_);
  reserve_sampling(slots);
  reserve(decode_ws_, cuda::kv::paged_kv_attention_workspace(layout_, c.n_heads, bucket, max_length));
  clock.lap(StepPart::inputs);

  Pass pass;
  pass.rows = pass.decode_rows = pass.samples = bucket;
  pass.max_length = max_length;
  const auto* tokens = reinterpret_cast<const std::int32_t*>(device + at.tokens);
  const auto* descs = reinterpret_cast<const core::KvSeqDesc*>(device + at.descs);
  // Everything the step queues; no allocation in it (the buffers are reserved above),
  // so that it can be captured.
  auto enqueue = [&] {
    PartMark mark;
    if (profiler_) mark = [this](StepPart part) { profiler_->mark(part); };
    run_pass(pass, {}, tokens, descs, nullptr, mark);
    if (mark) mark(StepPart::sample);
    sample(bucket, device, at);
  };
  if (use_graphs_) {
    const Graph& graph = decode_graph(bucket, max_length, enqueue);
    clock.lap(StepPart::capture);
    LOWBIT_CUDA_CHECK(cudaGraphLaunch(graph.exec.get(), stream_));
    ++graph_launches_;
    if (profiler_) profiler_->replayed(graph.marks);
  } else {
    if (profiler_) profiler_->begin(false);
    enqueue();
    if (profiler_) profiler_->close();
  }
  clock.lap(StepPart::launch);
  finish(rows, out, sampled, slots, clock);
}

const GpuBatchEngine::Graph& GpuBatchEngine::decode_graph(std::int64_t bucket, std::int64_t max_length,
                                                          const std::function<void()>& enqueue) {
  const auto key = std::make_pair(bucket, max_length);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) {
      graphs_.erase(std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
        return a.second.used < b.second.used;
      }));
    }
    Graph graph;
    cudaGraph_t captured = nullptr;
    LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      if (profiler_) profiler_->begin(true);
      enqueue();
      if (profiler_) graph.marks = profiler_->close();
    } catch (...) {
      cudaStreamEndCapture(stream_, &captured);
      if (captured) cudaGraphDestroy(captured);
      throw;
    }
    LOWBIT_CUDA_CHECK(cudaStreamEndCapture(stream_, &captured));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, captured, 0);
    cudaGraphDestroy(captured);
    LOWBIT_CUDA_CHECK(status);
    graph.exec.reset(exec);
    it = graphs_.emplace(key, std::move(graph)).first;
    ++graph_captures_;
  }
  it->second.used = ++graph_clock_;
  return it->second;
}

void GpuBatchEngine::finish(std::span<const StepRow> rows, std::span<StepOutput> out,
                            const std::vector<Sampled>& sampled, std::size_t slots, StepClock& clock) {
  const ModelConfig& c = model_->config();
  std::vector<std::int32_t> drawn(2 * slots);  // the slots' tokens, then their non-finite flags
  if (slots > 0) {
    LOWBIT_CUDA_CHECK(
        cudaMemcpyAsync(drawn.data(), outputs_.data(), drawn.size() * 4, cudaMemcpyDeviceToHost, stream_));
  }
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  clock.lap(StepPart::sync);
  // What the paged kernels found wrong (none, with the host's tables: a bug otherwise).
  cuda::kv::paged_kv_check_status(status_.as<std::int32_t>(), stream_);
  clock.lap(StepPart::status);

  // The caches hold the rows now.
  for (const StepRow& row : rows) sequence(row.seq).length += static_cast<std::int64_t>(row.tokens.size());
  for (const Sampled& s : sampled) {
    const std::size_t r = s.row, j = static_cast<std::size_t>(s.slot);
    if (drawn[slots + j] != 0) fail_non_finite_logits(sequence(rows[r].seq).length - 1);
    out[r].token = drawn[j];
    if (rows[r].sampling.logprobs < 0) continue;
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(c.vocab));
    LOWBIT_CUDA_CHECK(cudaMemcpy(bits.data(), logits_.as<std::uint16_t>() + j * static_cast<std::size_t>(c.vocab),
                                 bits.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> logits(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) logits[i] = formats::half_to_float(formats::Half{bits[i]});
    out[r].logprobs = token_logprobs(logits, out[r].token, rows[r].sampling.logprobs);
  }
  clock.lap(StepPart::other);
}

bool GpuBatchEngine::set_profiling(bool on) {
  // Graphs captured without the profiler's event nodes (or with them) no longer fit.
  graphs_.clear();
  profile_ = StepProfile{};
  profiler_.reset();
  // The marks of a decode pass: embedding, the counters, 8 a layer, head, sampling.
  const auto marks = static_cast<std::size_t>(8 * model_->config().n_layers + 8);
  if (on) profiler_ = std::make_unique<GpuStepProfiler>(stream_, marks);
  return true;
}

std::string GpuBatchEngine::describe() const {
  std::ostringstream s;
  s << "GPU batch engine, kv-cache " << kv_policy_name(cache_.policy) << ", KV budget " << budget_
    << " bytes: a paged pool of " << layout_.pool_bytes() << " bytes (" << layout_.pages << " pages of "
    << layout_.page_tokens << " tokens, " << layout_.max_seqs << " sequence slots), " << max_sequence_tokens_
    << " tokens a sequence at most; decode-only steps "
    << (use_graphs_ ? "as a CUDA graph per batch bucket" : "launched kernel by kernel");
  return s.str();
}

}  // namespace lowbit::engine
