// The _lowbit extension module: lowbit::Error becomes lowbit.LowbitError (a
// RuntimeError) with the C++ message; the op families are bound in bind_*.cpp.
#include <nanobind/nanobind.h>

#include "lowbit/error.h"
#include "views.h"

namespace lowbit::python {
void bind_quant(nanobind::module_& m);
void bind_gemm(nanobind::module_& m);
void bind_block_formats(nanobind::module_& m);
void bind_attention(nanobind::module_& m);
void bind_kv_cache(nanobind::module_& m);
void bind_diagnostics(nanobind::module_& m);
}  // namespace lowbit::python

NB_MODULE(_lowbit, m) {
  namespace nb = nanobind;
  using namespace nb::literals;
  m.doc() = "lowbit's C++ API over DLPack arrays (use the `lowbit` package, not this module)";
  nb::exception<lowbit::Error>(m, "LowbitError", PyExc_RuntimeError);
  lowbit::python::bind_quant(m);
  lowbit::python::bind_gemm(m);
  lowbit::python::bind_block_formats(m);
  lowbit::python::bind_attention(m);
  lowbit::python::bind_kv_cache(m);
  lowbit::python::bind_diagnostics(m);
  m.def("check_matrix", &lowbit::python::check_matrix_arg, "x"_a, "what"_a,
        "The checks every op makes of a matrix input, alone (before large outputs are allocated).");
  m.def("_set_torch_export", &lowbit::python::set_torch_export, "tensor_type"_a, "parameter_type"_a, "to_dlpack"_a,
        "Takes plain torch tensors through torch's C to_dlpack (called by lowbit._backend).");
  m.attr("cuda") = static_cast<bool>(LOWBIT_WITH_CUDA);
}
