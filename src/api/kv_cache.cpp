// The decode KV cache's entry points: validation at the boundary, then the CPU twin or
// the kernels by the buffers' device.
#include "lowbit/kv_cache.h"

#include <string>
#include <utility>
#include <vector>

#include "core/kv_layout.h"
#include "core/validate.h"
#include "cpu/kv_cache.h"
#include "formats/float16.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "cuda/kv/kv_cuda.h"
#endif

namespace lowbit {
namespace {

using core::DecodeSpan;
using core::KvLayerBuffers;
using core::KvLayerShape;
using core::KvPart;

void check_buffer(const TensorView& view, const char* what, DType dtype, std::int64_t count, Device device) {
  if (count == 0) return;  // a buffer this policy does not have: anything (empty, none) goes
  LOWBIT_CHECK(view.data != nullptr, what, ": missing (the layout needs ", count, " ", dtype_name(dtype), " values)");
  LOWBIT_CHECK(view.dtype == dtype && view.numel() == count && view.is_contiguous(), what, ": expected ", count,
               " contiguous ", dtype_name(dtype), " values, got ", view.describe());
  LOWBIT_CHECK(view.device == device, what, ": on ", device_name(view.device), ", but the cache is on ",
               device_name(device));
  if (device == Device::cuda) core::check_device_data(view, what);
}

constexpr const char* kKNames[4] = {"k_f16", "k_codes", "k_scales", "k_mins"};
constexpr const char* kVNames[4] = {"v_f16", "v_codes", "v_scales", "v_mins"};

// The cache's eight buffers, named (appends write them, attention and reads read them).
std::vector<core::NamedView> cache_views(const KvLayerViews& layer) {
  std::vector<core::NamedView> views;
  for (const auto& [part, names] : {std::pair{&layer.k, kKNames}, std::pair{&layer.v, kVNames}}) {
    views.push_back({part->f16, names[0]});
    views.push_back({part->codes, names[1]});
    views.push_back({part->scales, names[2]});
    views.push_back({part->mins, names[3]});
  }
  return views;
}

// The views an op reads besides the cache, after the cache's buffers.
std::vector<core::NamedView> cache_and(const KvLayerViews& layer, std::initializer_list<core::NamedView> more) {
  std::vector<core::NamedView> views = cache_views(layer);
  views.insert(views.end(), more.begin(), more.end());
  return views;
}

void check_part(const KvCacheSizes& z, const KvPartViews& p, const char* const names[4], Device device) {
  check_buffer(p.f16, names[0], DType::f16, z.f16, device);
  check_buffer(p.codes, names[1], z.code_dtype, z.codes, device);
  check_buffer(p.scales, names[2], DType::f16, z.scales, device);
  check_buffer(p.mins, names[3], DType::f16, z.mins, device);
}

// The spec's buffers checked on `device`.
void check_buffers(const KvCacheSpec& spec, const KvLayerViews& layer, Device device) {
  const KvCacheSizes z = kv_cache_sizes(spec);
  check_part(z, layer.k, kKNames, device);
  check_part(z, layer.v, kVNames, device);
  core::check_no_aliasing(cache_views(layer), {});
}

// The device of the first buffer the spec has (the f16 slots, or the codes).
Device device_of(const KvLayerViews& layer) {
  return layer.k.f16.data ? layer.k.f16.device : layer.k.codes.device;
}

KvPart part_of(const KvPartViews& p) {
  return KvPart{static_cast<std::uint16_t*>(p.f16.data), static_cast<std::uint8_t*>(p.codes.data),
                static_cast<std::uint16_t*>(p.scales.data), static_cast<std::uint16_t*>(p.mins.data)};
}
KvLayerBuffers buffers_of(const KvLayerViews& layer) { return KvLayerBuffers{part_of(layer.k), part_of(layer.v)}; }

// A contiguous f16 [rows x head_dim] (a token's K or V, the query).
void check_rows(const TensorView& x, const char* what, std::int64_t rows, std::int64_t d, const char* rows_name) {
  LOWBIT_CHECK(x.data != nullptr, what, ": missing");
  LOWBIT_CHECK(x.dtype == DType::f16 && x.rank == 2 && x.shape[0] == rows && x.shape[1] == d && x.is_contiguous(),
               what, ": expected a contiguous f16 [", rows_name, " x head_dim] = [", rows, " x ", d, "], got ",
               x.describe());
}

void check_device(const KvLayer& layer, const TensorView& x, const char* what) {
  LOWBIT_CHECK(x.device == layer.device(), what, ": on ", device_name(x.device), ", but the cache is on ",
               device_name(layer.device()));
}

// pos: the position array of the graph form (an input too), else empty.
KvLayerShape check_append(const KvLayer& kv, const TensorView& k, const TensorView& v, const TensorView& pos) {
  const KvLayerShape s = core::kv_layer_shape(kv.spec());
  const KvLayerViews& layer = kv.buffers();
  check_device(kv, k, "k");
  check_rows(k, "k", s.kv_heads, s.head_dim, "kv_heads");
  check_rows(v, "v", s.kv_heads, s.head_dim, "kv_heads");
  LOWBIT_CHECK(v.device == k.device, "v: on ", device_name(v.device), ", but k is on ", device_name(k.device));
  const std::vector<core::NamedView> cache = cache_views(layer);
  const core::NamedView inputs[] = {{k, "k"}, {v, "v"}, {pos, "pos"}};
  core::check_no_aliasing(cache, inputs);
  if (k.device == Device::cuda) {
    core::check_device_data(k, "k");
    core::check_device_data(v, "v");
  }
  return s;
}

// pos as in check_append; ws: the workspace's bytes on the device, else empty.
KvLayerShape check_attention(const KvLayer& kv, const TensorView& q, const TensorView& out, const TensorView& pos,
                             const TensorView& ws) {
  const KvLayerShape s = core::kv_layer_shape(kv.spec());
  const KvLayerViews& layer = kv.buffers();
  check_device(kv, q, "q");
  LOWBIT_CHECK(q.data != nullptr && q.rank == 2, "q: expected f16 [n_heads x head_dim], got ", q.describe());
  const std::int64_t n_heads = q.shape[0];
  LOWBIT_CHECK(n_heads > 0 && n_heads % s.kv_heads == 0 && n_heads <= 4096, "q: n_heads = ", n_heads,
               " is not a positive multiple of kv_heads = ", s.kv_heads);
  check_rows(q, "q", n_heads, s.head_dim, "n_heads");
  LOWBIT_CHECK(out.data != nullptr && (out.dtype == DType::f32 || out.dtype == DType::f16) && out.rank == 2 &&
                   out.shape[0] == n_heads && out.shape[1] == s.head_dim && out.is_contiguous(),
               "out: expected a contiguous f32 or f16 [", n_heads, " x ", s.head_dim, "], got ", out.describe());
  LOWBIT_CHECK(out.device == q.device, "out: on ", device_name(out.device), ", but q is on ", device_name(q.device));
  const core::NamedView outputs[] = {{out, "out"}, {ws, "workspace"}};
  core::check_no_aliasing(outputs, cache_and(layer, {{q, "q"}, {pos, "pos"}}));
  if (q.device == Device::cuda) {
    core::check_device_data(q, "q");
    core::check_device_data(out, "out");
  }
  return s;
}

// A length (or, for the graph forms, a max_length) of 1 .. the positions the cache holds.
void check_length(const KvLayerShape& s, std::int64_t length, const char* what, const char* name = "length") {
  const std::int64_t held = s.drops() ? std::int64_t{1} << 30 : core::kv_positions_held(s);
  LOWBIT_CHECK(length >= 1 && length <= held, what, ": ", name, " ", length, ", expected 1..", held,
               length < 1 ? " (append a token first)" : "");
}

void check_position(const KvLayerShape& s, std::int64_t pos, const char* what) {
  const std::int64_t held = s.drops() ? std::int64_t{1} << 30 : core::kv_positions_held(s);
  LOWBIT_CHECK(pos >= 0 && pos < held, what, ": position ", pos, " outside the cache (", held, " tokens)");
}

// The int32 [1] position array of the graph forms, on `device`; its value when on the CPU.
std::int64_t check_position_array(const TensorView& pos, Device device) {
  LOWBIT_CHECK(pos.data != nullptr && pos.dtype == DType::i32 && pos.numel() == 1, "pos: expected an int32 [1] array, got ",
               pos.data ? pos.describe() : std::string("none"));
  LOWBIT_CHECK(pos.device == device, "pos: on ", device_name(pos.device), ", but the token is on ", device_name(device));
  if (device == Device::cuda) core::check_device_data(pos, "pos");
  return device == Device::cpu ? *static_cast<const std::int32_t*>(pos.data) : 0;
}

// A device workspace's bytes (an output of the kernels); nothing on the CPU, which takes none.
TensorView workspace_bytes_of(const Workspace& workspace, Device device) {
  return device == Device::cuda ? core::byte_view(workspace.data, workspace.bytes) : TensorView{};
}

void check_heads(const KvLayerShape& s, std::int64_t n_heads) {
  LOWBIT_CHECK(n_heads > 0 && n_heads % s.kv_heads == 0, "n_heads: ", n_heads, " is not a positive multiple of kv_heads = ",
               s.kv_heads);
}

void append_on_cpu(const KvLayerShape& s, const KvLayerViews& layer, std::int64_t pos, const TensorView& k,
                   const TensorView& v) {
  cpu::kv_append(s, buffers_of(layer), pos, k.ptr<const std::uint16_t>(), k.row_stride(), v.ptr<const std::uint16_t>(),
                 v.row_stride());
}

#if LOWBIT_WITH_CUDA
void check_workspace(const Workspace& workspace, std::size_t need, const char* sizer) {
  core::check_workspace(workspace, need, sizer);
}
#endif

}  // namespace

KvLayer::KvLayer(const KvCacheSpec& spec, const KvLayerViews& buffers) : spec_(spec), buffers_(buffers) {
  (void)core::kv_layer_shape(spec);
  device_ = device_of(buffers);
  check_buffers(spec, buffers, device_);
#if !LOWBIT_WITH_CUDA
  if (device_ == Device::cuda) core::fail_no_cuda("kv cache");
#endif
}

void kv_append(const KvLayer& kv, std::int64_t pos, const TensorView& k, const TensorView& v, cuda_stream_t stream) {
  const KvLayerShape s = check_append(kv, k, v, TensorView{});
  const KvLayerViews& layer = kv.buffers();
  check_position(s, pos, "kv_append");
  if (k.device == Device::cpu) return append_on_cpu(s, layer, pos, k, v);
#if LOWBIT_WITH_CUDA
  cuda::kv::kv_append(s, buffers_of(layer), pos, k.data, v.data, stream);
#else
  (void)stream;
  core::fail_no_cuda("kv_append");
#endif
}

std::size_t kv_attention_workspace_bytes(const KvCacheSpec& spec, std::int64_t n_heads, std::int64_t length) {
  const KvLayerShape s = core::kv_layer_shape(spec);
  check_heads(s, n_heads);
  check_length(s, length, "kv_attention_workspace_bytes");
#if LOWBIT_WITH_CUDA
  const DecodeSpan span = core::decode_span(s, length);
  return core::decode_workspace_bytes(n_heads, s.head_dim, cuda::kv::kv_attention_plan(s, span, n_heads).splits);
#else
  return 0;
#endif
}

void kv_attention(const KvLayer& kv, std::int64_t length, const TensorView& q, const TensorView& out,
                  const Workspace& workspace, cuda_stream_t stream) {
  const KvLayerShape s = check_attention(kv, q, out, TensorView{}, workspace_bytes_of(workspace, q.device));
  const KvLayerViews& layer = kv.buffers();
  check_length(s, length, "kv_attention");
  if (q.device == Device::cpu) {
    cpu::kv_attention(s, buffers_of(layer), length, q.ptr<const std::uint16_t>(), q.shape[0], out.data, out.dtype);
    return;
  }
#if LOWBIT_WITH_CUDA
  check_workspace(workspace, kv_attention_workspace_bytes(kv.spec(), q.shape[0], length), "kv_attention_workspace_bytes");
  cuda::kv::kv_attention(s, buffers_of(layer), core::decode_span(s, length), q.data, q.shape[0], out.data, out.dtype,
                         workspace.data, workspace.bytes, stream);
#else
  (void)workspace, (void)stream;
  core::fail_no_cuda("kv_attention");
#endif
}

void kv_append_at(const KvLayer& kv, const TensorView& pos, const TensorView& k, const TensorView& v,
                  cuda_stream_t stream) {
  const std::int64_t host_pos = check_position_array(pos, k.device);
  const KvLayerShape s = check_append(kv, k, v, pos);
  const KvLayerViews& layer = kv.buffers();
  if (k.device == Device::cpu) {
    check_position(s, host_pos, "kv_append_at");
    return append_on_cpu(s, layer, host_pos, k, v);
  }
#if LOWBIT_WITH_CUDA
  cuda::kv::kv_append_at(s, buffers_of(layer), static_cast<const std::int32_t*>(pos.data), k.data, v.data, stream);
#else
  (void)stream;
  core::fail_no_cuda("kv_append_at");
#endif
}

std::size_t kv_attention_at_workspace_bytes(const KvCacheSpec& spec, std::int64_t n_heads, std::int64_t max_length) {
  const KvLayerShape s = core::kv_layer_shape(spec);
  check_heads(s, n_heads);
  check_length(s, max_length, "kv_attention_at_workspace_bytes", "max_length");
#if LOWBIT_WITH_CUDA
  return cuda::kv::kv_attention_workspace_bound(s, n_heads, max_length);
#else
  return 0;
#endif
}

void kv_attention_at(const KvLayer& kv, const TensorView& pos, std::int64_t max_length, const TensorView& q,
                     const TensorView& out, const Workspace& workspace, cuda_stream_t stream) {
  const std::int64_t host_pos = check_position_array(pos, q.device);
  const KvLayerShape s = check_attention(kv, q, out, pos, workspace_bytes_of(workspace, q.device));
  const KvLayerViews& layer = kv.buffers();
  check_length(s, max_length, "kv_attention_at", "max_length");
  if (q.device == Device::cpu) {
    LOWBIT_CHECK(host_pos >= 0 && host_pos < max_length, "kv_attention_at: position ", host_pos,
                 " outside the cache (", max_length, " tokens)");
    cpu::kv_attention(s, buffers_of(layer), host_pos + 1, q.ptr<const std::uint16_t>(), q.shape[0], out.data,
                      out.dtype);
    return;
  }
#if LOWBIT_WITH_CUDA
  check_workspace(workspace, kv_attention_at_workspace_bytes(kv.spec(), q.shape[0], max_length),
                  "kv_attention_at_workspace_bytes");
  cuda::kv::kv_attention_at(s, buffers_of(layer), static_cast<const std::int32_t*>(pos.data), max_length, q.data,
                            q.shape[0], out.data, out.dtype, workspace.data, workspace.bytes, stream);
#else
  (void)workspace, (void)stream;
  core::fail_no_cuda("kv_attention_at");
#endif
}

void kv_read(const KvLayer& kv, std::int64_t length, const TensorView& k_out, const TensorView& v_out,
             cuda_stream_t stream) {
  const KvLayerShape s = core::kv_layer_shape(kv.spec());
  const KvLayerViews& layer = kv.buffers();
  check_device(kv, k_out, "k_out");
  check_length(s, length, "kv_read");
  const std::int64_t visible = core::decode_span(s, length).visible(s), row = s.kv_heads * s.head_dim;
  for (const auto& [out, name] : {std::pair{&k_out, "k_out"}, std::pair{&v_out, "v_out"}}) {
    LOWBIT_CHECK(out->data != nullptr && out->dtype == DType::f16 && out->numel() == visible * row &&
                     out->is_contiguous(),
                 name, ": expected a contiguous f16 [", visible, " x ", s.kv_heads, " x ", s.head_dim, "], got ",
                 out->describe());
    LOWBIT_CHECK(out->device == k_out.device, name, ": on ", device_name(out->device), ", but k_out is on ",
                 device_name(k_out.device));
    if (out->device == Device::cuda) core::check_device_data(*out, name);
  }
  const core::NamedView outputs[] = {{k_out, "k_out"}, {v_out, "v_out"}};
  core::check_no_aliasing(outputs, cache_views(layer));
  if (k_out.device == Device::cpu) {
    const KvLayerBuffers b = buffers_of(layer);
    for (const auto& [part, out] : {std::pair{&b.k, &k_out}, std::pair{&b.v, &v_out}}) {
      const std::vector<float> values = cpu::kv_visible_values(s, *part, length);
      auto* o = out->ptr<std::uint16_t>();
      for (std::size_t i = 0; i < values.size(); ++i) o[i] = formats::float_to_half(values[i]).bits;
    }
    return;
  }
#if LOWBIT_WITH_CUDA
  cuda::kv::kv_read(s, buffers_of(layer), core::decode_span(s, length), k_out.data, v_out.data, stream);
#else
  (void)stream;
  core::fail_no_cuda("kv_read");
#endif
}

}  // namespace lowbit
