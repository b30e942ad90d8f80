// A tiny random llama-family model as a GGUF file in memory (tests/common/gguf_writer.h),
// plus an independent naive FP64 forward pass of it (straight loops, no KV cache) that
// applies each KV-cache policy's masking and FP16 / quantize-dequantize explicitly.
// The weights are encoded to Q8_0 / Q4_1 / F16 here and decoded here too, in double,
// so the engine's loader and dequantizer are checked against a second reading.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/tokenizer/bpe.h"
#include "cpu/kv_cache.h"
#include "formats/float16.h"
#include "common/gguf_writer.h"

namespace lowbit::test {

struct TinyLlamaSpec {
  std::int64_t layers = 2, d_model = 64, heads = 4, kv_heads = 2, head_dim = 16, ffn = 96, vocab = 50;
  double rope_base = 10000.0;
  float eps = 1e-5f;
  bool tied = true;  // no output.weight: the Q8_0 token embedding is the head; else an F16 output.weight
  // "qwen2": F32 biases on Q, K and V, and RoPE on pairs (i, i + head_dim / 2).
  std::string architecture = "llama";
  float bias_stddev = 0.1f;  // of the qwen2 biases (mean 0)
  double rope_linear_factor = 0.0;  // > 0: rope.scaling.type linear with this factor
  bool rope_freqs = false;          // a rope_freqs.weight tensor: frequency i divided by 1 + 0.4 i
  // A byte-level BPE tokenizer of `vocab` tokens in the metadata (needs vocab >= 260):
  // <|endoftext|>, <|im_start|>, <|im_end|> (control), <tool> (user-defined), the 256
  // bytes in GPT-2's alphabet but 0x04 (a byte without a token, as in SmolLM2), then
  // merged pairs of letters.
  bool with_tokenizer = false;
};

struct TinyLlama {
  TinyLlamaSpec spec;
  std::vector<std::uint8_t> gguf;
  // Decoded weights (what the file holds), [out x in] row-major.
  struct Layer {
    std::vector<double> attn_norm, wq, wk, wv, wo, ffn_norm, gate, up, down;
    std::vector<double> bq, bk, bv;  // qwen2 only
  };
  std::vector<double> embd, output_norm, output;  // output == embd when tied
  std::vector<double> rope_factors;               // empty: all 1
  std::vector<Layer> layers;
};

namespace tiny_detail {

inline void add_tokenizer(GgufWriter& w, std::int64_t vocab) {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"};
  std::vector<std::int32_t> types = {3, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(b == 0x04 ? "<unused04>" : engine::byte_level_encode(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  std::vector<std::string> merges;
  for (int i = 0; static_cast<std::int64_t>(tokens.size()) < vocab; ++i) {
    const std::string left(1, static_cast<char>('a' + i / 26 % 26)), right(1, static_cast<char>('a' + i % 26));
    merges.push_back(left + " " + right);
    tokens.push_back(left + right);
    types.push_back(1);
  }
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "smollm");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_array<std::int32_t>("tokenizer.ggml.token_type", gguf_type::i32, types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add("tokenizer.ggml.eos_token_id", gguf_type::u32, std::uint32_t{2});
  w.add("tokenizer.ggml.unknown_token_id", gguf_type::u32, std::uint32_t{0});
  w.add_string("tokenizer.chat_template", "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                                          "'<|im_end|>'}}");
}

inline void put_f16(std::vector<std::uint8_t>& out, float v) {
  const std::uint16_t bits = formats::float_to_half(v).bits;
  out.push_back(static_cast<std::uint8_t>(bits & 0xff));
  out.push_back(static_cast<std::uint8_t>(bits >> 8));
}
inline double f16_value(float v) { return formats::half_to_float(formats::float_to_half(v)); }

// Q8_0: per 32 values, f16 d = absmax / 127, then 32 int8 codes.
inline void q8_0(const std::vector<float>& x, std::vector<std::uint8_t>& bytes, std::vector<double>& decoded) {
  for (std::size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const double d = f16_value(amax / 127.0f);
    put_f16(bytes, amax / 127.0f);
    for (int j = 0; j < 32; ++j) {
      const int q = d == 0 ? 0 : static_cast<int>(std::clamp(std::lround(x[b + j] / d), -127L, 127L));
      bytes.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(q)));
      decoded.push_back(q * d);
    }
  }
}

// Q4_1: per 32 values, f16 d = (max - min) / 15 and f16 m = min, then 16 bytes holding
// element j in the low nibble and element j + 16 in the high nibble.
inline void q4_1(const std::vector<float>& x, std::vector<std::uint8_t>& bytes, std::vector<double>& decoded) {
  for (std::size_t b = 0; b < x.size(); b += 32) {
    float lo = x[b], hi = x[b];
    for (int j = 0; j < 32; ++j) lo = std::min(lo, x[b + j]), hi = std::max(hi, x[b + j]);
    const double d = f16_value((hi - lo) / 15.0f), m = f16_value(lo);
    put_f16(bytes, (hi - lo) / 15.0f);
    put_f16(bytes, lo);
    int q[32];
    for (int j = 0; j < 32; ++j) {
      q[j] = d == 0 ? 0 : static_cast<int>(std::clamp(std::lround((x[b + j] - m) / d), 0L, 15L));
    }
    for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<std::uint8_t>(q[j] | (q[j + 16] << 4)));
    for (int j = 0; j < 32; ++j) decoded.push_back(q[j] * d + m);
  }
}

}  // namespace tiny_detail

// Fixed seed: a deterministic fixture, so that its tolerances are stated once.
inline TinyLlama make_tiny_llama(const TinyLlamaSpec& spec = {}, std::uint32_t seed = 1234) {
  using namespace tiny_detail;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  TinyLlama m;
  m.spec = spec;
  GgufWriter w;
  const std::string a = spec.architecture + ".";
  w.add_string("general.architecture", spec.architecture);
  w.add_string("general.name", "tiny-random-llama");
  auto u32 = [&](const std::string& key, std::int64_t v) { w.add(key, gguf_type::u32, static_cast<std::uint32_t>(v)); };
  u32(a + "block_count", spec.layers);
  u32(a + "context_length", 256);
  u32(a + "embedding_length", spec.d_model);
  u32(a + "feed_forward_length", spec.ffn);
  u32(a + "attention.head_count", spec.heads);
  u32(a + "attention.head_count_kv", spec.kv_heads);
  u32(a + "rope.dimension_count", spec.head_dim);
  w.add(a + "rope.freq_base", gguf_type::f32, static_cast<float>(spec.rope_base));
  w.add(a + "attention.layer_norm_rms_epsilon", gguf_type::f32, spec.eps);
  if (spec.rope_linear_factor > 0.0) {
    w.add_string(a + "rope.scaling.type", "linear");
    w.add(a + "rope.scaling.factor", gguf_type::f32, static_cast<float>(spec.rope_linear_factor));
  }
  if (spec.with_tokenizer) tiny_detail::add_tokenizer(w, spec.vocab);

  auto random = [&](std::int64_t count, float stddev, float mean = 0.0f) {
    std::vector<float> v(static_cast<std::size_t>(count));
    for (float& x : v) x = mean + stddev * normal(rng);
    return v;
  };
  // A matrix of `out` rows of `in` inputs (GGUF dims {in, out}) in Q4_1 or Q8_0.
  auto matrix = [&](const std::string& name, std::int64_t in, std::int64_t out, bool q8, std::vector<double>& dec) {
    const std::vector<float> x = random(in * out, 1.0f / std::sqrt(static_cast<float>(in)));
    std::vector<std::uint8_t> bytes;
    (q8 ? q8_0 : q4_1)(x, bytes, dec);
    w.add_tensor(name, {static_cast<std::uint64_t>(in), static_cast<std::uint64_t>(out)},
                 q8 ? ggml_id::q8_0 : ggml_id::q4_1, bytes);
  };
  auto norm = [&](const std::string& name, std::int64_t n, std::vector<double>& dec, float mean = 1.0f,
                  float stddev = 0.1f) {
    const std::vector<float> x = random(n, stddev, mean);
    std::vector<std::uint8_t> bytes(x.size() * 4);
    std::memcpy(bytes.data(), x.data(), bytes.size());
    dec.assign(x.begin(), x.end());
    w.add_tensor(name, {static_cast<std::uint64_t>(n)}, ggml_id::f32, bytes);
  };
  {
    // The embedding has unit-scale rows (it is also the output head when tied).
    const std::vector<float> x = random(spec.vocab * spec.d_model, 1.0f);
    std::vector<std::uint8_t> bytes;
    q8_0(x, bytes, m.embd);
    w.add_tensor("token_embd.weight",
                 {static_cast<std::uint64_t>(spec.d_model), static_cast<std::uint64_t>(spec.vocab)}, ggml_id::q8_0,
                 bytes);
  }
  m.layers.resize(static_cast<std::size_t>(spec.layers));
  const std::int64_t qd = spec.heads * spec.head_dim, kvd = spec.kv_heads * spec.head_dim;
  for (std::int64_t l = 0; l < spec.layers; ++l) {
    TinyLlama::Layer& L = m.layers[static_cast<std::size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", spec.d_model, L.attn_norm);
    matrix(p + "attn_q.weight", spec.d_model, qd, false, L.wq);
    matrix(p + "attn_k.weight", spec.d_model, kvd, false, L.wk);
    matrix(p + "attn_v.weight", spec.d_model, kvd, true, L.wv);  // one Q8_0 matrix among the Q4_1
    if (spec.architecture == "qwen2") {  // biases: F32 vectors of mean 0
      norm(p + "attn_q.bias", qd, L.bq, 0.0f, spec.bias_stddev);
      norm(p + "attn_k.bias", kvd, L.bk, 0.0f, spec.bias_stddev);
      norm(p + "attn_v.bias", kvd, L.bv, 0.0f, spec.bias_stddev);
    }
    matrix(p + "attn_output.weight", qd, spec.d_model, false, L.wo);
    norm(p + "ffn_norm.weight", spec.d_model, L.ffn_norm);
    matrix(p + "ffn_gate.weight", spec.d_model, spec.ffn, false, L.gate);
    matrix(p + "ffn_up.weight", spec.d_model, spec.ffn, false, L.up);
    matrix(p + "ffn_down.weight", spec.ffn, spec.d_model, false, L.down);
  }
  norm("output_norm.weight", spec.d_model, m.output_norm);
  if (spec.rope_freqs) {
    std::vector<float> factors;
    for (std::int64_t i = 0; i < spec.head_dim / 2; ++i) factors.push_back(1.0f + 0.4f * static_cast<float>(i));
    std::vector<std::uint8_t> bytes(factors.size() * 4);
    std::memcpy(bytes.data(), factors.data(), bytes.size());
    m.rope_factors.assign(factors.begin(), factors.end());
    w.add_tensor("rope_freqs.weight", {static_cast<std::uint64_t>(factors.size())}, ggml_id::f32, bytes);
  }
  if (spec.tied) {
    m.output = m.embd;
  } else {
    const std::vector<float> x = random(spec.vocab * spec.d_model, 0.5f);
    std::vector<std::uint8_t> bytes;
    for (float v : x) {
      put_f16(bytes, v);
      m.output.push_back(f16_value(v));
    }
    w.add_tensor("output.weight", {static_cast<std::uint64_t>(spec.d_model), static_cast<std::uint64_t>(spec.vocab)},
                 ggml_id::f16, bytes);
  }
  m.gguf = w.bytes();
  return m;
}

// The policy's stored form of one token's K or V row (kv_dim values): the KV cache's
// quantize-dequantize (cpu/kv_cache.h: f16 scale and min) with the grouping
// kv_cache.h defines (default: one group per head).
inline std::vector<double> naive_quantized(const std::vector<double>& row, const engine::KvCacheOptions& o,
                                           std::int64_t kv_heads, std::int64_t head_dim, int bits) {
  const std::int64_t kv = kv_heads * head_dim;
  const std::int64_t group = o.kv_group != 0 ? o.kv_group : head_dim;
  const bool whole_heads = group > head_dim;
  const std::int64_t rows = whole_heads ? 1 : kv_heads, cols = whole_heads ? kv : head_dim;
  std::vector<float> x(row.begin(), row.end()), back(x.size());
  const std::int64_t groups = rows * (cols / group);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(bits == 8 ? kv : kv / 2));
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(groups)), mins(scales.size());
  std::uint16_t* m = bits == 4 ? mins.data() : nullptr;
  cpu::kv_quantize(bits, x.data(), rows, cols, group, codes.data(), scales.data(), m);
  cpu::kv_dequantize(bits, codes.data(), scales.data(), m, rows, cols, group, back.data());
  return {back.begin(), back.end()};
}

// Logits [n x vocab] for tokens fed from position 0, in double, without a cache: every
// query recomputes which keys it sees and in which form, straight from the policy's
// definition (window: sink + last `window` tokens; selective: older ones as
// quantize(FP16 value); int8/int4: quantize(value) for all, the current one included).
inline std::vector<double> naive_forward(const TinyLlama& m, const std::vector<std::int32_t>& tokens,
                                         const engine::KvCacheOptions& policy = {}) {
  using lowbit::KvPolicy;
  const TinyLlamaSpec& s = m.spec;
  const std::int64_t n = static_cast<std::int64_t>(tokens.size()), d = s.d_model, hd = s.head_dim;
  const std::int64_t qd = s.heads * hd, kvd = s.kv_heads * hd;
  auto matvec = [](const std::vector<double>& w, const std::vector<double>& x, std::int64_t out) {
    const std::int64_t in = static_cast<std::int64_t>(x.size());
    std::vector<double> y(static_cast<std::size_t>(out), 0.0);
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<double>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + static_cast<double>(s.eps));
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
    return y;
  };
  // Pairs (2i, 2i + 1), or (i, i + hd / 2) for qwen2; angles scaled as the spec says.
  const bool neox = s.architecture == "qwen2";
  const double position_scale = s.rope_linear_factor > 0.0 ? 1.0 / s.rope_linear_factor : 1.0;
  auto rope = [&](std::vector<double>& v, std::int64_t heads, std::int64_t pos) {
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < hd / 2; ++i) {
        const double factor = m.rope_factors.empty() ? 1.0 : m.rope_factors[static_cast<std::size_t>(i)];
        const double angle = static_cast<double>(pos) * position_scale *
                             std::pow(s.rope_base, -2.0 * i / static_cast<double>(hd)) / factor;
        double& a = v[h * hd + (neox ? i : 2 * i)];
        double& b = v[h * hd + (neox ? i + hd / 2 : 2 * i + 1)];
        const double ra = a * std::cos(angle) - b * std::sin(angle), rb = a * std::sin(angle) + b * std::cos(angle);
        a = ra, b = rb;
      }
  };
  auto f16_row = [](const std::vector<double>& r) {
    std::vector<double> o(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) o[i] = tiny_detail::f16_value(static_cast<float>(r[i]));
    return o;
  };
  const int bits = policy.policy == KvPolicy::int8 ? 8 : policy.policy == KvPolicy::int4 ? 4 : policy.kv_bits;

  std::vector<std::vector<double>> x(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t)
    x[t].assign(m.embd.begin() + tokens[t] * d, m.embd.begin() + (tokens[t] + 1) * d);
  for (const TinyLlama::Layer& L : m.layers) {
    std::vector<std::vector<double>> q(n), k16(n), v16(n), kq(n), vq(n);
    for (std::int64_t t = 0; t < n; ++t) {
      const std::vector<double> h = rmsnorm(x[t], L.attn_norm);
      q[t] = matvec(L.wq, h, qd);
      std::vector<double> k = matvec(L.wk, h, kvd), v = matvec(L.wv, h, kvd);
      for (std::size_t i = 0; i < L.bq.size(); ++i) q[t][i] += L.bq[i];
      for (std::size_t i = 0; i < L.bk.size(); ++i) k[i] += L.bk[i], v[i] += L.bv[i];
      rope(q[t], s.heads, t);
      rope(k, s.kv_heads, t);
      k16[t] = f16_row(k), v16[t] = f16_row(v);
      if (policy.policy == KvPolicy::selective) {
        kq[t] = naive_quantized(k16[t], policy, s.kv_heads, hd, bits);
        vq[t] = naive_quantized(v16[t], policy, s.kv_heads, hd, bits);
      } else if (policy.policy == KvPolicy::int8 || policy.policy == KvPolicy::int4) {
        kq[t] = naive_quantized(k, policy, s.kv_heads, hd, bits);
        vq[t] = naive_quantized(v, policy, s.kv_heads, hd, bits);
      }
    }
    for (std::int64_t t = 0; t < n; ++t) {
      std::vector<double> att(static_cast<std::size_t>(qd), 0.0);
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const std::int64_t kvh = h / (s.heads / s.kv_heads);
        std::vector<double> score;
        std::vector<const std::vector<double>*> vals;
        for (std::int64_t j = 0; j <= t; ++j) {
          const bool recent = j < policy.sink || j > t - policy.window;
          const std::vector<double>* kk = &k16[j];
          const std::vector<double>* vv = &v16[j];
          switch (policy.policy) {
            case KvPolicy::full: break;
            case KvPolicy::window: if (!recent) continue; break;
            case KvPolicy::selective: if (!recent) kk = &kq[j], vv = &vq[j]; break;
            case KvPolicy::int8:
            case KvPolicy::int4: kk = &kq[j], vv = &vq[j]; break;
          }
          double dot = 0;
          for (std::int64_t i = 0; i < hd; ++i) dot += q[t][h * hd + i] * (*kk)[kvh * hd + i];
          score.push_back(dot / std::sqrt(static_cast<double>(hd)));
          vals.push_back(vv);
        }
        const double mx = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (double& sc : score) total += (sc = std::exp(sc - mx));
        for (std::size_t j = 0; j < score.size(); ++j)
          for (std::int64_t i = 0; i < hd; ++i) att[h * hd + i] += score[j] / total * (*vals[j])[kvh * hd + i];
      }
      const std::vector<double> o = matvec(L.wo, att, d);
      for (std::int64_t i = 0; i < d; ++i) x[t][i] += o[i];
    }
    for (std::int64_t t = 0; t < n; ++t) {
      const std::vector<double> h = rmsnorm(x[t], L.ffn_norm);
      const std::vector<double> g = matvec(L.gate, h, s.ffn), u = matvec(L.up, h, s.ffn);
      std::vector<double> a(g.size());
      for (std::size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const std::vector<double> down = matvec(L.down, a, d);
      for (std::int64_t i = 0; i < d; ++i) x[t][i] += down[i];
    }
  }
  std::vector<double> logits;
  for (std::int64_t t = 0; t < n; ++t) {
    const std::vector<double> row = matvec(m.output, rmsnorm(x[t], m.output_norm), s.vocab);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

}  // namespace lowbit::test
