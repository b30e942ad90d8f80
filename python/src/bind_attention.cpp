// Bindings of include/lowbit/quantized_attention.h and flash_attention.h. Each quantized
// weight arrives as its encoded parts (codes, scales, global scale or None); the Python
// layer allocates out and the GPU workspace.
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "lowbit/error.h"
#include "lowbit/flash_attention.h"
#include "lowbit/quantized_attention.h"
#include "views.h"

namespace lowbit::python {
namespace {

// The C++ name of fused_two_kernel is "ours" (attention_variant_name); both spellings work.
AttentionVariant parse_variant(const char* name) {
  for (AttentionVariant v : kAttentionVariants) {
    if (std::strcmp(name, attention_variant_name(v)) == 0) return v;
  }
  if (std::strcmp(name, "fused_two_kernel") == 0) return AttentionVariant::fused_two_kernel;
  LOWBIT_FAIL("variant: expected naive_sequential, tiled_sequential, tiled_fused or fused_two_kernel, got '", name,
              "'");
}

AttentionConfig make_config(std::int64_t seq_len, std::int64_t d_model, std::int64_t heads, std::int64_t kv_heads,
                            std::int64_t head_dim, bool causal, const char* format) {
  AttentionConfig c;
  c.seq_len = seq_len;
  c.d_model = d_model;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.causal = causal;
  c.format = parse_block_format(format);
  return c;
}

// names: the views' names in conversion errors ("wq.codes", ...).
BlockQuantizedView weight(const In& codes, const In& scales, const OptIn& global_scale, const char* const names[3]) {
  return BlockQuantizedView{view_of(codes, names[0]), view_of(scales, names[1]), view_of(global_scale, names[2])};
}

constexpr const char* kWq[3] = {"wq.codes", "wq.scales", "wq.global_scale"};
constexpr const char* kWk[3] = {"wk.codes", "wk.scales", "wk.global_scale"};
constexpr const char* kWv[3] = {"wv.codes", "wv.scales", "wv.global_scale"};

void quantized_attention(const In& x, const In& wq_codes, const In& wq_scales, const OptIn& wq_global,
                         const In& wk_codes, const In& wk_scales, const OptIn& wk_global, const In& wv_codes,
                         const In& wv_scales, const OptIn& wv_global, const OptIn& bq, const OptIn& bk,
                         const OptIn& bv, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                         bool causal, const char* format, const char* variant, const Out& out,
                         const OptOut& workspace, std::uintptr_t stream) {
  const TensorView xv = view_of(x, "x");
  LOWBIT_CHECK(xv.rank == 2, "x: expected a rank-2 tensor [L, d_model], got rank ", xv.rank);
  const AttentionConfig c = make_config(xv.shape[0], xv.shape[1], heads, kv_heads, head_dim, causal, format);
  const AttentionVariant v = parse_variant(variant);
  AttentionWeights w;
  w.wq = weight(wq_codes, wq_scales, wq_global, kWq);
  w.wk = weight(wk_codes, wk_scales, wk_global, kWk);
  w.wv = weight(wv_codes, wv_scales, wv_global, kWv);
  w.bq = view_of(bq, "bq");
  w.bk = view_of(bk, "bk");
  w.bv = view_of(bv, "bv");
  const TensorView ov = view_of(out, "out");
  const TensorView ws = view_of(workspace, "workspace");
  DeviceGuard guard(xv, x.device_id());
  nb::gil_scoped_release release;
  lowbit::quantized_attention(xv, w, c, v, ov, Workspace{ws.data, ws.span_bytes()}, stream_of(stream));
}

// A [tokens, heads, head_dim] tensor with contiguous heads and channels as the
// [tokens, heads * head_dim] matrix flash_attention takes (row stride: its first).
TensorView heads_matrix(const TensorView& t, const char* what) {
  LOWBIT_CHECK(t.rank == 3, what, ": expected a rank-3 tensor [tokens, heads, head_dim], got rank ", t.rank);
  LOWBIT_CHECK(t.strides[2] == 1 && t.strides[1] == t.shape[2], what,
               ": expected contiguous heads and channels (strides [*, ", t.shape[2], ", 1]), got strides [",
               t.strides[0], ", ", t.strides[1], ", ", t.strides[2], "]");
  return TensorView::matrix(t.data, t.dtype, t.device, t.shape[0], t.shape[1] * t.shape[2], t.strides[0]);
}

void flash_attention(const In& q, const In& k, const In& v, const Out& out, const std::vector<std::int32_t>& cu_q,
                     const std::vector<std::int32_t>& cu_k, bool causal, float scale, const OptOut& workspace,
                     std::uintptr_t stream) {
  const TensorView q3 = view_of(q, "q"), k3 = view_of(k, "k");
  const TensorView qm = heads_matrix(q3, "q"), km = heads_matrix(k3, "k");
  const TensorView vm = heads_matrix(view_of(v, "v"), "v"), om = heads_matrix(view_of(out, "out"), "out");
  LOWBIT_CHECK(k3.shape[2] == q3.shape[2], "k: head_dim ", k3.shape[2], " differs from q's ", q3.shape[2]);
  FlashAttentionParams p;
  p.heads = q3.shape[1];
  p.kv_heads = k3.shape[1];
  p.head_dim = q3.shape[2];
  p.causal = causal;
  p.scale = scale;
  const TensorView ws = view_of(workspace, "workspace");
  DeviceGuard guard(qm, q.device_id());
  nb::gil_scoped_release release;
  lowbit::flash_attention(qm, km, vm, om, cu_q, cu_k, p, Workspace{ws.data, ws.span_bytes()}, stream_of(stream));
}

}  // namespace

void bind_attention(nb::module_& m) {
  using namespace nb::literals;
  m.def("quantized_attention", &quantized_attention, "x"_a, "wq_codes"_a, "wq_scales"_a, "wq_global"_a.none(),
        "wk_codes"_a, "wk_scales"_a, "wk_global"_a.none(), "wv_codes"_a, "wv_scales"_a, "wv_global"_a.none(),
        "bq"_a.none(), "bk"_a.none(), "bv"_a.none(), "heads"_a, "kv_heads"_a, "head_dim"_a, "causal"_a, "format"_a,
        "variant"_a, "out"_a, "workspace"_a.none(), "stream"_a,
        "Block-format QKV projections, then attention, into out (f16 [L, heads * head_dim]).");
  m.def(
      "attention_workspace_bytes",
      [](std::int64_t seq_len, std::int64_t d_model, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
         bool causal, const char* format, const char* variant) {
        return lowbit::attention_workspace_bytes(
            make_config(seq_len, d_model, heads, kv_heads, head_dim, causal, format), parse_variant(variant));
      },
      "seq_len"_a, "d_model"_a, "heads"_a, "kv_heads"_a, "head_dim"_a, "causal"_a, "format"_a, "variant"_a,
      "GPU workspace bytes of quantized_attention() (0 in a CPU-only build).");
  m.def("flash_attention", &flash_attention, "q"_a, "k"_a, "v"_a, "out"_a, "cu_q"_a, "cu_k"_a, "causal"_a, "scale"_a,
        "workspace"_a.none(), "stream"_a,
        "softmax(scale q k^T (+ causal mask)) v into out, for the batch of sequences the prefix sums cut.");
  m.def("flash_attention_workspace_bytes", &lowbit::flash_attention_workspace_bytes, "batch"_a,
        "GPU workspace bytes of flash_attention() for `batch` sequences (0 in a CPU-only build).");
}

}  // namespace lowbit::python
