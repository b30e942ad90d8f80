// Device-side input generation and checks for the GPU benchmarks: inputs of
// hundreds of MB are made where they are used, from a counter-based hash, so that
// nothing is timed or checked on zeros and nothing waits on the host.
#pragma once

#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::bench {

void fill_random_bytes(void* data, std::size_t bytes, std::uint64_t seed, cuda_stream_t stream);
// f16 or bf16 values uniform in [-amplitude, amplitude).
void fill_random_float16(void* data, std::size_t count, DType dtype, float amplitude, std::uint64_t seed,
                         cuda_stream_t stream);
// Positive f32 values uniform in [lo, hi).
void fill_random_f32(float* data, std::size_t count, float lo, float hi, std::uint64_t seed, cuda_stream_t stream);

// dst [cols x rows] = src [rows x cols]^T, bytes.
void transpose_bytes(const void* src, void* dst, std::int64_t rows, std::int64_t cols, cuda_stream_t stream);
// dst [rows x 2*cols_packed] int8 = sign-extended nibbles of src [rows x cols_packed]
// (low nibble first).
void unpack_int4_rows(const void* src, void* dst, std::int64_t rows, std::int64_t cols_packed, cuda_stream_t stream);

// Number of 32-bit words (or 16-bit halves when `word16`) that differ; synchronizes.
std::uint64_t count_mismatches(const void* a, const void* b, std::size_t words, bool word16, cuda_stream_t stream);

// ||a - b|| / ||b|| over `count` f16/bf16 values; synchronizes.
double relative_l2(const void* a, const void* b, std::size_t count, DType dtype, cuda_stream_t stream);

}  // namespace lowbit::bench
