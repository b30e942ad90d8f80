#include "engine/synth/synth_model.h"

#include <array>
#include <cmath>

#include "engine/synth/random_blocks.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

constexpr std::array<GgmlType, 11> k_matrix_types{GgmlType::q4_1, GgmlType::q4_0, GgmlType::q8_0, GgmlType::f16,
                                                   GgmlType::q5_0, GgmlType::q5_1, GgmlType::q2_k, GgmlType::q3_k,
                                                   GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

// llama.cpp's llama_ftype of a file whose matrices are of one type (the K-quants' "S"
// mixes: every matrix in the type).
std::uint32_t file_type(GgmlType matrix_type) {
  switch (matrix_type) {
    case GgmlType::f16: return 1;
    case GgmlType::q4_0: return 2;
    case GgmlType::q4_1: return 3;
    case GgmlType::q8_0: return 7;
    case GgmlType::q5_0: return 8;
    case GgmlType::q5_1: return 9;
    case GgmlType::q2_k: return 10;
    case GgmlType::q3_k: return 11;  // Q3_K_S: every matrix Q3_K
    case GgmlType::q4_k: return 14;
    case GgmlType::q5_k: return 16;
    case GgmlType::q6_k: return 18;
    default: break;
  }
  LOWBIT_FAIL("synth: no file type for ", ggml_type_name(matrix_type));
}

// The type a matrix of rows of `in` elements takes: the chosen one, or, where `in` is
// not a whole number of its blocks (K-quants: 256), the type llama.cpp's quantizer
// falls back to (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0). For Q2_K and Q3_K it writes
// IQ4_NL, which lowbit does not read: Q4_0 (4.5 bits, symmetric blocks of 32, linear
// levels) stands in for it.
GgmlType matrix_type_for(GgmlType type, std::int64_t in) {
  if (in % ggml_type_info(type).block_elements == 0) return type;
  switch (type) {
    case GgmlType::q2_k:
    case GgmlType::q3_k: return GgmlType::q4_0;
    case GgmlType::q4_k: return GgmlType::q5_0;
    case GgmlType::q5_k: return GgmlType::q5_1;
    case GgmlType::q6_k: return GgmlType::q8_0;
    default: break;
  }
  LOWBIT_FAIL("synth: rows of ", in, " elements are not whole ", ggml_type_name(type), " blocks");
}

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// llama.cpp's use_more_bits: the layers whose attn_v and ffn_down a _M mix gives more bits.
bool more_bits_layer(std::int64_t layer, std::int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// llama.cpp's _M mixes: the base type, the mix's name and its general.file_type
// (LLAMA_FTYPE_MOSTLY_Q4_K_M, _Q5_K_M).
struct KMMix {
  GgmlType base;
  std::string_view name;
  std::uint32_t file_type;
};
constexpr KMMix k_m_mixes[] = {{GgmlType::q4_k, "Q4_K_M", 15}, {GgmlType::q5_k, "Q5_K_M", 17}};

const KMMix& k_m_mix_for(GgmlType base) {
  for (const KMMix& mix : k_m_mixes) {
    if (mix.base == base) return mix;
  }
  LOWBIT_FAIL("synth: no _M mix has base type ", ggml_type_name(base), " (Q4_K or Q5_K)");
}

}  // namespace

SynthTypes SynthTypes::k_m_mix_of(GgmlType base) {
  k_m_mix_for(base);
  SynthTypes t(base);
  t.k_m_mix = true;
  return t;
}

std::string SynthTypes::name() const {
  return k_m_mix ? std::string(k_m_mix_for(matrices).name) : std::string(ggml_type_name(matrices));
}

std::vector<std::string> synth_type_names() {
  std::vector<std::string> names;
  for (const GgmlType type : k_matrix_types) names.emplace_back(ggml_type_name(type));
  for (const KMMix& mix : k_m_mixes) names.emplace_back(mix.name);
  return names;
}

SynthTypes find_synth_types(std::string_view name) {
  for (const KMMix& mix : k_m_mixes) {
    if (name == mix.name) return SynthTypes::k_m_mix_of(mix.base);
  }
  for (const GgmlType type : k_matrix_types) {
    if (ggml_type_name(type) == name) return type;
  }
  std::string names;
  for (const std::string& n : synth_type_names()) names += (names.empty() ? "" : ", ") + n;
  LOWBIT_FAIL("model type '", name, "' is not one synth writes (types: ", names, ")");
}

std::span<const GgmlType> synth_matrix_types() { return k_matrix_types; }

GgmlType find_synth_matrix_type(std::string_view name) {
  std::string names;
  for (const GgmlType type : k_matrix_types) {
    if (ggml_type_name(type) == name) return type;
    names += (names.empty() ? "" : ", ") + std::string(ggml_type_name(type));
  }
  LOWBIT_FAIL("model type '", name, "' is not one synth writes (types: ", names, ")");
}

SynthModel::SynthModel(const SynthPreset& preset, SynthTypes types, std::uint64_t seed,
                       const GgufFile& tokenizer_source)
    : seed_(seed) {
  const GgmlType matrix_type = types.matrices;
  find_synth_matrix_type(ggml_type_name(matrix_type));
  const GgufValue* tokens = tokenizer_source.find_metadata("tokenizer.ggml.tokens");
  LOWBIT_CHECK(tokens != nullptr && tokens->type() == GgufValueType::array && tokens->array_size() > 0,
               "synth: '", tokenizer_source.source(), "' has no tokenizer (tokenizer.ggml.tokens) to copy");
  ModelConfig& c = config_;
  c.architecture = std::string(preset.architecture);
  c.n_layers = preset.n_layers;
  c.d_model = preset.d_model;
  c.n_heads = preset.n_heads;
  c.n_kv_heads = preset.n_kv_heads;
  c.head_dim = preset.head_dim;
  c.ffn_dim = preset.ffn_dim;
  c.vocab = static_cast<std::int64_t>(tokens->array_size());
  c.context_length = preset.context_length;
  c.rope_dims = preset.head_dim;
  c.rope_base = preset.rope_base;
  c.rms_eps = preset.rms_eps;
  c.validate();

  using V = GgufMetadataValue;
  const std::string a = c.architecture + ".";
  writer_.add("general.architecture", V::string(c.architecture));
  writer_.add("general.name", V::string("lowbit synthetic " + std::string(preset.name) + " (" +
                                        std::string(preset.shape_of) + " shape, random weights)"));
  writer_.add("general.file_type", V::u32(types.k_m_mix ? k_m_mix_for(matrix_type).file_type : file_type(matrix_type)));
  writer_.add("general.quantization_version", V::u32(2));
  writer_.add(a + "vocab_size", V::u32(static_cast<std::uint32_t>(c.vocab)));
  writer_.add(a + "context_length", V::u32(static_cast<std::uint32_t>(c.context_length)));
  writer_.add(a + "embedding_length", V::u32(static_cast<std::uint32_t>(c.d_model)));
  writer_.add(a + "block_count", V::u32(static_cast<std::uint32_t>(c.n_layers)));
  writer_.add(a + "feed_forward_length", V::u32(static_cast<std::uint32_t>(c.ffn_dim)));
  writer_.add(a + "attention.head_count", V::u32(static_cast<std::uint32_t>(c.n_heads)));
  writer_.add(a + "attention.head_count_kv", V::u32(static_cast<std::uint32_t>(c.n_kv_heads)));
  writer_.add(a + "attention.key_length", V::u32(static_cast<std::uint32_t>(c.head_dim)));
  writer_.add(a + "attention.value_length", V::u32(static_cast<std::uint32_t>(c.head_dim)));
  writer_.add(a + "attention.layer_norm_rms_epsilon", V::f32(c.rms_eps));
  writer_.add(a + "rope.freq_base", V::f32(static_cast<float>(c.rope_base)));
  writer_.add(a + "rope.dimension_count", V::u32(static_cast<std::uint32_t>(c.rope_dims)));
  for (const GgufValue& v : tokenizer_source.metadata()) {
    if (v.key().starts_with("tokenizer.")) writer_.copy(v);
  }

  const auto matrix = [&](const std::string& name, std::int64_t in, std::int64_t out, bool more_bits = false) {
    const GgmlType type = types.k_m_mix && more_bits ? GgmlType::q6_k : matrix_type;
    add(name, matrix_type_for(type, in), {u(in), u(out)}, {0.0f, 1.0f / std::sqrt(static_cast<float>(in))});
  };
  const Values norm{1.0f, 0.05f}, bias{0.0f, 0.1f};
  add("token_embd.weight", GgmlType::q8_0, {u(c.d_model), u(c.vocab)},
      {0.0f, 1.0f / std::sqrt(static_cast<float>(c.d_model))});
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", GgmlType::f32, {u(c.d_model)}, norm);
    matrix(p + "attn_q.weight", c.d_model, c.q_dim());
    if (preset.qkv_bias) add(p + "attn_q.bias", GgmlType::f32, {u(c.q_dim())}, bias);
    matrix(p + "attn_k.weight", c.d_model, c.kv_dim());
    if (preset.qkv_bias) add(p + "attn_k.bias", GgmlType::f32, {u(c.kv_dim())}, bias);
    const bool more_bits = more_bits_layer(l, c.n_layers);
    matrix(p + "attn_v.weight", c.d_model, c.kv_dim(), more_bits);
    if (preset.qkv_bias) add(p + "attn_v.bias", GgmlType::f32, {u(c.kv_dim())}, bias);
    matrix(p + "attn_output.weight", c.q_dim(), c.d_model);
    add(p + "ffn_norm.weight", GgmlType::f32, {u(c.d_model)}, norm);
    matrix(p + "ffn_gate.weight", c.d_model, c.ffn_dim);
    matrix(p + "ffn_up.weight", c.d_model, c.ffn_dim);
    matrix(p + "ffn_down.weight", c.ffn_dim, c.d_model, more_bits);
  }
  add("output_norm.weight", GgmlType::f32, {u(c.d_model)}, norm);
  file_size_ = writer_.file_size();
}

void SynthModel::add(const std::string& name, GgmlType type, std::vector<std::uint64_t> dims, Values values) {
  writer_.add_tensor(name, type, std::move(dims));
  values_.push_back(values);
}

void SynthModel::fill(std::size_t index, std::span<std::uint8_t> out) const {
  const GgufWriter::Tensor& t = writer_.tensors()[index];
  LOWBIT_CHECK(out.size() == t.byte_size, "synth: tensor '", t.name, "' takes ", t.byte_size, " bytes, not ",
               out.size());
  // Each tensor its own stream: the seed and the tensor's index.
  const std::uint64_t tensor_seed = seed_ * 0x100000001b3ull + index + 1;
  fill_random_blocks(t.type, values_[index].mean, values_[index].stddev, tensor_seed, out);
}

std::vector<std::uint8_t> SynthModel::to_bytes() const {
  return writer_.to_bytes([this](std::size_t i, std::span<std::uint8_t> out) { fill(i, out); });
}

void SynthModel::write(const std::string& path, bool overwrite,
                       const std::function<void(std::size_t, std::uint64_t)>& progress) const {
  std::uint64_t done = 0;
  writer_.write(
      path,
      [&](std::size_t i, std::span<std::uint8_t> out) {
        fill(i, out);
        done += out.size();
        if (progress) progress(i + 1, done);
      },
      overwrite);
}

}  // namespace lowbit::engine
