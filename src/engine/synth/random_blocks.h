// Random tensor data drawn straight in a ggml type's block form, for synthetic models:
// no f32 intermediate and no quantizer. Codes are uniform over the type's range and
// each block's scale (with a +-25% jitter) is set so that the decoded values have mean
// about 0 and the requested standard deviation; F32 / F16 values are uniform in
// mean +- sqrt(3) stddev. A block's bytes depend only on (seed, block index), so the
// data is the same at any thread count.
#pragma once

#include <cstdint>
#include <span>

#include "engine/gguf/ggml_types.h"

namespace lowbit::engine {

// Whether fill_random_blocks() writes `type`.
bool can_fill_random(GgmlType type);

// Fills `out` (a whole number of `type`'s blocks) in parallel (OpenMP). Quantized
// types take mean 0 only. Throws lowbit::Error naming the type otherwise.
void fill_random_blocks(GgmlType type, float mean, float stddev, std::uint64_t seed, std::span<std::uint8_t> out);

}  // namespace lowbit::engine
