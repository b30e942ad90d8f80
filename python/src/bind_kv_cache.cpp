// Bindings of the decode KV cache (include/lowbit/kv_cache.h): _lowbit.KvLayer holds a
// lowbit::KvLayer over the caller's buffers (NumPy arrays or torch / CuPy tensors, kept
// alive by it), validated once; append() and attention() then convert only the token or
// query and the output. The Python layer (lowbit.kv) allocates the buffers from
// kv_layout() and the outputs and workspace like its inputs.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <array>
#include <cstdint>
#include <string>

#include "lowbit/error.h"
#include "lowbit/kv_cache.h"
#include "views.h"

namespace lowbit::python {
namespace {

// f() with CUDA device `device_id` current (the split plan depends on its SM count).
template <class F>
std::size_t on_device(int device_id, F f) {
  TensorView where;
  where.device = Device::cuda;
  DeviceGuard guard(where, device_id);
  return f();
}

KvCacheSpec spec_of(const std::string& policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
                    std::int64_t window, int kv_bits, std::int64_t max_tokens) {
  return KvCacheSpec{parse_kv_policy(policy.c_str()), kv_heads, head_dim, sink, window, kv_bits, max_tokens};
}

Workspace workspace_of(const TensorView& ws) { return Workspace{ws.data, ws.data ? ws.span_bytes() : 0}; }

class KvLayerBinding {
 public:
  KvLayerBinding(const std::string& policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
                 std::int64_t window, int kv_bits, std::int64_t max_tokens, const OptOut& k_f16, const OptOut& k_codes,
                 const OptOut& k_scales, const OptOut& k_mins, const OptOut& v_f16, const OptOut& v_codes,
                 const OptOut& v_scales, const OptOut& v_mins)
      : keep_{k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins},
        layer_(make_layer(spec_of(policy, kv_heads, head_dim, sink, window, kv_bits, max_tokens))) {}

  void append(const In& k, const In& v, std::int64_t pos, std::uintptr_t stream) {
    const TensorView kv = view_of(k, "k"), vv = view_of(v, "v");
    DeviceGuard guard(kv, k.device_id());
    nb::gil_scoped_release release;
    kv_append(layer_, pos, kv, vv, stream_of(stream));
  }

  void attention(const In& q, const Out& out, std::int64_t length, const OptOut& workspace, std::uintptr_t stream) {
    const TensorView qv = view_of(q, "q"), ov = view_of(out, "out"), ws = view_of(workspace, "workspace");
    DeviceGuard guard(qv, q.device_id());
    nb::gil_scoped_release release;
    kv_attention(layer_, length, qv, ov, workspace_of(ws), stream_of(stream));
  }

  // The CUDA-graph forms (kv_cache.h): the position is an int32 [1] array.
  void append_at(const In& k, const In& v, const In& pos, std::uintptr_t stream) {
    const TensorView kv = view_of(k, "k"), vv = view_of(v, "v"), pv = view_of(pos, "pos");
    DeviceGuard guard(kv, k.device_id());
    nb::gil_scoped_release release;
    kv_append_at(layer_, pv, kv, vv, stream_of(stream));
  }

  void attention_at(const In& q, const Out& out, const In& pos, std::int64_t max_length, const OptOut& workspace,
                    std::uintptr_t stream) {
    const TensorView qv = view_of(q, "q"), ov = view_of(out, "out"), pv = view_of(pos, "pos");
    const TensorView ws = view_of(workspace, "workspace");
    DeviceGuard guard(qv, q.device_id());
    nb::gil_scoped_release release;
    kv_attention_at(layer_, pv, max_length, qv, ov, workspace_of(ws), stream_of(stream));
  }

  // The values the query at length - 1 reads, into f16 [visible, kv_heads, head_dim] arrays.
  void read(const Out& k_out, const Out& v_out, std::int64_t length, std::uintptr_t stream) {
    const TensorView kv = view_of(k_out, "k_out"), vv = view_of(v_out, "v_out");
    DeviceGuard guard(kv, k_out.device_id());
    nb::gil_scoped_release release;
    kv_read(layer_, length, kv, vv, stream_of(stream));
  }

  // GPU workspace bytes of attention_at() / attention() (0 for CPU arrays), on device_id.
  std::size_t workspace_bytes_at(std::int64_t n_heads, std::int64_t max_length, bool cuda, int device_id) {
    if (!cuda) return 0;
    return on_device(device_id, [&] { return kv_attention_at_workspace_bytes(layer_.spec(), n_heads, max_length); });
  }
  std::size_t workspace_bytes(std::int64_t length, std::int64_t n_heads, bool cuda, int device_id) {
    if (!cuda) return 0;
    return on_device(device_id, [&] { return kv_attention_workspace_bytes(layer_.spec(), n_heads, length); });
  }

 private:
  // The spec's buffers as views (a buffer it does not have stays an empty view, whatever
  // was passed for it).
  KvLayer make_layer(const KvCacheSpec& spec) {
    const KvCacheSizes z = kv_cache_sizes(spec);
    const std::array<bool, 4> used{z.f16 > 0, z.codes > 0, z.scales > 0, z.mins > 0};
    constexpr const char* kNames[8] = {"k_f16", "k_codes", "k_scales", "k_mins",
                                       "v_f16", "v_codes", "v_scales", "v_mins"};
    KvLayerViews views;
    std::array<TensorView*, 8> slots{&views.k.f16, &views.k.codes, &views.k.scales, &views.k.mins,
                                     &views.v.f16, &views.v.codes, &views.v.scales, &views.v.mins};
    for (std::size_t i = 0; i < 8; ++i) {
      if (used[i % 4]) *slots[i] = view_of(keep_[i], kNames[i]);
    }
    return KvLayer(spec, views);
  }

  std::array<OptOut, 8> keep_;
  KvLayer layer_;
};

nb::dict layout(const std::string& policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
                std::int64_t window, int kv_bits, std::int64_t max_tokens) {
  const KvCacheSpec spec = spec_of(policy, kv_heads, head_dim, sink, window, kv_bits, max_tokens);
  const KvCacheSizes z = kv_cache_sizes(spec);
  const std::int64_t code_bytes = z.codes == 0 ? 0 : z.code_dtype == DType::i8 ? head_dim : head_dim / 2;
  const std::int64_t body = z.scales / kv_heads;
  nb::dict d;
  d["f16"] = nb::make_tuple(kv_heads, z.f16 / (kv_heads * head_dim), head_dim);
  d["codes"] = nb::make_tuple(body, kv_heads, code_bytes);
  d["code_dtype"] = z.code_dtype == DType::i8 ? "i8" : "u8";
  d["params"] = nb::make_tuple(body, kv_heads);
  d["param_dtype"] = "f16";  // scales and mins
  d["mins"] = nb::make_tuple(z.mins / kv_heads, kv_heads);
  d["sink"] = spec.policy == KvPolicy::window || spec.policy == KvPolicy::selective ? sink : 0;
  d["window"] = spec.policy == KvPolicy::window || spec.policy == KvPolicy::selective ? window : 0;
  d["body_base"] = spec.policy == KvPolicy::selective ? sink : 0;  // the first quantized position
  d["capacity"] = kv_cache_capacity(spec);
  d["nbytes"] = kv_cache_bytes(spec);
  return d;
}

}  // namespace

void bind_kv_cache(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<KvLayerBinding>(m, "KvLayer", "One layer's decode KV cache over caller-owned buffers (see lowbit.kv).")
      .def(nb::init<const std::string&, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, std::int64_t,
                    const OptOut&, const OptOut&, const OptOut&, const OptOut&, const OptOut&, const OptOut&,
                    const OptOut&, const OptOut&>(),
           "policy"_a, "kv_heads"_a, "head_dim"_a, "sink"_a, "window"_a, "kv_bits"_a, "max_tokens"_a,
           "k_f16"_a.none(), "k_codes"_a.none(), "k_scales"_a.none(), "k_mins"_a.none(), "v_f16"_a.none(),
           "v_codes"_a.none(), "v_scales"_a.none(), "v_mins"_a.none())
      .def("append", &KvLayerBinding::append, "k"_a, "v"_a, "pos"_a, "stream"_a,
           "Appends the token at pos (f16 [kv_heads, head_dim] K and V, RoPE applied).")
      .def("attention", &KvLayerBinding::attention, "q"_a, "out"_a, "length"_a, "workspace"_a.none(), "stream"_a,
           "out = attention of q (f16 [n_heads, head_dim]) over what the query at length - 1 sees.")
      .def("append_at", &KvLayerBinding::append_at, "k"_a, "v"_a, "pos"_a, "stream"_a,
           "append() at the position held by pos (int32 [1] on the token's device), read when the kernel runs.")
      .def("attention_at", &KvLayerBinding::attention_at, "q"_a, "out"_a, "pos"_a, "max_length"_a, "workspace"_a.none(),
           "stream"_a, "attention() of the query at the position held by pos, with the plan of max_length positions.")
      .def("read", &KvLayerBinding::read, "k_out"_a, "v_out"_a, "length"_a, "stream"_a,
           "The values the query at length - 1 reads (f16 [visible, kv_heads, head_dim] each).")
      .def("workspace_bytes_at", &KvLayerBinding::workspace_bytes_at, "n_heads"_a, "max_length"_a, "cuda"_a, "device_id"_a,
           "GPU workspace bytes of attention_at() (0 for CPU arrays or a CPU-only build).")
      .def("workspace_bytes", &KvLayerBinding::workspace_bytes, "length"_a, "n_heads"_a, "cuda"_a, "device_id"_a,
           "GPU workspace bytes of attention() (0 for CPU arrays or a CPU-only build).");
  m.def(
      "kv_visible_count",
      [](const std::string& policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
         std::int64_t window, int kv_bits, std::int64_t max_tokens, std::int64_t length) {
        return kv_visible_count(spec_of(policy, kv_heads, head_dim, sink, window, kv_bits, max_tokens), length);
      },
      "policy"_a, "kv_heads"_a, "head_dim"_a, "sink"_a, "window"_a, "kv_bits"_a, "max_tokens"_a, "length"_a,
      "Positions the query at length - 1 reads.");
  m.def("kv_layout", &layout, "policy"_a, "kv_heads"_a, "head_dim"_a, "sink"_a, "window"_a, "kv_bits"_a,
        "max_tokens"_a, "Buffer shapes of one layer's decode KV cache, its capacity and bytes.");
}

}  // namespace lowbit::python
