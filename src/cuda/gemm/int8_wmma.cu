// INT8 GEMM on tensor cores through the portable WMMA API (16x16x16 s8 fragments,
// int accumulators): the seed's tensor-core step. A block of 4 warps computes 64 x 64
// outputs (2 x 2 fragments per warp), staging 32-wide K steps through shared memory
// so that any shape, layout and alignment works: fragments are always loaded from
// shared tiles [k / 16][row][16 bytes], whose 16 x 16 blocks are 256-byte aligned as
// load_matrix_sync requires. B is stored there as [n][k] (col_major for matrix_b),
// transposed on the way in for k_by_n.
#include <mma.h>

#include <algorithm>
#include <cstdint>

#include "cuda/gemm/gemm_common.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::gemm {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 64;   // outputs per block side
constexpr int kStep = 32;   // K per step: two 16-wide slabs
constexpr int kThreads = 128;

// 16 bytes of a row at `src`, `valid` of them inside the matrix: one vector load when
// whole and aligned, else bytewise with zeros.
__device__ __forceinline__ uint4 load_16(const std::uint8_t* src, int valid) {
  if (valid >= 16 && (reinterpret_cast<std::uintptr_t>(src) & 15) == 0) return __ldg(reinterpret_cast<const uint4*>(src));
  std::uint32_t w[4] = {0, 0, 0, 0};
  for (int e = 0; e < 16 && e < valid; ++e) w[e / 4] |= static_cast<std::uint32_t>(src[e]) << (8 * (e % 4));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void __launch_bounds__(kThreads) wmma_kernel(const SeedGemmParams p) {
  __shared__ __align__(256) std::uint8_t a_tile[kStep / 16][kTile][16];
  __shared__ __align__(256) std::uint8_t b_tile[kStep / 16][kTile][16];  // [k / 16][n][k % 16]
  __shared__ __align__(256) std::int32_t staging[kThreads / 32][16 * 16];  // one fragment per warp

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;  // 2 x 2 warps of 32 x 32
  const int n0 = static_cast<int>(blockIdx.x) * kTile;
  // Loads: A (and B n_by_k) chunk (row lr, slab ls): 64 rows x 2 slabs = 128 chunks.
  const int lr = tid >> 1, ls = tid & 1;

  for (int m0 = static_cast<int>(blockIdx.y) * kTile; m0 < p.e.m; m0 += static_cast<int>(gridDim.y) * kTile) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0);
    }
    for (int k0 = 0; k0 < p.k; k0 += kStep) {
      const int kc = k0 + ls * 16;
      {
        const int row = m0 + lr;
        *reinterpret_cast<uint4*>(a_tile[ls][lr]) =
            row < p.e.m ? load_16(p.a + row * p.lda + kc, p.k - kc) : make_uint4(0, 0, 0, 0);
      }
      if (p.n_by_k) {
        const int n = n0 + lr;
        *reinterpret_cast<uint4*>(b_tile[ls][lr]) =
            n < p.e.n ? load_16(p.b + n * p.ldb + kc, p.k - kc) : make_uint4(0, 0, 0, 0);
      } else {
        // k_by_n: 32 rows of K x 64 columns = 128 chunks of 16 columns; chunk (kr, c).
        const int kr = tid >> 2, c = tid & 3;
        const int k = k0 + kr, n = n0 + c * 16;
        const uint4 v = k < p.k ? load_16(p.b + k * p.ldb + n, p.e.n - n) : make_uint4(0, 0, 0, 0);
        const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 16; ++e) b_tile[kr / 16][c * 16 + e][kr % 16] = static_cast<std::uint8_t>(w[e / 4] >> (8 * (e % 4)));
      }
      __syncthreads();
#pragma unroll
      for (int s = 0; s < kStep / 16; ++s) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> af[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> bf[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          wmma::load_matrix_sync(af[i], reinterpret_cast<const signed char*>(a_tile[s][wm * 32 + i * 16]), 16);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          wmma::load_matrix_sync(bf[j], reinterpret_cast<const signed char*>(b_tile[s][wn * 32 + j * 16]), 16);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
        }
      }
      __syncthreads();
    }
    // Each fragment goes through the warp's staging tile to guarded element stores.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::store_matrix_sync(staging[warp], acc[i][j], 16, wmma::mem_row_major);
        __syncwarp();
        const int row0 = m0 + wm * 32 + i * 16, col0 = n0 + wn * 32 + j * 16;
        for (int e = lane; e < 256; e += 32) store_one(p.e, row0 + e / 16, col0 + e % 16, staging[warp][e]);
        __syncwarp();
      }
    }
  }
}

}  // namespace

void launch_wmma(const IntGemmArgs& args, cudaStream_t stream) {
  const SeedGemmParams p = seed_gemm_params(args);
  const dim3 grid(static_cast<unsigned>((args.n + kTile - 1) / kTile),
                  static_cast<unsigned>(std::clamp<long long>((args.m + kTile - 1) / kTile, 1, 65535)));
  wmma_kernel<<<grid, kThreads, 0, stream>>>(p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::cuda::gemm
