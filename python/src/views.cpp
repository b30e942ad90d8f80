#include "views.h"

#include <cstring>

#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace lowbit::python {
namespace {

namespace dl = nb::dlpack;

const char* code_name(std::uint8_t code) {
  switch (static_cast<dl::dtype_code>(code)) {
    case dl::dtype_code::Int: return "int";
    case dl::dtype_code::UInt: return "uint";
    case dl::dtype_code::Float: return "float";
    case dl::dtype_code::Bfloat: return "bfloat";
    case dl::dtype_code::Complex: return "complex";
    case dl::dtype_code::Bool: return "bool";
    default: return "dlpack-code-";
  }
}

DType dtype_of(dl::dtype t, const char* what) {
  if (t.lanes == 1) {
    const auto code = static_cast<dl::dtype_code>(t.code);
    if (code == dl::dtype_code::Float && t.bits == 32) return DType::f32;
    if (code == dl::dtype_code::Float && t.bits == 16) return DType::f16;
    if (code == dl::dtype_code::Bfloat && t.bits == 16) return DType::bf16;
    if (code == dl::dtype_code::Int && t.bits == 8) return DType::i8;
    if (code == dl::dtype_code::UInt && t.bits == 8) return DType::u8;
    if (code == dl::dtype_code::Int && t.bits == 32) return DType::i32;
  }
  LOWBIT_FAIL(what, ": dtype ", code_name(t.code), static_cast<int>(t.bits),
              t.lanes != 1 ? " (vector lanes)" : "",
              " is not one lowbit takes (float32, float16, bfloat16, int8, uint8 or int32)");
}

Device device_of(int device_type, const char* what) {
  switch (device_type) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:  // pinned host memory: the CPU reads it directly
      return Device::cpu;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      return Device::cuda;
    default: break;
  }
  LOWBIT_FAIL(what, ": DLPack device type ", device_type, " is not supported (expected cpu or cuda)");
}

template <class Array>
TensorView make_view(const Array& a, const char* what) {
  LOWBIT_CHECK(a.ndim() <= static_cast<std::size_t>(kMaxRank), what, ": rank ", a.ndim(),
               " is more than lowbit's maximum of ", kMaxRank, " (reshape it first)");
  TensorView view;
  view.data = const_cast<void*>(static_cast<const void*>(a.data()));
  view.dtype = dtype_of(a.dtype(), what);
  view.device = device_of(a.device_type(), what);
  view.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < view.rank; ++i) {
    view.shape[i] = static_cast<std::int64_t>(a.shape(i));
    view.strides[i] = a.stride(i);
  }
  for (int i = view.rank; i < kMaxRank; ++i) view.shape[i] = view.strides[i] = 1;
  return view;
}

template <class Array>
TensorView make_bytes_view(const Array& a, const char* what, DType dtype) {
  const TensorView bytes = make_view(a, what);
  LOWBIT_CHECK(bytes.dtype == DType::u8 && bytes.is_contiguous(), what,
               ": expected a contiguous uint8 byte buffer, got ", bytes.describe());
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(dtype));
  LOWBIT_CHECK(bytes.numel() % size == 0, what, ": ", bytes.numel(), " bytes is not a whole number of ",
               dtype_name(dtype), " values");
  return TensorView::vector(bytes.data, dtype, bytes.device, bytes.numel() / size);
}

// Set once, never released: the types and the function live as long as torch.
PyObject* g_tensor_type = nullptr;
PyObject* g_parameter_type = nullptr;
PyObject* g_to_dlpack = nullptr;

}  // namespace

void set_torch_export(nb::handle tensor_type, nb::handle parameter_type, nb::handle to_dlpack) {
  g_tensor_type = nb::borrow(tensor_type).release().ptr();
  g_parameter_type = nb::borrow(parameter_type).release().ptr();
  g_to_dlpack = nb::borrow(to_dlpack).release().ptr();
}

nb::object torch_capsule(nb::handle src) noexcept {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(src.ptr()));
  if (g_to_dlpack == nullptr || (type != g_tensor_type && type != g_parameter_type)) return {};
  PyObject* capsule = PyObject_CallOneArg(g_to_dlpack, src.ptr());
  if (capsule == nullptr) PyErr_Clear();  // e.g. a tensor requiring grad: nanobind's import decides
  return nb::steal(capsule);
}

TensorView view_of(const In& array, const char* what) { return make_view(array, what); }
TensorView view_of(const Out& array, const char* what) { return make_view(array, what); }
TensorView view_of(const OptIn& array, const char* what) { return array ? make_view(*array, what) : TensorView{}; }
TensorView view_of(const OptOut& array, const char* what) { return array ? make_view(*array, what) : TensorView{}; }

TensorView bytes_as(const In& array, const char* what, DType dtype) { return make_bytes_view(array, what, dtype); }
TensorView bytes_as(const Out& array, const char* what, DType dtype) { return make_bytes_view(array, what, dtype); }

DeviceGuard::DeviceGuard(const TensorView& view, int device_id) {
#if LOWBIT_WITH_CUDA
  if (view.device != Device::cuda) return;
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) return;  // the op's own checks will report it
  if (current != device_id && cudaSetDevice(device_id) == cudaSuccess) previous_ = current;
#else
  (void)view, (void)device_id;
#endif
}

DeviceGuard::~DeviceGuard() {
#if LOWBIT_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

DType parse_dtype(const char* name) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32}) {
    if (std::strcmp(name, dtype_name(d)) == 0) return d;
  }
  LOWBIT_FAIL("dtype: expected f32, f16, bf16, i8, u8 or i32, got '", name, "'");
}

}  // namespace lowbit::python
