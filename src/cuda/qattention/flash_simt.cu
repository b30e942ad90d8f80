// Baseline 3, kernel 3: flash-style attention without tensor cores. A block owns 32
// query rows of one head; 4 lanes share a row, each holding every 4th dimension of q
// and of the f32 output (interleaved, so the 4 lanes read adjacent halves of a K/V
// row). K and V tiles of 32 keys go through shared memory; per tile the scores are
// completed with two shuffles, then one online-softmax update (tile max, rescale,
// exp, sum) per row. Scores never reach global memory.
#include <cstdint>

#include "cuda/qattention/kernels.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::attention {
namespace {

constexpr int kRows = 32, kKeys = 32, kThreads = kRows * 4;

template <int HD>
__global__ void __launch_bounds__(kThreads) flash_simt_kernel(const AttnArgs a) {
  constexpr int kPer = HD / 4;
  __shared__ __half ks[kKeys][HD], vs[kKeys][HD];
  const int tid = threadIdx.x, part = tid % 4, h = blockIdx.x;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kRows, row = q0 + tid / 4;
  const bool valid = row < a.seq_len;
  float q[kPer], o[kPer];
  const __half* qrow = a.qkv + static_cast<std::int64_t>(valid ? row : 0) * a.ld + a.q_col(h);
#pragma unroll
  for (int i = 0; i < kPer; ++i) q[i] = __half2float(qrow[4 * i + part]) * a.scale, o[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int n_end = a.causal ? min(a.seq_len, q0 + kRows) : a.seq_len;
  for (int n0 = 0; n0 < n_end; n0 += kKeys) {
    for (int id = tid; id < kKeys * HD / 8; id += kThreads) {
      const int key = id / (HD / 8), ch = id % (HD / 8);
      uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
      if (n0 + key < a.seq_len) {
        const std::int64_t base = static_cast<std::int64_t>(n0 + key) * a.ld + ch * 8;
        kv = *reinterpret_cast<const uint4*>(a.qkv + base + a.k_col(h));
        vv = *reinterpret_cast<const uint4*>(a.qkv + base + a.v_col(h));
      }
      *reinterpret_cast<uint4*>(&ks[key][ch * 8]) = kv;
      *reinterpret_cast<uint4*>(&vs[key][ch * 8]) = vv;
    }
    __syncthreads();
    float s[kKeys];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) dot = fmaf(q[i], __half2float(ks[j][4 * i + part]), dot);
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);
      dot += __shfl_xor_sync(0xffffffffu, dot, 2);
      const int key = n0 + j;
      s[j] = key >= a.seq_len || (a.causal && key > row) ? -INFINITY : dot;
      mx = fmaxf(mx, s[j]);
    }
    const float m_new = fmaxf(m, mx);
    if (m_new != -INFINITY) {
      const float corr = expf(m - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kKeys; ++j) sum += (s[j] = expf(s[j] - m_new));
      l = l * corr + sum;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        float acc = o[i] * corr;
#pragma unroll
        for (int j = 0; j < kKeys; ++j) acc = fmaf(s[j], __half2float(vs[j][4 * i + part]), acc);
        o[i] = acc;
      }
      m = m_new;
    }
    __syncthreads();
  }
  if (!valid) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  __half* dst = a.out + static_cast<std::int64_t>(row) * a.ldo + a.q_col(h);
#pragma unroll
  for (int i = 0; i < kPer; ++i) dst[4 * i + part] = __float2half_rn(o[i] * inv);
}

}  // namespace

void flash_simt(const AttnArgs& a, cudaStream_t stream) {
  const dim3 grid(a.heads, (a.seq_len + kRows - 1) / kRows);
  if (a.head_dim == 64) {
    flash_simt_kernel<64><<<grid, kThreads, 0, stream>>>(a);
  } else {
    flash_simt_kernel<128><<<grid, kThreads, 0, stream>>>(a);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::cuda::attention
