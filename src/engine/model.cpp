#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string_view>

#include "engine/gguf/dequant.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

// Sizes are bounded so that products like vocab * d_model cannot overflow and a
// hostile file cannot make us allocate terabytes before any tensor check.
constexpr std::int64_t k_max_dim = std::int64_t{1} << 20;
constexpr std::int64_t k_max_layers = 4096;

std::int64_t get_int(const GgufFile& file, const std::string& key, std::int64_t fallback, bool required) {
  const GgufValue* v = file.find_metadata(key);
  if (!v) {
    LOWBIT_CHECK(!required, "model metadata: missing key '", key, "'");
    return fallback;
  }
  return static_cast<std::int64_t>(v->as_u64());
}

double get_float(const GgufFile& file, const std::string& key, double fallback) {
  const GgufValue* v = file.find_metadata(key);
  return v ? v->as_f64() : fallback;
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig c;
  const GgufValue* arch = file.find_metadata("general.architecture");
  LOWBIT_CHECK(arch != nullptr, "model metadata: missing key 'general.architecture'");
  c.architecture = std::string(arch->as_string());
  LOWBIT_CHECK(c.architecture == "llama", "model: architecture '", c.architecture,
               "' is not supported (expected a llama-family model, general.architecture = llama)");
  const std::string p = c.architecture + ".";
  c.n_layers = get_int(file, p + "block_count", 0, true);
  c.d_model = get_int(file, p + "embedding_length", 0, true);
  c.n_heads = get_int(file, p + "attention.head_count", 0, true);
  c.n_kv_heads = get_int(file, p + "attention.head_count_kv", c.n_heads, false);
  c.ffn_dim = get_int(file, p + "feed_forward_length", 0, true);
  c.context_length = get_int(file, p + "context_length", 0, false);
  const std::int64_t default_head_dim = c.n_heads > 0 && c.d_model % c.n_heads == 0 ? c.d_model / c.n_heads : 0;
  if (c.n_heads > 0 && !file.find_metadata(p + "attention.key_length")) {
    LOWBIT_CHECK(c.d_model % c.n_heads == 0, "model metadata: ", p, "attention.head_count = ", c.n_heads,
                 " does not divide ", p, "embedding_length = ", c.d_model);
  }
  c.head_dim = get_int(file, p + "attention.key_length", default_head_dim, false);
  const std::int64_t value_length = get_int(file, p + "attention.value_length", c.head_dim, false);
  LOWBIT_CHECK(value_length == c.head_dim, "model metadata: ", p, "attention.value_length = ", value_length,
               " differs from key_length = ", c.head_dim, " (not supported)");
  c.rope_dims = get_int(file, p + "rope.dimension_count", c.head_dim, false);
  c.rope_base = get_float(file, p + "rope.freq_base", 10000.0);
  c.rms_eps = static_cast<float>(get_float(file, p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (const GgufValue* scaling = file.find_metadata(p + "rope.scaling.type")) {
    const std::string_view type = scaling->as_string();
    LOWBIT_CHECK(type == "none", "model metadata: ", p, "rope.scaling.type = '", type, "' is not supported");
  }
  const GgufTensor* embd = file.find_tensor("token_embd.weight");
  LOWBIT_CHECK(embd != nullptr, "model: missing tensor 'token_embd.weight'");
  LOWBIT_CHECK(embd->n_dims == 2, "model: tensor 'token_embd.weight' has ", embd->n_dims, " dims, expected 2");
  LOWBIT_CHECK(embd->dims[1] <= static_cast<std::uint64_t>(64 * k_max_dim), "model: tensor 'token_embd.weight' has ",
               embd->dims[1], " rows (vocab), expected at most ", 64 * k_max_dim);
  c.vocab = static_cast<std::int64_t>(embd->dims[1]);
  c.validate();
  return c;
}

void ModelConfig::validate() const {
  auto in_range = [](std::int64_t v, std::int64_t hi) { return v > 0 && v <= hi; };
  LOWBIT_CHECK(in_range(n_layers, k_max_layers), "model config: block_count = ", n_layers, ", expected 1..", k_max_layers);
  LOWBIT_CHECK(in_range(d_model, k_max_dim), "model config: embedding_length = ", d_model, ", expected 1..", k_max_dim);
  LOWBIT_CHECK(in_range(n_heads, d_model), "model config: head_count = ", n_heads, ", expected 1..", d_model);
  LOWBIT_CHECK(in_range(n_kv_heads, n_heads), "model config: head_count_kv = ", n_kv_heads, ", expected 1..head_count (",
               n_heads, ")");
  LOWBIT_CHECK(n_heads % n_kv_heads == 0, "model config: head_count_kv = ", n_kv_heads, " does not divide head_count = ",
               n_heads);
  LOWBIT_CHECK(in_range(head_dim, k_max_dim), "model config: head_dim = ", head_dim, ", expected 1..", k_max_dim);
  LOWBIT_CHECK(head_dim % 2 == 0, "model config: head_dim = ", head_dim, " is odd (RoPE rotates pairs)");
  LOWBIT_CHECK(n_heads * head_dim <= 4 * k_max_dim, "model config: head_count * head_dim = ", n_heads * head_dim,
               " is too large");
  LOWBIT_CHECK(rope_dims > 0 && rope_dims <= head_dim && rope_dims % 2 == 0, "model config: rope.dimension_count = ",
               rope_dims, ", expected an even number in 2..head_dim (", head_dim, ")");
  LOWBIT_CHECK(in_range(ffn_dim, 16 * k_max_dim), "model config: feed_forward_length = ", ffn_dim, ", expected 1..",
               16 * k_max_dim);
  LOWBIT_CHECK(in_range(vocab, 64 * k_max_dim), "model config: vocab = ", vocab, ", expected 1..", 64 * k_max_dim);
  LOWBIT_CHECK(context_length >= 0, "model config: context_length = ", context_length, " is negative");
  LOWBIT_CHECK(std::isfinite(rope_base) && rope_base > 1.0, "model config: rope.freq_base = ", rope_base,
               ", expected a finite value > 1");
  LOWBIT_CHECK(std::isfinite(rms_eps) && rms_eps > 0.0f && rms_eps < 1.0f,
               "model config: attention.layer_norm_rms_epsilon = ", rms_eps, ", expected 0 < eps < 1");
}

std::string ModelConfig::describe() const {
  std::ostringstream out;
  out << architecture << ": " << n_layers << " layers, d_model " << d_model << ", heads " << n_heads << "/"
      << n_kv_heads << " x " << head_dim << ", ffn " << ffn_dim << ", vocab " << vocab << ", rope base " << rope_base
      << " dims " << rope_dims << ", eps " << rms_eps;
  return out.str();
}

namespace {

std::vector<float> load_tensor(const GgufFile& file, const std::string& name, std::vector<std::int64_t> dims) {
  return dequantize_tensor(model_tensor(file, name, std::move(dims)));
}

WeightMatrix load_matrix(const GgufFile& file, const std::string& name, std::vector<std::int64_t> dims,
                         WeightForm form) {
  return WeightMatrix::load(model_tensor(file, name, std::move(dims)), form);
}

}  // namespace

const GgufTensor& model_tensor(const GgufFile& file, const std::string& name, std::vector<std::int64_t> dims) {
  const GgufTensor* t = file.find_tensor(name);
  LOWBIT_CHECK(t != nullptr, "model: missing tensor '", name, "'");
  bool same = t->n_dims == dims.size();
  for (std::size_t i = 0; same && i < dims.size(); ++i) same = t->dims[i] == static_cast<std::uint64_t>(dims[i]);
  if (!same) {
    std::ostringstream got, want;
    for (std::uint32_t i = 0; i < t->n_dims; ++i) got << (i ? " x " : "") << t->dims[i];
    for (std::size_t i = 0; i < dims.size(); ++i) want << (i ? " x " : "") << dims[i];
    LOWBIT_FAIL("model: tensor '", name, "' has dims [", got.str(), "], expected [", want.str(), "] from the config");
  }
  return *t;
}

Model Model::from_gguf(const GgufFile& file, WeightForm form) {
  Model m;
  m.source_ = file.source();
  m.form_ = form;
  m.config_ = ModelConfig::from_gguf(file);
  const ModelConfig& c = m.config_;
  m.token_embd_ = load_matrix(file, "token_embd.weight", {c.d_model, c.vocab}, form);
  m.output_norm_ = load_tensor(file, "output_norm.weight", {c.d_model});
  m.tied_output_ = file.find_tensor("output.weight") == nullptr;
  if (!m.tied_output_) m.output_ = load_matrix(file, "output.weight", {c.d_model, c.vocab}, form);
  m.layers_.resize(static_cast<std::size_t>(c.n_layers));
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& w = m.layers_[static_cast<std::size_t>(l)];
    w.attn_norm = load_tensor(file, p + "attn_norm.weight", {c.d_model});
    w.wq = load_matrix(file, p + "attn_q.weight", {c.d_model, c.q_dim()}, form);
    w.wk = load_matrix(file, p + "attn_k.weight", {c.d_model, c.kv_dim()}, form);
    w.wv = load_matrix(file, p + "attn_v.weight", {c.d_model, c.kv_dim()}, form);
    w.wo = load_matrix(file, p + "attn_output.weight", {c.q_dim(), c.d_model}, form);
    w.ffn_norm = load_tensor(file, p + "ffn_norm.weight", {c.d_model});
    w.w_gate = load_matrix(file, p + "ffn_gate.weight", {c.d_model, c.ffn_dim}, form);
    w.w_up = load_matrix(file, p + "ffn_up.weight", {c.d_model, c.ffn_dim}, form);
    w.w_down = load_matrix(file, p + "ffn_down.weight", {c.ffn_dim, c.d_model}, form);
  }
  return m;
}

Model Model::load(const std::string& path, WeightForm form) { return from_gguf(GgufFile::open(path), form); }

std::size_t Model::weight_bytes() const {
  std::size_t n = token_embd_.bytes() + output_.bytes() + output_norm_.size() * sizeof(float);
  for (const LayerWeights& w : layers_) {
    n += (w.attn_norm.size() + w.ffn_norm.size()) * sizeof(float);
    for (const WeightMatrix* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) n += m->bytes();
  }
  return n;
}

}  // namespace lowbit::engine
