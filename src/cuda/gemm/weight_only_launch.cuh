// The launchers of the weight-only GEMM kernels, called by weight_only_dispatch.cu.
#pragma once

#include <cuda_runtime.h>

#include "cuda/gemm/weight_only_common.cuh"

namespace lowbit::cuda::weight_only {

// Rows the small-M (weight-streaming) kernel takes: one m16 mma tile.
constexpr std::int64_t kGemvMaxRows = 16;

// M <= kGemvMaxRows.
void launch_gemv(const Params& p, bool bf16, Form form, cudaStream_t stream);

// Any M (meant for M > kGemvMaxRows).
void launch_mma(const Params& p, bool bf16, Form form, cudaStream_t stream);

}  // namespace lowbit::cuda::weight_only
