#include "engine/gpu_session.h"

#include <algorithm>
#include <cmath>

#include "cuda/kv/kv_cuda.h"
#include "cuda/model/model_cuda.h"
#include "engine/finite_logits.h"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::engine {

namespace {

using cuda::model::argmax_token;
using cuda::model::embed_rows;

constexpr std::int64_t kMaxChunk = 512;  // rows of one forward chunk (activation buffers)

std::uint16_t* f16_at(const DeviceBuffer& b, std::int64_t offset) { return b.as<std::uint16_t>() + offset; }

}  // namespace

GpuSession::GpuSession(const GpuModel& model, KvCacheOptions cache, std::int64_t max_tokens, bool use_graphs)
    : model_(&model),
      options_(cache),
      hadamard_(check_gpu_kv_options(model.config(), cache, "gpu session", /*paged=*/false)),
      max_tokens_(max_tokens),
      use_graphs_(use_graphs),
      kv_(model.config(), cache, max_tokens),
      chunk_(std::min(max_tokens, kMaxChunk)),
      act_(model.config(), chunk_),
      rope_(model.config(), max_tokens),
      scratch_(kv_.shape(), model.config().n_heads, max_tokens, chunk_) {
  const ModelConfig& c = model.config();
  LOWBIT_CHECK(max_tokens >= 1 && max_tokens < (std::int64_t{1} << 30), "gpu session: max_tokens = ", max_tokens);
  logits_ = DeviceBuffer(static_cast<std::size_t>(chunk_ * c.vocab) * 2);
  tokens_ = DeviceBuffer(static_cast<std::size_t>(chunk_) * 4);
  step_ = DeviceBuffer(16);

  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  void* pinned = nullptr;
  LOWBIT_CUDA_CHECK(cudaHostAlloc(&pinned, kHostStepInts * sizeof(std::int32_t), cudaHostAllocMapped));
  host_step_ = static_cast<std::int32_t*>(pinned);
  void* mapped = nullptr;
  LOWBIT_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, pinned, 0));
  host_step_device_ = static_cast<std::int32_t*>(mapped);
  for (cudaEvent_t* e : {&step_begin_, &step_end_, &run_begin_, &run_end_}) LOWBIT_CUDA_CHECK(cudaEventCreate(e));
  for (cudaEvent_t& e : token_ready_) LOWBIT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ring_backup_ = DeviceBuffer(cuda::kv::ring_backup_bytes(kv_.shape()) * static_cast<std::size_t>(c.n_layers));
  // The model's uploads and the members' memsets ran on the legacy stream, which stream_
  // (non-blocking) does not wait for; a pageable cudaMemcpy may return before it lands.
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
}

GpuSession::~GpuSession() {
  if (graph_) cudaGraphExecDestroy(graph_);
  if (stream_) cudaStreamDestroy(stream_);
  if (host_step_) cudaFreeHost(host_step_);
  for (cudaEvent_t e : {step_begin_, step_end_, run_begin_, run_end_, token_ready_[0], token_ready_[1]}) {
    if (e) cudaEventDestroy(e);
  }
}

std::size_t GpuSession::kv_bytes() const {
  const ModelConfig& c = model_->config();
  return KvCache::bytes_at(KvShape{c.n_layers, c.n_kv_heads, c.head_dim}, options_, position_);
}

void GpuSession::check_tokens(std::span<const std::int32_t> tokens) const {
  const auto n = static_cast<std::int64_t>(tokens.size());
  LOWBIT_CHECK(n > 0, "forward: empty token sequence");
  LOWBIT_CHECK(n <= max_tokens_ - position_, "forward: ", n, " tokens at position ", position_,
               " exceed the context the session was sized for (max_tokens = ", max_tokens_, ")");
  const std::int64_t vocab = model_->config().vocab;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t id = tokens[static_cast<std::size_t>(i)];
    LOWBIT_CHECK(id >= 0 && id < vocab, "forward: token id ", id, " at index ", i, " is outside the vocabulary (0..",
                 vocab - 1, ")");
  }
}

void GpuSession::run_layers(std::int64_t n, Where where, std::int64_t rows) {
  const ModelConfig& c = model_->config();
  auto attend = [&](std::int64_t l) {
    const SequenceLayer s{kv_.shape(), kv_.layers()[static_cast<std::size_t>(l)], rope_, hadamard_};
    if (where.device_pos) {  // one decode step
      // A decode step's first kernel starts after the previous step finished (each step is
      // its own graph launch, or follows a copy and a host sync): the history is complete,
      // so the append and the attention start their work early.
      const std::size_t backup_bytes = cuda::kv::ring_backup_bytes(kv_.shape());
      void* backup = backup_bytes ? ring_backup_.as<std::uint8_t>() + l * backup_bytes : nullptr;
      attend_decode_row(c, s, act_.qkv.as<std::uint16_t>(), where.device_pos, max_tokens_,
                        act_.att.as<std::uint16_t>(), scratch_.decode.data(), scratch_.decode.bytes(), backup,
                        /*history_complete=*/true, stream_);
    } else {
      attend_chunk(c, s, act_.qkv.as<std::uint16_t>(), n, where.pos0, act_.att.as<std::uint16_t>(),
                   scratch_.snapshot.data(), scratch_.rows.data(), scratch_.rows.bytes(), stream_);
    }
  };
  run_gpu_layers(*model_, act_, n, attend, stream_);
  if (rows == 0) return;
  // The last layer's residual and the final norm, for the rows whose logits are wanted.
  const std::int64_t first = (n - rows) * c.d_model;
  gpu_output_logits(*model_, act_.x.as<float>() + first, f16_at(act_.proj, first), rows, act_.h.as<std::uint16_t>(),
                    logits_.data(), stream_);
}

void GpuSession::logits_to_host(std::int64_t rows, float* out, std::int64_t first_position) {
  const auto count = static_cast<std::size_t>(rows * model_->config().vocab);
  std::vector<std::uint16_t> bits(count);
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(bits.data(), logits_.data(), count * 2, cudaMemcpyDeviceToHost, stream_));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (std::size_t i = 0; i < count; ++i) out[i] = formats::half_to_float(formats::Half{bits[i]});
  lowbit::engine::check_finite_logits(std::span<const float>(out, count), model_->config().vocab, first_position);
}

std::vector<float> GpuSession::forward(std::span<const std::int32_t> tokens, bool all_logits) {
  check_tokens(tokens);
  const ModelConfig& c = model_->config();
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::vector<float> logits(static_cast<std::size_t>((all_logits ? n : 1) * c.vocab));
  for (std::int64_t start = 0; start < n; start += chunk_) {
    const std::int64_t m = std::min(chunk_, n - start);
    const std::int64_t rows = all_logits ? m : (start + m == n ? 1 : 0);
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(tokens_.data(), tokens.data() + start, static_cast<std::size_t>(m) * 4,
                                      cudaMemcpyHostToDevice, stream_));
    embed_rows(model_->embedding(), tokens_.as<std::int32_t>(), m, c.d_model, act_.x.as<float>(), stream_);
    run_layers(m, Where{position_, nullptr}, rows);
    if (rows > 0) logits_to_host(rows, logits.data() + (all_logits ? start * c.vocab : 0), position_ + m - rows);
    position_ += m;
  }
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return logits;
}

// One decode step from step_[0] (token) and step_[2] (position) to step_[0] (the next
// token) and step_[2] + 1; step_[1] becomes 1 if the step's logits held a NaN or Inf.
void GpuSession::run_decode_step() {
  const ModelConfig& c = model_->config();
  std::int32_t* step = step_.as<std::int32_t>();
  // The events bracket the kernels alone (in a graph: external event-record nodes; that
  // flag is for capture only), so that their span excludes the host's submission.
  auto enqueue = [&](unsigned record_flags) {
    LOWBIT_CUDA_CHECK(cudaEventRecordWithFlags(step_begin_, stream_, record_flags));
    embed_rows(model_->embedding(), step, 1, c.d_model, act_.x.as<float>(), stream_);
    run_layers(1, Where{0, step + 2}, 1);
    argmax_token(f16_at(logits_, 0), c.vocab, step, step + 2, step + 1, stream_,  // the next step's input
                 host_step_device_ + kStepOut);
    LOWBIT_CUDA_CHECK(cudaEventRecordWithFlags(step_end_, stream_, record_flags));
  };
  if (!use_graphs_) {
    enqueue(cudaEventRecordDefault);
    return;
  }
  if (!graph_) {
    cudaGraph_t graph = nullptr;
    LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(cudaEventRecordExternal);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    LOWBIT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    const cudaError_t status = cudaGraphInstantiate(&graph_, graph, 0);
    cudaGraphDestroy(graph);
    LOWBIT_CUDA_CHECK(status);
  }
  LOWBIT_CUDA_CHECK(cudaGraphLaunch(graph_, stream_));
}

std::int32_t GpuSession::decode_greedy(std::int32_t token) {
  check_tokens(std::span<const std::int32_t>(&token, 1));
  set_step_input(token);
  run_decode_step();
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  float ms = 0;
  LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, step_begin_, step_end_));
  decode_device_ms_ += ms;
  const std::int32_t* out = host_step_ + kStepOut + 2 * (position_ % 2);
  ++position_;
  if (out[1] != 0) lowbit::engine::fail_non_finite_logits(position_ - 1);
  return out[0];
}

std::int64_t GpuSession::decode_greedy_run(std::int32_t token, std::int64_t steps,
                                           const std::function<bool(std::int32_t)>& keep) {
  if (steps <= 0) return 0;
  check_tokens(std::span<const std::int32_t>(&token, 1));
  LOWBIT_CHECK(steps <= max_tokens_ - position_, "decode: ", steps, " steps at position ", position_,
               " exceed the context the session was sized for (max_tokens = ", max_tokens_, ")");
  LOWBIT_CUDA_CHECK(cudaEventRecord(run_begin_, stream_));
  set_step_input(token);
  // Step k (at position p) leaves its token in step_[0] (the next step's input) and,
  // with the non-finite flag, in host_step_[kStepOut + 2 * (p % 2)] (its argmax writes it).
  auto enqueue = [&](std::int64_t k) {
    run_decode_step();
    LOWBIT_CUDA_CHECK(cudaEventRecord(token_ready_[k % 2], stream_));
  };
  auto finish = [&](bool ahead) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(run_end_, stream_));
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (ahead) take_back_step();
    float ms = 0;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, run_begin_, run_end_));
    decode_device_ms_ += ms;
  };
  enqueue(0);
  for (std::int64_t k = 0;; ++k) {
    const bool ahead = k + 1 < steps;
    if (ahead) enqueue(k + 1);  // runs while the host reads step k's token
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(token_ready_[k % 2]));
    const std::int32_t* out = host_step_ + kStepOut + 2 * (position_ % 2);
    ++position_;
    bool more = false;
    try {
      if (out[1] != 0) lowbit::engine::fail_non_finite_logits(position_ - 1);
      more = keep(out[0]);
    } catch (...) {
      finish(ahead);
      throw;
    }
    if (!more || !ahead) {
      finish(ahead);
      return k + 1;
    }
  }
}

void GpuSession::set_step_input(std::int32_t token) {
  host_step_[0] = token;
  host_step_[1] = 0;  // no non-finite logit yet
  host_step_[2] = static_cast<std::int32_t>(position_);
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(step_.data(), host_step_, 12, cudaMemcpyHostToDevice, stream_));
}

void GpuSession::take_back_step() {
  const std::size_t bytes = cuda::kv::ring_backup_bytes(kv_.shape());
  if (bytes == 0) return;  // full, window, int8, int4: the next append at position() rewrites all it wrote
  for (std::size_t l = 0; l < kv_.layers().size(); ++l) {
    cuda::kv::kv_restore_ring_slot(kv_.shape(), kv_.layers()[l], position_, ring_backup_.as<std::uint8_t>() + l * bytes, stream_);
  }
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace lowbit::engine
