#include "engine/gpu_forward.h"

#include <algorithm>

#include "cuda/kv/kv_cuda.h"
#include "cuda/kv/paged_kv_cuda.h"
#include "cuda/model/model_cuda.h"
#include "cuda/weight_only/weight_only_cuda.h"
#include "engine/rope_table.h"
#include "lowbit/cuda_check.h"

namespace lowbit::engine {

namespace {

TensorView f16_matrix(void* data, std::int64_t rows, std::int64_t cols) {
  return TensorView::matrix(data, DType::f16, Device::cuda, rows, cols);
}

// out [n x w.cols] (f16, row stride w.cols) = x W^T (+ w.bias), one GEMM per part, each
// adding its columns of the bias in its epilogue.
void stacked_gemm(const TensorView& x, const StackedWeights& w, std::uint16_t* out, cudaStream_t stream) {
  for (const StackedWeights::Part& p : w.parts) {
    const TensorView bias = w.bias ? TensorView::vector(const_cast<std::uint16_t*>(w.bias) + p.col0, DType::f16,
                                                        Device::cuda, p.weights.n)
                                   : TensorView{};
    gpu_gemm(x, p.weights, TensorView::matrix(out + p.col0, DType::f16, Device::cuda, x.rows(), p.weights.n, w.cols),
             stream, bias);
  }
}

}  // namespace

GpuActivations::GpuActivations(const ModelConfig& c, std::int64_t n) : rows(n) {
  const auto r = static_cast<std::size_t>(n);
  const auto d = static_cast<std::size_t>(c.d_model), f = static_cast<std::size_t>(c.ffn_dim);
  const auto qkv_cols = static_cast<std::size_t>(c.q_dim() + 2 * c.kv_dim());
  x = core::DeviceBuffer(r * d * 4);
  h = core::DeviceBuffer(r * d * 2);
  qkv = core::DeviceBuffer(r * qkv_cols * 2);
  att = core::DeviceBuffer(r * static_cast<std::size_t>(c.q_dim()) * 2);
  proj = core::DeviceBuffer(r * d * 2);
  gu = core::DeviceBuffer(r * 2 * f * 2);
  act = core::DeviceBuffer(r * f * 2);
}

GpuRope::GpuRope(const ModelConfig& c, std::int64_t positions) {
  // The CPU reference's angle table.
  const RopeTable table = rope_table(c, positions);
  cos = core::DeviceBuffer(table.cos.size() * 4);
  sin = core::DeviceBuffer(table.sin.size() * 4);
  LOWBIT_CUDA_CHECK(cudaMemcpy(cos.data(), table.cos.data(), cos.bytes(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(sin.data(), table.sin.data(), sin.bytes(), cudaMemcpyHostToDevice));
}

GpuAttentionScratch::GpuAttentionScratch(const core::KvLayerShape& shape, std::int64_t n_heads,
                                         std::int64_t max_length, std::int64_t max_rows) {
  constexpr std::size_t kRowsBudget = std::size_t{64} << 20;
  decode = core::DeviceBuffer(cuda::kv::kv_attention_workspace_bound(shape, n_heads, max_length));
  LOWBIT_CUDA_CHECK(cudaMemset(decode.data(), 0, decode.bytes()));
  const std::size_t per_row = cuda::kv::kv_attention_rows_workspace(shape, n_heads, 1, max_length);
  const auto rows_a_launch =
      std::clamp<std::int64_t>(static_cast<std::int64_t>(kRowsBudget / per_row), 1, std::max<std::int64_t>(max_rows, 1));
  rows = core::DeviceBuffer(per_row * static_cast<std::size_t>(rows_a_launch));
  snapshot = core::DeviceBuffer(cuda::kv::ring_snapshot_bytes(shape));
}

void gpu_gemm(const TensorView& x, const PackedWeights& w, const TensorView& out, cudaStream_t stream,
              const TensorView& bias) {
  cuda::weight_only::weight_only_gemm(x, w, bias, out, stream);
}

void run_gpu_layers(const GpuModel& model, GpuActivations& a, std::int64_t n,
                    const std::function<void(std::int64_t layer)>& attend, cudaStream_t stream,
                    const PartMark& mark) {
  const ModelConfig& c = model.config();
  const std::int64_t d = c.d_model, f = c.ffn_dim;
  float* x = a.x.as<float>();
  auto* h = a.h.as<std::uint16_t>();
  auto* proj = a.proj.as<std::uint16_t>();
  auto begin = [&](StepPart part) {
    if (mark) mark(part);
  };
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const GpuLayer& w = model.layers()[static_cast<std::size_t>(l)];
    begin(StepPart::norm);
    cuda::model::add_rms_norm(x, l == 0 ? nullptr : proj, w.attn_norm, n, d, c.rms_eps, h, stream);
    begin(StepPart::qkv);
    stacked_gemm(f16_matrix(h, n, d), w.qkv, a.qkv.as<std::uint16_t>(), stream);
    begin(StepPart::attention);
    attend(l);
    begin(StepPart::o_proj);
    gpu_gemm(f16_matrix(a.att.data(), n, c.q_dim()), w.wo, f16_matrix(proj, n, d), stream);
    begin(StepPart::norm);
    cuda::model::add_rms_norm(x, proj, w.ffn_norm, n, d, c.rms_eps, h, stream);
    begin(StepPart::gate_up);
    const TensorView hv = f16_matrix(h, n, d);
    if (w.gate_up.swiglu_tiles && cuda::weight_only::swiglu_epilogue_pays(hv, w.gate_up.parts[0].weights)) {
      // SwiGLU in the GEMV's epilogue: one launch fewer a layer
      cuda::weight_only::weight_only_gemm_swiglu(hv, w.gate_up.parts[0].weights, f16_matrix(a.act.data(), n, f),
                                                 stream);
    } else {
      stacked_gemm(hv, w.gate_up, a.gu.as<std::uint16_t>(), stream);
      begin(StepPart::swiglu);
      cuda::model::silu_mul(a.gu.as<std::uint16_t>(), n, f, a.act.as<std::uint16_t>(), stream, w.gate_up.swiglu_tiles);
    }
    begin(StepPart::down);
    gpu_gemm(f16_matrix(a.act.data(), n, f), w.down, f16_matrix(proj, n, d), stream);
  }
}

void gpu_output_logits(const GpuModel& model, float* x, const std::uint16_t* proj, std::int64_t rows,
                       std::uint16_t* h, void* logits, cudaStream_t stream) {
  const ModelConfig& c = model.config();
  cuda::model::add_rms_norm(x, proj, model.output_norm(), rows, c.d_model, c.rms_eps, h, stream);
  gpu_gemm(f16_matrix(h, rows, c.d_model), model.output(), f16_matrix(logits, rows, c.vocab), stream);
}

namespace {

// A chunk's rows as the QKV GEMM writes them, and its RoPE tables.
cuda::kv::ChunkRows chunk_rows(const ModelConfig& c, std::uint16_t* qkv, std::int64_t n, std::int64_t pos0) {
  const std::int64_t ld = c.q_dim() + 2 * c.kv_dim();
  return cuda::kv::ChunkRows{qkv, n, ld, c.q_dim(), c.q_dim() + c.kv_dim(), pos0};
}
cuda::kv::AppendRope rope_tables(const ModelConfig& c, const GpuRope& rope, bool hadamard) {
  return cuda::kv::AppendRope{rope.cos.as<float>(), rope.sin.as<float>(), c.rope_dims, nullptr, c.n_heads,
                              hadamard,             c.rope_style == RopeStyle::neox};
}

}  // namespace

void attend_decode_row(const ModelConfig& c, const SequenceLayer& s, std::uint16_t* qkv_row,
                       const std::int32_t* device_pos, std::int64_t max_length, std::uint16_t* att_row,
                       void* workspace, std::size_t workspace_bytes, void* ring_backup, bool history_complete,
                       cudaStream_t stream) {
  const std::uint16_t* k = qkv_row + c.q_dim();
  const std::uint16_t* v = k + c.kv_dim();
  // RoPE rides on the append: K rotated as it is stored, Q in place (qwen2: NEOX pairs).
  // With --kv-rotate k, K and Q are then rotated by the Hadamard transform.
  cuda::kv::AppendRope rope = rope_tables(c, s.rope, s.hadamard);
  rope.q = qkv_row;
  cuda::kv::kv_append_at(s.shape, s.layer, device_pos, k, v, stream, &rope, history_complete, ring_backup);
  cuda::kv::kv_attention_at(s.shape, s.layer, device_pos, max_length, qkv_row, c.n_heads, att_row, DType::f16,
                            workspace, workspace_bytes, stream, history_complete);
}

void attend_chunk(const ModelConfig& c, const SequenceLayer& s, std::uint16_t* qkv, std::int64_t n, std::int64_t pos0,
                  std::uint16_t* att, void* snapshot, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream) {
  // RoPE, the appends and the attention of every row at once, each row seeing what it
  // would one at a time (cuda/kv/kv_cuda.h, ChunkRows).
  const cuda::kv::ChunkRows chunk = chunk_rows(c, qkv, n, pos0);
  cuda::kv::rope_rows(s.shape, chunk, rope_tables(c, s.rope, s.hadamard), stream);
  if (s.shape.key_block > 0) {  // key blocks: appended in order, attended whole (flash) or in pieces
    cuda::kv::kv_prefill_key_blocks(s.shape, s.layer, chunk, snapshot, c.n_heads, att, c.q_dim(), workspace,
                                    workspace_bytes, stream);
    return;
  }
  cuda::kv::kv_append_rows(s.shape, s.layer, chunk, snapshot, stream);
  cuda::kv::kv_attention_rows(s.shape, s.layer, chunk, snapshot, c.n_heads, att, c.q_dim(), workspace,
                              workspace_bytes, stream);
}

void attend_chunk_paged(const ModelConfig& c, const PagedSequenceLayer& s, std::uint16_t* qkv, std::int64_t n,
                        std::int64_t pos0, std::uint16_t* att, void* snapshot, void* workspace,
                        std::size_t workspace_bytes, cudaStream_t stream) {
  const cuda::kv::ChunkRows chunk = chunk_rows(c, qkv, n, pos0);
  cuda::kv::rope_rows(s.layout.shape, chunk, rope_tables(c, s.rope, s.hadamard), stream);
  if (s.layout.shape.key_block > 0) {  // key blocks: in pieces (the simt rows form over pages)
    cuda::kv::paged_kv_prefill_key_blocks(s.layout, s.layer, s.slot, s.tables, chunk, snapshot, c.n_heads, att,
                                          c.q_dim(), workspace, workspace_bytes, stream, s.status);
    return;
  }
  cuda::kv::paged_kv_append_rows(s.layout, s.layer, s.slot, s.tables, chunk, snapshot, stream, s.status);
  cuda::kv::paged_kv_attention_rows(s.layout, s.layer, s.slot, s.tables, chunk, snapshot, c.n_heads, att, c.q_dim(),
                                    workspace, workspace_bytes, stream, s.status);
}

void attend_decode_rows(const ModelConfig& c, const core::KvPageLayout& layout, const core::KvPagedLayer& layer,
                        const core::KvSeqDesc* descs, const std::int32_t* tables, std::int32_t* status,
                        std::int64_t batch, std::int64_t max_length, const GpuRope& rope, bool hadamard,
                        std::uint16_t* qkv, std::uint16_t* att, void* workspace, std::size_t workspace_bytes,
                        bool history_complete, cudaStream_t stream) {
  const cuda::kv::PagedBatch b{descs, tables, batch, max_length, status};
  const cuda::kv::BatchRows rows{qkv, c.q_dim() + 2 * c.kv_dim(), c.q_dim(), c.q_dim() + c.kv_dim()};
  const cuda::kv::AppendRope r = rope_tables(c, rope, hadamard);
  cuda::kv::paged_kv_append(layout, layer, b, rows, c.n_heads, stream, &r, history_complete);
  cuda::kv::paged_kv_attention(layout, layer, b, rows, c.n_heads, att, c.q_dim(), DType::f16, workspace,
                               workspace_bytes, stream, history_complete);
}

}  // namespace lowbit::engine
