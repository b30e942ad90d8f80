// The progression of scalar INT8 GEMM kernels (naive, tiled, vectorized), kept as benchmark
// baselines and as fallbacks. All three take any shape, either B layout and any
// alignment; the tiled kernel also takes packed int4 operands (the int4 fallback).
//
//   naive:      one thread per output element, operands read straight from global.
//   tiled:      16 x 16 outputs per block from 16 x 16 shared-memory tiles.
//   vectorized: 64 x 64 outputs per block (4 x 4 per thread), 64-wide K steps loaded
//               as 16-byte vectors where a whole aligned vector is inside the
//               matrix (bytewise otherwise), dot products of 4 with __dp4a.
#include <algorithm>
#include <cstdint>

#include "cuda/gemm/gemm_common.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::gemm {
namespace {

// Block rows beyond gridDim.y (65535) are covered by striding.
unsigned grid_rows(long long blocks) { return static_cast<unsigned>(std::clamp<long long>(blocks, 1, 65535)); }

// ---------------------------------------------------------------- naive

__global__ void naive_kernel(const SeedGemmParams p) {
  const int col = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (col >= p.e.n) return;
  for (int row = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y); row < p.e.m;
       row += static_cast<int>(gridDim.y * blockDim.y)) {
    std::int32_t sum = 0;
    for (int k = 0; k < p.k; ++k) {
      sum += along_row<false>(p.a, p.lda, row, k) * b_value<false>(p.b, p.ldb, p.n_by_k, k, col);
    }
    store_one(p.e, row, col, sum);
  }
}

// ---------------------------------------------------------------- tiled (seed)

constexpr int kTile = 16;

template <bool kInt4>
__global__ void tiled_kernel(const SeedGemmParams p) {
  __shared__ std::int8_t a_tile[kTile][kTile];
  __shared__ std::int8_t b_tile[kTile][kTile + 1];  // [k][n]
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int col = static_cast<int>(blockIdx.x) * kTile + tx;
  for (int row0 = static_cast<int>(blockIdx.y) * kTile; row0 < p.e.m; row0 += static_cast<int>(gridDim.y) * kTile) {
    const int row = row0 + ty;
    std::int32_t sum = 0;
    for (int k0 = 0; k0 < p.k; k0 += kTile) {
      // Thread (ty, tx) loads A[row, k0 + tx] and B[k0 + ty, col]; zeros outside.
      const int ka = k0 + tx, kb = k0 + ty;
      a_tile[ty][tx] = static_cast<std::int8_t>(row < p.e.m && ka < p.k ? along_row<kInt4>(p.a, p.lda, row, ka) : 0);
      b_tile[ty][tx] = static_cast<std::int8_t>(col < p.e.n && kb < p.k ? b_value<kInt4>(p.b, p.ldb, p.n_by_k, kb, col) : 0);
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kTile; ++k) sum += a_tile[ty][k] * b_tile[k][tx];
      __syncthreads();
    }
    store_one(p.e, row, col, sum);
  }
}

// ---------------------------------------------------------------- vectorized

constexpr int kVecTile = 64;     // outputs per block side, and K per step
constexpr int kVecWords = 17;    // 16 words of K per row + 1 of padding: conflict-free columns

// 16 bytes of a row starting at `src` (`valid` of them inside the matrix), as 4 words.
__device__ __forceinline__ uint4 load_16(const std::uint8_t* src, int valid) {
  if (valid >= 16 && (reinterpret_cast<std::uintptr_t>(src) & 15) == 0) return __ldg(reinterpret_cast<const uint4*>(src));
  std::uint32_t w[4] = {0, 0, 0, 0};
  for (int e = 0; e < 16 && e < valid; ++e) w[e / 4] |= static_cast<std::uint32_t>(src[e]) << (8 * (e % 4));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void __launch_bounds__(256) vectorized_kernel(const SeedGemmParams p) {
  __shared__ std::uint32_t a_tile[kVecTile * kVecWords];  // [m][k / 4]
  __shared__ std::uint32_t b_tile[kVecTile * kVecWords];  // [n][k / 4]
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid & 15, ty = tid >> 4;
  const int n0 = static_cast<int>(blockIdx.x) * kVecTile;
  // The chunk this thread loads: row `lr` (of A, or of B n_by_k), bytes 16*lc..
  const int lr = tid >> 2, lc = tid & 3;

  for (int m0 = static_cast<int>(blockIdx.y) * kVecTile; m0 < p.e.m; m0 += static_cast<int>(gridDim.y) * kVecTile) {
    std::int32_t acc[4][4] = {};
    for (int k0 = 0; k0 < p.k; k0 += kVecTile) {
      const int kc = k0 + lc * 16;
      {
        const int row = m0 + lr;
        const uint4 v = row < p.e.m ? load_16(p.a + row * p.lda + kc, p.k - kc) : make_uint4(0, 0, 0, 0);
        std::uint32_t* dst = a_tile + lr * kVecWords + lc * 4;
        dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
      }
      if (p.n_by_k) {
        const int n = n0 + lr;
        const uint4 v = n < p.e.n ? load_16(p.b + n * p.ldb + kc, p.k - kc) : make_uint4(0, 0, 0, 0);
        std::uint32_t* dst = b_tile + lr * kVecWords + lc * 4;
        dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
      } else {
        // k_by_n: this thread loads B[k0 + lr, n0 + 16*lc ..] and scatters the bytes
        // into the [n][k] tile.
        const int k = k0 + lr, n = n0 + lc * 16;
        const uint4 v = k < p.k ? load_16(p.b + k * p.ldb + n, p.e.n - n) : make_uint4(0, 0, 0, 0);
        const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
        auto* bytes = reinterpret_cast<std::uint8_t*>(b_tile);
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          bytes[(lc * 16 + e) * kVecWords * 4 + lr] = static_cast<std::uint8_t>(w[e / 4] >> (8 * (e % 4)));
        }
      }
      __syncthreads();
#pragma unroll 4
      for (int w = 0; w < 16; ++w) {
        int av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = static_cast<int>(a_tile[(ty + 16 * i) * kVecWords + w]);
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = static_cast<int>(b_tile[(tx + 16 * j) * kVecWords + w]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = __dp4a(av[i], bv[j], acc[i][j]);
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) store_one(p.e, m0 + ty + 16 * i, n0 + tx + 16 * j, acc[i][j]);
    }
  }
}

}  // namespace

void launch_naive(const IntGemmArgs& args, cudaStream_t stream) {
  const dim3 block(64, 4);
  const dim3 grid(static_cast<unsigned>((args.n + block.x - 1) / block.x), grid_rows((args.m + block.y - 1) / block.y));
  naive_kernel<<<grid, block, 0, stream>>>(seed_gemm_params(args));
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_tiled(const IntGemmArgs& args, bool int4, cudaStream_t stream) {
  const dim3 block(kTile, kTile);
  const dim3 grid(static_cast<unsigned>((args.n + kTile - 1) / kTile), grid_rows((args.m + kTile - 1) / kTile));
  if (int4) {
    tiled_kernel<true><<<grid, block, 0, stream>>>(seed_gemm_params(args));
  } else {
    tiled_kernel<false><<<grid, block, 0, stream>>>(seed_gemm_params(args));
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_vectorized(const IntGemmArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.n + kVecTile - 1) / kVecTile), grid_rows((args.m + kVecTile - 1) / kVecTile));
  vectorized_kernel<<<grid, 256, 0, stream>>>(seed_gemm_params(args));
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::cuda::gemm
