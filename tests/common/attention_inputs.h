// Host-side inputs of the attention tests: random f16 X and projection weights
// encoded on the CPU into a block format (BlockQuantizedView over host vectors).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/random.h"
#include "formats/float16.h"
#include "lowbit/quantized_attention.h"

namespace lowbit::test {

struct HostBlockWeight {
  BlockFormat format = BlockFormat::nf4;
  std::int64_t rows = 0, cols = 0;
  std::vector<std::uint8_t> codes, scales;  // scales as raw bytes (f32 for nf4)
  std::vector<float> global = {0.0f};

  HostBlockWeight() = default;
  HostBlockWeight(BlockFormat f, std::int64_t r, std::int64_t c) : format(f), rows(r), cols(c) {
    const BlockLayout layout = block_layout(f, r, c);
    codes.assign(layout.code_bytes(), 0);
    scales.assign(static_cast<std::size_t>(layout.scale_count) * layout.scale_bytes, 0);
  }
  // Encodes w (f32 [rows x cols]) on the CPU.
  static HostBlockWeight encode(BlockFormat f, std::int64_t r, std::int64_t c, const std::vector<float>& w) {
    HostBlockWeight h(f, r, c);
    block_encode(TensorView::matrix(const_cast<float*>(w.data()), DType::f32, Device::cpu, r, c), f, h.view(),
                 Workspace{}, nullptr);
    return h;
  }
  BlockQuantizedView view() {
    const BlockLayout layout = block_layout(format, rows, cols);
    BlockQuantizedView v;
    v.codes = TensorView::matrix(codes.data(), DType::u8, Device::cpu, rows, layout.code_cols);
    v.scales = TensorView::vector(scales.data(), layout.scale_dtype, Device::cpu, layout.scale_count);
    if (layout.has_global_scale) v.global_scale = TensorView::vector(global.data(), DType::f32, Device::cpu, 1);
    return v;
  }
};

inline std::vector<formats::Half> to_half(const std::vector<float>& v) {
  std::vector<formats::Half> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = formats::from_float<formats::Half>(v[i]);
  return h;
}

// A random problem: X ~ N(0, 1); weights N(0, 1 / d_model) so that q, k, v are ~N(0, 1)
// and the scores q.k / sqrt(hd) ~N(0, 1): softmax neither flat nor one-hot; biases
// N(0, 0.25) when asked.
struct HostAttention {
  AttentionConfig config;
  std::vector<formats::Half> x;
  HostBlockWeight wq, wk, wv;
  std::vector<formats::Half> bq, bk, bv;

  HostAttention(Rng& rng, const AttentionConfig& c, bool bias) : config(c) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> xf(static_cast<std::size_t>(c.seq_len * c.d_model));
    for (float& v : xf) v = normal(rng);
    x = to_half(xf);
    const float ws = 1.0f / std::sqrt(static_cast<float>(c.d_model));
    auto weight = [&](std::int64_t rows) {
      std::vector<float> w(static_cast<std::size_t>(rows * c.d_model));
      for (float& v : w) v = normal(rng) * ws;
      return HostBlockWeight::encode(c.format, rows, c.d_model, w);
    };
    auto vec = [&](std::int64_t n) {
      std::vector<float> b(static_cast<std::size_t>(n));
      for (float& v : b) v = 0.5f * normal(rng);
      return to_half(b);
    };
    const std::int64_t nq = c.heads * c.head_dim, nkv = c.kv_heads * c.head_dim;
    wq = weight(nq), wk = weight(nkv), wv = weight(nkv);
    if (bias) bq = vec(nq), bk = vec(nkv), bv = vec(nkv);
  }

  TensorView x_view() {
    return TensorView::matrix(x.data(), DType::f16, Device::cpu, config.seq_len, config.d_model);
  }
  AttentionWeights weights() {
    AttentionWeights w{wq.view(), wk.view(), wv.view(), {}, {}, {}};
    if (!bq.empty()) {
      w.bq = TensorView::vector(bq.data(), DType::f16, Device::cpu, static_cast<std::int64_t>(bq.size()));
      w.bk = TensorView::vector(bk.data(), DType::f16, Device::cpu, static_cast<std::int64_t>(bk.size()));
      w.bv = TensorView::vector(bv.data(), DType::f16, Device::cpu, static_cast<std::int64_t>(bv.size()));
    }
    return w;
  }
};

}  // namespace lowbit::test
