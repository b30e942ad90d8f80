// Bindings of include/lowbit/gemm.h. Packed weights travel as opaque uint8 byte
// buffers on the Python side (their byte order is private to lowbit); the spec's
// act_dtype re-types them here.
#include <cstdint>
#include <cstring>

#include "lowbit/error.h"
#include "lowbit/gemm.h"
#include "lowbit/weight_only.h"
#include "views.h"

namespace lowbit::python {
namespace {

BLayout parse_layout(const char* name) {
  if (std::strcmp(name, "k_by_n") == 0) return BLayout::k_by_n;
  if (std::strcmp(name, "n_by_k") == 0) return BLayout::n_by_k;
  LOWBIT_FAIL("b_layout: expected 'k_by_n' ([K, N]) or 'n_by_k' ([N, K], nn.Linear's weight), got '", name, "'");
}

GemmEpilogue make_epilogue(const OptIn& scale_a, const OptIn& scale_b, float scale_c, const OptIn& bias, bool relu) {
  GemmEpilogue e;
  e.scale_a = view_of(scale_a, "scale_a");
  e.scale_b = view_of(scale_b, "scale_b");
  e.scale_c = scale_c;
  e.bias = view_of(bias, "bias");
  e.relu = relu;
  return e;
}

void int8_matmul(const In& a, const In& b, const char* b_layout, const Out& out, const OptIn& scale_a,
                 const OptIn& scale_b, float scale_c, const OptIn& bias, bool relu, std::uintptr_t stream) {
  const TensorView av = view_of(a, "a"), bv = view_of(b, "b"), ov = view_of(out, "out");
  const GemmEpilogue e = make_epilogue(scale_a, scale_b, scale_c, bias, relu);
  const BLayout layout = parse_layout(b_layout);
  DeviceGuard guard(ov, out.device_id());
  nb::gil_scoped_release release;
  lowbit::int8_gemm(av, bv, layout, ov, e, stream_of(stream));
}

void int4_matmul(const In& a, const In& b, const char* b_layout, std::int64_t k, const Out& out,
                 const OptIn& scale_a, const OptIn& scale_b, float scale_c, const OptIn& bias, bool relu,
                 std::uintptr_t stream) {
  const TensorView av = view_of(a, "a_packed"), bv = view_of(b, "b_packed"), ov = view_of(out, "out");
  const GemmEpilogue e = make_epilogue(scale_a, scale_b, scale_c, bias, relu);
  const BLayout layout = parse_layout(b_layout);
  DeviceGuard guard(ov, out.device_id());
  nb::gil_scoped_release release;
  lowbit::int4_gemm(av, bv, layout, k, ov, e, stream_of(stream));
}

WeightOnlySpec make_weight_spec(int bits, std::int64_t group_size, bool zero_point, const char* act_dtype) {
  return WeightOnlySpec{bits, group_size, zero_point, parse_dtype(act_dtype)};
}

void pack_weights(const In& codes, const In& scales, const OptIn& mins, int bits, std::int64_t group_size,
                  bool zero_point, const char* act_dtype, std::int64_t n, std::int64_t k, const Out& out_codes,
                  const Out& out_scales, const OptOut& out_mins) {
  PackedWeights w;
  w.spec = make_weight_spec(bits, group_size, zero_point, act_dtype);
  w.n = n;
  w.k = k;
  w.codes = bytes_as(out_codes, "out_codes", DType::u8);
  w.scales = bytes_as(out_scales, "out_scales", w.spec.act_dtype);
  if (out_mins) w.mins = bytes_as(*out_mins, "out_mins", w.spec.act_dtype);
  const TensorView cv = view_of(codes, "codes"), sv = view_of(scales, "scales"), mv = view_of(mins, "mins");
  nb::gil_scoped_release release;
  lowbit::pack_weights(cv, sv, mv, w);
}

void weight_only_linear(const In& x, const In& codes, const In& scales, const OptIn& mins, int bits,
                        std::int64_t group_size, bool zero_point, std::int64_t n, std::int64_t k, const OptIn& bias,
                        const Out& out, std::uintptr_t stream) {
  const TensorView xv = view_of(x, "x");
  PackedWeights w;
  w.spec = WeightOnlySpec{bits, group_size, zero_point, xv.dtype};
  w.n = n;
  w.k = k;
  w.codes = bytes_as(codes, "w.codes", DType::u8);
  w.scales = bytes_as(scales, "w.scales", xv.dtype);
  if (mins) w.mins = bytes_as(*mins, "w.mins", xv.dtype);
  const TensorView bv = view_of(bias, "bias"), ov = view_of(out, "out");
  DeviceGuard guard(ov, out.device_id());
  nb::gil_scoped_release release;
  lowbit::weight_only_gemm(xv, w, bv, ov, stream_of(stream));
}

}  // namespace

void bind_gemm(nb::module_& m) {
  using namespace nb::literals;
  m.def("int8_matmul", &int8_matmul, "a"_a, "b"_a, "b_layout"_a, "out"_a, "scale_a"_a.none(), "scale_b"_a.none(),
        "scale_c"_a, "bias"_a.none(), "relu"_a, "stream"_a, "out = A @ B (INT32, or the float epilogue).");
  m.def("int4_matmul", &int4_matmul, "a_packed"_a, "b_packed"_a, "b_layout"_a, "k"_a, "out"_a, "scale_a"_a.none(),
        "scale_b"_a.none(), "scale_c"_a, "bias"_a.none(), "relu"_a, "stream"_a,
        "out = A @ B for signed INT4 operands packed two per byte along K.");
  m.def(
      "packed_weight_sizes",
      [](int bits, std::int64_t group_size, bool zero_point, const char* act_dtype, std::int64_t n, std::int64_t k) {
        const PackedWeightSizes s = lowbit::packed_weight_sizes(make_weight_spec(bits, group_size, zero_point, act_dtype), n, k);
        return nb::make_tuple(s.code_bytes, s.scale_count, s.min_count);
      },
      "bits"_a, "group_size"_a, "zero_point"_a, "act_dtype"_a, "n"_a, "k"_a,
      "(code bytes, scale count, min count) of the packed form of an N x K weight.");
  m.def("pack_weights", &pack_weights, "codes"_a, "scales"_a, "mins"_a.none(), "bits"_a, "group_size"_a,
        "zero_point"_a, "act_dtype"_a, "n"_a, "k"_a, "out_codes"_a, "out_scales"_a, "out_mins"_a.none(),
        "Repacks quantized weights (on the host) into the byte buffers out_*.");
  m.def("weight_only_linear", &weight_only_linear, "x"_a, "codes"_a, "scales"_a, "mins"_a.none(), "bits"_a,
        "group_size"_a, "zero_point"_a, "n"_a, "k"_a, "bias"_a.none(), "out"_a, "stream"_a,
        "out = x @ W^T (+ bias) with W packed by pack_weights.");
}

}  // namespace lowbit::python
