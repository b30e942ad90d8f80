// A llama-family model for the CPU forward pass: its configuration from the GGUF
// metadata and its weights, validated by name, shape and type, in the form asked for
// (weight_matrix.h): decoded to f32 once at load (every type gguf/dequant.h decodes),
// the plain FP32 oracle, or blocks (the file's Q4_0 / Q4_1 / Q8_0 blocks as they are,
// the K-quants and Q5 types repacked exactly: cpu_block_repack.h; Q2_K and float types
// decoded to f32). The GPU path repacks the quantized blocks instead (gguf/repack.h).
//
// Architectures (general.architecture): llama and mistral (RoPE on consecutive pairs,
// for which llama.cpp's converter permutes Q and K), qwen2 (RoPE on pairs half the
// rotated dimensions apart, "NEOX", and biases on Q, K and V). Anything else is
// refused by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/gguf/reader.h"
#include "engine/weight_matrix.h"

namespace lowbit::engine {

// How RoPE pairs the channels of a head: (2i, 2i + 1), or (i, i + rope_dims / 2).
enum class RopeStyle { normal, neox };

struct ModelConfig {
  std::string architecture;          // general.architecture: "llama", "mistral" or "qwen2"
  std::int64_t n_layers = 0;         // <arch>.block_count
  std::int64_t d_model = 0;          // <arch>.embedding_length
  std::int64_t n_heads = 0;          // <arch>.attention.head_count
  std::int64_t n_kv_heads = 0;       // <arch>.attention.head_count_kv (default n_heads)
  std::int64_t head_dim = 0;         // <arch>.attention.key_length (default d_model / n_heads)
  std::int64_t ffn_dim = 0;          // <arch>.feed_forward_length
  std::int64_t vocab = 0;            // token_embd.weight dims[1]
  std::int64_t context_length = 0;  // <arch>.context_length (0 when absent)
  std::int64_t rope_dims = 0;        // <arch>.rope.dimension_count (default head_dim)
  double rope_base = 10000.0;        // <arch>.rope.freq_base
  float rms_eps = 1e-5f;             // <arch>.attention.layer_norm_rms_epsilon
  RopeStyle rope_style = RopeStyle::normal;  // by architecture
  bool qkv_bias = false;             // Q, K and V projections add biases (qwen2; llama when the file has them)
  // RoPE scaling as the file states it. Rotation angle of pair i at position p:
  //   p * rope_position_scale * rope_base^(-2i / rope_dims) / rope_freq_factors[i].
  // rope.scaling.type linear: rope_position_scale = 1 / rope.scaling.factor. llama3's
  // smoothing: the factors of the file's rope_freqs.weight tensor, or computed from
  // rope.scaling.{factor, original_context_length, low_freq_factor, high_freq_factor}
  // when rope.scaling.type is llama3 (llama3_rope_factors). Empty: all 1.
  double rope_position_scale = 1.0;
  std::vector<float> rope_freq_factors;  // [rope_dims / 2] or empty
  // <arch>.attention.sliding_window (0: none). Attention over the whole context equals
  // the model's sliding window only up to that many tokens: context_length is capped to it.
  std::int64_t sliding_window = 0;

  std::int64_t q_dim() const { return n_heads * head_dim; }
  std::int64_t kv_dim() const { return n_kv_heads * head_dim; }

  // Reads and validates (see validate()) the metadata of `file`. Throws lowbit::Error
  // naming an unknown architecture or RoPE scaling type.
  static ModelConfig from_gguf(const GgufFile& file);
  // Throws lowbit::Error naming the field for missing or absurd values: non-positive
  // sizes, heads not dividing d_model (without key_length), kv heads not dividing
  // heads, odd head_dim or rope_dims, rope_dims > head_dim, eps or base not positive.
  void validate() const;
  std::string describe() const;  // one line
};

struct LayerWeights {
  // Matrices are [out x in] row-major (in contiguous), as GGUF stores them.
  std::vector<float> attn_norm;         // [d_model]
  WeightMatrix wq, wk, wv, wo;          // [q_dim x d], [kv_dim x d], [kv_dim x d], [d x q_dim]
  std::vector<float> bq, bk, bv;        // [q_dim], [kv_dim], [kv_dim]; empty without qkv_bias
  std::vector<float> ffn_norm;          // [d_model]
  WeightMatrix w_gate, w_up;            // [ffn x d]
  WeightMatrix w_down;                  // [d x ffn]
};

// Llama 3's RoPE frequency smoothing (what llama.cpp's converter stores as
// rope_freqs.weight): for each of the rope_dims / 2 frequencies f = base^(-2i/dims),
// with wavelength w = 2 pi / f, the factor f is divided by: 1 where w < original /
// high_freq_factor, `factor` where w > original / low_freq_factor, in between
// 1 / ((1 - s) / factor + s) with s = (original / w - low) / (high - low).
std::vector<float> llama3_rope_factors(double base, std::int64_t rope_dims, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_context_length);

// The tensor `name` of `file`, checked against the dims the config implies ({in, out}
// for a matrix, GGUF order). Throws lowbit::Error naming it when absent or misshapen.
const GgufTensor& model_tensor(const GgufFile& file, const std::string& name, std::vector<std::int64_t> dims);

class Model {
 public:
  // Opens, validates and decodes a GGUF file. Throws lowbit::Error naming the file
  // (missing, not GGUF) or the tensor / key at fault.
  static Model load(const std::string& path, WeightForm form = WeightForm::f32);
  static Model from_gguf(const GgufFile& file, WeightForm form = WeightForm::f32);

  const ModelConfig& config() const { return config_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const WeightMatrix& token_embedding() const { return token_embd_; }  // [vocab x d]
  const std::vector<float>& output_norm() const { return output_norm_; }  // [d]
  // The output head [vocab x d]: output.weight, or the token embedding when tied.
  const WeightMatrix& output() const { return tied_output_ ? token_embd_ : output_; }
  bool tied_output() const { return tied_output_; }
  WeightForm weight_form() const { return form_; }
  std::size_t weight_bytes() const;  // bytes the weights hold in memory
  const std::string& source() const { return source_; }

 private:
  ModelConfig config_;
  std::vector<LayerWeights> layers_;
  WeightMatrix token_embd_, output_;
  std::vector<float> output_norm_;
  bool tied_output_ = false;
  WeightForm form_ = WeightForm::f32;
  std::string source_;
};

}  // namespace lowbit::engine
