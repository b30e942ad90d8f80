// Baseline 2 (tiled sequential): the six stages of baseline 1, with the three
// matmul-shaped ones (projections, Q K^T, P V) as 32 x 32 shared-memory tiled
// matmuls (each loaded element reused 32 times) and the softmax as one block per row
// in two chunk-wise passes (running max and sum per thread, a block reduction, then
// the normalized write).
#include <cstdint>

#include "cuda/qattention/kernels.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::attention {
namespace {

constexpr int kTile = 32, kRowsPerThread = 4;  // 32 x 8 threads, 4 outputs each

// C[z][i][j] = sum_k A(z, i, k) B(z, j, k): each Op names its operands and its store.
struct ProjOp {
  ProjectionArgs p;
  int col0;
  const __half* bias;
  static constexpr bool kBKContiguous = true;  // B(j, k): consecutive k adjacent
  __device__ float a(int, int i, int k) const { return __half2float(p.x[i * p.ldx + k]); }
  __device__ float b(int, int j, int k) const { return __half2float(p.w[static_cast<std::int64_t>(col0 + j) * p.k + k]); }
  __device__ void store(int, int i, int j, float v) const {
    if (bias) v += __half2float(bias[j]);
    p.out[i * p.ldo + col0 + j] = __float2half_rn(v);
  }
};
struct ScoresOp {
  AttnArgs a_;
  static constexpr bool kBKContiguous = true;
  __device__ float a(int h, int i, int d) const { return __half2float(a_.qkv[i * a_.ld + a_.q_col(h) + d]); }
  __device__ float b(int h, int j, int d) const { return __half2float(a_.qkv[j * a_.ld + a_.k_col(h) + d]); }
  __device__ void store(int h, int i, int j, float v) const {
    a_.scores[(static_cast<std::int64_t>(h) * a_.seq_len + i) * a_.seq_len + j] = v;
  }
};
struct PvOp {
  AttnArgs a_;
  static constexpr bool kBKContiguous = false;  // B(d, j) = v_j[d]: consecutive d adjacent
  __device__ float a(int h, int i, int j) const {
    return a_.scores[(static_cast<std::int64_t>(h) * a_.seq_len + i) * a_.seq_len + j];
  }
  __device__ float b(int h, int d, int j) const { return __half2float(a_.qkv[j * a_.ld + a_.v_col(h) + d]); }
  __device__ void store(int h, int i, int d, float v) const {
    a_.out[i * a_.ldo + h * a_.head_dim + d] = __float2half_rn(v);
  }
};

template <class Op>
__global__ void __launch_bounds__(256) tiled_kernel(const Op op, int m, int n, int k) {
  __shared__ float as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile, z = blockIdx.z;
  const int i0 = blockIdx.y * kTile, j0 = blockIdx.x * kTile;
  float acc[kRowsPerThread] = {};
  for (int k0 = 0; k0 < k; k0 += kTile) {
#pragma unroll
    for (int q = 0; q < kRowsPerThread; ++q) {
      const int row = ty + 8 * q;
      as[row][tx] = i0 + row < m && k0 + tx < k ? op.a(z, i0 + row, k0 + tx) : 0.0f;
      if constexpr (Op::kBKContiguous) {
        bs[row][tx] = j0 + row < n && k0 + tx < k ? op.b(z, j0 + row, k0 + tx) : 0.0f;
      } else {
        bs[tx][row] = j0 + tx < n && k0 + row < k ? op.b(z, j0 + tx, k0 + row) : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTile; ++kk) {
      const float bv = bs[tx][kk];
#pragma unroll
      for (int q = 0; q < kRowsPerThread; ++q) acc[q] = fmaf(as[ty + 8 * q][kk], bv, acc[q]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int q = 0; q < kRowsPerThread; ++q) {
    const int i = i0 + ty + 8 * q, j = j0 + tx;
    if (i < m && j < n) op.store(z, i, j, acc[q]);
  }
}

template <class Op>
void launch_tiled(const Op& op, int m, int n, int k, int batch, cudaStream_t stream) {
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile, batch);
  tiled_kernel<Op><<<grid, 256, 0, stream>>>(op, m, n, k);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

__global__ void scale_mask_kernel(const AttnArgs a) {
  const std::int64_t l = a.seq_len, total = a.heads * l * l;
  for (std::int64_t id = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; id < total;
       id += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = (id / l) % l, j = id % l;
    a.scores[id] = a.causal && j > i ? -INFINITY : a.scores[id] * a.scale;
  }
}

// Combines two (max, sum of exp(x - max)) pairs.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

__global__ void __launch_bounds__(256) softmax_kernel(const AttnArgs a) {
  __shared__ float red_m[8], red_s[8];
  const std::int64_t l = a.seq_len;
  float* s = a.scores + static_cast<std::int64_t>(blockIdx.x) * l;
  float m = -INFINITY, sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < l; j += blockDim.x) merge(m, sum, s[j], 1.0f);  // pass 1
  for (int off = 16; off > 0; off /= 2) {
    merge(m, sum, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, sum, off));
  }
  if (threadIdx.x % 32 == 0) red_m[threadIdx.x / 32] = m, red_s[threadIdx.x / 32] = sum;
  __syncthreads();
  m = red_m[0], sum = red_s[0];
  for (int w = 1; w < 8; ++w) merge(m, sum, red_m[w], red_s[w]);
  const float inv = 1.0f / sum;
  for (std::int64_t j = threadIdx.x; j < l; j += blockDim.x) s[j] = expf(s[j] - m) * inv;  // pass 2
}

}  // namespace

void tiled_matmul(const ProjectionArgs& p, int segment, cudaStream_t stream) {
  int col0 = 0;
  for (int s = 0; s < segment; ++s) col0 += p.seg[s].rows;
  launch_tiled(ProjOp{p, col0, p.seg[segment].bias}, p.m, p.seg[segment].rows, p.k, 1, stream);
}

void tiled_scores(const AttnArgs& a, cudaStream_t stream) {
  launch_tiled(ScoresOp{a}, a.seq_len, a.seq_len, a.head_dim, a.heads, stream);
}

void tiled_scale_mask(const AttnArgs& a, cudaStream_t stream) {
  scale_mask_kernel<<<1024, 256, 0, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void tiled_softmax(const AttnArgs& a, cudaStream_t stream) {
  softmax_kernel<<<static_cast<unsigned>(a.heads) * a.seq_len, 256, 0, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void tiled_pv(const AttnArgs& a, cudaStream_t stream) {
  launch_tiled(PvOp{a}, a.seq_len, a.head_dim, a.seq_len, a.heads, stream);
}

}  // namespace lowbit::cuda::attention
