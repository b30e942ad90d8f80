#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string_view>
#include <variant>

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

// A number stored as a float or an integer type (files differ: original_context_length is UINT32).
double number(const GgufValue& v) {
  const bool floating = v.type() == GgufValueType::f32 || v.type() == GgufValueType::f64;
  return floating ? v.as_f64() : static_cast<double>(v.as_i64());
}

double get_float(const GgufFile& file, const std::string& key, double fallback) {
  const GgufValue* v = file.find_metadata(key);
  return v ? number(*v) : fallback;
}

double required_float(const GgufFile& file, const std::string& key, const std::string& why) {
  const GgufValue* v = file.find_metadata(key);
  LOWBIT_CHECK(v != nullptr, "model metadata: missing key '", key, "' (", why, ")");
  return number(*v);
}

struct Architecture {
  std::string_view name;
  RopeStyle rope_style;
  bool qkv_bias;  // Q, K and V biases required (otherwise taken when the file has them)
};

constexpr Architecture k_architectures[] = {
    {"llama", RopeStyle::normal, false},
    {"mistral", RopeStyle::normal, false},
    {"qwen2", RopeStyle::neox, true},
};

const Architecture& find_architecture(std::string_view name) {
  std::string names;
  for (const Architecture& a : k_architectures) {
    if (a.name == name) return a;
    names += (names.empty() ? "" : ", ") + std::string(a.name);
  }
  LOWBIT_FAIL("model: architecture '", name, "' is not supported (general.architecture; supported: ", names, ")");
}

// rope.scaling.* and the rope_freqs.weight tensor into the config's RoPE scaling.
void read_rope_scaling(const GgufFile& file, const std::string& p, ModelConfig& c) {
  const GgufValue* type_value = file.find_metadata(p + "rope.scaling.type");
  const std::string type = type_value != nullptr ? std::string(type_value->as_string()) : "none";
  const std::string factor_key = p + "rope.scaling.factor";
  if (type == "linear") {
    const double factor = required_float(file, factor_key, "rope.scaling.type is linear");
    LOWBIT_CHECK(std::isfinite(factor) && factor > 0.0, "model metadata: ", factor_key, " = ", factor,
                 ", expected a finite value > 0");
    c.rope_position_scale = 1.0 / factor;
  } else if (type == "llama3") {
    const std::string why = "rope.scaling.type is llama3";
    c.rope_freq_factors = llama3_rope_factors(
        c.rope_base, c.rope_dims, required_float(file, factor_key, why),
        get_float(file, p + "rope.scaling.low_freq_factor", 1.0), get_float(file, p + "rope.scaling.high_freq_factor", 4.0),
        required_float(file, p + "rope.scaling.original_context_length", why));
  } else {
    LOWBIT_CHECK(type == "none", "model metadata: ", p, "rope.scaling.type = '", type,
                 "' is not supported (supported: none, linear, llama3)");
  }
  // llama.cpp's converter stores Llama 3.1+'s smoothing as this tensor; it wins over the metadata.
  if (file.find_tensor("rope_freqs.weight") != nullptr) {
    c.rope_freq_factors = dequantize_tensor(model_tensor(file, "rope_freqs.weight", {c.rope_dims / 2}));
  }
}

}  // namespace

std::vector<float> llama3_rope_factors(double base, std::int64_t rope_dims, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_context_length) {
  LOWBIT_CHECK(std::isfinite(factor) && factor > 0.0, "llama3 RoPE scaling: factor = ", factor,
               ", expected a finite value > 0");
  LOWBIT_CHECK(std::isfinite(original_context_length) && original_context_length > 0.0,
               "llama3 RoPE scaling: original_context_length = ", original_context_length, ", expected > 0");
  LOWBIT_CHECK(std::isfinite(low_freq_factor) && std::isfinite(high_freq_factor) && low_freq_factor > 0.0 &&
                   high_freq_factor > low_freq_factor,
               "llama3 RoPE scaling: low_freq_factor = ", low_freq_factor, " and high_freq_factor = ", high_freq_factor,
               ", expected 0 < low < high");
  const double pi = 3.14159265358979323846;
  const double low_freq_wavelength = original_context_length / low_freq_factor;
  const double high_freq_wavelength = original_context_length / high_freq_factor;
  std::vector<float> factors(static_cast<std::size_t>(rope_dims / 2));
  for (std::size_t i = 0; i < factors.size(); ++i) {
    const double freq = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rope_dims));
    const double wavelength = 2.0 * pi / freq;
    double divide_by = 1.0;
    if (wavelength > low_freq_wavelength) {
      divide_by = factor;
    } else if (wavelength >= high_freq_wavelength) {
      const double smooth = (original_context_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
      divide_by = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    factors[i] = static_cast<float>(divide_by);
  }
  return factors;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig c;
  const GgufValue* arch = file.find_metadata("general.architecture");
  LOWBIT_CHECK(arch != nullptr, "model metadata: missing key 'general.architecture'");
  c.architecture = std::string(arch->as_string());
  const Architecture& architecture = find_architecture(c.architecture);
  c.rope_style = architecture.rope_style;
  c.qkv_bias = architecture.qkv_bias || file.find_tensor("blk.0.attn_q.bias") != nullptr;
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
  c.sliding_window = get_int(file, p + "attention.sliding_window", 0, false);
  if (c.sliding_window > 0 && (c.context_length == 0 || c.context_length > c.sliding_window)) {
    c.context_length = c.sliding_window;
  }
  // The scaling reads rope_dims: validate the sizes first.
  LOWBIT_CHECK(c.rope_dims > 0 && c.rope_dims <= k_max_dim && c.rope_dims % 2 == 0,
               "model config: rope.dimension_count = ", c.rope_dims, ", expected an even number in 2..", k_max_dim);
  read_rope_scaling(file, p, c);
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
  LOWBIT_CHECK(std::isfinite(rope_position_scale) && rope_position_scale > 0.0,
               "model config: RoPE position scale ", rope_position_scale, ", expected a finite value > 0");
  LOWBIT_CHECK(rope_freq_factors.empty() || static_cast<std::int64_t>(rope_freq_factors.size()) == rope_dims / 2,
               "model config: ", rope_freq_factors.size(), " RoPE frequency factors, expected rope_dims / 2 = ",
               rope_dims / 2);
  for (std::size_t i = 0; i < rope_freq_factors.size(); ++i) {
    LOWBIT_CHECK(std::isfinite(rope_freq_factors[i]) && rope_freq_factors[i] > 0.0f, "model config: RoPE frequency ",
                 "factor ", i, " = ", rope_freq_factors[i], ", expected a finite value > 0");
  }
  LOWBIT_CHECK(sliding_window >= 0, "model config: attention.sliding_window = ", sliding_window, " is negative");
}

std::string ModelConfig::describe() const {
  std::ostringstream out;
  out << architecture << ": " << n_layers << " layers, d_model " << d_model << ", heads " << n_heads << "/"
      << n_kv_heads << " x " << head_dim << ", ffn " << ffn_dim << ", vocab " << vocab << ", rope base " << rope_base
      << " dims " << rope_dims << (rope_style == RopeStyle::neox ? " (neox)" : "") << ", eps " << rms_eps;
  if (rope_position_scale != 1.0) out << ", rope positions x " << rope_position_scale;
  if (!rope_freq_factors.empty()) out << ", rope frequency factors";
  if (qkv_bias) out << ", QKV biases";
  if (sliding_window > 0) out << ", sliding window " << sliding_window << " (context capped to it)";
  return out.str();
}

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
  m.tied_output_ = file.find_tensor("output.weight") == nullptr;
  m.layers_.resize(static_cast<std::size_t>(c.n_layers));
  // Every tensor the model takes, with its dims and its destination (a vector decoded
  // to f32, or a matrix in `form`): all are found and checked (shape, a decodable type)
  // before any is decoded.
  struct Load {
    std::string name;
    std::vector<std::int64_t> dims;
    std::variant<std::vector<float>*, WeightMatrix*> into;
  };
  std::vector<Load> loads = {{"token_embd.weight", {c.d_model, c.vocab}, &m.token_embd_},
                             {"output_norm.weight", {c.d_model}, &m.output_norm_}};
  if (!m.tied_output_) loads.push_back({"output.weight", {c.d_model, c.vocab}, &m.output_});
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& w = m.layers_[static_cast<std::size_t>(l)];
    loads.push_back({p + "attn_norm.weight", {c.d_model}, &w.attn_norm});
    loads.push_back({p + "attn_q.weight", {c.d_model, c.q_dim()}, &w.wq});
    loads.push_back({p + "attn_k.weight", {c.d_model, c.kv_dim()}, &w.wk});
    loads.push_back({p + "attn_v.weight", {c.d_model, c.kv_dim()}, &w.wv});
    if (c.qkv_bias) {
      loads.push_back({p + "attn_q.bias", {c.q_dim()}, &w.bq});
      loads.push_back({p + "attn_k.bias", {c.kv_dim()}, &w.bk});
      loads.push_back({p + "attn_v.bias", {c.kv_dim()}, &w.bv});
    }
    loads.push_back({p + "attn_output.weight", {c.q_dim(), c.d_model}, &w.wo});
    loads.push_back({p + "ffn_norm.weight", {c.d_model}, &w.ffn_norm});
    loads.push_back({p + "ffn_gate.weight", {c.d_model, c.ffn_dim}, &w.w_gate});
    loads.push_back({p + "ffn_up.weight", {c.d_model, c.ffn_dim}, &w.w_up});
    loads.push_back({p + "ffn_down.weight", {c.ffn_dim, c.d_model}, &w.w_down});
  }
  std::vector<const GgufTensor*> tensors;
  for (const Load& load : loads) {
    const GgufTensor& t = model_tensor(file, load.name, load.dims);
    LOWBIT_CHECK(can_dequantize(t.type), "tensor '", load.name, "': type ", ggml_type_name(t.type),
                 " is not supported (", dequantizable_types(), ")");
    tensors.push_back(&t);
  }
  for (std::size_t i = 0; i < loads.size(); ++i) {
    if (auto* vec = std::get_if<std::vector<float>*>(&loads[i].into)) {
      **vec = dequantize_tensor(*tensors[i]);
    } else {
      *std::get<WeightMatrix*>(loads[i].into) = WeightMatrix::load(*tensors[i], form);
    }
  }
  return m;
}

Model Model::load(const std::string& path, WeightForm form) { return from_gguf(GgufFile::open(path), form); }

std::size_t Model::weight_bytes() const {
  std::size_t n = token_embd_.bytes() + output_.bytes() + output_norm_.size() * sizeof(float);
  for (const LayerWeights& w : layers_) {
    n += (w.attn_norm.size() + w.ffn_norm.size() + w.bq.size() + w.bk.size() + w.bv.size()) * sizeof(float);
    for (const WeightMatrix* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) n += m->bytes();
  }
  return n;
}

}  // namespace lowbit::engine
