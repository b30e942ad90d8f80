// Host-side inputs of the weight-only GEMM benchmark: random quantized weights of one
// form, packed with lowbit::pack_weights, plus the dequantized FP16 matrix (the value
// definition of include/lowbit/gemm.h) that the cuBLAS FP16 peer multiplies.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/float16.h"
#include "lowbit/weight_only.h"

namespace lowbit::bench {

struct HostWeights {
  std::vector<std::uint8_t> codes, scales_packed, mins_packed;  // packed_weight_sizes() of them
  PackedWeightSizes sizes;
  std::vector<formats::Half> dequantized;  // [N x K]
};

HostWeights make_weights(const WeightOnlySpec& spec, std::int64_t n, std::int64_t k, std::uint64_t seed);

}  // namespace lowbit::bench
