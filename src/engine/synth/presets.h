// The shapes `lowbit model synth` writes: real models' architectures and sizes (the
// weights are random), plus a tiny one for tests. The vocabulary is not part of a
// preset: it is the tokenizer's that the file copies.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace lowbit::engine {

struct SynthPreset {
  std::string_view name;          // as --preset takes it
  std::string_view architecture;  // general.architecture: "llama" or "qwen2"
  std::string_view shape_of;      // the model whose shape it is
  std::int64_t d_model, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim;
  double rope_base;
  std::int64_t context_length;
  float rms_eps;
  bool qkv_bias;  // Q, K and V projections carry biases (qwen2)
};

std::span<const SynthPreset> synth_presets();

// Throws lowbit::Error naming `name` and listing the presets when there is none by it.
const SynthPreset& find_synth_preset(std::string_view name);

}  // namespace lowbit::engine
