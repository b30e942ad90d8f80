// The seed's CPU baseline for per-channel symmetric INT8 of an FP32 T x D matrix,
// kept as it was designed so that speed-ups are measured against it: scales with
// OpenMP over columns (each thread walks down whole columns, a strided scan), then
// serial quantize and dequantize loops. Same arithmetic as the rest of lowbit.
#pragma once

#include <cstdint>

namespace lowbit::cpu::baseline {

void compute_scales(const float* k, std::int64_t rows, std::int64_t cols, float* scales);
void quantize(const float* k, const float* scales, std::int8_t* codes, std::int64_t rows,
              std::int64_t cols);
void dequantize(const std::int8_t* codes, const float* scales, float* out, std::int64_t rows,
                std::int64_t cols);

}  // namespace lowbit::cpu::baseline
