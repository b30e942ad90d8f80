#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cpu/kv_cache.h"
#include "formats/float16.h"
#include "formats/hadamard.h"
#include "lowbit/error.h"

namespace lowbit::engine {

const char* kv_rotate_name(KvRotate rotate) {
  switch (rotate) {
    case KvRotate::off: return "off";
    case KvRotate::k: return "k";
    case KvRotate::kv: return "kv";
  }
  return "?";
}

KvRotate parse_kv_rotate(const char* name) {
  const std::string n = name ? name : "";
  if (n == "off") return KvRotate::off;
  if (n == "k") return KvRotate::k;
  if (n == "kv") return KvRotate::kv;
  LOWBIT_FAIL("kv cache: kv_rotate '", n, "', expected off, k or kv");
}

namespace {

struct Resolved {
  bool quantizes = false;
  QuantSpec spec{};
  std::int64_t code_bytes = 0;  // per token, all heads
  std::int64_t params = 0;      // scales per token, all heads (mins: as many again for INT4)
  std::int64_t rows_per_token = 0, cols = 0;  // the matrix one token's K (or V) is quantized as
};

Resolved resolve(const KvShape& shape, const KvCacheOptions& o) {
  LOWBIT_CHECK(shape.layers > 0 && shape.kv_heads > 0 && shape.head_dim > 0, "kv cache: shape [layers ", shape.layers,
               ", kv_heads ", shape.kv_heads, ", head_dim ", shape.head_dim, "] must be positive");
  const auto p = static_cast<int>(o.policy);
  LOWBIT_CHECK(p >= 0 && p <= static_cast<int>(KvPolicy::int4), "kv cache: unknown policy ", p);
  if (o.policy == KvPolicy::window || o.policy == KvPolicy::selective) {
    LOWBIT_CHECK(o.sink >= 0, "kv cache: sink = ", o.sink, ", expected >= 0");
    LOWBIT_CHECK(o.window >= 1, "kv cache: window = ", o.window, ", expected >= 1");
  }
  Resolved r;
  int bits = 0;
  if (o.policy == KvPolicy::int8) bits = 8;
  if (o.policy == KvPolicy::int4) bits = 4;
  if (o.policy == KvPolicy::selective) {
    LOWBIT_CHECK(o.kv_bits == 8 || o.kv_bits == 4, "kv cache: kv_bits = ", o.kv_bits, ", expected 8 or 4");
    bits = o.kv_bits;
  }
  const auto rot = static_cast<int>(o.kv_rotate);
  LOWBIT_CHECK(rot >= 0 && rot <= static_cast<int>(KvRotate::kv), "kv cache: unknown kv_rotate ", rot);
  LOWBIT_CHECK(o.kv_key_block == 0 || (o.kv_key_block >= 2 && o.kv_key_block <= 1024), "kv cache: kv_key_block = ",
               o.kv_key_block, ", expected 0 (off) or 2..1024");
  if (bits == 0) return r;
  r.quantizes = true;
  LOWBIT_CHECK(o.kv_rotate == KvRotate::off || formats::hadamard_size_ok(shape.head_dim), "kv cache: kv_rotate ",
               kv_rotate_name(o.kv_rotate), " needs head_dim a power of two, got ", shape.head_dim);
  const std::int64_t d = shape.head_dim, kv = shape.kv_dim();
  // Default: one scale (and min) per token per head, for INT8 and INT4 alike.
  const std::int64_t group = o.kv_group != 0 ? o.kv_group : d;
  // Groups never straddle a head unless they cover whole heads: either a part of a
  // head (a multiple of 16, lowbit's per_group rule) or whole heads of the token.
  const bool within_head = group == d || (group > 0 && group % 16 == 0 && group < d);
  const bool whole_heads = group > d && group % d == 0 && kv % group == 0 && (group == kv || group % 16 == 0);
  LOWBIT_CHECK(within_head || whole_heads, "kv cache: kv_group = ", o.kv_group, ", expected head_dim (", d,
               "), a multiple of 16 below it, or a multiple of head_dim dividing kv_heads * head_dim (", kv, ")");
  // One token is a [rows_per_token x cols] matrix: [kv_heads x head_dim] for groups
  // within a head (per_token = one scale per head), [1 x kv_dim] for whole heads.
  r.cols = within_head ? d : kv;
  r.rows_per_token = within_head ? shape.kv_heads : 1;
  r.spec.scheme = bits == 8          ? QuantScheme::int8_symmetric
                  : o.kv_symmetric ? QuantScheme::int4_symmetric
                                   : QuantScheme::int4_asymmetric;
  r.spec.granularity = group == r.cols ? Granularity::per_token : Granularity::per_group;
  r.spec.group_size = group == r.cols ? 0 : group;
  const QuantLayout layout = quant_layout(r.spec, 1, r.cols);
  r.code_bytes = r.rows_per_token * layout.code_cols;
  r.params = r.rows_per_token * layout.scale_cols;
  return r;
}

std::int64_t fp16_capacity(const KvCacheOptions& o, std::int64_t tokens) {
  switch (o.policy) {
    case KvPolicy::full: return tokens;
    case KvPolicy::window:
    case KvPolicy::selective: return std::min(tokens, o.sink + o.window);
    default: return 0;
  }
}

std::int64_t quant_count(const KvCacheOptions& o, std::int64_t tokens) {
  switch (o.policy) {
    case KvPolicy::selective: return std::max<std::int64_t>(0, tokens - o.sink - o.window);
    case KvPolicy::int8:
    case KvPolicy::int4: return tokens;
    default: return 0;
  }
}

}  // namespace

KvCache::KvCache(KvShape shape, KvCacheOptions options, std::int64_t max_tokens)
    : shape_(shape), options_(options), max_tokens_(max_tokens) {
  const Resolved r = resolve(shape, options);
  // The bound keeps a hostile --context from turning into a multi-terabyte allocation.
  LOWBIT_CHECK(max_tokens > 0 && max_tokens <= (std::int64_t{1} << 24), "kv cache: max_tokens = ", max_tokens,
               ", expected 1..", std::int64_t{1} << 24);
  quantizes_ = r.quantizes;
  spec_ = r.spec;
  code_bytes_ = r.code_bytes;
  params_per_token_ = r.params;
  rows_per_token_ = r.rows_per_token;
  quant_cols_ = r.cols;
  const auto kv = static_cast<std::size_t>(shape.kv_dim());
  const auto f16_slots = static_cast<std::size_t>(fp16_capacity(options, max_tokens));
  const auto q_slots = static_cast<std::size_t>(quant_count(options, max_tokens));
  const bool mins = r.quantizes && scheme_has_mins(r.spec.scheme);
  for (auto* parts : {&keys_, &values_}) {
    parts->resize(static_cast<std::size_t>(shape.layers));
    for (Part& part : *parts) {
      part.f16.resize(f16_slots * kv);
      part.codes.resize(q_slots * static_cast<std::size_t>(code_bytes_));
      part.scales.resize(q_slots * static_cast<std::size_t>(params_per_token_));
      if (mins) part.mins.resize(part.scales.size());
      const bool fp16_forms = options.policy != KvPolicy::int8 && options.policy != KvPolicy::int4;
      if (fp16_forms) part.decoded16.resize(static_cast<std::size_t>(max_tokens) * kv);
      if (r.quantizes) part.decodedq.resize(static_cast<std::size_t>(max_tokens) * kv);
    }
  }
  if (r.quantizes && options.kv_key_block > 0) {
    const auto block = static_cast<std::size_t>(options.kv_key_block);
    for (Part& part : keys_) {
      part.block = options.kv_key_block;
      part.staged.resize(block * kv);
      part.decoded16.resize(static_cast<std::size_t>(max_tokens) * kv);
      part.codes.resize((q_slots / block) * block * static_cast<std::size_t>(code_bytes_));
      part.scales.assign((q_slots / block) * kv, 0);
      if (mins) part.mins.resize(part.scales.size());
    }
  }
  length_.assign(static_cast<std::size_t>(shape.layers), 0);
  scratch_.resize(kv);
  rotate_k_ = r.quantizes && options.kv_rotate != KvRotate::off;
  rotate_v_ = r.quantizes && options.kv_rotate == KvRotate::kv;
}

void KvCache::rotate_heads(float* x, std::int64_t n) const {
  const std::int64_t d = shape_.head_dim;
  for (std::int64_t i = 0; i < n * shape_.kv_heads; ++i) formats::hadamard_rotate(x + i * d, d);
}

void KvCache::reset() { std::fill(length_.begin(), length_.end(), 0); }

std::int64_t KvCache::block_done(std::int64_t pos) const {
  const std::int64_t b = options_.kv_key_block;
  if (options_.policy != KvPolicy::selective) return (pos / b + 1) * b - 1;
  const std::int64_t j = pos - options_.sink;  // body index
  return options_.sink + (j / b + 1) * b - 1 + options_.window;
}

void KvCache::stage_key(Part& part, std::int64_t pos, std::int64_t index, const std::uint16_t* f16, bool rotated) {
  const std::int64_t kv = shape_.kv_dim(), b = part.block;
  std::copy(f16, f16 + kv, part.staged.begin() + (index % b) * kv);
  if (index % b != b - 1) return;
  // The block is full: tokens pos - b + 1 .. pos, quantized as a [kv_dim x b] matrix
  // (one group per channel), the codes kept channel-major within the block.
  const int bits = scheme_bits(spec_.scheme);
  const bool symmetric4 = spec_.scheme == QuantScheme::int4_symmetric;
  const std::int64_t block_index = index / b;
  std::vector<float> t(static_cast<std::size_t>(kv * b)), back(t.size());
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t c = 0; c < kv; ++c) {
      const std::uint16_t bits = part.staged[static_cast<std::size_t>(i * kv + c)];
      t[static_cast<std::size_t>(c * b + i)] = formats::half_to_float({bits});
    }
  }
  const std::int64_t code_bytes = bits == 8 ? kv * b : kv * b / 2;
  std::uint8_t* codes = part.codes.data() + block_index * code_bytes;
  std::uint16_t* scales = part.scales.data() + block_index * kv;
  std::uint16_t* mins = part.mins.empty() ? nullptr : part.mins.data() + block_index * kv;
  cpu::kv_quantize(bits, t.data(), kv, b, b, codes, scales, mins, symmetric4);
  cpu::kv_dequantize_to_f16(bits, codes, scales, mins, kv, b, b, back.data(), symmetric4);  // the kernels' keys
  for (std::int64_t i = 0; i < b; ++i) {
    float* out = part.decodedq.data() + (pos - b + 1 + i) * kv;
    for (std::int64_t c = 0; c < kv; ++c) out[c] = back[static_cast<std::size_t>(c * b + i)];
    if (rotated) rotate_heads(out, 1);
  }
}

std::int64_t KvCache::f16_slot(std::int64_t pos) const {
  if (options_.policy == KvPolicy::full || pos < options_.sink) return pos;
  return options_.sink + (pos - options_.sink) % options_.window;  // ring of `window` slots
}

// Codes, f16 scales (mins) of n tokens into quantized slots [slot, slot + n), and their
// decoded values into `decoded` (n x kv_dim), both through the KV cache's quantization
// (cpu/kv_cache.h: the GPU append's arithmetic). x is rotated already when `rotated`;
// the decoded values are then rotated back, so that readers see the part's own space.
void KvCache::quantize_into(Part& part, std::int64_t slot, std::int64_t n, const float* x, float* decoded,
                            bool rotated) {
  const std::int64_t rows = n * rows_per_token_;
  const int bits = scheme_bits(spec_.scheme);
  const std::int64_t group = spec_.group_size != 0 ? spec_.group_size : quant_cols_;
  std::uint8_t* codes = part.codes.data() + slot * code_bytes_;
  std::uint16_t* scales = part.scales.data() + slot * params_per_token_;
  std::uint16_t* mins = part.mins.empty() ? nullptr : part.mins.data() + slot * params_per_token_;
  const bool symmetric4 = spec_.scheme == QuantScheme::int4_symmetric;
  cpu::kv_quantize(bits, x, rows, quant_cols_, group, codes, scales, mins, symmetric4);
  cpu::kv_dequantize(bits, codes, scales, mins, rows, quant_cols_, group, decoded, symmetric4);
  if (rotated) rotate_heads(decoded, n);
}

// x: the token's f32 row in its own space; `rotated`: the policy rotates this part, so
// the FP16 slot holds the rotated values (which selective quantizes when they leave the
// window) and the decoded mirror their rotation back.
void KvCache::append_one_part(Part& part, std::int64_t pos, const float* x, bool rotated) {
  const std::int64_t kv = shape_.kv_dim();
  float* decoded = part.decoded16.data() + pos * kv;
  if (options_.policy == KvPolicy::selective && pos >= options_.sink + options_.window) {
    // Token pos - window leaves the window: quantize its FP16 value (the only form a
    // cache keeps) into its quantized slot; its ring slot is pos's.
    const std::int64_t evicted = pos - options_.window;
    const std::uint16_t* old = part.f16.data() + f16_slot(evicted) * kv;
    if (part.block > 0) {
      // Staged in FP16 (the mirror stays) until its block of the body (index
      // position - sink) is full.
      stage_key(part, evicted, evicted - options_.sink, old, rotated);
    } else {
      for (std::int64_t i = 0; i < kv; ++i) scratch_[static_cast<std::size_t>(i)] = formats::half_to_float({old[i]});
      quantize_into(part, evicted - options_.sink, 1, scratch_.data(), part.decodedq.data() + evicted * kv, rotated);
    }
  }
  if (rotated) {
    std::copy(x, x + kv, scratch_.begin());
    rotate_heads(scratch_.data(), 1);
    x = scratch_.data();
  }
  std::uint16_t* slot = part.f16.data() + f16_slot(pos) * kv;
  for (std::int64_t i = 0; i < kv; ++i) {
    slot[i] = formats::float_to_half(x[i]).bits;
    decoded[i] = formats::half_to_float({slot[i]});
  }
  if (rotated) rotate_heads(decoded, 1);
}

void KvCache::append(std::int64_t layer, std::int64_t n, const float* k, const float* v) {
  LOWBIT_CHECK(layer >= 0 && layer < shape_.layers, "kv cache: layer ", layer, " out of range 0..", shape_.layers - 1);
  auto& len = length_[static_cast<std::size_t>(layer)];
  LOWBIT_CHECK(n >= 1 && n <= max_tokens_ - len, "kv cache: appending ", n, " tokens to ", len,
               " would exceed max_tokens = ", max_tokens_, " (the context the cache was sized for)");
  Part& kp = keys_[static_cast<std::size_t>(layer)];
  Part& vp = values_[static_cast<std::size_t>(layer)];
  const std::int64_t kv = shape_.kv_dim();
  if (options_.policy == KvPolicy::int8 || options_.policy == KvPolicy::int4) {
    auto quantize_part = [&](Part& part, const float* x, bool rotated) {
      if (rotated) {  // the f32 rows rotated, then quantized
        rotated_.assign(x, x + n * kv);
        rotate_heads(rotated_.data(), n);
        x = rotated_.data();
      }
      quantize_into(part, len, n, x, part.decodedq.data() + len * kv, rotated);
    };
    if (kp.block > 0) {  // keys staged in FP16 one at a time, quantized by blocks
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t pos = len + i;
        std::copy(k + i * kv, k + (i + 1) * kv, scratch_.begin());
        if (rotate_k_) rotate_heads(scratch_.data(), 1);
        std::vector<std::uint16_t> f16(static_cast<std::size_t>(kv));
        float* mirror = kp.decoded16.data() + pos * kv;
        for (std::int64_t c = 0; c < kv; ++c) {
          f16[static_cast<std::size_t>(c)] = formats::float_to_half(scratch_[static_cast<std::size_t>(c)]).bits;
          mirror[c] = formats::half_to_float({f16[static_cast<std::size_t>(c)]});
        }
        if (rotate_k_) rotate_heads(mirror, 1);
        stage_key(kp, pos, pos, f16.data(), rotate_k_);
      }
    } else {
      quantize_part(kp, k, rotate_k_);
    }
    quantize_part(vp, v, rotate_v_);
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      append_one_part(kp, len + i, k + i * kv, rotate_k_);
      append_one_part(vp, len + i, v + i * kv, rotate_v_);
    }
  }
  len += n;
}

KvCache::Visible KvCache::visible(std::int64_t layer, std::int64_t t) const {
  LOWBIT_CHECK(t >= 0 && t < length(layer), "kv cache: query position ", t, " is not below the length ", length(layer));
  if (options_.policy != KvPolicy::window) return {0, 0, t + 1};
  const std::int64_t sink_end = std::min(options_.sink, t + 1);
  return {sink_end, std::max(sink_end, t + 1 - options_.window), t + 1};
}

const float* KvCache::read(const Part& part, std::int64_t pos, std::int64_t t) const {
  const std::int64_t kv = shape_.kv_dim();
  if (part.block > 0) {  // blocked keys: FP16 (window, sink, or staged) until the block is done
    const bool body = options_.policy != KvPolicy::selective || (pos >= options_.sink && pos <= t - options_.window);
    return (body && t >= block_done(pos) ? part.decodedq.data() : part.decoded16.data()) + pos * kv;
  }
  switch (options_.policy) {
    case KvPolicy::int8:
    case KvPolicy::int4: return part.decodedq.data() + pos * kv;
    case KvPolicy::selective:
      // Token pos was quantized when token pos + window arrived.
      if (pos >= options_.sink && pos <= t - options_.window) return part.decodedq.data() + pos * kv;
      return part.decoded16.data() + pos * kv;
    default: return part.decoded16.data() + pos * kv;
  }
}

const float* KvCache::key(std::int64_t layer, std::int64_t pos, std::int64_t t) const {
  return read(keys_[static_cast<std::size_t>(layer)], pos, t);
}

const float* KvCache::value(std::int64_t layer, std::int64_t pos, std::int64_t t) const {
  return read(values_[static_cast<std::size_t>(layer)], pos, t);
}

std::size_t KvCache::bytes_at(const KvShape& shape, const KvCacheOptions& options, std::int64_t tokens) {
  const Resolved r = resolve(shape, options);
  const std::int64_t f16_bytes = shape.kv_dim() * 2;
  const std::int64_t mins = r.quantizes && scheme_has_mins(r.spec.scheme) ? 2 : 1;
  const std::int64_t q_bytes = r.code_bytes + r.params * 2 * mins;  // f16 scales (and mins)
  const std::int64_t per_part = fp16_capacity(options, tokens) * f16_bytes + quant_count(options, tokens) * q_bytes;
  if (!r.quantizes || options.kv_key_block == 0) {
    return static_cast<std::size_t>(per_part * 2 * shape.layers);  // K and V
  }
  // Blocked keys: complete blocks as codes + one f16 scale (and min) per channel each,
  // the open block's tokens in FP16.
  const std::int64_t b = options.kv_key_block, nq = quant_count(options, tokens);
  const std::int64_t blocks = nq / b, staged = nq - blocks * b;
  const std::int64_t keys = fp16_capacity(options, tokens) * f16_bytes + blocks * b * r.code_bytes +
                            blocks * shape.kv_dim() * 2 * mins + staged * f16_bytes;
  return static_cast<std::size_t>((per_part + keys) * shape.layers);
}

}  // namespace lowbit::engine
