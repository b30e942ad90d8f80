// Shared pieces of the attention kernels: the arguments every attention-stage
// kernel takes (Q, K, V as column blocks of one Q|K|V matrix) and the warp-level
// tensor-core helpers (mma.sync, ldmatrix and cp.async from cuda/).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/async_copy.cuh"
#include "cuda/flash_tile.cuh"
#include "cuda/mma.cuh"
#include "lowbit/quantized_attention.h"

namespace lowbit::cuda::attention {

using cuda::cp_async16;
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::ldmatrix_x4;
using cuda::ldmatrix_x4_trans;
using cuda::mma_16816;
using cuda::smem_address;

// Q|K|V is [L x (H + 2 Hkv) hd]: query head h at column h hd, kv head g's K at
// (H + g) hd and V at (H + Hkv + g) hd.
struct AttnArgs {
  const __half* qkv = nullptr;
  std::int64_t ld = 0;  // row stride of qkv, elements
  int seq_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
  float scale = 0.0f;   // 1 / sqrt(hd)
  __half* out = nullptr;  // [L x H hd]
  std::int64_t ldo = 0;
  float* scores = nullptr;  // sequential variants: [H x L x L]

  __device__ __host__ int group() const { return heads / kv_heads; }
  __device__ __host__ std::int64_t q_col(int h) const { return static_cast<std::int64_t>(h) * head_dim; }
  __device__ __host__ std::int64_t k_col(int h) const {
    return static_cast<std::int64_t>(heads + h / group()) * head_dim;
  }
  __device__ __host__ std::int64_t v_col(int h) const {
    return static_cast<std::int64_t>(heads + kv_heads + h / group()) * head_dim;
  }
};

__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  mma_16816<__half>(d, a[0], a[1], a[2], a[3], b0, b1);
}

// The 16-byte-chunk swizzle of the tiles ldmatrix reads, and an f16 pair (cuda/flash_tile.cuh).
using flash::pack_half2;
using flash::swizzle;

}  // namespace lowbit::cuda::attention
