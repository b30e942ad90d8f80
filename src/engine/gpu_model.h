// A llama-family model (llama, mistral, qwen2) on the GPU: the GGUF's quantized
// matrices repacked once for lowbit's weight-only GEMM (Q4_1 / Q4_0 / Q8_0 blocks are its
// W4A16 / W8A16 forms, ggml_repack.h) and never dequantized in memory; Q | K | V and
// gate | up stacked so that each is one GEMM. Norms and the embedding table (for row
// lookups) in f32, exactly the CPU reference's values; qwen2's Q / K / V biases in f16
// (the activations' type), added in the QKV GEMM's epilogue.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/device_buffer.h"
#include "engine/gguf/repack.h"
#include "engine/gguf/reader.h"
#include "engine/model.h"
#include "lowbit/weight_only.h"

namespace lowbit::engine {

using core::DeviceBuffer;

// Matrices that share the input, stacked along N: one GEMM per run of parts of one
// GGUF type (all of Q | K | V when they share it), each writing its columns of the
// output. With a bias, each GEMM adds its columns' share of it: the FP32 accumulator
// plus the f16 bias, rounded to f16 once (weight_only_gemm's epilogue).
struct StackedWeights {
  struct Part {
    PackedWeights weights;
    std::int64_t col0 = 0;  // first output column
  };
  std::vector<Part> parts;
  std::int64_t cols = 0;
  const std::uint16_t* bias = nullptr;  // f16 [cols] on the device, or null
  // gate | up as one part in alternating tiles of 8 rows (RowOrder::swiglu_tiles): the
  // GEMV's SwiGLU epilogue, and silu_mul's swiglu_tiles order after the other GEMMs.
  bool swiglu_tiles = false;
};

struct GpuLayer {
  StackedWeights qkv;      // [(q_dim + 2 kv_dim) x d_model]; bias bq | bk | bv with qkv_bias
  PackedWeights wo;        // [d_model x q_dim]
  StackedWeights gate_up;  // [2 ffn x d_model]: gate | up, or their tiles of 8 alternating
  PackedWeights down;      // [d_model x ffn]
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
};

class GpuModel {
 public:
  // Throws lowbit::Error naming the tensor when one is missing, misshapen, or of a
  // type without a weight-only form (the GPU path takes Q4_1, Q4_0 and Q8_0 matrices).
  static GpuModel from_gguf(const GgufFile& file);

  const ModelConfig& config() const { return config_; }
  const std::vector<GpuLayer>& layers() const { return layers_; }
  const float* embedding() const { return embedding_; }      // f32 [vocab x d_model]
  const float* output_norm() const { return output_norm_; }  // f32 [d_model]
  const PackedWeights& output() const { return output_; }    // [vocab x d_model]
  // Bytes of weights one decode step reads: every layer's matrices (codes, scales, mins),
  // norms and biases, the output head and one row of the embedding.
  std::size_t decode_bytes() const;

 private:
  PackedWeights upload(HostPackedWeights host);
  StackedWeights upload_stacked(std::span<const GgufTensor* const> tensors);
  const float* upload(const std::vector<float>& values);
  // values rounded to f16 (the bias of a GEMM whose activations are f16).
  const std::uint16_t* upload_f16(const std::vector<float>& values);

  ModelConfig config_;
  std::vector<GpuLayer> layers_;
  const float* embedding_ = nullptr;
  const float* output_norm_ = nullptr;
  PackedWeights output_;
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace lowbit::engine
