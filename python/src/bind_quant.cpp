// Bindings of include/lowbit/quant.h. The Python layer allocates every output (and
// the GPU workspace) with the caller's array library; these functions only convert
// views, release the GIL and call the library.
#include <cstdint>

#include "lowbit/error.h"
#include "lowbit/quant.h"
#include "views.h"

namespace lowbit::python {
namespace {

QuantSpec make_spec(const char* scheme, const char* granularity, std::int64_t group_size) {
  return QuantSpec{parse_scheme(scheme), parse_granularity(granularity), group_size};
}

QuantizedView quantized_view(const TensorView& codes, const TensorView& scales, const TensorView& mins) {
  return QuantizedView{codes, scales, mins};
}

// NaN/Inf on the GPU: with `status` (a sticky NonFiniteStatus word) reported there and
// never synchronized; else in the workspace, read at once (synchronizing) unless deferred.
void quantize(const In& x, const Out& codes, const Out& scales, const OptOut& mins, const char* scheme,
              const char* granularity, std::int64_t group_size, const OptOut& workspace, std::uintptr_t stream,
              bool deferred, const OptOut& status) {
  const QuantSpec spec = make_spec(scheme, granularity, group_size);
  const TensorView xv = view_of(x, "x");
  const QuantizedView q = quantized_view(view_of(codes, "codes"), view_of(scales, "scales"), view_of(mins, "mins"));
  const TensorView ws = view_of(workspace, "workspace");
  const Workspace w{ws.data, ws.data ? ws.span_bytes() : 0};
  const TensorView word = view_of(status, "status");
  DeviceGuard guard(xv, x.device_id());
  nb::gil_scoped_release release;
  if (status) {
    lowbit::quantize(xv, spec, q, w, NonFiniteStatus{word.data}, stream_of(stream));
  } else {
    lowbit::quantize(xv, spec, q, w, stream_of(stream),
                     deferred ? NonFiniteCheck::deferred : NonFiniteCheck::sync_and_throw);
  }
}

// quantize() into outputs that the Python layer allocated itself and passes by address
// (torch: data_ptr(), CuPy: data.ptr), with the sticky status word's address: no DLPack
// export and import of those arrays (0.7 us a call less for codes and scales on the CPU,
// issue 6). The outputs are contiguous, of quant_layout's shapes and the scheme's dtypes,
// on x's device; the views made here meet the same checks as arrays' views (a null
// address fails them as a missing output). mins, status: 0 for none.
void quantize_to(const In& x, std::uintptr_t codes, std::uintptr_t scales, std::uintptr_t mins, const char* scheme,
                 const char* granularity, std::int64_t group_size, const OptOut& workspace, std::uintptr_t stream,
                 bool deferred, std::uintptr_t status) {
  const QuantSpec spec = make_spec(scheme, granularity, group_size);
  const TensorView xv = view_of(x, "x");
  LOWBIT_CHECK(xv.rank == 2, "x: expected a rank-2 tensor [tokens, channels], got rank ", xv.rank);
  const QuantLayout l = quant_layout(spec, xv.rows(), xv.cols());
  auto at = [](std::uintptr_t address) { return reinterpret_cast<void*>(address); };
  const QuantizedView q{
      TensorView::matrix(at(codes), scheme_code_dtype(spec.scheme), xv.device, xv.rows(), l.code_cols),
      TensorView::vector(at(scales), DType::f32, xv.device, l.scale_count()),
      mins ? TensorView::vector(at(mins), DType::f32, xv.device, l.scale_count()) : TensorView{}};
  const TensorView ws = view_of(workspace, "workspace");
  const Workspace w{ws.data, ws.data ? ws.span_bytes() : 0};
  DeviceGuard guard(xv, x.device_id());
  nb::gil_scoped_release release;
  if (status) {
    lowbit::quantize(xv, spec, q, w, NonFiniteStatus{at(status)}, stream_of(stream));
  } else {
    lowbit::quantize(xv, spec, q, w, stream_of(stream),
                     deferred ? NonFiniteCheck::deferred : NonFiniteCheck::sync_and_throw);
  }
}

void quantize_with_scales(const In& x, const Out& codes, const In& scales, const OptIn& mins, const char* scheme,
                          const char* granularity, std::int64_t group_size, std::uintptr_t stream) {
  const QuantSpec spec = make_spec(scheme, granularity, group_size);
  const TensorView xv = view_of(x, "x");
  const QuantizedView q = quantized_view(view_of(codes, "codes"), view_of(scales, "scales"), view_of(mins, "mins"));
  DeviceGuard guard(xv, x.device_id());
  nb::gil_scoped_release release;
  lowbit::quantize_with_scales(xv, spec, q, stream_of(stream));
}

void dequantize(const In& codes, const In& scales, const OptIn& mins, const char* scheme, const char* granularity,
                std::int64_t group_size, const Out& out, std::uintptr_t stream) {
  const QuantSpec spec = make_spec(scheme, granularity, group_size);
  const QuantizedView q = quantized_view(view_of(codes, "codes"), view_of(scales, "scales"), view_of(mins, "mins"));
  const TensorView ov = view_of(out, "out");
  DeviceGuard guard(ov, out.device_id());
  nb::gil_scoped_release release;
  lowbit::dequantize(q, spec, ov, stream_of(stream));
}

void check_status(const Out& workspace, std::uintptr_t stream) {
  const TensorView ws = view_of(workspace, "workspace");
  DeviceGuard guard(ws, workspace.device_id());
  nb::gil_scoped_release release;
  lowbit::check_quantize_status(Workspace{ws.data, ws.span_bytes()}, stream_of(stream));
}

void check_status_word(const Out& status, std::uintptr_t stream) {
  const TensorView word = view_of(status, "status");
  LOWBIT_CHECK(word.device == Device::cuda && word.span_bytes() >= non_finite_status_bytes(),
               "status: expected a CUDA array of at least ", non_finite_status_bytes(), " bytes, got ",
               word.describe());
  DeviceGuard guard(word, status.device_id());
  nb::gil_scoped_release release;
  lowbit::check_quantize_status(NonFiniteStatus{word.data}, stream_of(stream));
}

nb::tuple layout(const char* scheme, const char* granularity, std::int64_t group_size, std::int64_t rows,
                 std::int64_t cols) {
  const QuantLayout l = quant_layout(make_spec(scheme, granularity, group_size), rows, cols);
  return nb::make_tuple(l.code_cols, l.scale_rows, l.scale_cols);
}

}  // namespace

void bind_quant(nb::module_& m) {
  using namespace nb::literals;
  m.def("quantize", &quantize, "x"_a, "codes"_a, "scales"_a, "mins"_a.none(), "scheme"_a, "granularity"_a,
        "group_size"_a, "workspace"_a.none(), "stream"_a, "deferred"_a, "status"_a.none() = nb::none(),
        "Scales (and mins) of x, then its codes, into the given arrays (NaN/Inf on the GPU: into status "
        "if given, else the workspace's word, read at once unless deferred).");
  m.def("quantize_to", &quantize_to, "x"_a, "codes"_a, "scales"_a, "mins"_a, "scheme"_a, "granularity"_a,
        "group_size"_a, "workspace"_a.none(), "stream"_a, "deferred"_a, "status"_a,
        "quantize() into outputs given by address (contiguous, quant_layout's shapes, x's device; 0: none).");
  m.def("quantize_with_scales", &quantize_with_scales, "x"_a, "codes"_a, "scales"_a, "mins"_a.none(), "scheme"_a,
        "granularity"_a, "group_size"_a, "stream"_a, "Codes of x with the given scales (and mins).");
  m.def("dequantize", &dequantize, "codes"_a, "scales"_a, "mins"_a.none(), "scheme"_a, "granularity"_a,
        "group_size"_a, "out"_a, "stream"_a, "Decodes codes with their scales (and mins) into out.");
  m.def("check_quantize_status", &check_status, "workspace"_a, "stream"_a,
        "Synchronizes the stream; raises if a deferred quantize with this workspace saw NaN or Inf.");
  m.def("check_quantize_status_word", &check_status_word, "status"_a, "stream"_a,
        "Synchronizes the stream; raises (once) the first NaN/Inf reported into this status word since its "
        "last check.");
  m.attr("non_finite_status_bytes") = non_finite_status_bytes();
  m.def("quant_layout", &layout, "scheme"_a, "granularity"_a, "group_size"_a, "rows"_a, "cols"_a,
        "(code_cols, scale_rows, scale_cols) of the quantized form of a rows x cols tensor.");
  m.def(
      "quantize_workspace_bytes",
      [](const char* scheme, const char* granularity, std::int64_t group_size, std::int64_t rows, std::int64_t cols) {
        return lowbit::quantize_workspace_bytes(make_spec(scheme, granularity, group_size), rows, cols);
      },
      "scheme"_a, "granularity"_a, "group_size"_a, "rows"_a, "cols"_a, "GPU workspace bytes of quantize().");
  m.def(
      "quantize_workspace_bytes_without_status",
      [](const char* scheme, const char* granularity, std::int64_t group_size, std::int64_t rows, std::int64_t cols) {
        return lowbit::quantize_workspace_bytes_without_status(make_spec(scheme, granularity, group_size), rows,
                                                               cols);
      },
      "scheme"_a, "granularity"_a, "group_size"_a, "rows"_a, "cols"_a,
      "GPU workspace bytes of quantize() with a status word (0 for token and group).");
  m.def(
      "scheme_info",
      [](const char* scheme) {
        const QuantScheme s = parse_scheme(scheme);
        return nb::make_tuple(scheme_bits(s), scheme_has_mins(s), dtype_name(scheme_code_dtype(s)));
      },
      "scheme"_a, "(bits, has_mins, code dtype name) of a scheme.");
}

}  // namespace lowbit::python
