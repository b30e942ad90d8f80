#include "cpu/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats/code_scheme.h"
#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"
#include "lowbit/error.h"

namespace lowbit::cpu {
namespace {

void check_args(int bits, std::int64_t rows, std::int64_t cols, std::int64_t group) {
  LOWBIT_CHECK(bits == 8 || bits == 4, "kv quantize: bits = ", bits, ", expected 8 or 4");
  LOWBIT_CHECK(rows >= 0 && cols > 0 && group > 0 && cols % group == 0 && (bits == 8 || group % 2 == 0),
               "kv quantize: ", rows, " x ", cols, " values in groups of ", group,
               " (a divisor of the columns, even for INT4)");
}

template <class Scheme>
void quantize_typed(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t group, std::uint8_t* codes,
                    std::uint16_t* scales, std::uint16_t* mins) {
  const std::int64_t groups = cols / group;
  const std::int64_t code_cols = Scheme::kBits == 8 ? cols : cols / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* v = x + r * cols + g * group;
      // The statistics as the GPU append's warp reduction has them: max |x| as bits, min, max.
      std::uint32_t abs_bits = 0;
      float lo = v[0], hi = v[0];
      for (std::int64_t i = 0; i < group; ++i) {
        const std::uint32_t b = formats::abs_bits(v[i]);
        abs_bits = b > abs_bits ? b : abs_bits;
        lo = std::fmin(lo, v[i]);
        hi = std::fmax(hi, v[i]);
      }
      if (!formats::is_finite_bits(abs_bits)) {
        for (std::int64_t i = 0; i < group; ++i) {
          LOWBIT_CHECK(std::isfinite(v[i]), "kv quantize: x contains ", v[i], " at row ", r, ", column ",
                       g * group + i, "; quantization needs finite values");
        }
      }
      const auto p = formats::HalfParams<Scheme>::from_range(formats::bits_to_float(abs_bits), lo, hi);
      scales[r * groups + g] = p.scale.bits;
      if constexpr (Scheme::kAsymmetric) mins[r * groups + g] = p.min.bits;
      std::uint8_t* q = codes + r * code_cols;
      const std::int64_t c0 = g * group;
      if constexpr (Scheme::kBits == 8) {
        for (std::int64_t i = 0; i < group; ++i) {
          q[c0 + i] = static_cast<std::uint8_t>(Scheme::to_storage(p.encode(v[i])));
        }
      } else {
        for (std::int64_t i = 0; i < group; i += 2) {
          q[(c0 + i) / 2] = static_cast<std::uint8_t>(Scheme::to_storage(p.encode(v[i])) |
                                                      Scheme::to_storage(p.encode(v[i + 1])) << 4);
        }
      }
    }
  }
}

template <class Scheme, bool ToF16 = false>
void dequantize_typed(const std::uint8_t* codes, const std::uint16_t* scales, const std::uint16_t* mins,
                      std::int64_t rows, std::int64_t cols, std::int64_t group, float* out) {
  const std::int64_t groups = cols / group;
  const std::int64_t code_cols = Scheme::kBits == 8 ? cols : cols / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint16_t min_bits = Scheme::kAsymmetric ? mins[r * groups + g] : std::uint16_t{0};
      const auto p =
          formats::HalfParams<Scheme>::from_stored(formats::Half{scales[r * groups + g]}, formats::Half{min_bits});
      for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
        const std::uint8_t byte = codes[r * code_cols + (Scheme::kBits == 8 ? c : c / 2)];
        const unsigned stored = Scheme::kBits == 8 || c % 2 == 0 ? byte : byte >> 4u;
        const int code = Scheme::from_storage(stored);
        out[r * cols + c] = ToF16 ? f16_decoded(code, p.s, p.m) : p.decode(code);
      }
    }
  }
}

// kv_dequantize's scheme dispatch; ToF16: each value rounded once to f16.
template <bool ToF16>
void dequantize_scheme(int bits, const std::uint8_t* codes, const std::uint16_t* scales, const std::uint16_t* mins,
                       std::int64_t rows, std::int64_t cols, std::int64_t group, float* out, bool int4_symmetric) {
  check_args(bits, rows, cols, group);
  if (bits == 8) {
    dequantize_typed<formats::Int8Symmetric, ToF16>(codes, scales, mins, rows, cols, group, out);
  } else if (int4_symmetric) {
    dequantize_typed<formats::Int4Symmetric, ToF16>(codes, scales, nullptr, rows, cols, group, out);
  } else {
    LOWBIT_CHECK(mins != nullptr, "kv dequantize: INT4 needs mins");
    dequantize_typed<formats::Int4Asymmetric, ToF16>(codes, scales, mins, rows, cols, group, out);
  }
}

}  // namespace

void kv_quantize(int bits, const float* x, std::int64_t rows, std::int64_t cols, std::int64_t group,
                 std::uint8_t* codes, std::uint16_t* scales, std::uint16_t* mins, bool int4_symmetric) {
  check_args(bits, rows, cols, group);
  if (bits == 8) {
    quantize_typed<formats::Int8Symmetric>(x, rows, cols, group, codes, scales, mins);
  } else if (int4_symmetric) {
    quantize_typed<formats::Int4Symmetric>(x, rows, cols, group, codes, scales, nullptr);
  } else {
    LOWBIT_CHECK(mins != nullptr, "kv quantize: INT4 needs mins");
    quantize_typed<formats::Int4Asymmetric>(x, rows, cols, group, codes, scales, mins);
  }
}

void kv_dequantize(int bits, const std::uint8_t* codes, const std::uint16_t* scales, const std::uint16_t* mins,
                   std::int64_t rows, std::int64_t cols, std::int64_t group, float* out, bool int4_symmetric) {
  dequantize_scheme<false>(bits, codes, scales, mins, rows, cols, group, out, int4_symmetric);
}

void kv_dequantize_to_f16(int bits, const std::uint8_t* codes, const std::uint16_t* scales,
                          const std::uint16_t* mins, std::int64_t rows, std::int64_t cols, std::int64_t group,
                          float* out, bool int4_symmetric) {
  dequantize_scheme<true>(bits, codes, scales, mins, rows, cols, group, out, int4_symmetric);
}

float f16_decoded(int code, float scale, float min) {
  return formats::half_to_float(formats::double_to_half(code * static_cast<double>(scale) + min));
}

// ---- the decode cache's twin ----------------------------------------------------------

namespace {

using core::DecodeSpan;
using core::KvBody;
using core::KvLayerBuffers;
using core::KvLayerShape;
using core::KvPart;

bool all_quantized(const KvLayerShape& s) { return s.body != KvBody::none && s.window == 0; }
int body_bits(const KvLayerShape& s) { return s.body == KvBody::int8 ? 8 : 4; }

// The body's codes and f16 parameters from body slot b on.
std::uint8_t* body_codes(const KvLayerShape& s, const KvPart& p, std::int64_t b) {
  return p.codes + b * s.kv_heads * s.code_bytes();
}
std::uint16_t* body_scales(const KvLayerShape& s, const KvPart& p, std::int64_t b) { return p.scales + b * s.kv_heads; }
std::uint16_t* body_mins(const KvLayerShape& s, const KvPart& p, std::int64_t b) {
  return s.has_mins() ? p.mins + b * s.kv_heads : nullptr;
}

// Quantizes x (f16 bits [kv_heads x head_dim], row stride ld) into body slot b, one
// group per head.
void quantize_token(const KvLayerShape& s, const KvPart& p, std::int64_t b, const std::uint16_t* x, std::int64_t ld) {
  const std::int64_t h = s.kv_heads, d = s.head_dim;
  std::vector<float> in(static_cast<std::size_t>(h * d));
  for (std::int64_t r = 0; r < h; ++r) {
    for (std::int64_t c = 0; c < d; ++c) in[static_cast<std::size_t>(r * d + c)] = formats::half_to_float({x[r * ld + c]});
  }
  kv_quantize(body_bits(s), in.data(), h, d, d, body_codes(s, p, b), body_scales(s, p, b), body_mins(s, p, b));
}

// Key blocks: block `block` of K's body from the staging ring, as the engine's KvCache
// (stage_key) quantizes it: cpu::kv_quantize over the block's [H*D x B] transposed
// values, one group per channel; the codes then go to their positions' rows.
void quantize_key_block(const KvLayerShape& s, const KvPart& p, std::int64_t block) {
  const std::int64_t hd = s.kv_heads * s.head_dim, b = s.key_block, d = s.head_dim;
  const int bits = body_bits(s);
  std::vector<float> t(static_cast<std::size_t>(hd * b));
  for (std::int64_t r = 0; r < hd; ++r) {  // r = head * D + channel
    for (std::int64_t i = 0; i < b; ++i) {
      const std::uint16_t bits16 = p.staged[((r / d) * b + i) * d + r % d];
      t[static_cast<std::size_t>(r * b + i)] = formats::half_to_float({bits16});
    }
  }
  const std::int64_t row_bytes = bits == 8 ? b : b / 2;  // channel-major codes of the block
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(hd * row_bytes));
  std::uint16_t* mins = s.has_mins() ? p.mins + block * hd : nullptr;
  kv_quantize(bits, t.data(), hd, b, b, codes.data(), p.scales + block * hd, mins);
  std::uint8_t* out = body_codes(s, p, block * b);  // the block's first position, head 0
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t r = 0; r < hd; ++r) {
      if (bits == 8) {
        out[i * hd + r] = codes[static_cast<std::size_t>(r * b + i)];
      } else {  // token i's nibble of channel r, into byte r / 2 of token i (channel 2j low)
        const std::uint8_t byte = codes[static_cast<std::size_t>(r * row_bytes + i / 2)];
        const std::uint8_t code = i % 2 == 0 ? byte & 0xFu : byte >> 4u;
        std::uint8_t& dst = out[(i * hd + r) / 2];
        dst = r % 2 == 0 ? static_cast<std::uint8_t>((dst & 0xF0u) | code)
                         : static_cast<std::uint8_t>((dst & 0x0Fu) | (code << 4u));
      }
    }
  }
}

// Key blocks: the FP16 key (f16 bits [H x D], row stride ld) of body position pos into
// the staging ring; quantizes its block when pos completes it.
void stage_key(const KvLayerShape& s, const KvPart& p, std::int64_t pos, const std::uint16_t* x, std::int64_t ld) {
  const std::int64_t d = s.head_dim, b = s.key_block, j = pos - s.body_base;
  for (std::int64_t head = 0; head < s.kv_heads; ++head) {
    std::memcpy(p.staged + (head * b + j % b) * d, x + head * ld, static_cast<std::size_t>(d) * 2);
  }
  if (j % b == b - 1) quantize_key_block(s, p, j / b);
}

void append_part(const KvLayerShape& s, const KvPart& p, std::int64_t pos, const std::uint16_t* x, std::int64_t ld,
                 bool key_blocks) {
  if (all_quantized(s)) {  // int8 / int4: quantized on arrival (blocked keys: when the block is complete)
    key_blocks ? stage_key(s, p, pos, x, ld) : quantize_token(s, p, pos - s.body_base, x, ld);
    return;
  }
  const std::int64_t h = s.kv_heads, d = s.head_dim, head_stride = s.f16_slots() * d;
  std::uint16_t* slot = p.f16 + s.slot(pos) * d;  // head 0; heads are head_stride apart
  if (s.body != KvBody::none && pos >= s.sink + s.window) {
    // pos - window leaves the window; its ring slot is pos's: quantize (or stage) it before
    // the overwrite.
    if (key_blocks) {
      stage_key(s, p, pos - s.window, slot, head_stride);
    } else {
      quantize_token(s, p, pos - s.window - s.body_base, slot, head_stride);
    }
  }
  for (std::int64_t head = 0; head < h; ++head) {
    std::memcpy(slot + head * head_stride, x + head * ld, static_cast<std::size_t>(d) * 2);
  }
}

// Positions [first, end) of the FP16 slots as f32 [pos][head][d].
void read_f16(const KvLayerShape& s, const KvPart& p, std::int64_t first, std::int64_t end, float* out) {
  const std::int64_t h = s.kv_heads, d = s.head_dim;
  for (std::int64_t pos = first; pos < end; ++pos) {
    for (std::int64_t head = 0; head < h; ++head) {
      const std::uint16_t* row = p.f16 + (head * s.f16_slots() + s.slot(pos)) * d;
      float* o = out + ((pos - first) * h + head) * d;
      for (std::int64_t c = 0; c < d; ++c) o[c] = formats::half_to_float({row[c]});
    }
  }
}

// Key blocks: K's body positions [first, end) as f32 [pos][head][d]: the complete blocks'
// codes decoded with their channel's parameters into f16 keys, f16(q s + min) by one
// rounding (as every kernel decodes them: the flash producers' and the decode kernels'
// HFMA2), the open block's FP16 values from the staging ring.
void read_key_blocks(const KvLayerShape& s, const KvPart& p, std::int64_t first, std::int64_t end, float* out) {
  const std::int64_t h = s.kv_heads, d = s.head_dim, open = s.open_block_begin(end);
  for (std::int64_t pos = first; pos < end; ++pos) {
    const std::int64_t j = pos - s.body_base, block = j / s.key_block;
    for (std::int64_t head = 0; head < h; ++head) {
      float* o = out + ((pos - first) * h + head) * d;
      for (std::int64_t c = 0; c < d; ++c) {
        if (pos >= open) {
          o[c] = formats::half_to_float({p.staged[(head * s.key_block + s.staged_slot(pos)) * d + c]});
          continue;
        }
        const std::int64_t param = (block * h + head) * d + c;
        const float scale = formats::half_to_float({p.scales[param]});
        const std::uint8_t* row = body_codes(s, p, j) + head * s.code_bytes();
        if (s.body == KvBody::int8) {
          o[c] = f16_decoded(static_cast<std::int8_t>(row[c]), scale, 0.0f);
        } else {
          const std::uint8_t byte = row[c / 2];
          const auto code = static_cast<std::uint8_t>(c % 2 == 0 ? byte & 0xFu : byte >> 4u);
          o[c] = f16_decoded(code, scale, formats::half_to_float({p.mins[param]}));
        }
      }
    }
  }
}

void read_body(const KvLayerShape& s, const KvPart& p, std::int64_t first, std::int64_t end, float* out) {
  if (end <= first) return;
  if (s.key_blocks() && p.staged) {  // K's part (V has no staging ring)
    read_key_blocks(s, p, first, end, out);
    return;
  }
  const std::int64_t b = first - s.body_base;
  kv_dequantize(body_bits(s), body_codes(s, p, b), body_scales(s, p, b), body_mins(s, p, b), (end - first) * s.kv_heads,
                s.head_dim, s.head_dim, out);
}

}  // namespace

void kv_append(const KvLayerShape& shape, const KvLayerBuffers& layer, std::int64_t pos, const std::uint16_t* k,
               std::int64_t k_ld, const std::uint16_t* v, std::int64_t v_ld) {
  LOWBIT_CHECK(!shape.key_blocks() || layer.k.staged, "kv append: key blocks need K's staging ring");
  append_part(shape, layer.k, pos, k, k_ld, shape.key_blocks());
  append_part(shape, layer.v, pos, v, v_ld, false);
}

std::vector<float> kv_visible_values(const KvLayerShape& s, const KvPart& p, std::int64_t length) {
  const DecodeSpan span = core::decode_span(s, length);
  const std::int64_t row = s.kv_heads * s.head_dim;
  std::vector<float> out(static_cast<std::size_t>(span.visible(s) * row));
  float* o = out.data();
  if (all_quantized(s)) {
    read_body(s, p, 0, span.end, o);
    return out;
  }
  read_f16(s, p, 0, span.sink_end, o);
  o += span.sink_end * row;
  if (!s.drops()) {
    if (s.body != KvBody::none) read_body(s, p, span.sink_end, span.recent_begin, o);  // full: an empty range
    o += (span.recent_begin - span.sink_end) * row;
  }
  read_f16(s, p, span.recent_begin, span.end, o);
  return out;
}

std::vector<double> kv_attention_f64(const KvLayerShape& s, const KvLayerBuffers& layer, std::int64_t length,
                                     const std::uint16_t* q, std::int64_t n_heads) {
  const std::int64_t hkv = s.kv_heads, d = s.head_dim, group = n_heads / hkv;
  const std::vector<float> k = kv_visible_values(s, layer.k, length);
  const std::vector<float> v = kv_visible_values(s, layer.v, length);
  const std::int64_t n = static_cast<std::int64_t>(k.size()) / (hkv * d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(static_cast<std::size_t>(n_heads * d));
  std::vector<double> p(static_cast<std::size_t>(n)), qd(static_cast<std::size_t>(d));
  for (std::int64_t h = 0; h < n_heads; ++h) {
    const std::int64_t kvh = h / group;
    for (std::int64_t c = 0; c < d; ++c) qd[static_cast<std::size_t>(c)] = formats::half_to_float({q[h * d + c]});
    double mx = -INFINITY;
    for (std::int64_t j = 0; j < n; ++j) {
      const float* kr = k.data() + (j * hkv + kvh) * d;
      double dot = 0.0;
      for (std::int64_t c = 0; c < d; ++c) dot += qd[static_cast<std::size_t>(c)] * kr[c];
      p[static_cast<std::size_t>(j)] = dot * scale;
      mx = std::max(mx, p[static_cast<std::size_t>(j)]);
    }
    double total = 0.0;
    for (double& x : p) total += (x = std::exp(x - mx));
    double* acc = out.data() + h * d;
    for (std::int64_t j = 0; j < n; ++j) {
      const float* vr = v.data() + (j * hkv + kvh) * d;
      for (std::int64_t c = 0; c < d; ++c) acc[c] += p[static_cast<std::size_t>(j)] * vr[c];
    }
    for (std::int64_t c = 0; c < d; ++c) acc[c] /= total;
  }
  return out;
}

void kv_attention(const KvLayerShape& s, const KvLayerBuffers& layer, std::int64_t length, const std::uint16_t* q,
                  std::int64_t n_heads, void* out, DType out_dtype) {
  const std::vector<double> ref = kv_attention_f64(s, layer, length, q, n_heads);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const auto value = static_cast<float>(ref[i]);
    if (out_dtype == DType::f32) {
      static_cast<float*>(out)[i] = value;
    } else {
      static_cast<std::uint16_t*>(out)[i] = formats::float_to_half(value).bits;
    }
  }
}

}  // namespace lowbit::cpu
