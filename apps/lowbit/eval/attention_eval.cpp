// Host side of `lowbit eval attention`: encoding and the counted traffic model.
#include <algorithm>
#include <cmath>

#include "attention_eval.h"
#include "lowbit/error.h"

namespace lowbit::cli {

BlockQuantizedView EncodedWeight::view(BlockFormat format) {
  const BlockLayout layout = block_layout(format, rows, cols);
  BlockQuantizedView v;
  v.codes = TensorView::matrix(codes.data(), DType::u8, Device::cpu, rows, layout.code_cols);
  v.scales = TensorView::vector(scales.data(), layout.scale_dtype, Device::cpu, layout.scale_count);
  if (layout.has_global_scale) v.global_scale = TensorView::vector(global.data(), DType::f32, Device::cpu, 1);
  return v;
}

EncodedWeight encode_weight(BlockFormat format, const std::vector<float>& w, std::int64_t rows, std::int64_t cols) {
  const BlockLayout layout = block_layout(format, rows, cols);
  EncodedWeight e;
  e.rows = rows, e.cols = cols;
  e.codes.resize(layout.code_bytes());
  e.scales.resize(static_cast<std::size_t>(layout.scale_count) * layout.scale_bytes);
  block_encode(TensorView::matrix(const_cast<float*>(w.data()), DType::f32, Device::cpu, rows, cols), format,
               e.view(format), Workspace{}, nullptr);
  return e;
}

TensorView AttentionProblem::x_view() {
  return TensorView::matrix(x.data(), DType::f16, Device::cpu, config.seq_len, config.d_model);
}

AttentionWeights AttentionProblem::weights() {
  AttentionWeights w{wq.view(config.format), wk.view(config.format), wv.view(config.format), {}, {}, {}};
  auto vec = [](std::vector<formats::Half>& b) {
    return TensorView::vector(b.data(), DType::f16, Device::cpu, static_cast<std::int64_t>(b.size()));
  };
  if (!bq.empty()) w.bq = vec(bq), w.bk = vec(bk), w.bv = vec(bv);
  return w;
}

std::size_t counted_bytes(const AttentionConfig& c, AttentionVariant v, int kernel1_rows) {
  const double l = static_cast<double>(c.seq_len), k = static_cast<double>(c.d_model);
  const double hd = static_cast<double>(c.head_dim), h = static_cast<double>(c.heads);
  const double nq = h * hd, nkv = static_cast<double>(c.kv_heads) * hd, n = nq + 2 * nkv;
  const double packed = static_cast<double>(block_memory_bytes(c.format, static_cast<std::int64_t>(nq), c.d_model) +
                                            2 * block_memory_bytes(c.format, static_cast<std::int64_t>(nkv), c.d_model));
  const double x = l * k * 2, wd = n * k * 2, qkv = l * n * 2, s = h * l * l * 4, o = l * nq * 2;
  // Keys a query tile of `rows` reads per head, summed over the tiles.
  auto keys_read = [&](double rows) {
    const double tiles = std::ceil(l / rows);
    if (!c.causal) return tiles * l;
    double sum = 0;
    for (double t = 0; t < tiles; ++t) sum += std::min(l, (t + 1) * rows);
    return sum;
  };
  auto ceil = [](double a, double b) { return std::ceil(a / b); };
  double bytes = 0;
  switch (v) {
    case AttentionVariant::naive_sequential:
      bytes = packed + wd;                                     // dequantize
      bytes += l * n * 2 * k * 2 + qkv;                        // each output reads a row of x and of W
      bytes += h * l * l * 2 * hd * 2 + s;                     // scores: q and k rows per score
      bytes += 2 * s + 4 * s;                                  // scale + mask; softmax: 3 reads, 1 write
      bytes += l * nq * l * (4 + 2) + o;                       // P V: a row of P and a column of V per output
      break;
    case AttentionVariant::tiled_sequential:
      bytes = packed + wd;
      bytes += x * ceil(n, 32) + wd * ceil(l, 32) + qkv;       // 32 x 32 tiles
      bytes += h * (l * hd * 2) * 2 * ceil(l, 32) + s;
      bytes += 2 * s + 3 * s;                                  // two-pass softmax
      bytes += s * ceil(hd, 32) + h * l * hd * 2 * ceil(l, 32) + o;
      break;
    case AttentionVariant::tiled_fused:
      bytes = packed + wd;
      bytes += x * ceil(n, 64) + wd * ceil(l, 64) + qkv;       // 64 x 64 WMMA tiles
      bytes += l * nq * 2 + h * keys_read(32) * hd * 2 * 2 + o;
      break;
    case AttentionVariant::fused_two_kernel:
      // kernel1_rows x 128 tiles (X rows x Q|K|V columns), 4-bit weights
      bytes = x * ceil(n, 128) + packed * ceil(l, kernel1_rows) + qkv;
      bytes += l * nq * 2 + h * keys_read(128) * hd * 2 * 2 + o;
      break;
  }
  return static_cast<std::size_t>(bytes);
}

}  // namespace lowbit::cli
