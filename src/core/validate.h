// The argument checks every public entry point shares. Each throws lowbit::Error with a
// message that names the argument, its value and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "lowbit/tensor.h"

namespace lowbit::core {

bool is_float_dtype(DType dtype);

// A matrix extent the kernels index with 32-bit integers: 1 <= value < 2^31.
void check_dim(std::int64_t value, const char* what);

// `dtype` must be what the op takes.
void check_dtype(const TensorView& view, const char* what, DType expected);

// The view's element count: a rank in 0..kMaxRank, sizes >= 0, a product that fits 64
// bits; else lowbit::Error naming `what` and the dimension.
std::int64_t element_count(const TensorView& view, const char* what);
// Bytes from data to one past the last addressable element, with the checks of
// element_count plus: strides >= 0 (on dimensions of size > 1) and offsets and bytes
// that fit 64 bits; else lowbit::Error naming `what` and the dimension.
std::int64_t span_bytes(const TensorView& view, const char* what);
// Every view an entry point takes: element_count and span_bytes as above, and the byte
// range [data, data + span) inside the address space.
void check_view(const TensorView& view, const char* what);

// A rows x cols matrix view: rank 2, that shape, unit column stride, row stride >=
// cols (rows do not overlap), non-null data, and check_view.
void check_matrix(const TensorView& view, const char* what, std::int64_t rows, std::int64_t cols);

// A contiguous vector of `count` values of `dtype`, non-null, at its elements' alignment
// (and check_view).
void check_vector(const TensorView& view, const char* what, DType dtype, std::int64_t count);

// True when the two views' byte ranges intersect.
bool overlaps(const TensorView& a, const TensorView& b);

// A tensor an entry point takes, named for messages. Views without data take no part.
struct NamedView {
  TensorView view;
  const char* name;
};
// The bytes of a workspace (or another raw buffer) as a view, for check_no_aliasing.
TensorView byte_view(const void* data, std::size_t bytes);

// The one aliasing check of every entry point: each output against every input and
// every other output (inputs may share bytes: they are only read). Throws
// "<output>: overlaps <other> in memory ..." for the first pair that shares a byte.
void check_no_aliasing(std::span<const NamedView> outputs, std::span<const NamedView> inputs);
void check_no_aliasing(std::initializer_list<NamedView> outputs, std::initializer_list<NamedView> inputs);

void check_same_device(Device device, const TensorView& view, const char* what);

// Throws unless the view is empty or its pointer is device memory (CUDA builds; a
// no-op in CPU-only builds, where no view can be on cuda past fail_no_cuda).
void check_device_data(const TensorView& view, const char* what);
void check_device_data(const void* data, const char* what);  // a raw buffer (workspace, status word)

// A caller's workspace of at least `needed` bytes (`sizer` names the function that says
// how many), on the device when needed > 0.
void check_workspace(const Workspace& workspace, std::size_t needed, const char* sizer);

[[noreturn]] void fail_no_cuda(const char* what);

}  // namespace lowbit::core
