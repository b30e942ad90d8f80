// The decode cache's CPU twin (cpu/kv_cache.h) over host buffers poisoned as a test's
// device buffers are: the exact bytes a device layer holds after `length` appends of
// given f16 K/V, the values the newest query reads, and its attention in double with
// the magnitudes the GPU tests' tolerances use. Slots nothing wrote keep the poison, so
// a kernel that reads one produces NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/poison.h"
#include "core/kv_layout.h"
#include "cpu/kv_cache.h"
#include "formats/float16.h"

namespace lowbit::test {

using core::DecodeSpan;
using core::KvBody;
using core::KvLayerShape;

struct TwinPart {
  std::vector<std::uint16_t> f16;  // [H][f16_slots][D]
  std::vector<std::uint8_t> codes;  // [body_slots][H][code_bytes]
  std::vector<std::uint16_t> scales, mins;  // [body_slots][H] f16 bits (K with key blocks: [block][H][D])
  std::vector<std::uint16_t> staged;        // K with key blocks: [H][key_block][D] FP16 bits
  std::vector<float> visible;       // [visible][H][D]: what the newest query reads, in position order
};

struct KvTwin {
  KvLayerShape shape;
  std::int64_t length = 0;
  DecodeSpan span;
  TwinPart k, v;
};

// The policies with a quantized body, as the key-block tests sweep them.
struct QuantizingPolicy {
  KvPolicy policy;
  int bits;
  const char* name;
};
inline constexpr QuantizingPolicy kQuantizingPolicies[] = {{KvPolicy::selective, 8, "selective INT8"},
                                                           {KvPolicy::selective, 4, "selective INT4"},
                                                           {KvPolicy::int8, 8, "int8"},
                                                           {KvPolicy::int4, 4, "int4"}};

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

// The layer shape of a policy (the fields of KvCacheSpec, in its order).
inline KvLayerShape kv_shape(KvPolicy policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
                             std::int64_t window, int kv_bits, std::int64_t max_tokens) {
  return core::kv_layer_shape(KvCacheSpec{policy, kv_heads, head_dim, sink, window, kv_bits, max_tokens});
}

inline std::uint16_t poison_f16() { return static_cast<std::uint16_t>(0x0101u * kFloatPoison); }

// is_k: the part that key blocks (shape.key_block) lay out per block and channel.
inline void poison_part(const KvLayerShape& s, TwinPart& p, bool is_k = false) {
  const std::size_t params = is_k ? s.key_param_count() : s.param_count();
  p.f16.assign(static_cast<std::size_t>(s.kv_heads * s.f16_slots() * s.head_dim), poison_f16());
  p.codes.assign(s.code_bytes_total(), kCodePoison);
  p.scales.assign(params, poison_f16());
  p.mins.assign(s.has_mins() ? params : 0, poison_f16());
  p.staged.assign(is_k ? s.staged_bytes() / 2 : 0, poison_f16());
}

inline core::KvPart part_buffers(TwinPart& p) {
  return core::KvPart{p.f16.data(), p.codes.data(), p.scales.data(), p.mins.empty() ? nullptr : p.mins.data(),
                      p.staged.empty() ? nullptr : p.staged.data()};
}

inline core::KvLayerBuffers twin_buffers(KvTwin& t) { return {part_buffers(t.k), part_buffers(t.v)}; }

// The twin after appending tokens 0 .. length - 1 of k and v (f16 [length][H][D]) in order.
inline KvTwin build_kv_twin(const KvLayerShape& shape, std::int64_t length, const std::vector<std::uint16_t>& k,
                            const std::vector<std::uint16_t>& v) {
  KvTwin t;
  t.shape = shape;
  t.length = length;
  t.span = core::decode_span(shape, length);
  poison_part(shape, t.k, true);
  poison_part(shape, t.v);
  const core::KvLayerBuffers b = twin_buffers(t);
  const std::int64_t row = shape.kv_heads * shape.head_dim;
  for (std::int64_t pos = 0; pos < length; ++pos) {
    cpu::kv_append(shape, b, pos, k.data() + pos * row, shape.head_dim, v.data() + pos * row, shape.head_dim);
  }
  t.k.visible = cpu::kv_visible_values(shape, b.k, length);
  t.v.visible = cpu::kv_visible_values(shape, b.v, length);
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

// The twin's attention of q (f16 [n_heads][D]) in double; also, per head, Vmax = max |v|
// over what it reads and Smax = max_j sum_d |q_d k_jd| / sqrt(D).
struct TwinAttention {
  std::vector<double> out, vmax, smax;
};

inline TwinAttention twin_attention(const KvTwin& t, const std::vector<std::uint16_t>& q, std::int64_t n_heads) {
  const std::int64_t hkv = t.shape.kv_heads, d = t.shape.head_dim, group = n_heads / hkv;
  const auto n = static_cast<std::int64_t>(t.k.visible.size()) / (hkv * d);
  TwinAttention r;
  // The twin's functions only read through these pointers.
  r.out = cpu::kv_attention_f64(t.shape, twin_buffers(const_cast<KvTwin&>(t)), t.length, q.data(), n_heads);
  r.vmax.assign(static_cast<std::size_t>(n_heads), 0.0);
  r.smax.assign(static_cast<std::size_t>(n_heads), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (std::int64_t h = 0; h < n_heads; ++h) {
    const std::int64_t kvh = h / group;
    for (std::int64_t j = 0; j < n; ++j) {
      const float* kr = t.k.visible.data() + (j * hkv + kvh) * d;
      const float* vr = t.v.visible.data() + (j * hkv + kvh) * d;
      double mag = 0.0;
      for (std::int64_t c = 0; c < d; ++c) {
        mag += std::fabs(formats::half_to_float({q[static_cast<std::size_t>(h * d + c)]}) * kr[c]);
        r.vmax[static_cast<std::size_t>(h)] = std::max(r.vmax[static_cast<std::size_t>(h)], std::fabs(double{vr[c]}));
      }
      r.smax[static_cast<std::size_t>(h)] = std::max(r.smax[static_cast<std::size_t>(h)], mag * scale);
    }
  }
  return r;
}

}  // namespace lowbit::test
