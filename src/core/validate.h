// Argument checks shared by the public entry points (quant, gemm, ...). Each throws
// lowbit::Error with a message that names the argument, its value and what was
// expected.
#pragma once

#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::api {

bool is_float_dtype(DType dtype);

// A rows x cols matrix view: rank 2, that shape, unit column stride, row stride >=
// cols (rows do not overlap), non-null data.
void check_matrix(const TensorView& view, const char* what, std::int64_t rows, std::int64_t cols);

// `dtype` must be what the op takes.
void check_dtype(const TensorView& view, const char* what, DType expected);

// A contiguous vector of `count` f32 values.
void check_f32_vector(const TensorView& view, const char* what, std::int64_t count);

// True when the two views' byte ranges intersect.
bool overlaps(const TensorView& a, const TensorView& b);
void check_no_overlap(const TensorView& input, const char* input_name, const TensorView& output,
                      const char* output_name);

void check_same_device(Device device, const TensorView& view, const char* what);

// Throws unless the view is empty or its pointer is device memory (CUDA builds only).
void check_device_data(const TensorView& view, const char* what);

[[noreturn]] void fail_no_cuda(const char* what);

}  // namespace lowbit::api
