// CPU reference of quantized attention: plain loops in double, OpenMP over rows.
#include "cpu/quantized_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/block_formats.h"
#include "cpu/parallel.h"
#include "formats/float16.h"

namespace lowbit::cpu {
namespace {

double half_value(const void* base, std::int64_t index) {
  return formats::half_to_float(static_cast<const formats::Half*>(base)[index]);
}

// y[r x n] = x[r x K] w^T + b, w [n x K]; x rows at stride ldx (f16).
void project(const TensorView& x, std::int64_t rows, const std::vector<double>& w, std::int64_t n,
             const TensorView& bias, std::vector<double>& y) {
  const std::int64_t k = x.cols();
  y.assign(static_cast<std::size_t>(rows * n), 0.0);
#pragma omp parallel if (parallel_worth(rows, 0.7 * n * k))  // ~0.7 ns a multiply-add in double
  {
    std::vector<double> xr(static_cast<std::size_t>(k));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t i = 0; i < k; ++i) xr[i] = half_value(x.data, r * x.row_stride() + i);
      for (std::int64_t j = 0; j < n; ++j) {
        const double* wr = w.data() + j * k;
        double acc = 0.0;
        for (std::int64_t i = 0; i < k; ++i) acc += xr[i] * wr[i];
        if (bias.data) acc += half_value(bias.data, j);
        y[r * n + j] = acc;
      }
    }
  }
}

}  // namespace

std::vector<double> decoded_weight(const BlockQuantizedView& w, BlockFormat format, std::int64_t rows,
                                   std::int64_t cols) {
  std::vector<formats::Half> half(static_cast<std::size_t>(rows * cols));
  block_decode(w, format, TensorView::matrix(half.data(), DType::f16, Device::cpu, rows, cols));
  std::vector<double> out(half.size());
  for (std::size_t i = 0; i < half.size(); ++i) out[i] = formats::half_to_float(half[i]);
  return out;
}

AttentionProjections attention_projections(const TensorView& x, const AttentionWeights& weights,
                                           const AttentionConfig& c, std::int64_t rows, std::int64_t key_rows) {
  const std::int64_t nq = c.heads * c.head_dim, nkv = c.kv_heads * c.head_dim;
  AttentionProjections p;
  p.rows = rows;
  p.key_rows = key_rows;
  project(x, rows, decoded_weight(weights.wq, c.format, nq, c.d_model), nq, weights.bq, p.q);
  project(x, key_rows, decoded_weight(weights.wk, c.format, nkv, c.d_model), nkv, weights.bk, p.k);
  project(x, key_rows, decoded_weight(weights.wv, c.format, nkv, c.d_model), nkv, weights.bv, p.v);
  return p;
}

std::vector<double> attention_core(const AttentionProjections& p, const AttentionConfig& c) {
  const std::int64_t hd = c.head_dim, nq = c.heads * hd, nkv = c.kv_heads * hd;
  const std::int64_t group = c.heads / c.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> out(static_cast<std::size_t>(p.rows * nq), 0.0);
  // A (row, head): up to key_rows keys of 2 * head_dim multiply-adds (~0.7 ns) and an exp.
#pragma omp parallel if (parallel_worth(p.rows * c.heads, p.key_rows * (1.4 * hd + 20.0)))
  {
    std::vector<double> s(static_cast<std::size_t>(p.key_rows));
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (std::int64_t i = 0; i < p.rows; ++i) {
      for (std::int64_t h = 0; h < c.heads; ++h) {
        const std::int64_t g = h / group;  // GQA: query heads h share kv head h / (H / Hkv)
        const std::int64_t keys = c.causal ? std::min(i + 1, p.key_rows) : p.key_rows;
        const double* q = p.q.data() + i * nq + h * hd;
        double max = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < keys; ++j) {
          const double* k = p.k.data() + j * nkv + g * hd;
          double dot = 0.0;
          for (std::int64_t d = 0; d < hd; ++d) dot += q[d] * k[d];
          s[j] = dot * scale;
          max = std::max(max, s[j]);
        }
        double sum = 0.0;
        for (std::int64_t j = 0; j < keys; ++j) sum += (s[j] = std::exp(s[j] - max));
        double* o = out.data() + i * nq + h * hd;
        for (std::int64_t j = 0; j < keys; ++j) {
          const double* v = p.v.data() + j * nkv + g * hd;
          const double w = s[j] / sum;
          for (std::int64_t d = 0; d < hd; ++d) o[d] += w * v[d];
        }
      }
    }
  }
  return out;
}

std::vector<double> attention_reference(const TensorView& x, const AttentionWeights& weights,
                                        const AttentionConfig& c, std::int64_t rows) {
  const std::int64_t key_rows = c.causal ? rows : c.seq_len;
  return attention_core(attention_projections(x, weights, c, rows, key_rows), c);
}

void attention(const TensorView& x, const AttentionWeights& weights, const AttentionConfig& c, const TensorView& out) {
  const std::vector<double> o = attention_reference(x, weights, c, c.seq_len);
  const std::int64_t n = c.heads * c.head_dim;
  auto* dst = out.ptr<formats::Half>();
  for (std::int64_t i = 0; i < c.seq_len; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      dst[i * out.row_stride() + j] = formats::from_float<formats::Half>(static_cast<float>(o[i * n + j]));
    }
  }
}

}  // namespace lowbit::cpu
