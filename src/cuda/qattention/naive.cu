// Baseline 1 (naive sequential): every stage its own kernel, one thread per output,
// operands straight from global memory, scores f32 [H x L x L] in memory. The seed's
// reference pipeline, kept as the slowest point of comparison.
#include <cstdint>

#include "cuda/qattention/kernels.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::attention {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Q|K|V columns [col0, col0 + rows) = X W[col0 .. col0 + rows)^T + bias.
__global__ void matmul_kernel(const ProjectionArgs p, int col0, int cols, const __half* bias) {
  const std::int64_t id = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= static_cast<std::int64_t>(p.m) * cols) return;
  const int i = static_cast<int>(id / cols), j = static_cast<int>(id % cols);
  const __half* x = p.x + i * p.ldx;
  const __half* w = p.w + static_cast<std::int64_t>(col0 + j) * p.k;
  float acc = 0.0f;
  for (int k = 0; k < p.k; ++k) acc = fmaf(__half2float(x[k]), __half2float(w[k]), acc);
  if (bias) acc += __half2float(bias[j]);
  p.out[i * p.ldo + col0 + j] = __float2half_rn(acc);
}

// S[h][i][j] = q_i . k_j (unscaled).
__global__ void scores_kernel(const AttnArgs a) {
  const std::int64_t l = a.seq_len;
  const std::int64_t id = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= a.heads * l * l) return;
  const int h = static_cast<int>(id / (l * l));
  const std::int64_t i = (id / l) % l, j = id % l;
  const __half* q = a.qkv + i * a.ld + a.q_col(h);
  const __half* k = a.qkv + j * a.ld + a.k_col(h);
  float acc = 0.0f;
  for (int d = 0; d < a.head_dim; ++d) acc = fmaf(__half2float(q[d]), __half2float(k[d]), acc);
  a.scores[id] = acc;
}

__global__ void scale_mask_kernel(const AttnArgs a) {
  const std::int64_t l = a.seq_len;
  const std::int64_t id = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= a.heads * l * l) return;
  const std::int64_t i = (id / l) % l, j = id % l;
  a.scores[id] = a.causal && j > i ? -INFINITY : a.scores[id] * a.scale;
}

// One thread per (head, row): max, sum of exponentials, normalize in place.
__global__ void softmax_kernel(const AttnArgs a) {
  const std::int64_t l = a.seq_len;
  const std::int64_t id = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= a.heads * l) return;
  float* s = a.scores + id * l;
  float mx = -INFINITY;
  for (std::int64_t j = 0; j < l; ++j) mx = fmaxf(mx, s[j]);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < l; ++j) sum += expf(s[j] - mx);
  const float inv = 1.0f / sum;
  for (std::int64_t j = 0; j < l; ++j) s[j] = expf(s[j] - mx) * inv;
}

// O[i, h hd + d] = sum_j P[h][i][j] v_j[d].
__global__ void pv_kernel(const AttnArgs a) {
  const std::int64_t l = a.seq_len;
  const std::int64_t id = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int n = a.heads * a.head_dim;
  if (id >= l * n) return;
  const std::int64_t i = id / n;
  const int h = static_cast<int>(id % n) / a.head_dim, d = static_cast<int>(id % n) % a.head_dim;
  const float* p = a.scores + (h * l + i) * l;
  const __half* v = a.qkv + a.v_col(h) + d;
  float acc = 0.0f;
  for (std::int64_t j = 0; j < l; ++j) acc = fmaf(p[j], __half2float(v[j * a.ld]), acc);
  a.out[i * a.ldo + h * a.head_dim + d] = __float2half_rn(acc);
}

}  // namespace

void naive_matmul(const ProjectionArgs& p, int segment, cudaStream_t stream) {
  int col0 = 0;
  for (int s = 0; s < segment; ++s) col0 += p.seg[s].rows;
  const int cols = p.seg[segment].rows;
  matmul_kernel<<<blocks_for(static_cast<std::int64_t>(p.m) * cols), kThreads, 0, stream>>>(p, col0, cols,
                                                                                             p.seg[segment].bias);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void naive_scores(const AttnArgs& a, cudaStream_t stream) {
  scores_kernel<<<blocks_for(static_cast<std::int64_t>(a.heads) * a.seq_len * a.seq_len), kThreads, 0, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void naive_scale_mask(const AttnArgs& a, cudaStream_t stream) {
  scale_mask_kernel<<<blocks_for(static_cast<std::int64_t>(a.heads) * a.seq_len * a.seq_len), kThreads, 0, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void naive_softmax(const AttnArgs& a, cudaStream_t stream) {
  softmax_kernel<<<blocks_for(static_cast<std::int64_t>(a.heads) * a.seq_len), kThreads, 0, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void naive_pv(const AttnArgs& a, cudaStream_t stream) {
  pv_kernel<<<blocks_for(static_cast<std::int64_t>(a.seq_len) * a.heads * a.head_dim), kThreads, 0, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::cuda::attention
