// CPU flash_attention: plain loops in double, OpenMP over query rows.
#include "cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/parallel.h"
#include "formats/float16.h"

namespace lowbit::cpu {
namespace {

double element(const TensorView& t, std::int64_t row, std::int64_t col) {
  const std::int64_t at = row * t.row_stride() + col;
  return t.dtype == DType::bf16 ? formats::bf16_to_float(static_cast<const formats::BFloat16*>(t.data)[at])
                                : formats::half_to_float(static_cast<const formats::Half*>(t.data)[at]);
}

}  // namespace

std::vector<double> flash_attention_f64(const TensorView& q, const TensorView& k, const TensorView& v,
                                        std::span<const std::int32_t> cu_q, std::span<const std::int32_t> cu_k,
                                        const FlashAttentionParams& p) {
  const std::int64_t hd = p.head_dim, cols = p.heads * hd, group = p.heads / p.kv_heads;
  const double scale = p.scale > 0.0f ? static_cast<double>(p.scale) : 1.0 / std::sqrt(static_cast<double>(hd));
  const std::int64_t total = cu_q.back();
  std::vector<double> out(static_cast<std::size_t>(total * cols), 0.0);
  const std::int64_t batch = static_cast<std::int64_t>(cu_q.size()) - 1;
  std::int64_t longest = 1;
  for (std::int64_t b = 0; b < batch; ++b) longest = std::max<std::int64_t>(longest, cu_k[b + 1] - cu_k[b]);
#pragma omp parallel if (parallel_worth(total, 4.0 * static_cast<double>(cols) * static_cast<double>(longest)))
  {
    std::vector<double> scores(static_cast<std::size_t>(longest));
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t row = 0; row < total; ++row) {
      const auto after = std::upper_bound(cu_q.begin(), cu_q.end(), static_cast<std::int32_t>(row));
      const std::int64_t b = after - cu_q.begin() - 1;  // the row's sequence
      const std::int64_t i = row - cu_q[b], q_len = cu_q[b + 1] - cu_q[b];
      const std::int64_t k0 = cu_k[b], k_len = cu_k[b + 1] - cu_k[b];
      const std::int64_t seen = p.causal ? k_len - q_len + i + 1 : k_len;  // keys [0, seen)
      for (std::int64_t h = 0; h < p.heads; ++h) {
        const std::int64_t g = h / group;
        double top = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < seen; ++j) {
          double s = 0.0;
          for (std::int64_t d = 0; d < hd; ++d) s += element(q, row, h * hd + d) * element(k, k0 + j, g * hd + d);
          scores[static_cast<std::size_t>(j)] = s * scale;
          top = std::max(top, scores[static_cast<std::size_t>(j)]);
        }
        double sum = 0.0;
        for (std::int64_t j = 0; j < seen; ++j) {
          scores[static_cast<std::size_t>(j)] = std::exp(scores[static_cast<std::size_t>(j)] - top);
          sum += scores[static_cast<std::size_t>(j)];
        }
        double* o = out.data() + row * cols + h * hd;
        for (std::int64_t j = 0; j < seen; ++j) {
          const double w = scores[static_cast<std::size_t>(j)] / sum;
          for (std::int64_t d = 0; d < hd; ++d) o[d] += w * element(v, k0 + j, g * hd + d);
        }
      }
    }
  }
  return out;
}

void flash_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     std::span<const std::int32_t> cu_q, std::span<const std::int32_t> cu_k,
                     const FlashAttentionParams& p) {
  const std::vector<double> o = flash_attention_f64(q, k, v, cu_q, cu_k, p);
  const std::int64_t cols = p.heads * p.head_dim;
  for (std::int64_t row = 0; row < cu_q.back(); ++row) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float value = static_cast<float>(o[static_cast<std::size_t>(row * cols + c)]);
      const std::int64_t at = row * out.row_stride() + c;
      if (out.dtype == DType::bf16) {
        static_cast<formats::BFloat16*>(out.data)[at] = formats::float_to_bf16(value);
      } else {
        static_cast<formats::Half*>(out.data)[at] = formats::float_to_half(value);
      }
    }
  }
}

}  // namespace lowbit::cpu
