// flash_attention on tensor cores: FlashAttention-2 on mma.sync m16n8k16 (the tile steps of
// cuda/flash_tile.cuh), for f16 and bf16, any GQA group, a batch of sequences of different
// lengths, and causal chunks (queries at the end of a longer key range); and the entry
// that picks between it and the Hopper kernel (flash_wgmma.cu), which runs where the
// device and TMA allow. Also the attention of the seed-004 pipeline ("ours",
// cuda/qattention/dispatch.cu): one sequence, Q, K and V column blocks of one matrix.
//
// Grid (query tiles of the longest sequence, heads, sequences), taken in block_order.cuh's
// order (groups of heads, each group's longest tiles first): a block owns 128 query
// rows of one head of one sequence (8 warps x 16 rows), and streams tiles of 64
// keys of its KV head through shared memory, double-buffered with cp.async (16-byte chunks
// swizzled per row, so ldmatrix is conflict-free). Key tiles past the block's last
// visible key are never loaded; a warp skips tiles entirely above its rows; only tiles
// that cross the diagonal or the sequence's end are masked. Blocks past their sequence's
// queries exit at once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/async_copy.cuh"
#include "cuda/flash/block_order.cuh"
#include "cuda/flash/flash_cuda.h"
#include "cuda/flash/flash_kernels.h"
#include "cuda/flash_tile.cuh"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::cuda::flash {
namespace {

constexpr int kBM = 128, kBN = 64, kWarps = 8, kThreads = kWarps * 32;

template <int HD>
struct Layout {
  static constexpr int kRow = HD * 2;  // bytes of a tile row
  static constexpr int kQ = kBM * kRow;
  static constexpr int kKV = kBN * kRow;
  static constexpr int kSmem = kQ + 4 * kKV;  // Q, K[2], V[2]
};

template <int HD, class T>
__global__ void __launch_bounds__(kThreads, 1) flash_kernel(const Args a) {
  using L = Layout<HD>;
  constexpr int kChunks = HD / 8;  // 16-byte chunks a row
  extern __shared__ __align__(128) std::uint8_t smem[];
  const std::uint32_t sq = smem_address(smem);
  const std::uint32_t sk = sq + L::kQ, sv = sk + 2 * L::kKV;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, r = lane / 4, c = lane % 4;
  const BlockTile tile = block_tile(a, kBM);
  const int h = tile.head, b = blockIdx.z, g = h / a.group;
  const int q_first = a.cu_q ? a.cu_q[b] : 0, q_len = a.cu_q ? a.cu_q[b + 1] - q_first : a.q_len;
  const int k_first = a.cu_k ? a.cu_k[b] : 0, k_len = a.cu_k ? a.cu_k[b + 1] - k_first : a.k_len;
  const int t0 = tile.t0;  // the block's first query of the sequence
  if (t0 >= q_len) return;
  // Query i sits at position offset + i of the keys (causal: the last q_len of k_len).
  const int offset = a.causal ? k_len - q_len : 0;
  const int n_end = a.causal ? min(k_len, offset + t0 + kBM) : k_len;
  const int tiles = (n_end + kBN - 1) / kBN;
  const std::uint16_t* qg = a.q + static_cast<long long>(q_first) * a.ldq + h * HD;
  const std::uint16_t* kg = a.k + static_cast<long long>(k_first) * a.ldk + g * a.kh;
  const std::uint16_t* vg = a.v + static_cast<long long>(k_first) * a.ldv + g * a.vh;

  // Q tile (rows past the sequence read as zeros).
#pragma unroll
  for (int i = 0; i < kBM * kChunks / kThreads; ++i) {
    const int id = tid + i * kThreads, row = id / kChunks, ch = id % kChunks;
    const bool ok = t0 + row < q_len;
    cp_async16(smem + row * L::kRow + swizzle(row, ch) * 16, qg + (ok ? (t0 + row) * a.ldq + ch * 8 : 0), ok ? 16 : 0);
  }
  auto load_kv = [&](int t) {
    const int n0 = t * kBN, buf = t & 1;
#pragma unroll
    for (int i = 0; i < kBN * kChunks / kThreads; ++i) {
      const int id = tid + i * kThreads, row = id / kChunks, ch = id % kChunks;
      const bool ok = n0 + row < k_len;
      const int dst = buf * L::kKV + row * L::kRow + swizzle(row, ch) * 16;
      cp_async16(smem + L::kQ + dst, kg + (ok ? (n0 + row) * a.ldk + ch * 8 : 0), ok ? 16 : 0);
      cp_async16(smem + L::kQ + 2 * L::kKV + dst, vg + (ok ? (n0 + row) * a.ldv + ch * 8 : 0), ok ? 16 : 0);
    }
  };
  load_kv(0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  std::uint32_t qf[HD / 16][4];
  load_q<HD>(qf, sq, warp, lane);
  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row_lo = t0 + warp * 16;  // this warp's first query of the sequence

  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) load_kv(t + 1);  // the buffer of tile t - 1, freed by the barrier below
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int n0 = t * kBN, buf = t & 1;
    if (!a.causal || n0 <= offset + row_lo + 15) {
      float s[kBN / 8][4];
      qk_tile<HD, kBN, T>(s, qf, sk + buf * L::kKV, lane);
      if (n0 + kBN > k_len || (a.causal && n0 + kBN - 1 > offset + row_lo)) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + j * 8 + 2 * c + (e & 1), row = row_lo + r + 8 * (e >> 1);
            if (key >= k_len || (a.causal && key > offset + row)) s[j][e] = -INFINITY;
          }
      }
      float corr[2];
      softmax_tile<kBN>(s, m, l, a.sl2, corr);
      pv_tile<HD, kBN, T>(o, corr, s, sv + buf * L::kKV, lane);
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  store_rows<HD, T>(o, l, a.out, a.ldo, q_first, h * HD, row_lo + r, q_len, c);
}

template <int HD, class T>
void launch(const Args& a, dim3 grid, cudaStream_t stream) {
  static const bool configured = [] {
    LOWBIT_CUDA_CHECK(
        cudaFuncSetAttribute(flash_kernel<HD, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, Layout<HD>::kSmem));
    return true;
  }();
  (void)configured;
  // Causal: the longest tiles of every head first (one group of all heads), which
  // measured better here than query tiles fastest (H200: head_dim 64 211 -> 184-199
  // TFLOPS, 128 288 -> 275; bench/notes/flash.md step 7); non-causal: query tiles fastest.
  check_block_count(grid.x, static_cast<int>(grid.y));
  Args ordered = a;
  ordered.head_group = a.causal ? static_cast<int>(grid.y) : 1;
  flash_kernel<HD, T><<<grid, kThreads, Layout<HD>::kSmem, stream>>>(ordered);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void check_block_count(std::int64_t q_tiles, int heads) {
  LOWBIT_CHECK(q_tiles * heads < (std::int64_t{1} << 31), "flash_attention: ", q_tiles, " query tiles x ", heads,
               " heads is more blocks than the grid's order indexes (2^31)");
}

bool flash_wgmma_available() { return wgmma_ready(); }

void flash_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const std::int32_t* cu_q, const std::int32_t* cu_k, std::int64_t batch, std::int64_t max_q_len,
                     const FlashAttentionParams& p, cuda_stream_t stream, FlashKernel kernel) {
  const float scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  const Args a{static_cast<const std::uint16_t*>(q.data),
               static_cast<const std::uint16_t*>(k.data),
               static_cast<const std::uint16_t*>(v.data),
               static_cast<std::uint16_t*>(out.data),
               q.row_stride(),
               k.row_stride(),
               v.row_stride(),
               out.row_stride(),
               p.head_dim,
               p.head_dim,
               cu_q,
               cu_k,
               static_cast<int>(q.rows()),
               static_cast<int>(k.rows()),
               static_cast<int>(p.heads / p.kv_heads),
               p.causal,
               scale * 1.4426950408889634f};
  const dim3 grid(static_cast<unsigned>((max_q_len + kBM - 1) / kBM), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(batch));
  const bool bf16 = q.dtype == DType::bf16;
  if (kernel != FlashKernel::mma && wgmma_ready() &&
      launch_wgmma(a, static_cast<int>(p.heads), static_cast<int>(p.kv_heads), static_cast<int>(p.head_dim), bf16,
                   max_q_len, grid.z, stream)) {
    return;
  }
  LOWBIT_CHECK(kernel != FlashKernel::wgmma, "flash_attention: the wgmma kernel was asked for, but ",
               wgmma_ready() ? "TMA cannot read these operands (the driver refused a tensor map)"
                             : "this device or build does not run it (Hopper and an sm_90a image needed)");
  if (p.head_dim == 64) {
    bf16 ? launch<64, __nv_bfloat16>(a, grid, stream) : launch<64, __half>(a, grid, stream);
  } else {
    bf16 ? launch<128, __nv_bfloat16>(a, grid, stream) : launch<128, __half>(a, grid, stream);
  }
}

bool flash_attention_over_cache(const CacheAttention& c, cuda_stream_t stream) {
  const std::int64_t d = c.head_dim, q_cols = c.heads * d;
  LOWBIT_CHECK(c.q && c.k && c.v && c.out, "flash_attention_over_cache: null q, k, v or out");
  LOWBIT_CHECK(c.kv_heads >= 1 && c.heads >= c.kv_heads && c.heads <= 65535 && c.heads % c.kv_heads == 0,
               "flash_attention_over_cache: heads ", c.heads, " must be a multiple of kv_heads ", c.kv_heads,
               " (at most 65535)");
  LOWBIT_CHECK(c.rows >= 1 && c.pos0 >= 0 && c.pos0 + c.rows < (std::int64_t{1} << 31),
               "flash_attention_over_cache: ", c.rows, " rows at position ", c.pos0,
               " (>= 1 rows, positions below 2^31)");
  LOWBIT_CHECK(c.ldq >= q_cols && c.ldo >= q_cols && c.ldo % 2 == 0 &&
                   reinterpret_cast<std::uintptr_t>(c.out) % 4 == 0,
               "flash_attention_over_cache: ldq ", c.ldq, " and ldo ", c.ldo, " must hold the ", q_cols,
               " query columns (ldo even, out 4-byte aligned)");
  LOWBIT_CHECK(c.key_stride >= d && c.head_stride >= d, "flash_attention_over_cache: key_stride ", c.key_stride,
               " and head_stride ", c.head_stride, " below head_dim ", d);
  if ((d != 64 && d != 128) || !wgmma_ready()) return false;
  const Args a{static_cast<const std::uint16_t*>(c.q),
               static_cast<const std::uint16_t*>(c.k),
               static_cast<const std::uint16_t*>(c.v),
               static_cast<std::uint16_t*>(c.out),
               c.ldq,
               c.key_stride,
               c.key_stride,
               c.ldo,
               c.head_stride,
               c.head_stride,
               nullptr,
               nullptr,
               static_cast<int>(c.rows),
               static_cast<int>(c.pos0 + c.rows),  // causal: the queries are the last rows of the keys
               static_cast<int>(c.heads / c.kv_heads),
               true,
               1.4426950408889634f / std::sqrt(static_cast<float>(d))};
  return launch_wgmma(a, static_cast<int>(c.heads), static_cast<int>(c.kv_heads), static_cast<int>(d), false, c.rows,
                      1, stream);
}

}  // namespace lowbit::cuda::flash
