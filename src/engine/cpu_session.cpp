#include "engine/cpu_session.h"

#include <algorithm>
#include <cmath>

#include "cpu/thread_pool.h"
#include "engine/cpu_kernels.h"
#include "engine/cpu_matmul.h"
#include "engine/finite_logits.h"
#include "engine/rope_table.h"
#include "lowbit/error.h"

namespace lowbit::engine {

using cpu_kernels::dot;
using cpu_kernels::rms_norm;

namespace {

// Q, K and V of n rows plus their projections' biases (qwen2).
void add_qkv_biases(const LayerWeights& w, std::int64_t n, std::int64_t qd, std::int64_t kvd, float* q, float* k,
                    float* v) {
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < qd; ++j) q[i * qd + j] += w.bq[static_cast<std::size_t>(j)];
    for (std::int64_t j = 0; j < kvd; ++j) {
      k[i * kvd + j] += w.bk[static_cast<std::size_t>(j)];
      v[i * kvd + j] += w.bv[static_cast<std::size_t>(j)];
    }
  }
}

}  // namespace

CpuSession::CpuSession(const Model& model, KvCacheOptions cache, std::int64_t max_tokens)
    : model_(&model),
      cache_(KvShape{model.config().n_layers, model.config().n_kv_heads, model.config().head_dim}, cache, max_tokens) {
  RopeTable table = rope_table(model.config(), max_tokens);
  rope_cos_ = std::move(table.cos);
  rope_sin_ = std::move(table.sin);
}

CpuSession::~CpuSession() { cpu::quiesce_engine_pool(); }

void CpuSession::reset() {
  cache_.reset();
  position_ = 0;
}

// Rotates pairs of the first rope_dims channels of every head: (2i, 2i + 1), or
// (i, i + rope_dims / 2) for RopeStyle::neox.
void CpuSession::rope(float* x, std::int64_t n, std::int64_t heads, std::int64_t pos0) const {
  const ModelConfig& c = model_->config();
  const std::int64_t half = c.rope_dims / 2;
  const bool neox = c.rope_style == RopeStyle::neox;
  const std::int64_t step = neox ? 1 : 2, partner = neox ? half : 1;
  for (std::int64_t t = 0; t < n; ++t) {
    const float* cs = rope_cos_.data() + (pos0 + t) * half;
    const float* sn = rope_sin_.data() + (pos0 + t) * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * c.head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = v[step * i], b = v[step * i + partner];
        v[step * i] = a * cs[i] - b * sn[i];
        v[step * i + partner] = a * sn[i] + b * cs[i];
      }
    }
  }
}

// Query head h of the query row at position pos against what the cache shows for
// `layer`, limited to positions <= pos (causal).
void CpuSession::attend(std::int64_t layer, std::int64_t pos, std::int64_t h, const float* q, float* out,
                        float* scores) const {
  const ModelConfig& c = model_->config();
  const std::int64_t d = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const KvCache::Visible vis = cache_.visible(layer, pos);
  const std::int64_t end = vis.end, sink_end = vis.sink_end;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  {
    const std::int64_t off = (h / group) * d;  // this query head's KV head
    const float* qh = q + h * d;
    float* oh = out + h * d;
    std::int64_t count = 0;
    float mx = -INFINITY;
    // Scores four positions at a time (q loaded once for four keys).
    const float* keys[4];
    int pending = 0;
    auto flush = [&] {
      float s[4];
      if (pending == 4) {
        cpu_kernels::dot4(qh, keys, d, s);
      } else {
        for (int i = 0; i < pending; ++i) s[i] = dot(qh, keys[i], d);
      }
      for (int i = 0; i < pending; ++i) {
        scores[count] = s[i] * scale;
        mx = std::max(mx, scores[count++]);
      }
      pending = 0;
    };
    auto score = [&](std::int64_t j) {
      keys[pending++] = cache_.key(layer, j, pos) + off;
      if (pending == 4) flush();
    };
    for (std::int64_t j = 0; j < sink_end; ++j) score(j);
    for (std::int64_t j = vis.recent_begin; j < end; ++j) score(j);
    flush();
    double total = 0.0;
    for (std::int64_t i = 0; i < count; ++i) {
      scores[i] = std::exp(scores[i] - mx);
      total += scores[i];
    }
    const auto inv = static_cast<float>(1.0 / total);
    std::fill(oh, oh + d, 0.0f);
    count = 0;
    auto accumulate = [&](std::int64_t j) {
      const float p = scores[count++] * inv;
      const float* v = cache_.value(layer, j, pos) + off;
      for (std::int64_t i = 0; i < d; ++i) oh[i] += p * v[i];
    };
    for (std::int64_t j = 0; j < sink_end; ++j) accumulate(j);
    for (std::int64_t j = vis.recent_begin; j < end; ++j) accumulate(j);
  }
}

std::vector<float> CpuSession::forward(std::span<const std::int32_t> tokens, bool all_logits) {
  const ModelConfig& c = model_->config();
  const auto n = static_cast<std::int64_t>(tokens.size());
  LOWBIT_CHECK(n > 0, "forward: empty token sequence");
  LOWBIT_CHECK(n <= max_tokens() - position_, "forward: ", n, " tokens at position ", position_,
               " exceed the context the session was sized for (max_tokens = ", max_tokens(), ")");
  for (std::int64_t i = 0; i < n; ++i) {
    LOWBIT_CHECK(tokens[static_cast<std::size_t>(i)] >= 0 && tokens[static_cast<std::size_t>(i)] < c.vocab,
                 "forward: token id ", tokens[static_cast<std::size_t>(i)], " at index ", i,
                 " is outside the vocabulary (0..", c.vocab - 1, ")");
  }
  const std::int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_dim;
  const std::int64_t p0 = position_;
  std::vector<float> x(static_cast<std::size_t>(n * d)), h(x.size()), proj(x.size());
  std::vector<float> q(static_cast<std::size_t>(n * qd)), att(q.size());
  std::vector<float> k(static_cast<std::size_t>(n * kvd)), v(k.size());
  std::vector<float> gate(static_cast<std::size_t>(n * f)), up(gate.size());
  for (std::int64_t i = 0; i < n; ++i) {
    model_->token_embedding().decode_row(tokens[static_cast<std::size_t>(i)], x.data() + i * d);
  }
  cpu::ThreadPool& pool = cpu::engine_pool();

  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model_->layers()[static_cast<std::size_t>(l)];
    rms_norm(x.data(), w.attn_norm.data(), n, d, c.rms_eps, h.data());
    matmul(h.data(), n, d, {{&w.wq, q.data()}, {&w.wk, k.data()}, {&w.wv, v.data()}}, activations_);
    if (c.qkv_bias) add_qkv_biases(w, n, qd, kvd, q.data(), k.data(), v.data());
    rope(q.data(), n, c.n_heads, p0);
    rope(k.data(), n, c.n_kv_heads, p0);
    // The whole batch goes into the cache first; each query then reads every older
    // token in the form it had at the query's own time (KvCache::key(layer, j, t)),
    // so the queries run in parallel and still equal one-at-a-time decoding.
    cache_.append(l, n, k.data(), v.data());
    pool.run(n * c.n_heads, [&](std::int64_t ih) {
      thread_local std::vector<float> scores;
      scores.resize(static_cast<std::size_t>(p0 + n));
      const std::int64_t i = ih / c.n_heads;
      attend(l, p0 + i, ih % c.n_heads, q.data() + i * qd, att.data() + i * qd, scores.data());
    });
    matmul(att.data(), n, qd, {{&w.wo, proj.data()}}, activations_);
    for (std::int64_t i = 0; i < n * d; ++i) x[static_cast<std::size_t>(i)] += proj[static_cast<std::size_t>(i)];

    rms_norm(x.data(), w.ffn_norm.data(), n, d, c.rms_eps, h.data());
    matmul(h.data(), n, d, {{&w.w_gate, gate.data()}, {&w.w_up, up.data()}}, activations_);
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];  // SwiGLU: silu(gate) * up
    }
    matmul(gate.data(), n, f, {{&w.w_down, proj.data()}}, activations_);
    for (std::int64_t i = 0; i < n * d; ++i) x[static_cast<std::size_t>(i)] += proj[static_cast<std::size_t>(i)];
  }
  position_ += n;

  const std::int64_t rows = all_logits ? n : 1;
  const float* last = x.data() + (n - rows) * d;
  rms_norm(last, model_->output_norm().data(), rows, d, c.rms_eps, h.data());
  std::vector<float> logits(static_cast<std::size_t>(rows * c.vocab));
  matmul(h.data(), rows, d, {{&model_->output(), logits.data()}}, activations_);
  check_finite_logits(logits, c.vocab, position_ - rows);
  return logits;
}

}  // namespace lowbit::engine
