// Checked layout helpers the layers above share (the public ones are declared in
// include/lowbit/*.h and defined in core/layout.cpp).
#pragma once

#include <cstdint>

#include "formats/weight_pack.h"
#include "lowbit/block_formats.h"
#include "lowbit/weight_only.h"

namespace lowbit::core {

// Throws lowbit::Error unless `format` is a BlockFormat value.
void check_block_format(BlockFormat format);

// The packed layout of an N x K weight matrix of `spec`; throws lowbit::Error naming the
// field for a spec or shape the kernels do not take.
formats::WeightPackLayout checked_weight_layout(const WeightOnlySpec& spec, std::int64_t n, std::int64_t k);

}  // namespace lowbit::core
