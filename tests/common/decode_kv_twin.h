// The CPU twin of the decode cache (src/cuda/engine/kv_cache_gpu.h): the exact buffers
// a device layer holds after `length` appends of given f16 K/V (built through
// cpu::kv_quantize(), the KvCache's path: f16 scales and mins), the values the
// newest query reads (cpu::kv_dequantize()), and attention over them in double.
// Slots nothing wrote keep the test poison, so a kernel that reads one produces NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/poison.h"
#include "cuda/kv/kv_cuda.h"
#include "cpu/kv_cache.h"
#include "formats/float16.h"

namespace lowbit::test {

using cuda::engine::DecodeSpan;
using cuda::engine::KvBody;
using cuda::engine::KvLayerShape;

struct TwinPart {
  std::vector<std::uint16_t> f16;  // [H][f16_slots][D]
  std::vector<std::uint8_t> codes;  // [body_slots][H][code_bytes]
  std::vector<std::uint16_t> scales, mins;  // [body_slots][H] f16 bits
  std::vector<float> decoded;       // [length][H][D]: what the newest query reads (NaN: not visible)
};

struct KvTwin {
  KvLayerShape shape;
  std::int64_t length = 0;
  DecodeSpan span;
  TwinPart k, v;
};

// Random f16 values of n rows x cols, N(0, 1) with a few loud channels (as real keys
// have), times `gain`.
inline std::vector<std::uint16_t> random_f16(std::mt19937& rng, std::int64_t rows, std::int64_t cols, float gain) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> channel(static_cast<std::size_t>(cols));
  for (float& c : channel) c = gain * (normal(rng) > 1.5f ? 6.0f : 1.0f);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = formats::float_to_half(normal(rng) * channel[i % static_cast<std::size_t>(cols)]).bits;
  }
  return out;
}

inline std::uint16_t poison_f16() { return static_cast<std::uint16_t>(0x0101u * kFloatPoison); }

namespace detail {

// Quantizes tokens [first, first + n) of x (f16 [tokens][H][D]) into the body slots of
// those positions, and writes their decoded values.
inline void quantize_tokens(const KvLayerShape& s, const std::vector<std::uint16_t>& x, std::int64_t first,
                            std::int64_t n, TwinPart& part) {
  if (n <= 0) return;
  const std::int64_t h = s.kv_heads, d = s.head_dim, rows = n * h;
  const int bits = s.body == KvBody::int8 ? 8 : 4;
  std::vector<float> in(static_cast<std::size_t>(rows * d));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = formats::half_to_float({x[static_cast<std::size_t>(first * h * d) + i]});
  const std::int64_t slot = first - s.body_base;
  std::uint8_t* codes = part.codes.data() + slot * h * s.code_bytes();
  std::uint16_t* scales = part.scales.data() + slot * h;
  std::uint16_t* mins = s.has_mins() ? part.mins.data() + slot * h : nullptr;
  cpu::kv_quantize(bits, in.data(), rows, d, d, codes, scales, mins);  // one group per head
  cpu::kv_dequantize(bits, codes, scales, mins, rows, d, d, part.decoded.data() + first * h * d);
}

inline void build_part(const KvLayerShape& s, const DecodeSpan& span, std::int64_t length,
                       const std::vector<std::uint16_t>& x, TwinPart& part) {
  const std::int64_t h = s.kv_heads, d = s.head_dim;
  part.f16.assign(static_cast<std::size_t>(h * s.f16_slots() * d), 0x0101u * kFloatPoison);
  part.codes.assign(s.code_bytes_total(), kCodePoison);
  part.scales.assign(s.param_count(), poison_f16());
  part.mins.assign(s.has_mins() ? s.param_count() : 0, poison_f16());
  part.decoded.assign(static_cast<std::size_t>(length * h * d), NAN);
  const bool all_quantized = s.body != KvBody::none && s.window == 0;
  if (all_quantized) {
    quantize_tokens(s, x, 0, length, part);
    return;
  }
  // Appends in order: a later position overwrites a ring slot, as on the device.
  for (std::int64_t pos = 0; pos < length; ++pos) {
    for (std::int64_t head = 0; head < h; ++head) {
      for (std::int64_t c = 0; c < d; ++c) {
        part.f16[static_cast<std::size_t>((head * s.f16_slots() + s.slot(pos)) * d + c)] =
            x[static_cast<std::size_t>((pos * h + head) * d + c)];
      }
    }
  }
  auto fp16_form = [&](std::int64_t pos) {
    for (std::int64_t i = pos * h * d; i < (pos + 1) * h * d; ++i) {
      part.decoded[static_cast<std::size_t>(i)] = formats::half_to_float({x[static_cast<std::size_t>(i)]});
    }
  };
  for (std::int64_t p = 0; p < span.sink_end; ++p) fp16_form(p);
  for (std::int64_t p = span.recent_begin; p < span.end; ++p) fp16_form(p);
  // Selective: everything that left the window, quantized from its FP16 value.
  if (s.body != KvBody::none) quantize_tokens(s, x, span.sink_end, span.recent_begin - span.sink_end, part);
}

}  // namespace detail

inline KvTwin build_kv_twin(const KvLayerShape& shape, std::int64_t length, const std::vector<std::uint16_t>& k,
                            const std::vector<std::uint16_t>& v) {
  KvTwin t;
  t.shape = shape;
  t.length = length;
  t.span = cuda::engine::decode_span(shape, length);
  detail::build_part(shape, t.span, length, k, t.k);
  detail::build_part(shape, t.span, length, v, t.v);
  return t;
}

// The positions the newest query reads, in order.
inline std::vector<std::int64_t> visible_positions(const KvTwin& t) {
  std::vector<std::int64_t> out;
  for (std::int64_t p = 0; p < t.span.sink_end; ++p) out.push_back(p);
  if (!t.shape.drops()) {
    for (std::int64_t p = t.span.sink_end; p < t.span.recent_begin; ++p) out.push_back(p);
  }
  for (std::int64_t p = t.span.recent_begin; p < t.span.end; ++p) out.push_back(p);
  return out;
}

// Attention of q (f16 [n_heads][D]) over the decoded cache, in double; also, per head,
// Vmax = max |v| over what it reads and Smax = max_j sum_d |q_d k_jd| / sqrt(D).
struct TwinAttention {
  std::vector<double> out, vmax, smax;
};

inline TwinAttention twin_attention(const KvTwin& t, const std::vector<std::uint16_t>& q, std::int64_t n_heads) {
  const std::int64_t hkv = t.shape.kv_heads, d = t.shape.head_dim, group = n_heads / hkv;
  const std::vector<std::int64_t> pos = visible_positions(t);
  TwinAttention r;
  r.out.assign(static_cast<std::size_t>(n_heads * d), 0.0);
  r.vmax.assign(static_cast<std::size_t>(n_heads), 0.0);
  r.smax.assign(static_cast<std::size_t>(n_heads), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> s(pos.size());
  for (std::int64_t h = 0; h < n_heads; ++h) {
    const std::int64_t kvh = h / group;
    double mx = -INFINITY;
    for (std::size_t j = 0; j < pos.size(); ++j) {
      const float* kr = t.k.decoded.data() + (pos[j] * hkv + kvh) * d;
      double dot = 0.0, mag = 0.0;
      for (std::int64_t c = 0; c < d; ++c) {
        const double qc = formats::half_to_float({q[static_cast<std::size_t>(h * d + c)]});
        dot += qc * kr[c];
        mag += std::fabs(qc * kr[c]);
      }
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
      r.smax[static_cast<std::size_t>(h)] = std::max(r.smax[static_cast<std::size_t>(h)], mag * scale);
    }
    double total = 0.0;
    for (double& x : s) total += (x = std::exp(x - mx));
    for (std::size_t j = 0; j < pos.size(); ++j) {
      const float* vr = t.v.decoded.data() + (pos[j] * hkv + kvh) * d;
      for (std::int64_t c = 0; c < d; ++c) {
        r.out[static_cast<std::size_t>(h * d + c)] += s[j] / total * vr[c];
        r.vmax[static_cast<std::size_t>(h)] = std::max(r.vmax[static_cast<std::size_t>(h)], std::fabs(double{vr[c]}));
      }
    }
  }
  return r;
}

}  // namespace lowbit::test
