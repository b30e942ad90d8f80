// Ours, kernel 2: FlashAttention-2 style attention on tensor cores.
//
// A block owns 128 query rows of one head (8 warps x 16 rows) and streams K and V
// tiles of 64 keys through shared memory, double-buffered with cp.async (16-byte
// chunks swizzled per row: ldmatrix is conflict-free). Each warp keeps its Q
// fragments and its O accumulators (f32) in registers for the whole pass:
//   S = Q K^T      mma.sync m16n8k16, K fragments by ldmatrix
//   online softmax in the exp2 domain (scale * log2 e folded into one FMA), the row
//                  max and sum reduced over the 4 lanes that share a row
//   O += P V       P re-packed from the S accumulators to f16 A fragments in
//                  registers (the accumulator and A layouts line up), V by
//                  ldmatrix.trans
// Causal: key tiles past the block's last row are never loaded; a warp skips tiles
// entirely above its own rows; only tiles crossing the diagonal (or L) are masked.
// Blocks run heaviest q-tiles first (grid.y reversed) so the causal tail is short.
// GQA: the K/V column block is that of kv head h / (H / Hkv).
#include <cstdint>

#include "cuda/flash_tile.cuh"
#include "cuda/qattention/kernels.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::attention {
namespace {

constexpr int kBM = 128, kBN = 64, kWarps = 8, kThreads = kWarps * 32;

template <int HD>
struct FlashLayout {
  static constexpr int kRow = HD * 2;  // bytes per smem row
  static constexpr int kQ = kBM * kRow;
  static constexpr int kKV = kBN * kRow;
  static constexpr int kSmem = kQ + 4 * kKV;  // Q, K[2], V[2]
};

template <int HD>
__global__ void __launch_bounds__(kThreads, 1) flash_mma_kernel(const AttnArgs a) {
  using L = FlashLayout<HD>;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  extern __shared__ __align__(128) std::uint8_t smem[];
  const std::uint32_t sq = smem_address(smem);
  const std::uint32_t sk = sq + L::kQ, sv = sk + 2 * L::kKV;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, r = lane / 4, c = lane % 4;
  const int h = blockIdx.x;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBM;
  const int n_end = a.causal ? min(a.seq_len, q0 + kBM) : a.seq_len;
  const int tiles = (n_end + kBN - 1) / kBN;
  const __half* qg = a.qkv + a.q_col(h);
  const __half* kg = a.qkv + a.k_col(h);
  const __half* vg = a.qkv + a.v_col(h);

  // Q tile (rows past L read as zeros).
#pragma unroll
  for (int i = 0; i < kBM * kChunks / kThreads; ++i) {
    const int id = tid + i * kThreads, row = id / kChunks, ch = id % kChunks;
    const bool ok = q0 + row < a.seq_len;
    cp_async16(smem + row * L::kRow + swizzle(row, ch) * 16, qg + (ok ? (q0 + row) * a.ld + ch * 8 : 0), ok ? 16 : 0);
  }
  auto load_kv = [&](int t) {
    const int n0 = t * kBN, buf = t & 1;
#pragma unroll
    for (int i = 0; i < kBN * kChunks / kThreads; ++i) {
      const int id = tid + i * kThreads, row = id / kChunks, ch = id % kChunks;
      const bool ok = n0 + row < a.seq_len;
      const std::int64_t off = ok ? (n0 + row) * a.ld + ch * 8 : 0;
      const int dst = buf * L::kKV + row * L::kRow + swizzle(row, ch) * 16;
      cp_async16(smem + L::kQ + dst, kg + off, ok ? 16 : 0);
      cp_async16(smem + L::kQ + 2 * L::kKV + dst, vg + off, ok ? 16 : 0);
    }
  };
  load_kv(0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  std::uint32_t qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    const int row = warp * 16 + lane % 16;
    ldmatrix_x4(qf[ks], sq + row * L::kRow + swizzle(row, 2 * ks + lane / 16) * 16);
  }

  float o[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[d][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = a.scale * 1.4426950408889634f;
  const int row_lo = q0 + warp * 16;  // this warp's first query row

  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) load_kv(t + 1);  // the buffer of tile t - 1, freed by the barrier below
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int n0 = t * kBN, buf = t & 1;
    if (!a.causal || n0 <= row_lo + 15) {
      float s[kBN / 8][4];
      flash::qk_tile<HD, kBN>(s, qf, sk + buf * L::kKV, lane);
      const bool mask = n0 + kBN > a.seq_len || (a.causal && n0 + kBN - 1 > row_lo);
      if (mask) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + j * 8 + 2 * c + (e & 1), row = row_lo + r + 8 * (e >> 1);
            if (key >= a.seq_len || (a.causal && key > row)) s[j][e] = -INFINITY;
          }
      }
      float corr[2];
      flash::softmax_tile<kBN>(s, m, l, sl2, corr);
      flash::pv_tile<HD, kBN>(o, corr, s, sv + buf * L::kKV, lane);
    }
    __syncthreads();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float sum = l[hr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int row = row_lo + r + 8 * hr;
    if (row >= a.seq_len) continue;
    __half* dst = a.out + static_cast<std::int64_t>(row) * a.ldo + a.q_col(h) + 2 * c;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
      *reinterpret_cast<std::uint32_t*>(dst + d * 8) = pack_half2(o[d][2 * hr] * inv, o[d][2 * hr + 1] * inv);
    }
  }
}

template <int HD>
void launch(const AttnArgs& a, cudaStream_t stream) {
  static bool configured = false;
  if (!configured) {
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(flash_mma_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           FlashLayout<HD>::kSmem));
    configured = true;
  }
  const dim3 grid(a.heads, (a.seq_len + kBM - 1) / kBM);
  flash_mma_kernel<HD><<<grid, kThreads, FlashLayout<HD>::kSmem, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void flash_mma(const AttnArgs& a, cudaStream_t stream) {
  if (a.head_dim == 64) return launch<64>(a, stream);
  launch<128>(a, stream);
}

}  // namespace lowbit::cuda::attention
