// Host time of single steps inside a binding call, for python -m lowbit.bench_overhead
// (issue 6): each timed in a C++ loop, so that no Python call is in it.
#include <chrono>

#include "lowbit/error.h"
#include "lowbit/quant.h"
#include "views.h"

#if LOWBIT_WITH_CUDA
#include "core/device.h"
#endif

namespace lowbit::python {

#if LOWBIT_WITH_CUDA
double time_empty_launches(std::uintptr_t stream, int count);  // diagnostics_launch.cu
#endif

namespace {

template <class F>
double microseconds_each(int count, F f) {
  LOWBIT_CHECK(count > 0, "count: expected a positive number of calls, got ", count);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) f();
  const std::chrono::duration<double, std::micro> spent = std::chrono::steady_clock::now() - start;
  return spent.count() / count;
}

// One call of the checks' core::check_device_pointer (cudaPointerGetAttributes).
double time_pointer_checks(const Out& array, int count) {
  const TensorView view = view_of(array, "array");
  LOWBIT_CHECK(view.device == Device::cuda, "array: expected a CUDA array");
#if LOWBIT_WITH_CUDA
  DeviceGuard guard(view, array.device_id());
  return microseconds_each(count, [&] { core::check_device_pointer(view.data, "array"); });
#else
  LOWBIT_FAIL("time_pointer_checks: this build of lowbit has no CUDA support");
#endif
}

// One lowbit::quantize (checks and launch) of x into codes and scales, int8 per token,
// NaN/Inf into the sticky word `status`: the library's part of quantize_tensor.
double time_quantize(const In& x, const Out& codes, const Out& scales, const Out& status, std::uintptr_t stream,
                     int count) {
  const TensorView xv = view_of(x, "x"), word = view_of(status, "status");
  const QuantizedView q{view_of(codes, "codes"), view_of(scales, "scales"), TensorView{}};
  const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_token, 0};
  DeviceGuard guard(xv, x.device_id());
  return microseconds_each(
      count, [&] { lowbit::quantize(xv, spec, q, Workspace{}, NonFiniteStatus{word.data}, stream_of(stream)); });
}

// One launch of an empty kernel on `stream` (cudaLaunchKernel's host cost here).
double time_launches(std::uintptr_t stream, int count) {
#if LOWBIT_WITH_CUDA
  LOWBIT_CHECK(count > 0, "count: expected a positive number of calls, got ", count);
  return time_empty_launches(stream, count);
#else
  (void)stream, (void)count;
  LOWBIT_FAIL("time_launches: this build of lowbit has no CUDA support");
#endif
}

// One output made through the DLPack exchange API of like's type (its allocator, then
// its Python object, then released), shaped [4, 64] of like's dtype on like's device.
double time_exchange_outputs(nb::handle like, int count) {
  const dlpack_exchange::Api* api = exchange_api_of(like);
  LOWBIT_CHECK(api != nullptr && api->managed_tensor_allocator != nullptr &&
                   api->managed_tensor_to_py_object_no_sync != nullptr,
               "like: its type has no DLPack exchange API with an allocator");
  nb::dlpack::dltensor prototype{};
  LOWBIT_CHECK(api->dltensor_from_py_object_no_sync(like.ptr(), &prototype) == 0, "like: not exported");
  std::int64_t shape[2] = {4, 64};
  prototype.ndim = 2;
  prototype.shape = shape;
  prototype.strides = nullptr;
  bool failed = false;
  const double us = microseconds_each(count, [&] {
    dlpack_exchange::ManagedTensor* made = nullptr;
    void* object = nullptr;
    if (api->managed_tensor_allocator(&prototype, &made, nullptr, [](void*, const char*, const char*) {}) != 0 ||
        api->managed_tensor_to_py_object_no_sync(made, &object) != 0) {
      failed = true;
      return;
    }
    Py_DECREF(static_cast<PyObject*>(object));
  });
  if (failed) PyErr_Clear();
  LOWBIT_CHECK(!failed, "time_exchange_outputs: the exchange API refused to allocate");
  return us;
}

// Which of the casters' paths (views.h) takes `array` as an input: "exchange" (the
// DLPack C exchange API), "to_dlpack" (torch's C export) or "nanobind".
const char* import_path(nb::handle array) {
  In probe;
  if (exchange_import(array, probe)) return "exchange";
  if (torch_capsule(array).is_valid()) return "to_dlpack";
  return "nanobind";
}

}  // namespace

void bind_diagnostics(nb::module_& m) {
  using namespace nb::literals;
  m.def("_time_pointer_checks", &time_pointer_checks, "array"_a, "count"_a,
        "Microseconds one CUDA pointer check of the C++ argument checks takes (bench_overhead).");
  m.def("_time_quantize", &time_quantize, "x"_a, "codes"_a, "scales"_a, "status"_a, "stream"_a, "count"_a,
        "Microseconds one lowbit::quantize call (int8 per token) takes from C++ (bench_overhead).");
  m.def("_time_launches", &time_launches, "stream"_a, "count"_a,
        "Microseconds one empty kernel launch takes from C++ (bench_overhead).");
  m.def("_import_path", &import_path, "array"_a,
        "How the bindings take `array` as an input: 'exchange', 'to_dlpack' or 'nanobind' (tests).");
  m.def("_time_exchange_outputs", &time_exchange_outputs, "like"_a, "count"_a,
        "Microseconds one output tensor made through the DLPack exchange API takes (bench_overhead).");
}

}  // namespace lowbit::python
