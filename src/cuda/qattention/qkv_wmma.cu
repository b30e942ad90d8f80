// Baseline 3, kernel 2: Q|K|V = X W^T + bias in one launch over the decoded weights
// (Wq | Wk | Wv stacked, f16 [n x k]), on tensor cores through WMMA 16x16x16: 64 x 64
// block tiles, 4 warps of 32 x 32, K steps of 32 loaded synchronously (no cp.async
// pipeline: the simple tensor-core matmul the seed's baseline describes).
#include <mma.h>

#include <cstdint>

#include "cuda/qattention/kernels.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::attention {
namespace {

namespace wmma = nvcuda::wmma;
constexpr int kBM = 64, kBN = 64, kBK = 32, kPad = 8, kThreads = 128;

__global__ void __launch_bounds__(kThreads) qkv_wmma_kernel(const ProjectionArgs p) {
  __shared__ __align__(32) __half xs[kBM][kBK + kPad];
  __shared__ __align__(32) __half ws[kBN][kBK + kPad];
  __shared__ __align__(32) float cs[kBM][kBN + 4];
  const int tid = threadIdx.x, warp = tid / 32, wm = warp / 2, wn = warp % 2;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int k0 = 0; k0 < p.k; k0 += kBK) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {  // 64 rows x 4 chunks of 8 halves per operand
      const int id = tid + q * kThreads, row = id / 4, ch = id % 4;
      uint4 xv = make_uint4(0, 0, 0, 0);
      if (m0 + row < p.m) xv = *reinterpret_cast<const uint4*>(p.x + (m0 + row) * p.ldx + k0 + ch * 8);
      *reinterpret_cast<uint4*>(&xs[row][ch * 8]) = xv;
      uint4 wv = make_uint4(0, 0, 0, 0);
      if (n0 + row < p.n) wv = *reinterpret_cast<const uint4*>(p.w + static_cast<std::int64_t>(n0 + row) * p.k + k0 + ch * 8);
      *reinterpret_cast<uint4*>(&ws[row][ch * 8]) = wv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &xs[wm * 32 + i * 16][kk], kBK + kPad);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &ws[wn * 32 + j * 16][kk], kBK + kPad);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&cs[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kBN + 4, wmma::mem_row_major);
  __syncthreads();
  for (int id = tid; id < kBM * kBN; id += kThreads) {
    const int row = id / kBN, col = n0 + id % kBN;
    if (m0 + row >= p.m || col >= p.n) continue;
    float v = cs[row][id % kBN];
    const int s = col < p.seg[0].rows ? 0 : (col < p.seg[0].rows + p.seg[1].rows ? 1 : 2);
    const int base = s == 0 ? 0 : (s == 1 ? p.seg[0].rows : p.seg[0].rows + p.seg[1].rows);
    const __half* bias = s == 0 ? p.seg[0].bias : (s == 1 ? p.seg[1].bias : p.seg[2].bias);
    if (bias) v += __half2float(bias[col - base]);
    p.out[(m0 + row) * p.ldo + col] = __float2half_rn(v);
  }
}

}  // namespace

void qkv_wmma(const ProjectionArgs& p, cudaStream_t stream) {
  const dim3 grid((p.n + kBN - 1) / kBN, (p.m + kBM - 1) / kBM);
  qkv_wmma_kernel<<<grid, kThreads, 0, stream>>>(p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::cuda::attention
