// A model of a preset's shape with random weights, as a GGUF file that lowbit and
// llama.cpp both load: the preset's architecture and sizes, the tokenizer (every
// tokenizer.* key) copied from another GGUF file, the token embedding in Q8_0 (tied
// to the output, as llama.cpp's Q4_1 files of small models have it), norms (and
// biases) in F32, every matrix in the chosen type (or mix: SynthTypes). Weights are drawn straight in block
// form (random_blocks.h) with standard deviation 1/sqrt(fan_in) for matrices and
// 1/sqrt(d_model) for the embedding, norms near 1: activations stay finite through
// every layer. The bytes are a function of (preset, type, seed, tokenizer) alone.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/reader.h"
#include "engine/gguf/writer.h"
#include "engine/model.h"
#include "engine/synth/presets.h"

namespace lowbit::engine {

// The matrix types synth writes, and the type named `name` among them (throws
// lowbit::Error naming it and listing them).
std::span<const GgmlType> synth_matrix_types();
GgmlType find_synth_matrix_type(std::string_view name);

// What synth writes the matrices in: one type, or one of llama.cpp's _M mixes, Q4_K_M (the
// file type most GGUF downloads have) or Q5_K_M: Q4_K or Q5_K, with attn_v and ffn_down in
// Q6_K in the layers its quantizer gives more bits (the first and last eighth and every
// third between).
struct SynthTypes {
  SynthTypes(GgmlType type) : matrices(type) {}  // one type for every matrix
  static SynthTypes k_m_mix_of(GgmlType base);    // base: Q4_K or Q5_K
  GgmlType matrices;
  bool k_m_mix = false;
  std::string name() const;
};
// --type's names: the matrix types, then the mixes; and the one named `name` (throws
// lowbit::Error naming it and listing them).
std::vector<std::string> synth_type_names();
SynthTypes find_synth_types(std::string_view name);

class SynthModel {
 public:
  // Throws lowbit::Error when the tokenizer source has no tokenizer.ggml.tokens, or
  // the type is not a synth matrix type.
  SynthModel(const SynthPreset& preset, SynthTypes types, std::uint64_t seed, const GgufFile& tokenizer_source);

  const ModelConfig& config() const { return config_; }
  const GgufWriter& layout() const { return writer_; }
  std::uint64_t file_size() const { return file_size_; }

  // Tensor `index`'s bytes (exactly its byte_size), generated in parallel.
  void fill(std::size_t index, std::span<std::uint8_t> out) const;

  std::vector<std::uint8_t> to_bytes() const;
  // The file at `path`, whole or not at all (GgufWriter::write). `progress` is called
  // after each tensor with the tensors and bytes done.
  void write(const std::string& path, bool overwrite,
             const std::function<void(std::size_t tensors, std::uint64_t bytes)>& progress) const;

 private:
  struct Values {
    float mean, stddev;
  };
  void add(const std::string& name, GgmlType type, std::vector<std::uint64_t> dims, Values values);

  ModelConfig config_;
  std::uint64_t seed_;
  GgufWriter writer_;
  std::vector<Values> values_;  // per tensor
  std::uint64_t file_size_ = 0;
};

}  // namespace lowbit::engine
