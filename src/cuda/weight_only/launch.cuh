// The launchers of the weight-only GEMM kernels, called by weight_only_dispatch.cu.
#pragma once

#include <cuda_runtime.h>

#include "cuda/weight_only/common.cuh"

namespace lowbit::cuda::weight_only {

// Rows the small-M (weight-streaming) kernel takes: one m16 mma tile.
constexpr std::int64_t kGemvMaxRows = 16;

// M <= kGemvMaxRows.
void launch_gemv(const Params& p, bool bf16, Form form, cudaStream_t stream);

// A tuning override of the small-M kernel for sweeps (tests/gpu/weight_only_gpu_test.cpp
// declares it too, to stay free of CUDA headers): variant >= 0 picks a kernel shape of
// the f16 Q4-with-zero-point path (see launch_tuning_variant), k_slices > 0 the K split
// of every form. Not thread-safe; the default {-1, 0, 0, -1} is the production choice.
struct GemvTuning {
  int variant = -1;
  int k_slices = 0;
  int rotate = 0;  // 1: each warp starts its K range at a staggered chunk
  int pdl = -1;    // programmatic dependent launch: 0 off, 1 wait first, 2 prefetch weights
                   // first, -1 the production choice (2)
};
void set_gemv_tuning(const GemvTuning& tuning);

// The small-matrix kernel (weight_only_gemv_small.cu): whether it takes p (M <= 16,
// K within 8 warps' registers, under 4 MB of codes), and its launch.
bool small_gemv_takes(const Params& p, Form form);
void launch_small_gemv(const Params& p, bool bf16, Form form, cudaStream_t stream);
// A test override: -1 (default) the rule above, 0 never, 1 whenever M and K allow.
void set_small_gemv_mode(int mode);

// Any M (meant for M > kGemvMaxRows).
void launch_mma(const Params& p, bool bf16, Form form, cudaStream_t stream);

}  // namespace lowbit::cuda::weight_only
