// flash_attention on Hopper's tensor cores (sm_90a): FlashAttention-2's algorithm with
// the matmuls as wgmma and the K / V tiles brought in by TMA, warp-specialized,
// pipelined within a warpgroup and ping-ponged between two as FlashAttention-3 is.
//
// A block owns 128 query rows (head_dim 128; 192 at 64) of one head of one sequence
// (grid: query tiles x heads x sequences, taken in block_order.cuh's order) and has 1 + kConsumers warpgroups:
//   - the producer (one thread; its registers given up with setmaxnreg) loads the Q
//     tile once and streams the key range in tiles of 128 keys through two rings of
//     kStages stages, one for K and one for V: TMA boxes of 64 channels (128 bytes,
//     written with the 128-byte swizzle) x 128 keys of one KV head, completing on the
//     stage's full barrier; it refills a stage when every consumer warp has arrived on
//     its empty barrier. K and V are read through 3D maps (channel, key, KV head), so the
//     same code reads a [keys][kv_heads x D] matrix and a decode cache's [kv_heads][slots][D]
//     (Args' head strides);
//   - two consumers (three at head_dim 64), 64 query rows each: S_t = Q K_t^T (wgmma
//     m64 n128 k16, Q and K K-major from shared memory), the mask and the online softmax
//     in registers
//     (cuda/flash_tile.cuh's, on the accumulators as they lie; at head_dim 128 with a lazy
//     max, so O is rescaled only on tiles where a row's max jumps), O += P_t V_t (wgmma with
//     P from registers and V's tile read N-major: its rows are keys, the wgmma's K).
//     S_t+1 and P_t V_t are issued together, so the softmax of S_t+1 runs while P_t V_t
//     is on the tensor cores; the consumers take turns to issue (ping-pong), so one's
//     softmax runs under another's products.
// Rows past a sequence's end read the next sequence's (or TMA's zeros) and are never
// written; keys past it are masked. The producer loads no tile past the block's last
// visible key; a consumer computes none wholly above its rows' diagonal (it passes on its
// turn and releases the stages).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "cuda/flash/block_order.cuh"
#include "cuda/flash/flash_kernels.h"
#include "cuda/flash/wgmma_attention.cuh"
#include "cuda/flash_tile.cuh"
#include "cuda/gemm/tma.h"
#include "cuda/gemm/wgmma.cuh"
#include "cuda/sm90_kernel.h"
#include "cuda/wgmma_rs.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::flash {
namespace {

constexpr int kBN = 128;  // keys a tile
constexpr int kProducerRegs = 24;
constexpr int kBox = 64;  // channels a TMA box: 128 bytes, the swizzle's span

// head_dim 128: two consumers of 64 query rows (128-row blocks); head_dim 64, where the
// softmax is as long as the two products, three (192-row blocks, FlashAttention-3's
// choice), within the register file: 160 registers a consumer thread instead of 240.
template <int HD>
struct WgLayout {
  static constexpr int kConsumers = HD == 64 ? 3 : 2;
  static constexpr int kBM = 64 * kConsumers;  // query rows a block: one m64 row block a consumer
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  // The lazy max (softmax_tile's kMaxSlack) at head_dim 128, with which the softmax runs
  // under P V (sm90::wait_pv_rescale): +4-6% (H200, bench/notes/flash.md step 11); at 64
  // the overlap measured 2-4% slower.
  static constexpr int kMaxSlack = HD == 128 ? 8 : 0;
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file");
  static constexpr int kBoxes = HD / kBox;  // column boxes a row
  static constexpr int kQ = kBM * HD * 2;  // the Q tile: kBoxes boxes of kBM rows
  static constexpr int kKV = kBN * HD * 2;  // one K or V tile: kBoxes boxes of kBN rows
  static constexpr int kStages = 2;
  static constexpr int kSmem = kQ + kStages * 2 * kKV + 1024;  // + slack to align to the swizzle's 1024 bytes
};

// K and V in rings of their own (FlashAttention-3's two pipelines): tile j's K is released
// as soon as S_j is computed, its V only after P_j V_j, which runs alongside S_j+1.
struct Barriers {
  std::uint64_t q;
  std::uint64_t k_full[2], k_empty[2];
  std::uint64_t v_full[2], v_empty[2];
};

struct Maps {
  CUtensorMap q, k, v;
};

template <int HD, class T>
__global__ void __launch_bounds__(WgLayout<HD>::kThreads, 1) flash_wgmma_kernel(const __grid_constant__ Maps maps, const Args a) {
#if defined(LOWBIT_SM90A_DEVICE)
  using namespace gemm::sm90;
  using L = WgLayout<HD>;
  static_assert(L::kStages == 2, "Barriers holds two stages");
  __shared__ Barriers bars;  // also the sm_90a body's static marker (cuda/sm90_kernel.h)
  extern __shared__ std::uint8_t dynamic_smem[];
  const std::uint32_t sq = (smem_address(dynamic_smem) + 1023u) & ~1023u, skv = sq + L::kQ;
  const BlockTile tile = block_tile(a, L::kBM);
  const int h = tile.head, b = blockIdx.z, g = h / a.group;
  const int q_first = a.cu_q ? a.cu_q[b] : 0, q_len = a.cu_q ? a.cu_q[b + 1] - q_first : a.q_len;
  const int k_first = a.cu_k ? a.cu_k[b] : 0, k_len = a.cu_k ? a.cu_k[b + 1] - k_first : a.k_len;
  constexpr int kBM = L::kBM, kConsumers = L::kConsumers;
  const int t0 = tile.t0;  // the block's first query of the sequence
  if (t0 >= q_len) return;
  // Query i sits at position offset + i of the keys (causal: the last q_len of k_len).
  const int offset = a.causal ? k_len - q_len : 0;
  const int n_end = a.causal ? min(k_len, offset + t0 + kBM) : k_len;
  const int tiles = (n_end + kBN - 1) / kBN;
  const std::uint32_t q_bar = smem_address(&bars.q);
  const std::uint32_t k_full = smem_address(&bars.k_full[0]), k_empty = smem_address(&bars.k_empty[0]);
  const std::uint32_t v_full = smem_address(&bars.v_full[0]), v_empty = smem_address(&bars.v_empty[0]);
  // Stage t % 2 of each ring holds tile t: its K at skv + stage * 2 kKV, its V kKV further.
  auto k_tile = [&](int t) { return skv + (t % L::kStages) * 2 * L::kKV; };
  auto v_tile = [&](int t) { return k_tile(t) + L::kKV; };
  auto bar = [](std::uint32_t ring, int t) { return ring + 8 * (t % L::kStages); };
  auto parity = [](int t) { return static_cast<std::uint32_t>((t / L::kStages) & 1); };

  if (threadIdx.x == 0) {
    mbarrier_init(q_bar, 1);
#pragma unroll
    for (int s = 0; s < L::kStages; ++s) {
      mbarrier_init(k_full + 8 * s, 1);  // the producer's arrive + the TMA bytes
      mbarrier_init(v_full + 8 * s, 1);
      mbarrier_init(k_empty + 8 * s, kConsumers * 4);  // one arrive per consumer warp
      mbarrier_init(v_empty + 8 * s, kConsumers * 4);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (warpgroup == 0) {
    release_registers<kProducerRegs>();
    if (threadIdx.x == 0) {
      prefetch_tensor_map(&maps.q);
      prefetch_tensor_map(&maps.k);
      prefetch_tensor_map(&maps.v);
      mbarrier_arrive_expect_tx(q_bar, L::kQ);
#pragma unroll
      for (int x = 0; x < L::kBoxes; ++x) tma_load_2d(sq + x * kBM * 128, &maps.q, q_bar, h * HD + x * kBox, q_first + t0);
      for (int t = 0; t < tiles; ++t) {
        const int key = k_first + t * kBN;
        mbarrier_wait(bar(k_empty, t), parity(t) ^ 1);
        mbarrier_arrive_expect_tx(bar(k_full, t), L::kKV);
#pragma unroll
        for (int x = 0; x < L::kBoxes; ++x) tma_load_3d(k_tile(t) + x * kBN * 128, &maps.k, bar(k_full, t), x * kBox, key, g);
        mbarrier_wait(bar(v_empty, t), parity(t) ^ 1);
        mbarrier_arrive_expect_tx(bar(v_full, t), L::kKV);
#pragma unroll
        for (int x = 0; x < L::kBoxes; ++x) tma_load_3d(v_tile(t) + x * kBN * 128, &maps.v, bar(v_full, t), x * kBox, key, g);
      }
    }
    return;
  }

  claim_registers<L::kConsumerRegs>();
  const int wg = warpgroup - 1, warp = (static_cast<int>(threadIdx.x) / 32) % 4, lane = static_cast<int>(threadIdx.x) % 32;
  const int r = lane / 4, c = lane % 4;
  const int wg_lo = t0 + wg * 64, row_lo = wg_lo + warp * 16;  // the warpgroup's and the warp's first query
  // The warpgroup's tiles: a prefix of the block's (causal, three consumers: up to its last
  // row's diagonal). Two consumers of a 128-row block skip a tile only where the keys run
  // 64-127 past the queries, and the skip's code cost 2-3% at head_dim 128 (H200).
  const int wg_tiles =
      a.causal && kConsumers == 3 ? min(tiles, (min(k_len, offset + wg_lo + 64) + kBN - 1) / kBN) : tiles;
  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float sc[kBN / 8][4];  // S_j, then its softmax weights
  std::uint32_t pa[kBN / 16][4];  // P_j: the weights rounded to T, wgmma's A fragments

  // S = Q K_t^T, issued (not waited for).
  auto issue_s = [&](int t) {
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      const std::uint32_t col = (ks % 4) * 32;  // the k16 step's bytes in its 128-byte box row
      const std::uint64_t qd = sw128_descriptor(sq + (ks / 4) * kBM * 128 + wg * 64 * 128 + col);
      const std::uint64_t kd = sw128_descriptor(k_tile(t) + (ks / 4) * kBN * 128 + col);
      sm90::wgmma_ss<T, kBN>(sc, qd, kd, ks > 0);
    }
  };
  // O += P V_t, issued.
  auto issue_pv = [&](int t) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      // Keys 16 kk .. 16 kk + 15: two 8-row atoms of every channel box.
      sm90::wgmma_rs_n_major<T, HD>(o, pa[kk], sm90::sw128_mn_descriptor(v_tile(t) + kk * 16 * 128, kBN * 128), 1);
    }
  };
  // The mask (tiles that cross the diagonal or the sequence's end) and the online
  // softmax of S_t; corr: the factor O and l take.
  auto softmax = [&](int t, float (&corr)[2]) {
    const int n0 = t * kBN;
    if (n0 + kBN > k_len || (a.causal && n0 + kBN - 1 > offset + row_lo)) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + j * 8 + 2 * c + (e & 1), row = row_lo + r + 8 * (e >> 1);
          if (key >= k_len || (a.causal && key > offset + row)) sc[j][e] = -INFINITY;
        }
    }
    softmax_tile<kBN, L::kMaxSlack>(sc, m, l, a.sl2, corr);
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      pa[kk][0] = pack_pair<T>(sc[2 * kk][0], sc[2 * kk][1]);
      pa[kk][1] = pack_pair<T>(sc[2 * kk][2], sc[2 * kk][3]);
      pa[kk][2] = pack_pair<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      pa[kk][3] = pack_pair<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
    }
  };
  auto release = [&](std::uint32_t ring, int t) {
    if (lane == 0) mbarrier_arrive(bar(ring, t));  // this warp is done with the stage
  };
  // Ping-pong (FlashAttention-3): the consumers take turns to issue their wgmmas, so one's
  // softmax runs while another's products hold the tensor cores. Named barrier 1 + w is
  // consumer w's turn: it waits there (bar.sync) and hands the turn to the next (w + 1
  // mod kConsumers) with bar.arrive. Each takes tiles + 1 turns (those of skipped tiles
// too); the last consumer gives
  // consumer 0 its first turn and skips handing over its last, so every barrier's
  // arrivals match its waits.
  int turns = 0;
  auto take_turn = [&] { named_barrier(1 + wg, 256); };
  auto hand_over = [&] {
    if (++turns <= tiles || wg != kConsumers - 1) named_barrier_arrive(1 + (wg + 1) % kConsumers, 256);
  };
  if (wg == kConsumers - 1) named_barrier_arrive(1, 256);

  mbarrier_wait(q_bar, 0);
  // S_0 alone; then each step issues S_t and P_t-1 V_t-1 together: the softmax of S_t runs
  // while P_t-1 V_t-1 is on the tensor cores, and O is rescaled once that is done.
  mbarrier_wait(bar(k_full, 0), 0);
  take_turn();
  wgmma_fence();
  issue_s(0);
  wgmma_commit();
  hand_over();
  wgmma_wait<0>();
  fence_accumulators(sc);
  release(k_empty, 0);
  {
    float corr[2];
    softmax(0, corr);  // O is still zero: nothing to rescale
  }
  pack_p();
  for (int t = 1; t < wg_tiles; ++t) {
    mbarrier_wait(bar(k_full, t), parity(t));
    mbarrier_wait(bar(v_full, t - 1), parity(t - 1));
    take_turn();
    wgmma_fence();
    issue_s(t);
    wgmma_commit();
    issue_pv(t - 1);
    wgmma_commit();
    hand_over();
    wgmma_wait<1>();  // S_t is done; P_t-1 V_t-1 may still run
    fence_accumulators(sc);
    release(k_empty, t);
    float corr[2];
    softmax(t, corr);
    sm90::wait_pv_rescale<L::kMaxSlack, HD>(o, corr);
    release(v_empty, t - 1);
    pack_p();
  }
  mbarrier_wait(bar(v_full, wg_tiles - 1), parity(wg_tiles - 1));
  take_turn();
  wgmma_fence();
  issue_pv(wg_tiles - 1);
  wgmma_commit();
  hand_over();
  wgmma_wait<0>();
  fence_accumulators(o);
  release(v_empty, wg_tiles - 1);
  // Tiles wholly above this warpgroup's diagonal (another's): their turns are passed on
  // at once and their stages released once they land (never while TMA still writes).
  for (int t = wg_tiles; t < tiles; ++t) {
    mbarrier_wait(bar(k_full, t), parity(t));
    mbarrier_wait(bar(v_full, t), parity(t));
    take_turn();
    hand_over();
    release(k_empty, t);
    release(v_empty, t);
  }

  store_rows<HD, T>(o, l, a.out, a.ldo, q_first, h * HD, row_lo + r, q_len, c);
#else
  (void)maps, (void)a;
#endif  // LOWBIT_SM90A_DEVICE
}

template <int HD, class T>
bool instance_ready() {
  static Sm90KernelReady ready;
  return ready(reinterpret_cast<const void*>(flash_wgmma_kernel<HD, T>), sizeof(Barriers), WgLayout<HD>::kSmem);
}

template <int HD, class T>
bool launch_instance(const Args& a, int heads, int kv_heads, std::int64_t max_q_len, unsigned batch,
                     cudaStream_t stream) {
  using L = WgLayout<HD>;
  if (!instance_ready<HD, T>()) return false;
  // Three maps a call (~1-2 us of host time each), not cached: a cache keyed by pointers
  // goes stale when memory is freed and reused. K and V by (channel, key, KV head): keys
  // bounded at k_len (TMA's zeros past it), any head stride.
  Maps maps;
  const CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT16;  // the bits as they are, f16 or bf16
  if (gemm::encode_swizzled_128(&maps.q, type, a.q, static_cast<std::int64_t>(heads) * HD, a.q_len, a.ldq * 2, kBox,
                                L::kBM) != nullptr ||
      gemm::encode_swizzled_128_3d(&maps.k, type, a.k, HD, a.k_len, kv_heads, a.ldk * 2, a.kh * 2, kBox, kBN) !=
          nullptr ||
      gemm::encode_swizzled_128_3d(&maps.v, type, a.v, HD, a.k_len, kv_heads, a.ldv * 2, a.vh * 2, kBox, kBN) !=
          nullptr) {
    return false;
  }
  const std::int64_t q_tiles = (max_q_len + L::kBM - 1) / L::kBM;
  // Query tiles fastest (a group of one head: its K and V read from L2 by the blocks
  // resident together), except causal at head_dim 64, whose 43 tiles a head left a tail
  // that way: there the longest tiles of every head first (one group of all heads). H200,
  // bench/notes/flash.md steps 5 and 7: non-causal 128 595 / 532 -> 653 TFLOPS, causal
  // 128 594 -> 606; causal 64 460 with all heads against 431 with one, 448 with seven.
  check_block_count(q_tiles, heads);
  Args ordered = a;
  ordered.head_group = a.causal && HD == 64 ? heads : 1;
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(heads), batch);
  flash_wgmma_kernel<HD, T><<<grid, L::kThreads, L::kSmem, stream>>>(maps, ordered);
  LOWBIT_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

bool wgmma_ready() { return instance_ready<128, __half>(); }  // built together, for the same targets

bool launch_wgmma(const Args& a, int heads, int kv_heads, int head_dim, bool bf16, std::int64_t max_q_len,
                  unsigned batch, cuda_stream_t stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (head_dim == 64) {
    return bf16 ? launch_instance<64, __nv_bfloat16>(a, heads, kv_heads, max_q_len, batch, s)
                : launch_instance<64, __half>(a, heads, kv_heads, max_q_len, batch, s);
  }
  return bf16 ? launch_instance<128, __nv_bfloat16>(a, heads, kv_heads, max_q_len, batch, s)
              : launch_instance<128, __half>(a, heads, kv_heads, max_q_len, batch, s);
}

}  // namespace lowbit::cuda::flash
