// The four GPU kernels of the KV-cache seed (per-channel symmetric INT8 of a
// contiguous FP32 T x D matrix, scales given), kept as benchmark baselines and held
// to the same exactness as everything else. They use the formats layer's
// arithmetic, so their codes equal the CPU reference's.
#pragma once

#include <cstdint>
#include <span>

#include "lowbit/tensor.h"

namespace lowbit::cuda::seed {

using QuantizeFn = void (*)(const float* k, const float* scales, std::int8_t* codes, std::int64_t rows,
                            std::int64_t cols, cuda_stream_t stream);
using DequantizeFn = void (*)(const std::int8_t* codes, const float* scales, float* out, std::int64_t rows,
                              std::int64_t cols, cuda_stream_t stream);

struct Variant {
  const char* name;
  const char* description;
  QuantizeFn quantize;
  DequantizeFn dequantize;
};

// naive, tiled, coarsened, vectorized: in the seed's order.
std::span<const Variant> variants();

}  // namespace lowbit::cuda::seed
