// Bindings of include/lowbit/quant.h. The Python layer allocates every output (and
// the GPU workspace) with the caller's array library; these functions only convert
// views, release the GIL and call the library.
#include <cstdint>

#include "lowbit/error.h"
#include "lowbit/quant.h"
#include "views.h"

namespace lowbit::python {

// An output (or the status word) of quantize(): an array, or the address of memory that
// the Python layer allocated for it itself (torch's data_ptr(), CuPy's data.ptr), which
// skips that array's DLPack import (0.3-0.7 us a call for codes and scales). An address
// must hold contiguous memory of quant_layout's shape and the scheme's dtype on x's
// device. None or 0: not given.
struct OutputArg {
  OptOut array;
  std::uintptr_t address = 0;
};

}  // namespace lowbit::python

namespace nanobind::detail {

template <>
struct type_caster<lowbit::python::OutputArg> {
  NB_TYPE_CASTER(lowbit::python::OutputArg, const_name("Optional[Union[ndarray, int]]"))

  bool from_python(handle src, uint8_t flags, cleanup_list* cleanup) noexcept {
    if (src.is_none()) return true;
    if (PyLong_CheckExact(src.ptr())) {
      value.address = static_cast<std::uintptr_t>(PyLong_AsUnsignedLongLong(src.ptr()));
      if (!PyErr_Occurred()) return true;
      PyErr_Clear();  // a negative or too large number: not an address
      return false;
    }
    make_caster<lowbit::python::Out> array;
    if (!array.from_python(src, flags, cleanup)) return false;
    value.array = std::move(array.value);
    return true;
  }

  static handle from_cpp(const lowbit::python::OutputArg&, rv_policy, cleanup_list*) noexcept { return handle(); }
};

}  // namespace nanobind::detail

namespace lowbit::python {
namespace {

QuantSpec make_spec(const char* scheme, const char* granularity, std::int64_t group_size) {
  return QuantSpec{parse_scheme(scheme), parse_granularity(granularity), group_size};
}

QuantizedView quantized_view(const TensorView& codes, const TensorView& scales, const TensorView& mins) {
  return QuantizedView{codes, scales, mins};
}

// The view of an output: its array's, or one made at its address (`made`), or empty.
template <class MakeView>
TensorView output_view(const OutputArg& out, const char* what, MakeView made) {
  if (out.array) return view_of(*out.array, what);
  return out.address ? made(reinterpret_cast<void*>(out.address)) : TensorView{};
}

// Scales (and mins) of x, then its codes, into the outputs (arrays, or addresses the
// Python layer allocated: see OutputArg). NaN/Inf on the GPU: with `status` (a sticky
// NonFiniteStatus word) reported there and never synchronized; else in the workspace,
// read at once (synchronizing) unless deferred.
void quantize(const In& x, const OutputArg& codes, const OutputArg& scales, const OutputArg& mins,
              const char* scheme, const char* granularity, std::int64_t group_size, const OptOut& workspace,
              std::uintptr_t stream, bool deferred, const OutputArg& status) {
  const QuantSpec spec = make_spec(scheme, granularity, group_size);
  const TensorView xv = view_of(x, "x");
  // Outputs by address take quant_layout's shapes of x (a rank other than 2 leaves them
  // empty, and the library names x).
  const QuantLayout l = xv.rank == 2 ? quant_layout(spec, xv.rows(), xv.cols()) : QuantLayout{};
  const std::int64_t rows = xv.rank == 2 ? xv.rows() : 0;
  const DType code_dtype = scheme_code_dtype(spec.scheme);
  auto params = [&](void* data) { return TensorView::vector(data, DType::f32, xv.device, l.scale_count()); };
  const QuantizedView q{
      output_view(codes, "codes",
                  [&](void* data) { return TensorView::matrix(data, code_dtype, xv.device, rows, l.code_cols); }),
      output_view(scales, "scales", params), output_view(mins, "mins", params)};
  const TensorView ws = view_of(workspace, "workspace");
  const Workspace w{ws.data, ws.data ? ws.span_bytes() : 0};
  void* word = status.array ? view_of(*status.array, "status").data : reinterpret_cast<void*>(status.address);
  DeviceGuard guard(xv, x.device_id());
  nb::gil_scoped_release release;
  if (word) {
    lowbit::quantize(xv, spec, q, w, NonFiniteStatus{word}, stream_of(stream));
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

nb::tuple scheme_info(QuantScheme s) {
  return nb::make_tuple(scheme_bits(s), scheme_has_mins(s), dtype_name(scheme_code_dtype(s)));
}

// {name: (bits, has_mins, code dtype name)} of every scheme.
nb::dict schemes() {
  nb::dict table;
  for (QuantScheme s : kQuantSchemes) table[scheme_name(s)] = scheme_info(s);
  return table;
}

nb::tuple layout_rule(const char* scheme, const char* granularity, std::int64_t group_size) {
  const QuantLayoutRule r = quant_layout_rule(make_spec(scheme, granularity, group_size));
  auto term = [](const LayoutTerm& t) { return nb::make_tuple(layout_source_name(t.source), t.divisor); };
  return nb::make_tuple(term(r.code_cols), term(r.scale_rows), term(r.scale_cols));
}

}  // namespace

void bind_quant(nb::module_& m) {
  using namespace nb::literals;
  m.def("quantize", &quantize, "x"_a, "codes"_a.none(), "scales"_a.none(), "mins"_a.none(), "scheme"_a,
        "granularity"_a, "group_size"_a, "workspace"_a.none(), "stream"_a, "deferred"_a,
        "status"_a.none() = nb::none(),
        "Scales (and mins) of x, then its codes, into the outputs: arrays, or addresses of contiguous memory "
        "of quant_layout's shapes on x's device (None or 0: none). NaN/Inf on the GPU: into status if given, "
        "else the workspace's word, read at once unless deferred.");
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
      "scheme_info", [](const char* scheme) { return scheme_info(parse_scheme(scheme)); }, "scheme"_a,
      "(bits, has_mins, code dtype name) of a scheme.");
  m.def("quant_schemes", &schemes, "{name: (bits, has_mins, code dtype name)} of every scheme.");
  m.def("quant_layout_rule", &layout_rule, "scheme"_a, "granularity"_a, "group_size"_a,
        "quant_layout as ((source, divisor) of code_cols, scale_rows, scale_cols): each ceil(source / divisor), "
        "source 'one', 'rows' or 'cols' (divisor 0: 0).");
}

}  // namespace lowbit::python
