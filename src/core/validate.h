// The argument checks every public entry point shares. Each throws lowbit::Error with a
// message that names the argument, its value and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::core {

bool is_float_dtype(DType dtype);

// A matrix extent the kernels index with 32-bit integers: 1 <= value < 2^31.
void check_dim(std::int64_t value, const char* what);

// `dtype` must be what the op takes.
void check_dtype(const TensorView& view, const char* what, DType expected);

// A rows x cols matrix view: rank 2, that shape, unit column stride, row stride >=
// cols (rows do not overlap), non-null data.
void check_matrix(const TensorView& view, const char* what, std::int64_t rows, std::int64_t cols);

// A contiguous vector of `count` values of `dtype`, non-null, at its elements' alignment.
void check_vector(const TensorView& view, const char* what, DType dtype, std::int64_t count);

// True when the two views' byte ranges intersect.
bool overlaps(const TensorView& a, const TensorView& b);
void check_no_overlap(const TensorView& input, const char* input_name, const TensorView& output,
                      const char* output_name);

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
