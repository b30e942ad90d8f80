// Launchers of the attention kernels, one file each (see include/lowbit/attention.h
// for the variants they compose). All launch on `stream`, never synchronize.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/qattention/common.cuh"

namespace lowbit::cuda::attention {

// One weight matrix of the Q|K|V projection, as the fused kernel reads it.
struct FusedSegment {
  const std::uint8_t* codes = nullptr;
  std::int64_t code_stride = 0;  // bytes
  const void* scales = nullptr;
  const float* global = nullptr;  // nvfp4
  const __half* bias = nullptr;   // or null
  int rows = 0;
};

struct ProjectionArgs {
  const __half* x = nullptr;
  std::int64_t ldx = 0;
  int m = 0, k = 0, n = 0;     // L, d_model, (H + 2 Hkv) hd
  FusedSegment seg[3];         // Wq, Wk, Wv: output columns [0, r0), [r0, r0 + r1), ...
  const __half* w = nullptr;   // baselines: decoded Wq | Wk | Wv, f16 [n x k]
  __half* out = nullptr;       // Q|K|V [m x n]
  std::int64_t ldo = 0;
};

// Baseline 1 (naive.cu): one thread per output everywhere.
void naive_matmul(const ProjectionArgs& p, int segment, cudaStream_t stream);
void naive_scores(const AttnArgs& a, cudaStream_t stream);
void naive_scale_mask(const AttnArgs& a, cudaStream_t stream);
void naive_softmax(const AttnArgs& a, cudaStream_t stream);
void naive_pv(const AttnArgs& a, cudaStream_t stream);

// Baseline 2 (tiled.cu): shared-memory tiles, block-per-row two-pass softmax.
void tiled_matmul(const ProjectionArgs& p, int segment, cudaStream_t stream);
void tiled_scores(const AttnArgs& a, cudaStream_t stream);
void tiled_scale_mask(const AttnArgs& a, cudaStream_t stream);
void tiled_softmax(const AttnArgs& a, cudaStream_t stream);
void tiled_pv(const AttnArgs& a, cudaStream_t stream);

// Baseline 3: WMMA matmul over the decoded weights (qkv_wmma.cu), FP32 SIMT
// flash-style attention (flash_simt.cu).
void qkv_wmma(const ProjectionArgs& p, cudaStream_t stream);
void flash_simt(const AttnArgs& a, cudaStream_t stream);

// Ours: decode fused into an mma.sync matmul (qkv_fused.cu); its attention is
// flash_attention's tensor-core kernel (cuda/flash/flash_cuda.h, dispatch.cu).
void qkv_fused(const ProjectionArgs& p, BlockFormat format, cudaStream_t stream);

// Ours' kernel 1 on Hopper's wgmma (qkv_fused_wgmma.cu): the same result as qkv_fused
// (the same f16 weights; only the f32 summation order differs). Throws where it cannot
// run (qkv_wgmma_available(), qattention_cuda.h, says whether it does).
void qkv_fused_wgmma(const ProjectionArgs& p, BlockFormat format, cudaStream_t stream);

}  // namespace lowbit::cuda::attention
