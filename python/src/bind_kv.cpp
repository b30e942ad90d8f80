// Bindings of one layer's decode KV cache (kv_decode.h): _lowbit.KvLayer holds the
// layer's shape and the caller's buffers (NumPy arrays or torch / CuPy tensors, kept
// alive by it), validated once; append() and attention() then convert only the token
// or query and the output. The Python layer (lowbit.kv) allocates the buffers from
// kv_layout() and the outputs and workspace like its inputs.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <array>
#include <cstdint>
#include <string>

#include "kv_decode.h"
#include "lowbit/error.h"
#include "views.h"

namespace lowbit::python {
namespace {

using cuda::engine::KvBody;

// f() with CUDA device `device_id` current (the split plan depends on its SM count).
template <class F>
std::size_t on_device(int device_id, F f) {
  TensorView where;
  where.device = Device::cuda;
  DeviceGuard guard(where, device_id);
  return f();
}

class KvLayer {
 public:
  KvLayer(const std::string& policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
          std::int64_t window, int kv_bits, std::int64_t max_tokens, const OptOut& k_f16, const OptOut& k_codes,
          const OptOut& k_scales, const OptOut& k_mins, const OptOut& v_f16, const OptOut& v_codes,
          const OptOut& v_scales, const OptOut& v_mins)
      : shape_(kv_shape(policy.c_str(), kv_heads, head_dim, sink, window, kv_bits, max_tokens)),
        keep_{k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins} {
    // A part the layout does not have stays an empty view, whatever was passed for it.
    const KvLayerShape& s = shape_;
    const bool body = s.body != KvBody::none;
    const std::array<bool, 4> used{s.f16_slots() > 0, body && s.body_slots > 0, body && s.body_slots > 0,
                                   s.has_mins() && s.body_slots > 0};
    constexpr const char* kNames[8] = {"k_f16", "k_codes", "k_scales", "k_mins",
                                       "v_f16", "v_codes", "v_scales", "v_mins"};
    std::array<TensorView*, 8> views{&views_.k.f16, &views_.k.codes, &views_.k.scales, &views_.k.mins,
                                     &views_.v.f16, &views_.v.codes, &views_.v.scales, &views_.v.mins};
    for (std::size_t i = 0; i < 8; ++i) {
      if (used[i % 4]) *views[i] = view_of(keep_[i], kNames[i]);
    }
  }

  void append(const In& k, const In& v, std::int64_t pos, std::uintptr_t stream) {
    const TensorView kv = view_of(k, "k"), vv = view_of(v, "v");
    DeviceGuard guard(kv, k.device_id());
    nb::gil_scoped_release release;
    kv_append_views(shape_, views_, pos, kv, vv, stream_of(stream));
  }

  void attention(const In& q, const Out& out, std::int64_t length, const OptOut& workspace, std::uintptr_t stream) {
    const TensorView qv = view_of(q, "q"), ov = view_of(out, "out"), ws = view_of(workspace, "workspace");
    DeviceGuard guard(qv, q.device_id());
    nb::gil_scoped_release release;
    kv_attention_views(shape_, views_, length, qv, ov, ws, stream_of(stream));
  }

  // The CUDA-graph forms (kv_decode.h): the position is an int32 [1] array.
  void append_at(const In& k, const In& v, const In& pos, std::uintptr_t stream) {
    const TensorView kv = view_of(k, "k"), vv = view_of(v, "v"), pv = view_of(pos, "pos");
    DeviceGuard guard(kv, k.device_id());
    nb::gil_scoped_release release;
    kv_append_at_views(shape_, views_, pv, kv, vv, stream_of(stream));
  }

  void attention_at(const In& q, const Out& out, const In& pos, std::int64_t max_length, const OptOut& workspace,
                    std::uintptr_t stream) {
    const TensorView qv = view_of(q, "q"), ov = view_of(out, "out"), pv = view_of(pos, "pos");
    const TensorView ws = view_of(workspace, "workspace");
    DeviceGuard guard(qv, q.device_id());
    nb::gil_scoped_release release;
    kv_attention_at_views(shape_, views_, pv, max_length, qv, ov, ws, stream_of(stream));
  }

  // GPU workspace bytes of attention_at() / attention() (0 for CPU arrays), on device_id.
  std::size_t workspace_bytes_at(std::int64_t n_heads, std::int64_t max_length, bool cuda, int device_id) {
    return cuda ? on_device(device_id, [&] { return kv_attention_at_workspace_bytes(shape_, n_heads, max_length); })
                : 0;
  }
  std::size_t workspace_bytes(std::int64_t length, std::int64_t n_heads, bool cuda, int device_id) {
    return cuda ? on_device(device_id, [&] { return kv_attention_workspace_bytes(shape_, length, n_heads); }) : 0;
  }

 private:
  KvLayerShape shape_;
  std::array<OptOut, 8> keep_;
  KvLayerViews views_;
};

nb::dict layout(const std::string& policy, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t sink,
                std::int64_t window, int kv_bits, std::int64_t max_tokens) {
  const KvLayerShape s = kv_shape(policy.c_str(), kv_heads, head_dim, sink, window, kv_bits, max_tokens);
  const std::int64_t body = s.body == KvBody::none ? 0 : s.body_slots;
  nb::dict d;
  d["f16"] = nb::make_tuple(s.kv_heads, s.f16_slots(), s.head_dim);
  d["codes"] = nb::make_tuple(body, s.kv_heads, s.body == KvBody::none ? 0 : s.code_bytes());
  d["code_dtype"] = s.body == KvBody::int8 ? "i8" : "u8";
  d["params"] = nb::make_tuple(body, s.kv_heads);
  d["param_dtype"] = "f16";  // scales and mins
  d["mins"] = nb::make_tuple(s.has_mins() ? body : 0, s.kv_heads);
  d["sink"] = s.sink;
  d["window"] = s.window;
  d["body_base"] = s.body_base;
  d["capacity"] = kv_capacity(s);
  d["nbytes"] = kv_buffer_bytes(s);
  return d;
}

}  // namespace

void bind_kv(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<KvLayer>(m, "KvLayer", "One layer's decode KV cache over caller-owned buffers (see lowbit.kv).")
      .def(nb::init<const std::string&, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, std::int64_t,
                    const OptOut&, const OptOut&, const OptOut&, const OptOut&, const OptOut&, const OptOut&,
                    const OptOut&, const OptOut&>(),
           "policy"_a, "kv_heads"_a, "head_dim"_a, "sink"_a, "window"_a, "kv_bits"_a, "max_tokens"_a,
           "k_f16"_a.none(), "k_codes"_a.none(), "k_scales"_a.none(), "k_mins"_a.none(), "v_f16"_a.none(),
           "v_codes"_a.none(), "v_scales"_a.none(), "v_mins"_a.none())
      .def("append", &KvLayer::append, "k"_a, "v"_a, "pos"_a, "stream"_a,
           "Appends the token at pos (f16 [kv_heads, head_dim] K and V, RoPE applied).")
      .def("attention", &KvLayer::attention, "q"_a, "out"_a, "length"_a, "workspace"_a.none(), "stream"_a,
           "out = attention of q (f16 [n_heads, head_dim]) over what the query at length - 1 sees.")
      .def("append_at", &KvLayer::append_at, "k"_a, "v"_a, "pos"_a, "stream"_a,
           "append() at the position held by pos (int32 [1] on the token's device), read when the kernel runs.")
      .def("attention_at", &KvLayer::attention_at, "q"_a, "out"_a, "pos"_a, "max_length"_a, "workspace"_a.none(),
           "stream"_a, "attention() of the query at the position held by pos, with the plan of max_length positions.")
      .def("workspace_bytes_at", &KvLayer::workspace_bytes_at, "n_heads"_a, "max_length"_a, "cuda"_a, "device_id"_a,
           "GPU workspace bytes of attention_at() (0 for CPU arrays or a CPU-only build).")
      .def("workspace_bytes", &KvLayer::workspace_bytes, "length"_a, "n_heads"_a, "cuda"_a, "device_id"_a,
           "GPU workspace bytes of attention() (0 for CPU arrays or a CPU-only build).");
  m.def("kv_layout", &layout, "policy"_a, "kv_heads"_a, "head_dim"_a, "sink"_a, "window"_a, "kv_bits"_a,
        "max_tokens"_a, "Buffer shapes of one layer's decode KV cache, its capacity and bytes.");
}

}  // namespace lowbit::python
