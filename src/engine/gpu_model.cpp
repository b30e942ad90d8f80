#include "engine/gpu_model.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "engine/gguf/dequant.h"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"

namespace lowbit::engine {

namespace {

// Q4_K as the grouped INT4 form, which the GEMV and wgmma kernels read faster than the
// block form (engine/gguf/repack.h says what it rounds).
constexpr KQuantPacking kKQuants = KQuantPacking::groups;

void* copy_to_device(std::vector<DeviceBuffer>& buffers, const void* data, std::size_t bytes) {
  buffers.emplace_back(bytes);
  LOWBIT_CUDA_CHECK(cudaMemcpy(buffers.back().data(), data, bytes, cudaMemcpyHostToDevice));
  return buffers.back().data();
}

}  // namespace

PackedWeights GpuModel::upload(HostPackedWeights host) {
  PackedWeights w = host.view();
  for (TensorView* t : {&w.codes, &w.scales, &w.mins}) {
    if (!t->data) continue;
    t->data = copy_to_device(buffers_, t->data, t->span_bytes());
    t->device = Device::cuda;
  }
  return w;
}

StackedWeights GpuModel::upload_stacked(std::span<const GgufTensor* const> tensors) {
  StackedWeights out;
  for (std::size_t i = 0; i < tensors.size();) {
    std::size_t j = i + 1;
    while (j < tensors.size() && tensors[j]->type == tensors[i]->type) ++j;
    StackedWeights::Part part{upload(repack_ggml_weights(tensors.subspan(i, j - i), RowOrder::stacked, kKQuants)),
                              out.cols};
    out.cols += part.weights.n;
    out.parts.push_back(part);
    i = j;
  }
  return out;
}

const float* GpuModel::upload(const std::vector<float>& values) {
  return static_cast<const float*>(copy_to_device(buffers_, values.data(), values.size() * sizeof(float)));
}

const std::uint16_t* GpuModel::upload_f16(const std::vector<float>& values) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = formats::float_to_half(values[i]).bits;
  return static_cast<const std::uint16_t*>(copy_to_device(buffers_, bits.data(), bits.size() * 2));
}

GpuModel GpuModel::from_gguf(const GgufFile& file) {
  GpuModel m;
  m.config_ = ModelConfig::from_gguf(file);
  const ModelConfig& c = m.config_;
  const std::int64_t d = c.d_model;
  const GgufTensor& embd = model_tensor(file, "token_embd.weight", {d, c.vocab});
  m.embedding_ = m.upload(dequantize_tensor(embd));
  m.output_norm_ = m.upload(dequantize_tensor(model_tensor(file, "output_norm.weight", {d})));
  const GgufTensor* output = file.find_tensor("output.weight") ? &model_tensor(file, "output.weight", {d, c.vocab})
                                                               : &embd;  // tied
  m.output_ = m.upload(repack_ggml_weight(*output, kKQuants));
  m.layers_.resize(static_cast<std::size_t>(c.n_layers));
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    GpuLayer& g = m.layers_[static_cast<std::size_t>(l)];
    g.attn_norm = m.upload(dequantize_tensor(model_tensor(file, p + "attn_norm.weight", {d})));
    g.ffn_norm = m.upload(dequantize_tensor(model_tensor(file, p + "ffn_norm.weight", {d})));
    const GgufTensor* qkv[] = {&model_tensor(file, p + "attn_q.weight", {d, c.q_dim()}),
                               &model_tensor(file, p + "attn_k.weight", {d, c.kv_dim()}),
                               &model_tensor(file, p + "attn_v.weight", {d, c.kv_dim()})};
    g.qkv = m.upload_stacked(qkv);
    if (c.qkv_bias) {  // bq | bk | bv, the columns of Q | K | V
      std::vector<float> bias;
      for (const auto& [name, n] : {std::pair{"attn_q.bias", c.q_dim()}, std::pair{"attn_k.bias", c.kv_dim()},
                                    std::pair{"attn_v.bias", c.kv_dim()}}) {
        const std::vector<float> b = dequantize_tensor(model_tensor(file, p + name, {n}));
        bias.insert(bias.end(), b.begin(), b.end());
      }
      g.qkv.bias = m.upload_f16(bias);
    }
    g.wo = m.upload(repack_ggml_weight(model_tensor(file, p + "attn_output.weight", {c.q_dim(), d}), kKQuants));
    const GgufTensor* gate_up[] = {&model_tensor(file, p + "ffn_gate.weight", {d, c.ffn_dim}),
                                   &model_tensor(file, p + "ffn_up.weight", {d, c.ffn_dim})};
    // One type and ffn a multiple of 8 (every model in use): gate and up interleaved by
    // tiles of 8 rows, for the GEMV's SwiGLU epilogue (one launch fewer a layer in decode).
    if (gate_up[0]->type == gate_up[1]->type && c.ffn_dim % 8 == 0) {
      g.gate_up.parts.push_back({m.upload(repack_ggml_weights(gate_up, RowOrder::swiglu_tiles, kKQuants)), 0});
      g.gate_up.cols = 2 * c.ffn_dim;
      g.gate_up.swiglu_tiles = true;
    } else {
      g.gate_up = m.upload_stacked(gate_up);
    }
    g.down = m.upload(repack_ggml_weight(model_tensor(file, p + "ffn_down.weight", {c.ffn_dim, d}), kKQuants));
  }
  return m;
}

namespace {

std::size_t packed_bytes(const PackedWeights& w) {
  return w.codes.span_bytes() + w.scales.span_bytes() + (w.mins.data ? w.mins.span_bytes() : 0);
}

std::size_t packed_bytes(const StackedWeights& w) {
  std::size_t n = w.bias ? static_cast<std::size_t>(w.cols) * 2 : 0;
  for (const StackedWeights::Part& p : w.parts) n += packed_bytes(p.weights);
  return n;
}

}  // namespace

std::size_t GpuModel::decode_bytes() const {
  const auto d = static_cast<std::size_t>(config_.d_model);
  std::size_t n = packed_bytes(output_) + d * sizeof(float) * 2;  // output head, final norm, embedding row
  for (const GpuLayer& l : layers_) {
    n += packed_bytes(l.qkv) + packed_bytes(l.wo) + packed_bytes(l.gate_up) + packed_bytes(l.down) +
         2 * d * sizeof(float);
  }
  return n;
}

}  // namespace lowbit::engine
