#include "engine/gpu_session.h"

#include <algorithm>
#include <cmath>

#include "cuda/kv/kv_cuda.h"
#include "cuda/model/model_cuda.h"
#include "cuda/weight_only/weight_only_cuda.h"
#include "engine/finite_logits.h"
#include "engine/rope_table.h"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::engine {

namespace {

using cuda::kv::AppendRope;
using cuda::kv::ChunkRows;
using cuda::model::add_rms_norm;
using cuda::model::argmax_token;
using cuda::model::embed_rows;
using cuda::model::silu_mul;

constexpr std::int64_t kMaxChunk = 512;  // rows of one forward chunk (activation buffers)
constexpr std::size_t kRowsWorkspaceBudget = std::size_t{64} << 20;  // prefill attention partials

TensorView f16_matrix(void* data, std::int64_t rows, std::int64_t cols) {
  return TensorView::matrix(data, DType::f16, Device::cuda, rows, cols);
}

std::uint16_t* f16_at(const DeviceBuffer& b, std::int64_t offset) { return b.as<std::uint16_t>() + offset; }

// out = x W^T (+ bias) on the weight-only kernels (the weights were checked at upload).
void gemm(const TensorView& x, const PackedWeights& w, const TensorView& out, cudaStream_t stream,
          const TensorView& bias = TensorView{}) {
  cuda::weight_only::weight_only_gemm(x, w, bias, out, stream);
}

// out [n x w.cols] (f16, row stride w.cols) = x W^T (+ w.bias), one GEMM per part, each
// adding its columns of the bias in its epilogue.
void stacked_gemm(const TensorView& x, const StackedWeights& w, std::uint16_t* out, cudaStream_t stream) {
  for (const StackedWeights::Part& p : w.parts) {
    const TensorView bias = w.bias ? TensorView::vector(const_cast<std::uint16_t*>(w.bias) + p.col0, DType::f16,
                                                        Device::cuda, p.weights.n)
                                   : TensorView{};
    gemm(x, p.weights, TensorView::matrix(out + p.col0, DType::f16, Device::cuda, x.rows(), p.weights.n, w.cols),
         stream, bias);
  }
}

}  // namespace

GpuSession::GpuSession(const GpuModel& model, KvCacheOptions cache, std::int64_t max_tokens, bool use_graphs)
    : model_(&model), options_(cache), max_tokens_(max_tokens), use_graphs_(use_graphs) {
  const ModelConfig& c = model.config();
  LOWBIT_CHECK(max_tokens >= 1 && max_tokens < (std::int64_t{1} << 30), "gpu session: max_tokens = ", max_tokens);
  LOWBIT_CHECK(cache.kv_group == 0 || cache.kv_group == c.head_dim, "gpu session: --kv-group ", cache.kv_group,
               " is not supported on the GPU (one scale per token per head: 0 or head_dim ", c.head_dim, ")");
  // The GPU cache reads rotated keys as they are (the query is rotated with them, after
  // RoPE); values rotated (kv) would need the output rotated back, and symmetric INT4 has
  // no GPU layout yet.
  LOWBIT_CHECK(cache.kv_rotate != KvRotate::kv, "gpu session: --kv-rotate kv is not supported on the GPU (k or off)");
  LOWBIT_CHECK(!cache.kv_symmetric, "gpu session: --kv-symmetric on is not supported on the GPU");
  LOWBIT_CHECK(cache.kv_key_block == 0, "gpu session: --kv-key-block ", cache.kv_key_block,
               " is not supported on the GPU (keys per token: 0)");
  hadamard_ = cache.kv_rotate == KvRotate::k && cache.policy != KvPolicy::full && cache.policy != KvPolicy::window;
  LOWBIT_CHECK(!hadamard_ || c.head_dim == 64 || c.head_dim == 128,
               "gpu session: --kv-rotate k needs head_dim 64 or 128, got ", c.head_dim);
  shape_ = core::kv_layer_shape(
      KvCacheSpec{cache.policy, c.n_kv_heads, c.head_dim, cache.sink, cache.window, cache.kv_bits, max_tokens});
  auto alloc = [this](std::size_t bytes) { return cache_buffers_.emplace_back(bytes).data(); };
  layers_.resize(static_cast<std::size_t>(c.n_layers));
  for (core::KvLayerBuffers& layer : layers_) {
    for (core::KvPart* part : {&layer.k, &layer.v}) {
      part->f16 = static_cast<std::uint16_t*>(alloc(shape_.f16_bytes()));
      part->codes = static_cast<std::uint8_t*>(alloc(shape_.code_bytes_total()));
      part->scales = static_cast<std::uint16_t*>(alloc(shape_.param_count() * core::KvLayerShape::kParamBytes));
      part->mins =
          shape_.has_mins() ? static_cast<std::uint16_t*>(alloc(shape_.param_count() * core::KvLayerShape::kParamBytes))
                            : nullptr;
    }
  }

  chunk_ = std::min(max_tokens, kMaxChunk);
  const auto rows = static_cast<std::size_t>(chunk_);
  const auto d = static_cast<std::size_t>(c.d_model), f = static_cast<std::size_t>(c.ffn_dim);
  const auto qkv = static_cast<std::size_t>(c.q_dim() + 2 * c.kv_dim());
  x_ = DeviceBuffer(rows * d * 4);
  h_ = DeviceBuffer(rows * d * 2);
  qkv_ = DeviceBuffer(rows * qkv * 2);
  att_ = DeviceBuffer(rows * static_cast<std::size_t>(c.q_dim()) * 2);
  proj_ = DeviceBuffer(rows * d * 2);
  gu_ = DeviceBuffer(rows * 2 * f * 2);
  act_ = DeviceBuffer(rows * f * 2);
  logits_ = DeviceBuffer(rows * static_cast<std::size_t>(c.vocab) * 2);
  attn_ws_bytes_ = cuda::kv::kv_attention_workspace_bound(shape_, c.n_heads, max_tokens);
  graph_attn_ws_ = DeviceBuffer(attn_ws_bytes_);
  // The prefill attention's partials: as many rows a launch as the budget holds.
  const std::size_t per_row = cuda::kv::kv_attention_rows_workspace(shape_, c.n_heads, 1, max_tokens);
  const auto rows_a_launch = std::clamp<std::int64_t>(static_cast<std::int64_t>(kRowsWorkspaceBudget / per_row), 1, chunk_);
  rows_ws_ = DeviceBuffer(per_row * static_cast<std::size_t>(rows_a_launch));
  ring_snapshot_ = DeviceBuffer(cuda::kv::ring_snapshot_bytes(shape_));
  LOWBIT_CUDA_CHECK(cudaMemset(graph_attn_ws_.data(), 0, attn_ws_bytes_));
  tokens_ = DeviceBuffer(rows * 4);
  step_ = DeviceBuffer(16);

  // The CPU reference's angle table.
  const RopeTable table = rope_table(c, max_tokens);
  rope_cos_ = DeviceBuffer(table.cos.size() * 4);
  rope_sin_ = DeviceBuffer(table.sin.size() * 4);
  LOWBIT_CUDA_CHECK(cudaMemcpy(rope_cos_.data(), table.cos.data(), rope_cos_.bytes(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(rope_sin_.data(), table.sin.data(), rope_sin_.bytes(), cudaMemcpyHostToDevice));

  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  void* pinned = nullptr;
  LOWBIT_CUDA_CHECK(cudaMallocHost(&pinned, kHostStepInts * sizeof(std::int32_t)));
  host_step_ = static_cast<std::int32_t*>(pinned);
  for (cudaEvent_t* e : {&step_begin_, &step_end_, &run_begin_, &run_end_}) LOWBIT_CUDA_CHECK(cudaEventCreate(e));
  for (cudaEvent_t& e : token_ready_) LOWBIT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ring_backup_ = DeviceBuffer(cuda::kv::ring_backup_bytes(shape_) * static_cast<std::size_t>(c.n_layers));
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

void GpuSession::attention(std::int64_t l, std::int64_t n, Where where) {
  const ModelConfig& c = model_->config();
  const core::KvLayerBuffers& layer = layers_[static_cast<std::size_t>(l)];
  const std::int64_t ld = c.q_dim() + 2 * c.kv_dim();
  const bool neox = c.rope_style == RopeStyle::neox;  // qwen2's pairs (i, i + rope_dims / 2)
  if (where.device_pos) {  // one decode step
    std::uint16_t* row = f16_at(qkv_, 0);
    const std::uint16_t* k = row + c.q_dim();
    const std::uint16_t* v = k + c.kv_dim();
    // RoPE rides on the append: K rotated as it is stored, Q in place.
    // With --kv-rotate k, K and Q are then rotated by the Hadamard transform.
    const AppendRope rope{rope_cos_.as<float>(), rope_sin_.as<float>(), c.rope_dims, row, c.n_heads, hadamard_, neox};
    // A decode step's first kernel starts after the previous step finished (each step is
    // its own graph launch, or follows a copy and a host sync): the history is complete,
    // so the append and the attention start their work early.
    const bool history_complete = true;
    void* backup = ring_backup_.bytes() ? ring_backup_.as<std::uint8_t>() + l * cuda::kv::ring_backup_bytes(shape_) : nullptr;
    cuda::kv::kv_append_at(shape_, layer, where.device_pos, k, v, stream_, &rope, history_complete, backup);
    cuda::kv::kv_attention_at(shape_, layer, where.device_pos, max_tokens_, row, c.n_heads, att_.data(), DType::f16,
                        graph_attn_ws_.data(), attn_ws_bytes_, stream_, history_complete);
    return;
  }
  // A chunk of rows at pos0..: RoPE, the appends and the attention of every row at once,
  // each row seeing what it would one at a time (cuda/kv/kv_cuda.h, ChunkRows).
  const ChunkRows chunk{qkv_.data(), n, ld, c.q_dim(), c.q_dim() + c.kv_dim(), where.pos0};
  const AppendRope table{rope_cos_.as<float>(), rope_sin_.as<float>(), c.rope_dims, nullptr, c.n_heads, hadamard_, neox};
  cuda::kv::rope_rows(shape_, chunk, table, stream_);
  cuda::kv::kv_append_rows(shape_, layer, chunk, ring_snapshot_.data(), stream_);
  cuda::kv::kv_attention_rows(shape_, layer, chunk, ring_snapshot_.data(), c.n_heads, att_.data(), c.q_dim(),
                        rows_ws_.data(), rows_ws_.bytes(), stream_);
}

void GpuSession::run_layers(std::int64_t n, Where where, std::int64_t rows) {
  const ModelConfig& c = model_->config();
  const std::int64_t d = c.d_model, f = c.ffn_dim;
  float* x = x_.as<float>();
  std::uint16_t* h = f16_at(h_, 0);
  std::uint16_t* proj = f16_at(proj_, 0);
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const GpuLayer& w = model_->layers()[static_cast<std::size_t>(l)];
    add_rms_norm(x, l == 0 ? nullptr : proj, w.attn_norm, n, d, c.rms_eps, h, stream_);
    stacked_gemm(f16_matrix(h, n, d), w.qkv, f16_at(qkv_, 0), stream_);
    attention(l, n, where);
    gemm(f16_matrix(att_.data(), n, c.q_dim()), w.wo, f16_matrix(proj, n, d), stream_);
    add_rms_norm(x, proj, w.ffn_norm, n, d, c.rms_eps, h, stream_);
    stacked_gemm(f16_matrix(h, n, d), w.gate_up, f16_at(gu_, 0), stream_);
    silu_mul(f16_at(gu_, 0), n, f, f16_at(act_, 0), stream_);
    gemm(f16_matrix(act_.data(), n, f), w.down, f16_matrix(proj, n, d), stream_);
  }
  if (rows == 0) return;
  // The last layer's residual and the final norm, for the rows whose logits are wanted.
  add_rms_norm(x + (n - rows) * d, proj + (n - rows) * d, model_->output_norm(), rows, d, c.rms_eps, h, stream_);
  gemm(f16_matrix(h, rows, d), model_->output(), f16_matrix(logits_.data(), rows, c.vocab), stream_);
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
    embed_rows(model_->embedding(), tokens_.as<std::int32_t>(), m, c.d_model, x_.as<float>(), stream_);
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
    embed_rows(model_->embedding(), step, 1, c.d_model, x_.as<float>(), stream_);
    run_layers(1, Where{0, step + 2}, 1);
    argmax_token(f16_at(logits_, 0), c.vocab, step, step + 2, step + 1, stream_);  // the next step's input
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
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(host_step_ + kStepOut, step_.data(), 8, cudaMemcpyDeviceToHost, stream_));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  float ms = 0;
  LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, step_begin_, step_end_));
  decode_device_ms_ += ms;
  ++position_;
  if (host_step_[kStepOut + 1] != 0) lowbit::engine::fail_non_finite_logits(position_ - 1);
  return host_step_[kStepOut];
}

std::int64_t GpuSession::decode_greedy_run(std::int32_t token, std::int64_t steps,
                                           const std::function<bool(std::int32_t)>& keep) {
  if (steps <= 0) return 0;
  check_tokens(std::span<const std::int32_t>(&token, 1));
  LOWBIT_CHECK(steps <= max_tokens_ - position_, "decode: ", steps, " steps at position ", position_,
               " exceed the context the session was sized for (max_tokens = ", max_tokens_, ")");
  LOWBIT_CUDA_CHECK(cudaEventRecord(run_begin_, stream_));
  set_step_input(token);
  // Step k leaves its token in step_[0] (the next step's input) and, with the
  // non-finite flag, in host_step_[kStepOut + 2 * (k % 2)].
  auto enqueue = [&](std::int64_t k) {
    run_decode_step();
    const auto slot = static_cast<std::size_t>(k % 2);
    LOWBIT_CUDA_CHECK(
        cudaMemcpyAsync(host_step_ + kStepOut + 2 * slot, step_.data(), 8, cudaMemcpyDeviceToHost, stream_));
    LOWBIT_CUDA_CHECK(cudaEventRecord(token_ready_[slot], stream_));
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
    ++position_;
    const std::int32_t* out = host_step_ + kStepOut + 2 * (k % 2);
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
  const std::size_t bytes = cuda::kv::ring_backup_bytes(shape_);
  if (bytes == 0) return;  // full, window, int8, int4: the next append at position() rewrites all it wrote
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    cuda::kv::kv_restore_ring_slot(shape_, layers_[l], position_, ring_backup_.as<std::uint8_t>() + l * bytes, stream_);
  }
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace lowbit::engine
