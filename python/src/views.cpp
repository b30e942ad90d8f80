#include "views.h"

#include <array>
#include <cstring>
#include <type_traits>

#include "core/validate.h"
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

template <class Imported>
TensorView make_view(const ArrayArg<Imported>& a, const char* what) {
  LOWBIT_CHECK(a.ndim <= kMaxRank, what, ": rank ", a.ndim, " is more than lowbit's maximum of ", kMaxRank,
               " (reshape it first)");
  TensorView view;
  view.data = a.data;
  view.dtype = dtype_of(a.dtype, what);
  view.device = device_of(a.device_type, what);
  view.rank = a.ndim;
  for (int i = 0; i < kMaxRank; ++i) {
    view.shape[i] = i < a.ndim ? a.shape[i] : 1;
    view.strides[i] = i < a.ndim ? a.strides[i] : 1;
  }
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

bool is_torch_type(PyTypeObject* type) {
  const auto* t = reinterpret_cast<PyObject*>(type);
  return t == g_tensor_type || t == g_parameter_type;
}

namespace exchange = dlpack_exchange;

// The exchange table of each array type seen (null: none lowbit uses). The types are
// held (never released), so an entry never outlives its type; past kCached types a
// type is looked up at each call. Read and written with the GIL held.
struct CachedApi {
  PyTypeObject* type;
  const exchange::Api* api;
};
constexpr std::size_t kCached = 16;
std::array<CachedApi, kCached> g_apis{};
std::size_t g_api_count = 0;

const exchange::Api* look_up_api(PyTypeObject* type) noexcept {
  PyObject* t = reinterpret_cast<PyObject*>(type);
  PyObject* table = PyObject_GetAttrString(t, exchange::kAttribute);
  const exchange::Api* api = nullptr;
  if (table != nullptr && PyCapsule_IsValid(table, exchange::kCapsuleName)) {
    api = static_cast<const exchange::Api*>(PyCapsule_GetPointer(table, exchange::kCapsuleName));
  }
  Py_XDECREF(table);
  // The type's own table, or the one torch's Parameter inherits (see views.h).
  PyObject* own = PyObject_GetAttrString(t, "__dict__");
  const bool defines = own != nullptr && PyMapping_HasKeyString(own, exchange::kAttribute) == 1;
  Py_XDECREF(own);
  PyErr_Clear();
  if (api == nullptr || (!defines && !is_torch_type(type))) return nullptr;
  if (api->header.version.major != 1 || api->dltensor_from_py_object_no_sync == nullptr) return nullptr;
  return api;
}

const exchange::Api* api_of(PyTypeObject* type) noexcept {
  for (std::size_t i = 0; i < g_api_count; ++i) {
    if (g_apis[i].type == type) return g_apis[i].api;
  }
  const exchange::Api* api = look_up_api(type);
  if (g_api_count < kCached) {
    Py_INCREF(reinterpret_cast<PyObject*>(type));
    g_apis[g_api_count++] = CachedApi{type, api};
  }
  return api;
}

template <class Imported>
void copy_description(const nb::dlpack::dltensor& t, ArrayArg<Imported>& out) {
  out.data = static_cast<char*>(t.data) + t.byte_offset;
  out.dtype = t.dtype;
  out.device_type = t.device.device_type;
  out.device = t.device.device_id;
  out.ndim = t.ndim;
  if (t.ndim > kMaxRank) return;  // make_view reports it
  std::int64_t compact = 1;       // DLPack's null strides: row-major and compact
  for (int i = t.ndim - 1; i >= 0; --i) {
    out.shape[i] = t.shape[i];
    out.strides[i] = t.strides != nullptr ? t.strides[i] : compact;
    compact *= t.shape[i];
  }
}

}  // namespace

void set_torch_export(nb::handle tensor_type, nb::handle parameter_type, nb::handle to_dlpack) {
  g_tensor_type = nb::borrow(tensor_type).release().ptr();
  g_parameter_type = nb::borrow(parameter_type).release().ptr();
  g_to_dlpack = nb::borrow(to_dlpack).release().ptr();
  g_api_count = 0;  // an entry made before the torch types were named may be wrong (held types stay held)
}

const exchange::Api* exchange_api_of(nb::handle src) noexcept { return api_of(Py_TYPE(src.ptr())); }

template <class Imported>
bool exchange_import(nb::handle src, ArrayArg<Imported>& out) noexcept {
  PyTypeObject* type = Py_TYPE(src.ptr());
  // A DLTensor has no read-only mark: outputs only of torch's (always writable) tensors.
  constexpr bool writes = std::is_same_v<Imported, nb::ndarray<>>;
  if (writes && !is_torch_type(type)) return false;
  const exchange::Api* api = api_of(type);
  if (api == nullptr) return false;
  nb::dlpack::dltensor t{};
  if (api->dltensor_from_py_object_no_sync(src.ptr(), &t) != 0) {
    PyErr_Clear();  // e.g. a dtype DLPack cannot name: the other paths decide and report
    return false;
  }
  copy_description(t, out);
  out.owner = nb::borrow(src);
  return true;
}

nb::object torch_capsule(nb::handle src) noexcept {
  if (g_to_dlpack == nullptr || !is_torch_type(Py_TYPE(src.ptr()))) return {};
  PyObject* capsule = PyObject_CallOneArg(g_to_dlpack, src.ptr());
  if (capsule == nullptr) PyErr_Clear();  // e.g. a tensor requiring grad: nanobind's import decides
  return nb::steal(capsule);
}

template <class Imported>
void describe_import(ArrayArg<Imported>& out) noexcept {
  const Imported& a = out.imported;
  out.data = const_cast<void*>(static_cast<const void*>(a.data()));
  out.dtype = a.dtype();
  out.device_type = a.device_type();
  out.device = a.device_id();
  out.ndim = static_cast<std::int32_t>(a.ndim());
  if (out.ndim > kMaxRank) return;
  for (int i = 0; i < out.ndim; ++i) {
    out.shape[i] = static_cast<std::int64_t>(a.shape(i));
    out.strides[i] = a.stride(i);
  }
}

template bool exchange_import(nb::handle, ArrayArg<nb::ndarray<nb::ro>>&) noexcept;
template bool exchange_import(nb::handle, ArrayArg<nb::ndarray<>>&) noexcept;
template void describe_import(ArrayArg<nb::ndarray<nb::ro>>&) noexcept;
template void describe_import(ArrayArg<nb::ndarray<>>&) noexcept;

void check_matrix_arg(const In& array, const char* what) {
  const TensorView view = view_of(array, what);
  LOWBIT_CHECK(view.rank == 2, what, ": expected a rank-2 tensor, got rank ", view.rank);
  LOWBIT_CHECK(view.shape[0] > 0 && view.shape[1] > 0, what, ": expected a non-empty shape, got [", view.shape[0],
               ", ", view.shape[1], "]");
  core::check_matrix(view, what, view.shape[0], view.shape[1]);
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
