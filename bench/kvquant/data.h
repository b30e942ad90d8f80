// Inputs and error metrics of the KV-cache benchmark.
#pragma once

#include <cstdint>
#include <vector>

#include "lowbit/tensor.h"

namespace lowbit::bench {

// KV-like data: N(0, 1) scaled per channel by a log-normal factor, with about 1% of
// channels ten times larger (the outlier channels real key caches have, which is
// why keys are quantized per channel). Deterministic in `seed`, generated in
// parallel (a counter-based generator, so any thread count gives the same values).
void fill_kv_like(float* x, std::int64_t rows, std::int64_t cols, std::uint64_t seed);
void fill_normal(float* x, std::int64_t count, std::uint64_t seed);

// x converted to dtype (f32, f16 or bf16) as raw storage, and that storage read back
// as floats: the values the quantizer actually sees.
std::vector<std::uint8_t> convert_to_dtype(const float* x, std::int64_t count, DType dtype);
std::vector<float> dtype_values_as_float(const std::uint8_t* storage, std::int64_t count, DType dtype);

struct ErrorMetrics {
  double rel_l2 = 0;          // ||x - x~|| / ||x||
  double max_abs = 0;         // max |x - x~|
  double attn_surrogate = 0;  // mean over rows of |q . x_t - q . x~_t|
};

// reconstruction is a rows x cols contiguous tensor of `dtype`.
ErrorMetrics error_metrics(const float* x, const void* reconstruction, DType dtype, std::int64_t rows,
                           std::int64_t cols, const float* query);

}  // namespace lowbit::bench
