// Host time of single steps inside a binding call, for python -m lowbit.bench_overhead
// (issue 6): what the rest of a call's floor is made of is known from torch's own ops;
// the C++ checks' CUDA pointer queries (one a tensor) are not.
#include <chrono>

#include "lowbit/error.h"
#include "views.h"

#if LOWBIT_WITH_CUDA
#include "cuda/quant/quant_cuda.h"
#endif

namespace lowbit::python {
namespace {

// Microseconds a call of the checks' cuda::check_device_pointer (cudaPointerGetAttributes)
// takes on `array`'s data, averaged over `count` calls.
double time_pointer_checks(const Out& array, int count) {
  const TensorView view = view_of(array, "array");
  LOWBIT_CHECK(view.device == Device::cuda && count > 0, "array: expected a CUDA array and count > 0");
#if LOWBIT_WITH_CUDA
  DeviceGuard guard(view, array.device_id());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) cuda::check_device_pointer(view.data, "array");
  const std::chrono::duration<double, std::micro> spent = std::chrono::steady_clock::now() - start;
  return spent.count() / count;
#else
  LOWBIT_FAIL("time_pointer_checks: this build of lowbit has no CUDA support");
#endif
}

}  // namespace

void bind_diagnostics(nb::module_& m) {
  using namespace nb::literals;
  m.def("_time_pointer_checks", &time_pointer_checks, "array"_a, "count"_a,
        "Microseconds one CUDA pointer check of the C++ argument checks takes (bench_overhead).");
}

}  // namespace lowbit::python
