#include "engine/gpu_batch_engine.h"

#include <algorithm>
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
constexpr std::int64_t kMaxSlots = 256;      // sequence slots at most
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
  const core::KvPageLayout probe = core::kv_page_layout(spec, c.n_layers, std::size_t{1} << 60, 1, kPageTokens);
  const auto per_slot = static_cast<std::size_t>(probe.layers * probe.fixed_bytes());
  std::int64_t slots = kMaxSlots;
  if (per_slot > 0) {
    const std::size_t share = probe.has_pages() ? bytes / 2 : bytes;
    slots = std::clamp<std::int64_t>(static_cast<std::int64_t>(share / per_slot), 1, kMaxSlots);
  }
  return core::kv_page_layout(spec, c.n_layers, bytes, slots, kPageTokens);
}

// Sections of the step's input blob, each 16-byte aligned.
std::size_t section(std::size_t& offset, std::size_t bytes) {
  const std::size_t at = offset;
  offset += (bytes + 15) / 16 * 16;
  return at;
}

}  // namespace

GpuBatchEngine::GpuBatchEngine(const GpuModel& model, KvCacheOptions cache, std::size_t kv_budget_bytes,
                               std::int64_t max_sequence_tokens)
    : model_(&model),
      cache_(cache),
      hadamard_(check_gpu_kv_options(model.config(), cache, "gpu batch engine")),
      budget_(kv_budget_bytes),
      max_sequence_tokens_(max_sequence_tokens > 0 ? max_sequence_tokens : model.config().context_length),
      act_(model.config(), kPassRows),
      rope_(model.config(), std::max<std::int64_t>(max_sequence_tokens_, 1)),
      scratch_(core::kv_layer_shape(spec_of(model.config(), cache, std::max<std::int64_t>(max_sequence_tokens_, 1))),
               model.config().n_heads, std::max<std::int64_t>(max_sequence_tokens_, 1), kPassRows) {
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
}

GpuBatchEngine::~GpuBatchEngine() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
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
  if (buffer.bytes() < bytes) buffer = core::DeviceBuffer(std::max(bytes, buffer.bytes() * 3 / 2));
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

void GpuBatchEngine::run_pass(const Pass& pass, const std::vector<Piece>& pieces, const std::int32_t* tokens,
                              const core::KvSeqDesc* descs, const std::int32_t* gather,
                              const std::int32_t* device_gather) {
  const ModelConfig& c = model_->config();
  const std::int64_t ld = c.q_dim() + 2 * c.kv_dim();
  cuda::model::embed_rows(model_->embedding(), tokens + pass.token_offset, pass.rows, c.d_model, act_.x.as<float>(),
                          stream_);
  std::size_t decode_ws = 0;
  if (pass.decode_rows > 0) {
    // The fused combine's counters sit at the workspace's start, their count set by the
    // batch size: zero them for this pass's batch (its layers leave them zero).
    decode_ws = cuda::kv::paged_kv_attention_workspace(layout_, c.n_heads, pass.decode_rows, pass.max_length);
    reserve(decode_ws_, decode_ws);
    const std::size_t counters = std::min(decode_ws_.bytes(), static_cast<std::size_t>(pass.decode_rows * c.n_heads) * 4 + 16);
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(decode_ws_.data(), 0, counters, stream_));
  }
  auto attend = [&](std::int64_t l) {
    const core::KvPagedLayer& layer = layers_[static_cast<std::size_t>(l)];
    if (pass.decode_rows > 0) {
      // Every one-token row at once: their histories were written by earlier steps,
      // which ended synced (history_complete).
      attend_decode_rows(c, layout_, layer, descs + pass.desc0, tables_.as<std::int32_t>(), status_.as<std::int32_t>(),
                         pass.decode_rows, pass.max_length, rope_, hadamard_, act_.qkv.as<std::uint16_t>(),
                         act_.att.as<std::uint16_t>(), decode_ws_.data(), decode_ws, true, stream_);
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
  run_gpu_layers(*model_, act_, pass.rows, attend, stream_);
  if (pass.samples == 0) return;
  // The sampling rows' residual and final norm: in place when they are consecutive (a
  // decode step's), else gathered first.
  const std::int64_t d = c.d_model;
  const std::int32_t* rows = gather + pass.slot0;
  bool consecutive = true;
  for (std::int64_t j = 1; j < pass.samples; ++j) consecutive &= rows[j] == rows[0] + j;
  float* x = act_.x.as<float>() + rows[0] * d;
  std::uint16_t* proj = act_.proj.as<std::uint16_t>() + rows[0] * d;
  if (!consecutive) {
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

void GpuBatchEngine::step(std::span<const StepRow> rows, std::span<StepOutput> out) {
  check_step(rows, out);
  for (StepOutput& o : out) o = StepOutput{};
  if (rows.empty()) return;
  const ModelConfig& c = model_->config();

  grow_pages(rows);

  // Pieces in pass order: one-token rows first (they share the first pass and sample
  // from consecutive rows), then the longer rows, each cut at multiples of
  // kPieceTokens from its start; a pass takes pieces while they fit in kPassRows.
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return rows[i].tokens.size() == 1; });
  std::vector<Piece> pieces;
  std::vector<Pass> passes;
  std::vector<std::int32_t> tokens, gather;
  std::vector<core::KvSeqDesc> descs;  // the one-token rows', in pass order
  std::vector<std::size_t> slot_row;  // the row of each sampling slot
  Pass pass;
  auto close_pass = [&] {
    if (pass.rows == 0) return;
    pass.piece_end = pieces.size();
    passes.push_back(pass);
    pass = Pass{pieces.size(), pieces.size(), 0, static_cast<std::int64_t>(tokens.size()), 0,
                static_cast<std::int64_t>(slot_row.size()), 0, static_cast<std::int64_t>(descs.size()), 0};
  };
  for (const std::size_t r : order) {
    const StepRow& row = rows[r];
    Sequence& s = sequence(row.seq);
    const auto n = static_cast<std::int64_t>(row.tokens.size());
    for (std::int64_t begin = 0; begin < n; begin += kPieceTokens) {
      const std::int64_t count = std::min(kPieceTokens, n - begin);
      if (pass.rows + count > kPassRows) close_pass();
      Piece p{r, &s, begin, count, s.length + begin, pass.rows, -1};
      for (std::int64_t t = 0; t < count; ++t) tokens.push_back(row.tokens[static_cast<std::size_t>(begin + t)]);
      if (n == 1) {  // one-token rows lead the pass: rows 0..decode_rows-1
        descs.push_back(core::KvSeqDesc{static_cast<std::int32_t>(p.pos0), s.slot});
        ++pass.decode_rows;
        const std::int64_t length = (p.pos0 + kLengthGranule) / kLengthGranule * kLengthGranule;
        pass.max_length = std::max(pass.max_length, std::min(length, max_sequence_tokens_));
      }
      if (row.sample && begin + count == n) {
        p.slot = static_cast<std::int64_t>(slot_row.size());
        slot_row.push_back(r);
        gather.push_back(static_cast<std::int32_t>(pass.rows + count - 1));
        ++pass.samples;
      }
      pass.rows += count;
      pieces.push_back(p);
    }
  }
  close_pass();

  // The step's inputs in one blob: tokens, decode descriptors, gather rows, sampling parameters
  // and penalty lists.
  const std::size_t samples = slot_row.size();
  std::vector<formats::sampling::RowParams> params;
  std::vector<std::int32_t> penalty_offsets{0}, penalty_ids, penalty_counts;
  for (const std::size_t r : slot_row) {
    params.push_back(rows[r].sampling.params);
    for (const TokenCount& tc : rows[r].sampling.penalties) {
      penalty_ids.push_back(tc.id);
      penalty_counts.push_back(tc.count);
    }
    penalty_offsets.push_back(static_cast<std::int32_t>(penalty_ids.size()));
  }
  std::size_t size = 0;
  const std::size_t at_tokens = section(size, tokens.size() * 4);
  const std::size_t at_descs = section(size, descs.size() * sizeof(core::KvSeqDesc));
  const std::size_t at_gather = section(size, gather.size() * 4);
  const std::size_t at_params = section(size, params.size() * sizeof(formats::sampling::RowParams));
  const std::size_t at_offsets = section(size, penalty_offsets.size() * 4);
  const std::size_t at_ids = section(size, penalty_ids.size() * 4 + 4);  // never empty: non-null pointers
  const std::size_t at_counts = section(size, penalty_counts.size() * 4 + 4);
  host_inputs_.assign(size, std::byte{0});
  auto put = [&](std::size_t at, const void* data, std::size_t bytes) {
    if (bytes) std::memcpy(host_inputs_.data() + at, data, bytes);
  };
  put(at_tokens, tokens.data(), tokens.size() * 4);
  put(at_descs, descs.data(), descs.size() * sizeof(core::KvSeqDesc));
  put(at_gather, gather.data(), gather.size() * 4);
  put(at_params, params.data(), params.size() * sizeof(formats::sampling::RowParams));
  put(at_offsets, penalty_offsets.data(), penalty_offsets.size() * 4);
  put(at_ids, penalty_ids.data(), penalty_ids.size() * 4);
  put(at_counts, penalty_counts.data(), penalty_counts.size() * 4);
  auto* device = static_cast<std::uint8_t*>(reserve(inputs_, size));
  // From pageable memory: the call returns once the source is read.
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(device, host_inputs_.data(), size, cudaMemcpyHostToDevice, stream_));
  if (samples > 0) {
    reserve(logits_, samples * static_cast<std::size_t>(c.vocab) * 2);
    reserve(sampler_ws_, cuda::model::sample_rows_workspace_bytes(static_cast<std::int64_t>(samples), c.vocab));
    reserve(outputs_, samples * 2 * 4);
  }

  const auto* d_tokens = reinterpret_cast<const std::int32_t*>(device + at_tokens);
  const auto* d_descs = reinterpret_cast<const core::KvSeqDesc*>(device + at_descs);
  const auto* d_gather = reinterpret_cast<const std::int32_t*>(device + at_gather);
  for (const Pass& p : passes) run_pass(p, pieces, d_tokens, d_descs, gather.data(), d_gather);

  std::vector<std::int32_t> drawn(2 * samples);
  if (samples > 0) {
    cuda::model::SamplingBatch batch;
    batch.logits_f16 = logits_.as<std::uint16_t>();
    batch.rows = static_cast<std::int64_t>(samples);
    batch.vocab = c.vocab;
    batch.logits_stride = c.vocab;
    batch.params = reinterpret_cast<const formats::sampling::RowParams*>(device + at_params);
    batch.penalty_offsets = reinterpret_cast<const std::int32_t*>(device + at_offsets);
    batch.penalty_ids = reinterpret_cast<const std::int32_t*>(device + at_ids);
    batch.penalty_counts = reinterpret_cast<const std::int32_t*>(device + at_counts);
    batch.tokens = outputs_.as<std::int32_t>();
    batch.non_finite = outputs_.as<std::int32_t>() + samples;
    cuda::model::sample_rows(batch, sampler_ws_.data(), sampler_ws_.bytes(), stream_);
    LOWBIT_CUDA_CHECK(
        cudaMemcpyAsync(drawn.data(), outputs_.data(), drawn.size() * 4, cudaMemcpyDeviceToHost, stream_));
  }
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // What the paged kernels found wrong (none, with the host's tables: a bug otherwise).
  cuda::kv::paged_kv_check_status(status_.as<std::int32_t>(), stream_);

  // The caches hold the rows now.
  for (const StepRow& row : rows) sequence(row.seq).length += static_cast<std::int64_t>(row.tokens.size());
  for (std::size_t j = 0; j < samples; ++j) {
    const std::size_t r = slot_row[j];
    if (drawn[samples + j] != 0) fail_non_finite_logits(sequence(rows[r].seq).length - 1);
    out[r].token = drawn[j];
    if (rows[r].sampling.logprobs < 0) continue;
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(c.vocab));
    LOWBIT_CUDA_CHECK(cudaMemcpy(bits.data(), logits_.as<std::uint16_t>() + j * static_cast<std::size_t>(c.vocab),
                                 bits.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> logits(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) logits[i] = formats::half_to_float(formats::Half{bits[i]});
    out[r].logprobs = token_logprobs(logits, out[r].token, rows[r].sampling.logprobs);
  }
}

std::string GpuBatchEngine::describe() const {
  std::ostringstream s;
  s << "GPU batch engine, kv-cache " << kv_policy_name(cache_.policy) << ", KV budget " << budget_
    << " bytes: a paged pool of " << layout_.pool_bytes() << " bytes (" << layout_.pages << " pages of "
    << layout_.page_tokens << " tokens, " << layout_.max_seqs << " sequence slots), " << max_sequence_tokens_
    << " tokens a sequence at most";
  return s.str();
}

}  // namespace lowbit::engine
