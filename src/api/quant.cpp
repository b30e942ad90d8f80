// Validation at the boundary, then dispatch by device to cpu/ or cuda/.
#include "lowbit/quant.h"

#include <cstring>

#include "cpu/quant.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "cuda/quant/quant_cuda.h"
#endif

namespace lowbit {

const char* scheme_name(QuantScheme scheme) {
  return scheme == QuantScheme::int8_symmetric ? "int8" : "int4";
}

const char* granularity_name(Granularity granularity) {
  switch (granularity) {
    case Granularity::per_tensor: return "tensor";
    case Granularity::per_channel: return "channel";
    case Granularity::per_token: return "token";
    case Granularity::per_group: return "group";
  }
  return "unknown";
}

QuantScheme parse_scheme(const char* name) {
  if (std::strcmp(name, "int8") == 0) return QuantScheme::int8_symmetric;
  if (std::strcmp(name, "int4") == 0) return QuantScheme::int4_asymmetric;
  LOWBIT_FAIL("scheme: expected int8 or int4, got '", name, "'");
}

Granularity parse_granularity(const char* name) {
  for (Granularity g : {Granularity::per_tensor, Granularity::per_channel, Granularity::per_token,
                        Granularity::per_group}) {
    if (std::strcmp(name, granularity_name(g)) == 0) return g;
  }
  LOWBIT_FAIL("granularity: expected tensor, channel, token or group, got '", name, "'");
}

QuantLayout quant_layout(const QuantSpec& spec, std::int64_t rows, std::int64_t cols) {
  QuantLayout layout{};
  layout.code_cols = spec.scheme == QuantScheme::int8_symmetric ? cols : (cols + 1) / 2;
  switch (spec.granularity) {
    case Granularity::per_tensor: layout.scale_rows = 1; layout.scale_cols = 1; break;
    case Granularity::per_channel: layout.scale_rows = 1; layout.scale_cols = cols; break;
    case Granularity::per_token: layout.scale_rows = rows; layout.scale_cols = 1; break;
    case Granularity::per_group:
      layout.scale_rows = rows;
      layout.scale_cols = spec.group_size > 0 ? (cols + spec.group_size - 1) / spec.group_size : 0;
      break;
  }
  return layout;
}

namespace {

bool is_float_dtype(DType dtype) { return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16; }

void check_spec(const QuantSpec& spec) {
  LOWBIT_CHECK(spec.scheme == QuantScheme::int8_symmetric || spec.scheme == QuantScheme::int4_asymmetric,
               "spec.scheme: unknown value ", static_cast<int>(spec.scheme));
  LOWBIT_CHECK(static_cast<int>(spec.granularity) <= static_cast<int>(Granularity::per_group),
               "spec.granularity: unknown value ", static_cast<int>(spec.granularity));
  if (spec.granularity == Granularity::per_group) {
    LOWBIT_CHECK(spec.group_size > 0 && spec.group_size % 16 == 0,
                 "spec.group_size: expected a positive multiple of 16 for per_group, got ", spec.group_size);
  }
}

// A rows x cols matrix view whose rows are unit-stride and do not overlap.
void check_matrix(const TensorView& view, const char* what, std::int64_t rows, std::int64_t cols) {
  LOWBIT_CHECK(view.rank == 2, what, ": expected a rank-2 tensor, got rank ", view.rank);
  LOWBIT_CHECK(view.shape[0] == rows && view.shape[1] == cols, what, ": expected shape [", rows, ", ",
               cols, "], got [", view.shape[0], ", ", view.shape[1], "]");
  LOWBIT_CHECK(view.strides[1] == 1, what, ": expected unit column stride, got ", view.strides[1]);
  LOWBIT_CHECK(view.strides[0] >= cols, what, ": row stride ", view.strides[0],
               " is smaller than the row length ", cols, " (rows would overlap)");
  LOWBIT_CHECK(view.data != nullptr, what, ": data pointer is null");
}

// Scales and mins: contiguous f32 with exactly `count` elements.
void check_params(const TensorView& view, const char* what, std::int64_t count) {
  LOWBIT_CHECK(view.data != nullptr, what, ": data pointer is null");
  LOWBIT_CHECK(view.dtype == DType::f32, what, ": expected dtype f32, got ", dtype_name(view.dtype));
  LOWBIT_CHECK(view.numel() == count, what, ": expected ", count, " elements, got ", view.numel(),
               " (", view.describe(), ")");
  LOWBIT_CHECK(view.is_contiguous(), what, ": expected a contiguous tensor, got ", view.describe());
}

bool overlaps(const TensorView& a, const TensorView& b) {
  if (!a.data || !b.data || a.empty() || b.empty()) return false;
  const auto* a0 = static_cast<const char*>(a.data);
  const auto* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.span_bytes() && b0 < a0 + a.span_bytes();
}

void check_no_overlap(const TensorView& input, const char* input_name, const TensorView& output,
                      const char* output_name) {
  LOWBIT_CHECK(!overlaps(input, output), output_name, ": overlaps ", input_name,
               " in memory; the output must not alias the input");
}

void check_same_device(Device device, const TensorView& view, const char* what) {
  LOWBIT_CHECK(view.device == device, what, ": on ", device_name(view.device),
               " but the input is on ", device_name(device));
}

struct Checked {
  std::int64_t rows, cols;
  Device device;
};

// Checks the quantized form (codes and/or params) against a rows x cols original.
void check_quantized(const QuantizedView& q, const QuantSpec& spec, std::int64_t rows, std::int64_t cols,
                     Device device, bool need_codes) {
  const QuantLayout layout = quant_layout(spec, rows, cols);
  if (need_codes) {
    check_matrix(q.codes, "codes", rows, layout.code_cols);
    const DType code_dtype = spec.scheme == QuantScheme::int8_symmetric ? DType::i8 : DType::u8;
    LOWBIT_CHECK(q.codes.dtype == code_dtype, "codes: expected dtype ", dtype_name(code_dtype), " for ",
                 scheme_name(spec.scheme), ", got ", dtype_name(q.codes.dtype));
    check_same_device(device, q.codes, "codes");
  }
  check_params(q.scales, "scales", layout.scale_count());
  check_same_device(device, q.scales, "scales");
  if (spec.scheme == QuantScheme::int4_asymmetric) {
    check_params(q.mins, "mins", layout.scale_count());
    check_same_device(device, q.mins, "mins");
    check_no_overlap(q.scales, "scales", q.mins, "mins");
  } else {
    LOWBIT_CHECK(q.mins.data == nullptr, "mins: int8 (symmetric) has no mins; pass an empty view");
  }
  if (need_codes) check_no_overlap(q.scales, "scales", q.codes, "codes");
  if (need_codes && q.mins.data) check_no_overlap(q.mins, "mins", q.codes, "codes");
}

Checked check_input(const TensorView& x) {
  LOWBIT_CHECK(x.rank == 2, "x: expected a rank-2 tensor [tokens, channels], got rank ", x.rank);
  LOWBIT_CHECK(x.shape[0] > 0 && x.shape[1] > 0, "x: expected a non-empty shape, got [", x.shape[0],
               ", ", x.shape[1], "]");
  LOWBIT_CHECK(is_float_dtype(x.dtype), "x: expected dtype f32, f16 or bf16, got ", dtype_name(x.dtype));
  check_matrix(x, "x", x.shape[0], x.shape[1]);
  return Checked{x.shape[0], x.shape[1], x.device};
}

[[maybe_unused]] void check_workspace(const Workspace& workspace, std::size_t needed) {
  LOWBIT_CHECK(workspace.bytes >= needed, "workspace: expected at least ", needed, " bytes, got ",
               workspace.bytes, " (see quantize_workspace_bytes)");
  LOWBIT_CHECK(needed == 0 || workspace.data != nullptr, "workspace: data pointer is null");
#if LOWBIT_WITH_CUDA
  if (needed) cuda::check_device_pointer(workspace.data, "workspace");
#endif
}

#if LOWBIT_WITH_CUDA
void check_device_pointers(const TensorView& dense, const char* dense_name, const QuantizedView& q, bool codes) {
  cuda::check_device_pointer(dense.data, dense_name);
  if (codes) cuda::check_device_pointer(q.codes.data, "codes");
  cuda::check_device_pointer(q.scales.data, "scales");
  if (q.mins.data) cuda::check_device_pointer(q.mins.data, "mins");
}

void throw_on_status(const cuda::QuantStatus& status) {
  if (!status.non_finite) return;
  if (status.row >= 0 && status.col >= 0) {
    LOWBIT_FAIL("x: contains NaN or Inf at row ", status.row, ", column ", status.col,
                "; quantization needs finite values");
  }
  if (status.col >= 0) LOWBIT_FAIL("x: contains NaN or Inf in column ", status.col, "; quantization needs finite values");
  if (status.row >= 0) LOWBIT_FAIL("x: contains NaN or Inf in row ", status.row, "; quantization needs finite values");
  LOWBIT_FAIL("x: contains NaN or Inf; quantization needs finite values");
}
#endif

[[noreturn, maybe_unused]] void fail_no_cuda(const char* what) {
  LOWBIT_FAIL(what, ": tensors are on cuda but this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
}

}  // namespace

std::size_t quantize_workspace_bytes(const QuantSpec& spec, std::int64_t rows, std::int64_t cols) {
#if LOWBIT_WITH_CUDA
  return cuda::quantize_workspace_bytes(spec, rows, cols);
#else
  (void)spec, (void)rows, (void)cols;
  return 0;
#endif
}

void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                    const Workspace& workspace, cuda_stream_t stream, NonFiniteCheck check) {
  check_spec(spec);
  const Checked c = check_input(x);
  check_quantized(out, spec, c.rows, c.cols, c.device, /*need_codes=*/false);
  check_no_overlap(x, "x", out.scales, "scales");
  if (out.mins.data) check_no_overlap(x, "x", out.mins, "mins");
  if (c.device == Device::cpu) return cpu::compute_scales(x, spec, out);
#if LOWBIT_WITH_CUDA
  check_workspace(workspace, quantize_workspace_bytes(spec, c.rows, c.cols));
  check_device_pointers(x, "x", out, false);
  cuda::compute_scales(x, spec, out, workspace, stream);
  if (check == NonFiniteCheck::sync_and_throw) throw_on_status(cuda::read_status(workspace, stream));
#else
  (void)workspace, (void)stream, (void)check;
  fail_no_cuda("compute_scales");
#endif
}

void quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
              const Workspace& workspace, cuda_stream_t stream, NonFiniteCheck check) {
  check_spec(spec);
  const Checked c = check_input(x);
  check_quantized(out, spec, c.rows, c.cols, c.device, /*need_codes=*/true);
  check_no_overlap(x, "x", out.codes, "codes");
  check_no_overlap(x, "x", out.scales, "scales");
  if (out.mins.data) check_no_overlap(x, "x", out.mins, "mins");
  if (c.device == Device::cpu) {
    cpu::compute_scales(x, spec, out);
    return cpu::quantize_with_scales(x, spec, out);
  }
#if LOWBIT_WITH_CUDA
  check_workspace(workspace, quantize_workspace_bytes(spec, c.rows, c.cols));
  check_device_pointers(x, "x", out, true);
  cuda::quantize(x, spec, out, workspace, stream);
  if (check == NonFiniteCheck::sync_and_throw) throw_on_status(cuda::read_status(workspace, stream));
#else
  (void)workspace, (void)stream, (void)check;
  fail_no_cuda("quantize");
#endif
}

void quantize_with_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                          cuda_stream_t stream) {
  check_spec(spec);
  const Checked c = check_input(x);
  check_quantized(out, spec, c.rows, c.cols, c.device, /*need_codes=*/true);
  check_no_overlap(x, "x", out.codes, "codes");
  if (c.device == Device::cpu) return cpu::quantize_with_scales(x, spec, out);
#if LOWBIT_WITH_CUDA
  check_device_pointers(x, "x", out, true);
  cuda::quantize_with_scales(x, spec, out, stream);
#else
  (void)stream;
  fail_no_cuda("quantize_with_scales");
#endif
}

void dequantize(const QuantizedView& in, const QuantSpec& spec, const TensorView& out, cuda_stream_t stream) {
  check_spec(spec);
  LOWBIT_CHECK(out.rank == 2, "out: expected a rank-2 tensor [tokens, channels], got rank ", out.rank);
  LOWBIT_CHECK(out.shape[0] > 0 && out.shape[1] > 0, "out: expected a non-empty shape, got [",
               out.shape[0], ", ", out.shape[1], "]");
  LOWBIT_CHECK(is_float_dtype(out.dtype), "out: expected dtype f32, f16 or bf16, got ", dtype_name(out.dtype));
  check_matrix(out, "out", out.shape[0], out.shape[1]);
  check_quantized(in, spec, out.shape[0], out.shape[1], out.device, /*need_codes=*/true);
  check_no_overlap(in.codes, "codes", out, "out");
  check_no_overlap(in.scales, "scales", out, "out");
  if (in.mins.data) check_no_overlap(in.mins, "mins", out, "out");
  if (out.device == Device::cpu) return cpu::dequantize(in, spec, out);
#if LOWBIT_WITH_CUDA
  check_device_pointers(out, "out", in, true);
  cuda::dequantize(in, spec, out, stream);
#else
  (void)stream;
  fail_no_cuda("dequantize");
#endif
}

void check_quantize_status(const Workspace& workspace, cuda_stream_t stream) {
#if LOWBIT_WITH_CUDA
  LOWBIT_CHECK(workspace.data != nullptr, "workspace: data pointer is null");
  throw_on_status(cuda::read_status(workspace, stream));
#else
  (void)workspace, (void)stream;
  LOWBIT_FAIL("check_quantize_status: this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
#endif
}

}  // namespace lowbit
