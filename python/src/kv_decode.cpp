#include "kv_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kv_cache.h"
#include "formats/float16.h"
#include "lowbit/error.h"

namespace lowbit::python {
namespace {

using cuda::engine::DecodeSpan;
using cuda::engine::KvBody;
using cuda::engine::KvLayerDevice;
using cuda::engine::KvPart;

bool all_quantized(const KvLayerShape& s) { return s.body != KvBody::none && s.window == 0; }

int body_bits(const KvLayerShape& s) { return s.body == KvBody::int8 ? 8 : 4; }

void check_buffer(const TensorView& view, const char* what, DType dtype, std::int64_t numel, Device device) {
  if (numel == 0) return;  // a part this policy does not have: anything (None, empty) goes
  LOWBIT_CHECK(view.data != nullptr, what, ": missing (the layout needs ", numel, " ", dtype_name(dtype), " values)");
  LOWBIT_CHECK(view.dtype == dtype && view.numel() == numel && view.is_contiguous(), what, ": expected ",
               numel, " contiguous ", dtype_name(dtype), " values, got ", view.describe());
  LOWBIT_CHECK(view.device == device, what, ": on ", device_name(view.device), ", but the token is on ",
               device_name(device));
}

void check_part(const KvLayerShape& s, const KvPartViews& p, const char* const names[4], Device device) {
  const auto h = s.kv_heads, d = s.head_dim;
  check_buffer(p.f16, names[0], DType::f16, h * s.f16_slots() * d, device);
  const std::int64_t body = s.body == KvBody::none ? 0 : s.body_slots;
  check_buffer(p.codes, names[1], s.body == KvBody::int8 ? DType::i8 : DType::u8, body * h * s.code_bytes(), device);
  check_buffer(p.scales, names[2], DType::f16, body * h, device);
  check_buffer(p.mins, names[3], DType::f16, s.has_mins() ? body * h : 0, device);
}

constexpr const char* kKNames[4] = {"k_f16", "k_codes", "k_scales", "k_mins"};
constexpr const char* kVNames[4] = {"v_f16", "v_codes", "v_scales", "v_mins"};

void check_layer(const KvLayerShape& s, const KvLayerViews& layer, Device device) {
  check_part(s, layer.k, kKNames, device);
  check_part(s, layer.v, kVNames, device);
}

// [rows x head_dim] f16 with unit column stride (the token's K or V, or the query).
void check_rows(const TensorView& x, const char* what, std::int64_t rows, std::int64_t d, const char* rows_name) {
  LOWBIT_CHECK(x.data != nullptr, what, ": missing");
  LOWBIT_CHECK(x.dtype == DType::f16 && x.rank == 2 && x.shape[0] == rows && x.shape[1] == d && x.is_contiguous(),
               what, ": expected a contiguous f16 [", rows_name, " x head_dim] = [", rows, " x ", d, "], got ",
               x.describe());
}

KvPart device_part(const KvPartViews& p) {
  return KvPart{static_cast<std::uint16_t*>(p.f16.data), static_cast<std::uint8_t*>(p.codes.data),
                static_cast<std::uint16_t*>(p.scales.data), static_cast<std::uint16_t*>(p.mins.data)};
}

// --- the CPU twins of kv_append and decode_attention --------------------------------

// The body's codes and f16 parameters of positions from body slot b on (the kernels' layout).
std::uint8_t* body_codes(const KvLayerShape& s, const KvPartViews& p, std::int64_t b) {
  return static_cast<std::uint8_t*>(p.codes.data) + b * s.kv_heads * s.code_bytes();
}
std::uint16_t* body_scales(const KvLayerShape& s, const KvPartViews& p, std::int64_t b) {
  return static_cast<std::uint16_t*>(p.scales.data) + b * s.kv_heads;
}
std::uint16_t* body_mins(const KvLayerShape& s, const KvPartViews& p, std::int64_t b) {
  return s.has_mins() ? static_cast<std::uint16_t*>(p.mins.data) + b * s.kv_heads : nullptr;
}

// Quantizes x (f16 [kv_heads x head_dim], any row stride) into the body slot body_pos,
// one group per head (cpu::kv_quantize, the kernel's arithmetic).
void quantize_token(const KvLayerShape& s, const KvPartViews& p, std::int64_t body_pos, const TensorView& x) {
  const std::int64_t h = s.kv_heads, d = s.head_dim;
  std::vector<float> in(static_cast<std::size_t>(h * d));
  const auto* src = static_cast<const std::uint16_t*>(x.data);
  for (std::int64_t r = 0; r < h; ++r) {
    for (std::int64_t c = 0; c < d; ++c) in[r * d + c] = formats::half_to_float({src[r * x.row_stride() + c]});
  }
  cpu::kv_quantize(body_bits(s), in.data(), h, d, d, body_codes(s, p, body_pos), body_scales(s, p, body_pos),
                      body_mins(s, p, body_pos));
}

void append_part_cpu(const KvLayerShape& s, const KvPartViews& p, std::int64_t pos, const TensorView& x) {
  if (all_quantized(s)) {  // int8 / int4: quantized on arrival
    quantize_token(s, p, pos - s.body_base, x);
    return;
  }
  const std::int64_t h = s.kv_heads, d = s.head_dim;
  auto* f16 = static_cast<std::uint16_t*>(p.f16.data);
  std::uint16_t* slot = f16 + s.slot(pos) * d;  // head 0; heads are f16_slots * d apart
  if (s.body != KvBody::none && pos >= s.sink + s.window) {
    // pos - window leaves the window; its ring slot is pos's: quantize it before the overwrite.
    quantize_token(s, p, pos - s.window - s.body_base,
                   TensorView::matrix(slot, DType::f16, Device::cpu, h, d, s.f16_slots() * d));
  }
  const auto* src = static_cast<const std::uint16_t*>(x.data);
  for (std::int64_t head = 0; head < h; ++head) {
    std::memcpy(slot + head * s.f16_slots() * d, src + head * x.row_stride(), static_cast<std::size_t>(d) * 2);
  }
}

// The values of positions [first, end) of one part as the query reads them: f32 [pos][head][d].
void read_f16(const KvLayerShape& s, const KvPartViews& p, std::int64_t first, std::int64_t end, float* out) {
  const std::int64_t h = s.kv_heads, d = s.head_dim;
  const auto* f16 = static_cast<const std::uint16_t*>(p.f16.data);
  for (std::int64_t pos = first; pos < end; ++pos) {
    for (std::int64_t head = 0; head < h; ++head) {
      const std::uint16_t* row = f16 + (head * s.f16_slots() + s.slot(pos)) * d;
      float* o = out + ((pos - first) * h + head) * d;
      for (std::int64_t c = 0; c < d; ++c) o[c] = formats::half_to_float({row[c]});
    }
  }
}

void read_body(const KvLayerShape& s, const KvPartViews& p, std::int64_t first, std::int64_t end, float* out) {
  if (end <= first) return;
  const std::int64_t rows = (end - first) * s.kv_heads, b = first - s.body_base;
  cpu::kv_dequantize(body_bits(s), body_codes(s, p, b), body_scales(s, p, b), body_mins(s, p, b), rows, s.head_dim,
                        s.head_dim, out);
}

// Every visible position's values, in position order.
std::vector<float> visible_values(const KvLayerShape& s, const KvPartViews& p, const DecodeSpan& span) {
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

void attention_cpu(const KvLayerShape& s, const KvLayerViews& layer, const DecodeSpan& span, const TensorView& q,
                   const TensorView& out) {
  const std::int64_t hkv = s.kv_heads, d = s.head_dim, n_heads = q.shape[0], group = n_heads / hkv;
  const std::int64_t n = span.visible(s);
  const std::vector<float> k = visible_values(s, layer.k, span);
  const std::vector<float> v = visible_values(s, layer.v, span);
  const auto* qh = static_cast<const std::uint16_t*>(q.data);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> p(static_cast<std::size_t>(n)), qd(static_cast<std::size_t>(d)), acc(static_cast<std::size_t>(d));
  for (std::int64_t h = 0; h < n_heads; ++h) {
    const std::int64_t kvh = h / group;
    for (std::int64_t c = 0; c < d; ++c) qd[c] = formats::half_to_float({qh[h * d + c]});
    double mx = -INFINITY;
    for (std::int64_t j = 0; j < n; ++j) {
      const float* kr = k.data() + (j * hkv + kvh) * d;
      double dot = 0.0;
      for (std::int64_t c = 0; c < d; ++c) dot += qd[c] * kr[c];
      p[j] = dot * scale;
      mx = std::max(mx, p[j]);
    }
    double total = 0.0;
    for (double& x : p) total += (x = std::exp(x - mx));
    std::fill(acc.begin(), acc.end(), 0.0);
    for (std::int64_t j = 0; j < n; ++j) {
      const float* vr = v.data() + (j * hkv + kvh) * d;
      for (std::int64_t c = 0; c < d; ++c) acc[c] += p[j] * vr[c];
    }
    for (std::int64_t c = 0; c < d; ++c) {
      const float value = static_cast<float>(acc[c] / total);
      if (out.dtype == DType::f32) {
        static_cast<float*>(out.data)[h * d + c] = value;
      } else {
        static_cast<std::uint16_t*>(out.data)[h * d + c] = formats::float_to_half(value).bits;
      }
    }
  }
}

}  // namespace

KvLayerShape kv_shape(const char* policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
                      std::int64_t window, int kv_bits, std::int64_t max_tokens) {
  LOWBIT_CHECK(max_tokens <= (std::int64_t{1} << 24), "kv layer: max_tokens = ", max_tokens, ", expected at most ",
               std::int64_t{1} << 24);
  LOWBIT_CHECK(kv_heads <= 1024, "kv layer: kv_heads = ", kv_heads, ", expected at most 1024");
  return cuda::engine::kv_layer_shape(engine::parse_kv_policy(policy), kv_heads, head_dim, sink, window, kv_bits,
                                      max_tokens);
}

std::int64_t kv_capacity(const KvLayerShape& s) {
  if (s.drops()) return -1;
  return all_quantized(s) ? s.body_slots : s.sink + s.window + s.body_slots;
}

std::size_t kv_buffer_bytes(const KvLayerShape& s) {
  return 2 * (s.f16_bytes() + s.code_bytes_total() + s.param_bytes_total());
}

namespace {

void check_append(const KvLayerShape& s, const KvLayerViews& layer, const TensorView& k, const TensorView& v) {
  check_rows(k, "k", s.kv_heads, s.head_dim, "kv_heads");
  check_rows(v, "v", s.kv_heads, s.head_dim, "kv_heads");
  LOWBIT_CHECK(k.device == v.device, "v: on ", device_name(v.device), ", but k is on ", device_name(k.device));
  check_layer(s, layer, k.device);
}

void check_position(std::int64_t pos, std::int64_t limit, const char* what) {
  LOWBIT_CHECK(pos >= 0 && (limit < 0 || pos < limit), what, ": position ", pos, " outside the cache (", limit,
               " tokens)");
}

// The int32 [1] position array of the graph forms, on `device`; its value when on the CPU.
std::int64_t check_position_array(const TensorView& pos, Device device) {
  LOWBIT_CHECK(pos.data != nullptr && pos.dtype == DType::i32 && pos.numel() == 1, "pos: expected an int32 [1] array, got ",
               pos.data ? pos.describe() : std::string("None"));
  LOWBIT_CHECK(pos.device == device, "pos: on ", device_name(pos.device), ", but the token is on ", device_name(device));
  return device == Device::cpu ? *static_cast<const std::int32_t*>(pos.data) : 0;
}

void check_attention(const KvLayerShape& s, const KvLayerViews& layer, const TensorView& q, const TensorView& out) {
  LOWBIT_CHECK(q.data != nullptr && q.rank == 2, "q: expected f16 [n_heads x head_dim], got ", q.describe());
  const std::int64_t n_heads = q.shape[0];
  LOWBIT_CHECK(n_heads > 0 && n_heads % s.kv_heads == 0, "q: n_heads = ", n_heads,
               " is not a positive multiple of kv_heads = ", s.kv_heads);
  check_rows(q, "q", n_heads, s.head_dim, "n_heads");
  LOWBIT_CHECK(out.data != nullptr && (out.dtype == DType::f32 || out.dtype == DType::f16) && out.rank == 2 &&
                   out.shape[0] == n_heads && out.shape[1] == s.head_dim && out.is_contiguous(),
               "out: expected a contiguous f32 or f16 [", n_heads, " x ", s.head_dim, "], got ", out.describe());
  LOWBIT_CHECK(out.device == q.device, "out: on ", device_name(out.device), ", but q is on ", device_name(q.device));
  check_layer(s, layer, q.device);
}

}  // namespace

void kv_append_views(const KvLayerShape& s, const KvLayerViews& layer, std::int64_t pos, const TensorView& k,
                     const TensorView& v, cuda_stream_t stream) {
  check_append(s, layer, k, v);
  check_position(pos, kv_capacity(s), "kv_append");
  if (k.device == Device::cuda) {
#if LOWBIT_WITH_CUDA
    cuda::engine::kv_append(s, KvLayerDevice{device_part(layer.k), device_part(layer.v)}, pos, k.data, v.data, stream);
    return;
#else
    LOWBIT_FAIL("kv_append: CUDA arrays, but lowbit was built without CUDA");
#endif
  }
  (void)stream;
  append_part_cpu(s, layer.k, pos, k);
  append_part_cpu(s, layer.v, pos, v);
}

void kv_attention_views(const KvLayerShape& s, const KvLayerViews& layer, std::int64_t length, const TensorView& q,
                        const TensorView& out, const TensorView& workspace, cuda_stream_t stream) {
  check_attention(s, layer, q, out);
  const std::int64_t n_heads = q.shape[0];
  const std::int64_t capacity = kv_capacity(s);
  LOWBIT_CHECK(length >= 1 && (capacity < 0 || length <= capacity), "kv_attention: length ", length,
               ", expected 1..", capacity < 0 ? std::int64_t{1} << 30 : capacity, " (append a token first)");
  const DecodeSpan span = cuda::engine::decode_span(s, length);
  if (q.device == Device::cuda) {
#if LOWBIT_WITH_CUDA
    LOWBIT_CHECK(workspace.data == nullptr || workspace.device == Device::cuda, "workspace: expected a CUDA array");
    cuda::engine::decode_attention(s, KvLayerDevice{device_part(layer.k), device_part(layer.v)}, span, q.data, n_heads,
                                   out.data, out.dtype, workspace.data, workspace.data ? workspace.span_bytes() : 0,
                                   stream);
    return;
#else
    (void)workspace, (void)stream;
    LOWBIT_FAIL("kv_attention: CUDA arrays, but lowbit was built without CUDA");
#endif
  }
  attention_cpu(s, layer, span, q, out);
}

std::size_t kv_attention_workspace_bytes(const KvLayerShape& s, std::int64_t length, std::int64_t n_heads) {
#if LOWBIT_WITH_CUDA
  LOWBIT_CHECK(length >= 1, "kv_attention: length ", length, ", expected >= 1 (append a token first)");
  const DecodeSpan span = cuda::engine::decode_span(s, length);
  return cuda::engine::decode_workspace_bytes(n_heads, s.head_dim,
                                              cuda::engine::decode_attention_plan(s, span, n_heads).splits);
#else
  (void)s, (void)length, (void)n_heads;
  return 0;
#endif
}

void kv_append_at_views(const KvLayerShape& s, const KvLayerViews& layer, const TensorView& pos, const TensorView& k,
                        const TensorView& v, cuda_stream_t stream) {
  check_append(s, layer, k, v);
  const std::int64_t host_pos = check_position_array(pos, k.device);
  if (k.device == Device::cuda) {
#if LOWBIT_WITH_CUDA
    cuda::engine::kv_append_at(s, KvLayerDevice{device_part(layer.k), device_part(layer.v)},
                               static_cast<const std::int32_t*>(pos.data), k.data, v.data, stream);
    return;
#else
    LOWBIT_FAIL("kv_append_at: CUDA arrays, but lowbit was built without CUDA");
#endif
  }
  (void)stream;
  check_position(host_pos, kv_capacity(s), "kv_append_at");
  append_part_cpu(s, layer.k, host_pos, k);
  append_part_cpu(s, layer.v, host_pos, v);
}

void kv_attention_at_views(const KvLayerShape& s, const KvLayerViews& layer, const TensorView& pos,
                           std::int64_t max_length, const TensorView& q, const TensorView& out,
                           const TensorView& workspace, cuda_stream_t stream) {
  check_attention(s, layer, q, out);
  const std::int64_t host_pos = check_position_array(pos, q.device);
  const std::int64_t capacity = kv_capacity(s);
  LOWBIT_CHECK(max_length >= 1 && (capacity < 0 || max_length <= capacity), "kv_attention_at: max_length ",
               max_length, ", expected 1..", capacity < 0 ? std::int64_t{1} << 30 : capacity);
  if (q.device == Device::cuda) {
#if LOWBIT_WITH_CUDA
    LOWBIT_CHECK(workspace.data == nullptr || workspace.device == Device::cuda, "workspace: expected a CUDA array");
    cuda::engine::decode_attention_at(s, KvLayerDevice{device_part(layer.k), device_part(layer.v)},
                                      static_cast<const std::int32_t*>(pos.data), max_length, q.data, q.shape[0],
                                      out.data, out.dtype, workspace.data, workspace.data ? workspace.span_bytes() : 0,
                                      stream);
    return;
#else
    (void)workspace, (void)stream;
    LOWBIT_FAIL("kv_attention_at: CUDA arrays, but lowbit was built without CUDA");
#endif
  }
  check_position(host_pos, max_length, "kv_attention_at");
  attention_cpu(s, layer, cuda::engine::decode_span(s, host_pos + 1), q, out);
}

std::size_t kv_attention_at_workspace_bytes(const KvLayerShape& s, std::int64_t n_heads, std::int64_t max_length) {
#if LOWBIT_WITH_CUDA
  LOWBIT_CHECK(n_heads > 0 && n_heads % s.kv_heads == 0, "q: n_heads = ", n_heads,
               " is not a positive multiple of kv_heads = ", s.kv_heads);
  return cuda::engine::decode_attention_workspace_bound(s, n_heads, max_length);
#else
  (void)s, (void)n_heads, (void)max_length;
  return 0;
#endif
}

}  // namespace lowbit::python
