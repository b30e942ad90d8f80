// Validation at the boundary, then dispatch by device to cpu/ or cuda/.
#include "lowbit/quant.h"

#include <cstring>

#include "cpu/quant.h"
#include "core/validate.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "cuda/quant/quant_cuda.h"
#endif

namespace lowbit {


namespace {

using core::check_matrix;
using core::check_no_aliasing;
using core::check_same_device;
using core::fail_no_cuda;
using core::is_float_dtype;

void check_spec(const QuantSpec& spec) {
  LOWBIT_CHECK(static_cast<int>(spec.scheme) <= static_cast<int>(QuantScheme::int4_symmetric),
               "spec.scheme: unknown value ", static_cast<int>(spec.scheme));
  LOWBIT_CHECK(static_cast<int>(spec.granularity) <= static_cast<int>(Granularity::per_group),
               "spec.granularity: unknown value ", static_cast<int>(spec.granularity));
  if (spec.granularity == Granularity::per_group) {
    LOWBIT_CHECK(spec.group_size > 0 && spec.group_size % 16 == 0,
                 "spec.group_size: expected a positive multiple of 16 for per_group, got ", spec.group_size);
  }
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
    const DType code_dtype = scheme_code_dtype(spec.scheme);
    LOWBIT_CHECK(q.codes.dtype == code_dtype, "codes: expected dtype ", dtype_name(code_dtype), " for ",
                 scheme_name(spec.scheme), ", got ", dtype_name(q.codes.dtype));
    check_same_device(device, q.codes, "codes");
  }
  core::check_vector(q.scales, "scales", DType::f32, layout.scale_count());
  check_same_device(device, q.scales, "scales");
  if (scheme_has_mins(spec.scheme)) {
    core::check_vector(q.mins, "mins", DType::f32, layout.scale_count());
    check_same_device(device, q.mins, "mins");
  } else {
    LOWBIT_CHECK(q.mins.data == nullptr, "mins: ", scheme_name(spec.scheme), " (symmetric) has no mins; pass an empty view");
  }
}

Checked check_input(const TensorView& x) {
  LOWBIT_CHECK(x.rank == 2, "x: expected a rank-2 tensor [tokens, channels], got rank ", x.rank);
  LOWBIT_CHECK(x.shape[0] > 0 && x.shape[1] > 0, "x: expected a non-empty shape, got [", x.shape[0],
               ", ", x.shape[1], "]");
  LOWBIT_CHECK(is_float_dtype(x.dtype), "x: expected dtype f32, f16 or bf16, got ", dtype_name(x.dtype));
  check_matrix(x, "x", x.shape[0], x.shape[1]);
  return Checked{x.shape[0], x.shape[1], x.device};
}

#if LOWBIT_WITH_CUDA
void check_device_pointers(const TensorView& dense, const char* dense_name, const QuantizedView& q, bool codes) {
  core::check_device_data(dense, dense_name);
  if (codes) core::check_device_data(q.codes, "codes");
  core::check_device_data(q.scales, "scales");
  core::check_device_data(q.mins, "mins");
}

// `when` tells a late (sticky) report from the call's own.
void throw_on_status(const cuda::QuantStatus& status, const char* when = "") {
  if (!status.non_finite) return;
  if (status.row >= 0 && status.col >= 0) {
    LOWBIT_FAIL("x: contains NaN or Inf at row ", status.row, ", column ", status.col, when,
                "; quantization needs finite values");
  }
  if (status.col >= 0) {
    LOWBIT_FAIL("x: contains NaN or Inf in column ", status.col, when, "; quantization needs finite values");
  }
  if (status.row >= 0) LOWBIT_FAIL("x: contains NaN or Inf in row ", status.row, when, "; quantization needs finite values");
  LOWBIT_FAIL("x: contains NaN or Inf", when, "; quantization needs finite values");
}

void check_status_word(const NonFiniteStatus& status) {
  LOWBIT_CHECK(status.data != nullptr, "status: data pointer is null (see non_finite_status_bytes)");
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(status.data) % 8 == 0, "status: expected an 8-byte aligned pointer, got ",
               status.data);
  core::check_device_data(status.data, "status");
}
#endif

// What compute_scales() and quantize() share; status: nullptr reports into the
// workspace (and `check` says when it is read), else into that sticky word.
void scales_or_quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                        const Workspace& workspace, const NonFiniteStatus* status, cuda_stream_t stream,
                        NonFiniteCheck check, bool codes) {
  check_spec(spec);
  const Checked c = check_input(x);
  check_quantized(out, spec, c.rows, c.cols, c.device, /*need_codes=*/codes);
  const TensorView ws = c.device == Device::cuda ? core::byte_view(workspace.data, workspace.bytes) : TensorView{};
  const TensorView status_word =
      status != nullptr ? core::byte_view(status->data, non_finite_status_bytes()) : TensorView{};
  check_no_aliasing({{out.scales, "scales"}, {out.mins, "mins"}, {codes ? out.codes : TensorView{}, "codes"},
                     {ws, "workspace"}, {status_word, "status"}},
                    {{x, "x"}});
  if (c.device == Device::cpu) {
    cpu::compute_scales(x, spec, out);
    if (codes) cpu::quantize_with_scales(x, spec, out);
    return;
  }
#if LOWBIT_WITH_CUDA
  core::check_workspace(workspace, cuda::quantize_workspace_bytes(spec, c.rows, c.cols, status != nullptr),
                  status ? "quantize_workspace_bytes_without_status" : "quantize_workspace_bytes");
  check_device_pointers(x, "x", out, codes);
  if (status) check_status_word(*status);
  void* word = status ? status->data : nullptr;
  if (codes) {
    cuda::quantize(x, spec, out, workspace, word, stream);
  } else {
    cuda::compute_scales(x, spec, out, workspace, word, stream);
  }
  if (!status && check == NonFiniteCheck::sync_and_throw) throw_on_status(cuda::read_status(workspace.data, stream));
#else
  (void)workspace, (void)status, (void)stream, (void)check;
  fail_no_cuda(codes ? "quantize" : "compute_scales");
#endif
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

std::size_t non_finite_status_bytes() {
#if LOWBIT_WITH_CUDA
  return cuda::kStatusBytes;
#else
  return 64;  // what the CUDA build's word takes; nothing uses it here
#endif
}

std::size_t quantize_workspace_bytes_without_status(const QuantSpec& spec, std::int64_t rows, std::int64_t cols) {
#if LOWBIT_WITH_CUDA
  return cuda::quantize_workspace_bytes(spec, rows, cols, /*status_outside=*/true);
#else
  (void)spec, (void)rows, (void)cols;
  return 0;
#endif
}

void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                    const Workspace& workspace, cuda_stream_t stream, NonFiniteCheck check) {
  scales_or_quantize(x, spec, out, workspace, nullptr, stream, check, /*codes=*/false);
}

void quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
              const Workspace& workspace, cuda_stream_t stream, NonFiniteCheck check) {
  scales_or_quantize(x, spec, out, workspace, nullptr, stream, check, /*codes=*/true);
}

void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                    const Workspace& workspace, const NonFiniteStatus& status, cuda_stream_t stream) {
  scales_or_quantize(x, spec, out, workspace, &status, stream, NonFiniteCheck::deferred, /*codes=*/false);
}

void quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& out, const Workspace& workspace,
              const NonFiniteStatus& status, cuda_stream_t stream) {
  scales_or_quantize(x, spec, out, workspace, &status, stream, NonFiniteCheck::deferred, /*codes=*/true);
}

void quantize_with_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                          cuda_stream_t stream) {
  check_spec(spec);
  const Checked c = check_input(x);
  check_quantized(out, spec, c.rows, c.cols, c.device, /*need_codes=*/true);
  check_no_aliasing({{out.codes, "codes"}}, {{x, "x"}, {out.scales, "scales"}, {out.mins, "mins"}});
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
  check_no_aliasing({{out, "out"}}, {{in.codes, "codes"}, {in.scales, "scales"}, {in.mins, "mins"}});
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
  throw_on_status(cuda::read_status(workspace.data, stream));
#else
  (void)workspace, (void)stream;
  LOWBIT_FAIL("check_quantize_status: this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
#endif
}

void check_quantize_status(const NonFiniteStatus& status, cuda_stream_t stream) {
#if LOWBIT_WITH_CUDA
  check_status_word(status);
  const cuda::QuantStatus seen = cuda::read_status(status.data, stream);
  if (seen.non_finite) cuda::clear_status(status.data, stream);
  throw_on_status(seen, " (reported by a quantize since the status was last checked)");
#else
  (void)status, (void)stream;
  LOWBIT_FAIL("check_quantize_status: this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
#endif
}

}  // namespace lowbit
