// Validation at the boundary, then dispatch by device to cpu/ or cuda/.
#include "lowbit/quantized_attention.h"

#include <cstdint>

#include "core/checked.h"
#include "core/validate.h"
#include "cpu/quantized_attention.h"
#include "cuda/qattention/qattention_cuda.h"
#include "lowbit/error.h"

namespace lowbit {

const char* attention_variant_name(AttentionVariant variant) {
  switch (variant) {
    case AttentionVariant::naive_sequential: return "naive_sequential";
    case AttentionVariant::tiled_sequential: return "tiled_sequential";
    case AttentionVariant::tiled_fused: return "tiled_fused";
    case AttentionVariant::fused_two_kernel: return "ours";
  }
  return "unknown";
}

void check_attention_config(const AttentionConfig& c) {
  LOWBIT_CHECK(static_cast<int>(c.format) <= static_cast<int>(BlockFormat::nvfp4), "format: unknown value ",
               static_cast<int>(c.format));
  LOWBIT_CHECK(c.seq_len >= 1, "seq_len: expected L >= 1, got ", c.seq_len);
  LOWBIT_CHECK(c.seq_len <= 0x7fffffff, "seq_len: expected L < 2^31, got ", c.seq_len);
  LOWBIT_CHECK(c.head_dim == 64 || c.head_dim == 128, "head_dim: expected 64 or 128, got ", c.head_dim);
  LOWBIT_CHECK(c.heads >= 1, "heads: expected >= 1, got ", c.heads);
  LOWBIT_CHECK(c.kv_heads >= 1, "kv_heads: expected >= 1, got ", c.kv_heads);
  LOWBIT_CHECK(c.heads % c.kv_heads == 0, "kv_heads: heads ", c.heads, " is not a multiple of kv_heads ", c.kv_heads,
               " (grouped-query attention shares each kv head among heads / kv_heads query heads)");
  const std::int64_t block = block_size(c.format);
  LOWBIT_CHECK(c.d_model >= 1 && c.d_model % block == 0, "d_model: ", c.d_model, " is not a multiple of the ",
               block_format_name(c.format), " block size ", block, " (blocks run along the weights' rows)");
  LOWBIT_CHECK(c.d_model % 64 == 0, "d_model: expected a multiple of 64 (the kernels step K by 64), got ",
               c.d_model);
  const std::int64_t q_cols = core::checked_mul(c.heads, c.head_dim, "heads x head_dim");
  LOWBIT_CHECK(c.d_model <= 65536 && q_cols <= 65536, "d_model and heads * head_dim: expected <= 65536, got ",
               c.d_model, " and ", c.heads, " x ", c.head_dim, " = ", q_cols);
}

std::int64_t attention_qkv_cols(const AttentionConfig& c) {
  const std::int64_t heads = core::checked_add(c.heads, core::checked_mul(2, c.kv_heads, "2 x kv_heads"),
                                               "heads + 2 x kv_heads");
  return core::checked_mul(heads, c.head_dim, "(heads + 2 x kv_heads) x head_dim");
}

namespace {

void check_bias(const TensorView& b, const char* what, std::int64_t n, Device device) {
  if (b.data == nullptr) {
    // A default TensorView (rank 0) or a zero-length one means no bias.
    LOWBIT_CHECK(b.rank == 0 || b.empty(), what, ": data pointer is null but the view has ", b.numel(),
                 " elements (pass an empty view for no bias)");
    return;
  }
  core::check_dtype(b, what, DType::f16);
  LOWBIT_CHECK(b.numel() == n && b.is_contiguous(), what, ": expected a contiguous vector of ", n,
               " elements, got ", b.describe());
  core::check_same_device(device, b, what);
}

void check_weight(const BlockQuantizedView& w, const char* what, BlockFormat format, std::int64_t rows,
                  std::int64_t cols, Device device) {
  LOWBIT_CHECK(w.codes.data != nullptr, what, ".codes: data pointer is null");
  LOWBIT_CHECK(w.scales.data != nullptr, what, ".scales: data pointer is null");
  const BlockLayout layout = block_layout(format, rows, cols);
  core::check_dtype(w.codes, what, DType::u8);
  core::check_matrix(w.codes, what, rows, layout.code_cols);
  core::check_same_device(device, w.codes, what);
  core::check_dtype(w.scales, what, layout.scale_dtype);
  LOWBIT_CHECK(w.scales.numel() == layout.scale_count && w.scales.is_contiguous(), what, ".scales: expected ",
               layout.scale_count, " contiguous elements, got ", w.scales.describe());
  core::check_same_device(device, w.scales, what);
  if (layout.has_global_scale) {
    LOWBIT_CHECK(w.global_scale.data != nullptr && w.global_scale.dtype == DType::f32 && w.global_scale.numel() == 1,
                 what, ".global_scale: nvfp4 needs one f32 tensor scale");
    core::check_same_device(device, w.global_scale, what);
  }
  if (device == Device::cuda) {
    // The fused kernel copies each row's codes of a 64-wide K step as 16-byte chunks.
    LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(w.codes.data) % 16 == 0 && w.codes.row_stride() % 16 == 0, what,
                 ".codes: the GPU kernels need 16-byte aligned rows (pointer ", w.codes.data, ", row stride ",
                 w.codes.row_stride(), ")");
    LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(w.scales.data) % 4 == 0, what,
                 ".scales: the GPU kernels need a 4-byte aligned pointer");
  }
}

}  // namespace

std::size_t attention_workspace_bytes(const AttentionConfig& config, AttentionVariant variant) {
  check_attention_config(config);
  LOWBIT_CHECK(static_cast<int>(variant) <= 3, "variant: unknown value ", static_cast<int>(variant));
#if LOWBIT_WITH_CUDA
  return cuda::attention::workspace_layout(config, variant).total;
#else
  return 0;
#endif
}

void quantized_attention(const TensorView& x, const AttentionWeights& w, const AttentionConfig& c,
                         AttentionVariant variant, const TensorView& out, const Workspace& workspace,
                         cuda_stream_t stream) {
  check_attention_config(c);
  LOWBIT_CHECK(static_cast<int>(variant) <= 3, "variant: unknown value ", static_cast<int>(variant));
  LOWBIT_CHECK(x.data != nullptr, "x: data pointer is null");
  LOWBIT_CHECK(out.data != nullptr, "out: data pointer is null");
  core::check_dtype(x, "x", DType::f16);
  core::check_matrix(x, "x", c.seq_len, c.d_model);
  core::check_dtype(out, "out", DType::f16);
  const std::int64_t nq = c.heads * c.head_dim, nkv = c.kv_heads * c.head_dim;
  core::check_matrix(out, "out", c.seq_len, nq);
  core::check_same_device(x.device, out, "out");
  check_weight(w.wq, "wq", c.format, nq, c.d_model, x.device);
  check_weight(w.wk, "wk", c.format, nkv, c.d_model, x.device);
  check_weight(w.wv, "wv", c.format, nkv, c.d_model, x.device);
  check_bias(w.bq, "bq", nq, x.device);
  check_bias(w.bk, "bk", nkv, x.device);
  check_bias(w.bv, "bv", nkv, x.device);
  const TensorView ws = x.device == Device::cuda ? core::byte_view(workspace.data, workspace.bytes) : TensorView{};
  core::check_no_aliasing({{out, "out"}, {ws, "workspace"}},
                          {{x, "x"},
                           {w.wq.codes, "wq.codes"},
                           {w.wq.scales, "wq.scales"},
                           {w.wq.global_scale, "wq.global_scale"},
                           {w.wk.codes, "wk.codes"},
                           {w.wk.scales, "wk.scales"},
                           {w.wk.global_scale, "wk.global_scale"},
                           {w.wv.codes, "wv.codes"},
                           {w.wv.scales, "wv.scales"},
                           {w.wv.global_scale, "wv.global_scale"},
                           {w.bq, "bq"},
                           {w.bk, "bk"},
                           {w.bv, "bv"}});
  if (x.device == Device::cpu) return cpu::attention(x, w, c, out);
#if LOWBIT_WITH_CUDA
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0 && x.row_stride() % 8 == 0,
               "x: the GPU kernels need 16-byte aligned rows (pointer ", x.data, ", row stride ", x.row_stride(), ")");
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(out.data) % 4 == 0 && out.row_stride() % 2 == 0,
               "out: the GPU kernels store pairs of f16; need a 4-byte aligned pointer and an even row stride");
  const std::size_t need = cuda::attention::workspace_layout(c, variant).total;
  LOWBIT_CHECK(need == 0 || workspace.data != nullptr, "workspace: data pointer is null (", attention_variant_name(variant),
               " needs ", need, " bytes; see attention_workspace_bytes)");
  LOWBIT_CHECK(workspace.bytes >= need, "workspace: expected at least ", need, " bytes for ",
               attention_variant_name(variant), ", got ", workspace.bytes, " (see attention_workspace_bytes)");
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(workspace.data) % 256 == 0,
               "workspace: expected a 256-byte aligned pointer, got ", workspace.data);
  core::check_device_data(x, "x");
  core::check_device_data(out, "out");
  for (const BlockQuantizedView* q : {&w.wq, &w.wk, &w.wv}) {
    core::check_device_data(q->codes, "codes");
    core::check_device_data(q->scales, "scales");
    core::check_device_data(q->global_scale, "global_scale");
  }
  core::check_device_data(w.bq, "bq");
  core::check_device_data(w.bk, "bk");
  core::check_device_data(w.bv, "bv");
  core::check_device_data(workspace.data, "workspace");
  cuda::attention::run(x, w, c, variant, out, workspace, stream);
#else
  (void)workspace, (void)stream;
  core::fail_no_cuda("quantized_attention");
#endif
}

}  // namespace lowbit
