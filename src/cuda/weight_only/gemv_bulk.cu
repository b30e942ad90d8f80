// Weight-only GEMV for M <= 16 whose weight ring is filled by bulk copies (Hopper,
// sm_90a): gemv_kernel's step (gemv_step.cuh) on another stream of weights.
//
// Why (bench/notes/weight_only.md, "What one launch can read"): the H200 streams at its
// copy ceiling only with ~10-17 MB in flight. gemv_kernel's per-lane cp.async rings hold at
// most ~11 MB at the 8B gate|up shape, and its 224 blocks of equal work sit two on 92 SMs
// and one on 40. Here:
// - one block a SM; the pairs of 8-row tiles are split evenly over the grid (13 or 14 a
//   block at 28672 rows), and a block's (pair, step) units evenly over its warps, each warp
//   a contiguous run that may cross pairs: every SM and every warp streams the same bytes
//   to within one unit;
// - a warp's ring holds kStages slots of up to kChunk steps of one pair, filled by bulk
//   copies (cp.async.bulk: a tile's units, scales or mins of the chunk, each contiguous,
//   issued by one lane each) that complete on the slot's mbarrier: no registers or issue
//   slots for addresses, and ~200 KB of ring a SM in flight;
// - a pair split between warps is summed through shared memory after the loop, in warp
//   order (deterministic, no atomics).
#include <algorithm>
#include <cstdint>

#include "core/device.h"
#include "core/pdl.cuh"
#include "cuda/gemm/wgmma.cuh"
#include "cuda/sm90_kernel.h"
#include "cuda/weight_only/gemv_step.cuh"
#include "cuda/weight_only/launch.cuh"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::cuda::weight_only {
namespace {

using namespace gemv_step;

constexpr int kRingBudget = 200 * 1024;  // shared memory for the rings of a block (one block a SM)

template <Form F, int kChunk>
using Slot = PairRing<F, 1, kChunk>;  // one slot: kChunk steps of a tile pair

template <Form F, int kWarps, int kChunk>
constexpr int stages() {
  const int fit = kRingBudget / (kWarps * static_cast<int>(sizeof(Slot<F, kChunk>)));
  return fit > 8 ? 8 : fit;
}

template <Form F, int kWarps, int kChunk>
using WarpRing = PairRing<F, stages<F, kWarps, kChunk>(), kChunk>;

// The rings, then one mbarrier a slot.
template <Form F, int kWarps, int kChunk>
constexpr int smem_bytes() {
  return kWarps * static_cast<int>(sizeof(WarpRing<F, kWarps, kChunk>) + 8 * stages<F, kWarps, kChunk>());
}

// Where a pair's D fragments go: gemv_kernel's write_out for one pair (tiles 2 pair, 2 pair + 1).
template <class T, int kRowGroups>
__device__ __forceinline__ void store_pair(const Params& p, std::int64_t pair, const float (&v)[kRowGroups][4],
                                           int lane) {
  const int r = lane / 4, c = lane % 4;
#pragma unroll
  for (int rg = 0; rg < kRowGroups; ++rg) store_quad<T>(p, 8 * rg + 2 * c, pair * 16 + r, v[rg][0], v[rg][1], v[rg][2], v[rg][3]);
}

template <class T, Form F, int kRowGroups, int kWarps, int kChunk, bool kSub>
__global__ void __launch_bounds__(kWarps * 32, 1) gemv_bulk_kernel(const Params p, int pdl) {
#if defined(LOWBIT_SM90A_DEVICE)
  namespace sm90 = gemm::sm90;
  // A static marker: its size tells the host that this image has the sm_90a body.
  __shared__ int sm90a_body;
  if (threadIdx.x == 0) *static_cast<volatile int*>(&sm90a_body) = 0;
  constexpr int kStages = stages<F, kWarps, kChunk>();
  static_assert(kStages >= 2, "a ring of at least two slots");
  using RingT = WarpRing<F, kWarps, kChunk>;
  constexpr int kUnit = form_unit_bytes<F>();
  constexpr bool kScales = !is_block_form(F);  // (the block forms' units hold theirs)
  constexpr bool kMins = F == Form::q4_zero_point;
  constexpr int kLists = 1 + (kScales ? 1 : 0) + (kMins ? 1 : 0);
  // pdl as gemv_kernel's: weights are issued before griddepcontrol.wait, activations after.
  if (pdl == 1 || pdl == 2) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (pdl == 1) asm volatile("griddepcontrol.wait;\n" ::: "memory");

  extern __shared__ __align__(16) std::uint8_t smem_[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 4, c = lane % 4;
  RingT& ring = reinterpret_cast<RingT*>(smem_)[warp];
  std::uint64_t* const full = reinterpret_cast<std::uint64_t*>(smem_ + kWarps * sizeof(RingT)) + warp * kStages;

  // The block's pairs and the warp's run [u0, u1) of its units (pair-major, then step).
  const std::int64_t ks = p.k_steps;
  const std::int64_t n_pairs = (p.n_tiles + 1) / 2;
  const std::int64_t pair0 = n_pairs * blockIdx.x / gridDim.x;
  const std::int64_t units = (n_pairs * (blockIdx.x + 1) / gridDim.x - pair0) * ks;
  auto run_begin = [&](int w) { return units * w / kWarps; };
  const std::int64_t u0 = run_begin(warp), u1 = run_begin(warp + 1);

  // Zeros in the ring (a missing second tile of an odd N stays 0), then the barriers.
  for (int i = lane; i < static_cast<int>(sizeof(RingT) / 16); i += 32) reinterpret_cast<uint4*>(&ring)[i] = make_uint4(0, 0, 0, 0);
  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) sm90::mbarrier_init(sm90::smem_address(&full[s]), 1);
    sm90::fence_barrier_init();
  }
  sm90::fence_proxy_async();  // the zeros before the copies that land on them
  __syncwarp();

  // The chunk of up to kChunk steps from unit u (never past its pair or the run).
  auto chunk_len = [&](std::int64_t step, std::int64_t u) {
    return static_cast<int>(std::min<std::int64_t>({kChunk, ks - step, u1 - u}));
  };
  // Copies a chunk into `slot`: lane (list, tile) copies the chunk's units, or its scales or
  // mins, of one tile (contiguous in the packed weights and in the slot); lane 0 first
  // announces the bytes.
  auto issue = [&](int slot, std::int64_t pair, std::int64_t step, int len) {
    const std::int64_t tile = 2 * (pair0 + pair);
    const int tiles = p.n_tiles - tile >= 2 ? 2 : 1;
    // One scale chunk of 16 bytes a group; a per-channel scale (groups_per_step 0) once.
    const int scale_bytes = p.groups_per_step > 0 ? len * p.groups_per_step * 16 : 16;
    const std::uint32_t bar = sm90::smem_address(&full[slot]);
    if (lane == 0) {
      const int per_tile = len * kUnit + (kScales ? scale_bytes : 0) + (kMins ? scale_bytes : 0);
      sm90::mbarrier_arrive_expect_tx(bar, static_cast<std::uint32_t>(tiles * per_tile));
    }
    __syncwarp();
    const int t = lane % 2, list = lane / 2;
    if (list < kLists && t < tiles) {
      const std::int64_t n_tile = tile + t;
      if (list == 0) {
        sm90::bulk_load(sm90::smem_address(&ring.codes[slot][t][0][0]), p.codes + (n_tile * ks + step) * kUnit,
                        static_cast<std::uint32_t>(len * kUnit), bar);
      } else {
        const std::uint16_t* src = (list == 1 ? p.scales : p.mins) + (n_tile * p.groups + step * p.groups_per_step) * 8;
        const void* dst = list == 1 ? &ring.scales[slot][t][0][0] : &ring.mins[slot][t][0][0];
        sm90::bulk_load(sm90::smem_address(dst), src, static_cast<std::uint32_t>(scale_bytes), bar);
      }
    }
  };

  // The producer's cursor: the next chunk to copy.
  std::int64_t pu = u0, p_pair = ks > 0 ? u0 / ks : 0, p_step = ks > 0 ? u0 % ks : 0;
  auto issue_next = [&](int slot) {
    const int len = chunk_len(p_step, pu);
    issue(slot, p_pair, p_step, len);
    pu += len;
    p_step += len;
    if (p_step == ks) ++p_pair, p_step = 0;
  };
#pragma unroll 1
  for (int s = 0; s < kStages && pu < u1; ++s) issue_next(s);
  if (pdl >= 2) asm volatile("griddepcontrol.wait;\n" ::: "memory");

  // Activation rows (kSub: B column r is M row r / 4 masked to lane column r % 4).
  const std::uint16_t* x_row[kRowGroups];
  bool row_ok[kRowGroups];
#pragma unroll
  for (int rg = 0; rg < kRowGroups; ++rg) {
    const std::int64_t row = kSub ? r / 4 : r + 8 * rg;
    row_ok[rg] = row < p.m && (!kSub || c == r % 4);
    x_row[rg] = static_cast<const std::uint16_t*>(p.x) + (row_ok[rg] ? row * p.ldx : 0) + 32 * c;
  }
  const std::int64_t fast_end = p.x_vec16 ? p.k / formats::kPackStepK : 0;

  // acc: the current pair's sums; head: the first pair's if another warp shares it (a run
  // inside one pair included); the last pair's, if shared and not the first, stays in acc.
  float acc[1][kRowGroups][4] = {}, head[kRowGroups][4] = {};
  const std::int64_t first_pair = ks > 0 ? u0 / ks : 0;
  auto whole = [&](std::int64_t pair) { return pair * ks >= u0 && (pair + 1) * ks <= u1; };
  std::int64_t cu = u0, c_pair = first_pair, c_step = ks > 0 ? u0 % ks : 0;
  int slot = 0;
  std::uint32_t phase = 0;
  while (cu < u1) {
    const int len = chunk_len(c_step, cu);
    sm90::mbarrier_wait(sm90::smem_address(&full[slot]), phase);
#pragma unroll
    for (int cc = 0; cc < kChunk; ++cc) {
      if (cc >= len) break;
      const std::int64_t step = c_step + cc;
      const std::uint16_t* xs[kRowGroups];
#pragma unroll
      for (int rg = 0; rg < kRowGroups; ++rg) xs[rg] = x_row[rg] + step * formats::kPackStepK;
      std::uint32_t x[kRowGroups][16];
      load_x<kRowGroups>(p, xs, row_ok, step, fast_end, c, x);
      if constexpr (kSub) {
        compute_step_sub<F, 2>(x[0], lane, slot, cc, ring, acc);
      } else {
        compute_step<T, F, kRowGroups, 2>(p, x, lane, slot, cc, ring, acc);
      }
    }
    __syncwarp();               // every lane has read the slot ...
    sm90::fence_proxy_async();  // ... before the copies that refill it
    if (pu < u1) issue_next(slot);
    cu += len;
    c_step += len;
    if (c_step == ks || cu == u1) {  // the pair ends here (for this warp)
      if constexpr (kSub) sub_to_rows<2>(acc, c);
      const bool whole_pair = whole(c_pair);
      if (whole_pair) store_pair<T, kRowGroups>(p, pair0 + c_pair, acc[0], lane);
      if (whole_pair || c_pair == first_pair) {  // else the run's last pair, shared: acc keeps it
#pragma unroll
        for (int rg = 0; rg < kRowGroups; ++rg) {
#pragma unroll
          for (int i = 0; i < 4; ++i) head[rg][i] = whole_pair ? head[rg][i] : acc[0][rg][i], acc[0][rg][i] = 0.0f;
        }
      }
      if (cu < u1) ++c_pair, c_step = 0;
    }
    if (++slot == kStages) slot = 0, phase ^= 1;
  }
  if (pdl == 3) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  // The shared pairs: each warp's head and tail partials through the (drained) rings, each
  // pair summed in warp order by the warp whose run holds its first unit.
  constexpr int kVals = kRowGroups * 4;
  static_assert(kWarps * 2 * kVals * 32 * 4 <= kWarps * sizeof(RingT), "partials fit the rings");
  float* part = reinterpret_cast<float*>(smem_);  // [warp][head, tail][kVals][32]
  __syncthreads();
#pragma unroll
  for (int a = 0; a < kVals; ++a) {
    part[((warp * 2 + 0) * kVals + a) * 32 + lane] = head[a / 4][a % 4];
    part[((warp * 2 + 1) * kVals + a) * 32 + lane] = acc[0][a / 4][a % 4];
  }
  __syncthreads();
  if (u0 < u1) {
    const std::int64_t last = (u1 - 1) / ks;
    if (!whole(last) && last * ks >= u0) {
      float sum[kRowGroups][4] = {};
      for (int v = 0; v < kWarps; ++v) {
        const std::int64_t vb = run_begin(v), ve = run_begin(v + 1);
        if (vb == ve || ve <= last * ks || vb >= (last + 1) * ks) continue;
        const int half = vb / ks == last ? 0 : 1;  // the pair is v's first (head) or its last (tail)
#pragma unroll
        for (int a = 0; a < kVals; ++a) sum[a / 4][a % 4] += part[((v * 2 + half) * kVals + a) * 32 + lane];
      }
      store_pair<T, kRowGroups>(p, pair0 + last, sum, lane);
    }
  }
#endif  // LOWBIT_SM90A_DEVICE
}

template <class T, Form F, int kRowGroups, int kWarps, int kChunk, bool kSub>
void launch(const Params& p, const Variant& v, cudaStream_t stream) {
  auto* kernel = gemv_bulk_kernel<T, F, kRowGroups, kWarps, kChunk, kSub>;
  constexpr int kSmem = smem_bytes<F, kWarps, kChunk>();
  static Sm90KernelReady ready;
  LOWBIT_CHECK(ready(reinterpret_cast<const void*>(kernel), sizeof(int), kSmem),
               "weight_only: the bulk-copy GEMV needs a compute capability 9.0 GPU and an sm_90a image "
               "(CMAKE_CUDA_ARCHITECTURES 90a)");
  const std::int64_t n_pairs = (p.n_tiles + 1) / 2;
  const std::int64_t grid = std::min<std::int64_t>(n_pairs, core::multiprocessor_count());
  const int pdl = default_pdl(v);
  launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(kWarps * 32), kSmem, stream, pdl > 0, p, pdl);
}

template <class T, Form F, int kWarps, int kChunk>
void launch_rows(const Params& p, const Variant& v, cudaStream_t stream) {
  if constexpr (is_block_form(F) && std::is_same_v<T, __half>) {
    if (sub_block_decode<F>(p, v)) return launch<T, F, 1, kWarps, kChunk, true>(p, v, stream);
  }
  if (p.m > 8) {
    launch<T, F, 2, kWarps, kChunk, false>(p, v, stream);
  } else {
    launch<T, F, 1, kWarps, kChunk, false>(p, v, stream);
  }
}

}  // namespace

bool gemv_bulk_available() {
  static Sm90KernelReady ready;
  // One instantiation stands for all: they are built together, for the same targets.
  auto* kernel = gemv_bulk_kernel<__half, Form::q4_zero_point, 1, 16, 2, false>;
  return ready(reinterpret_cast<const void*>(kernel), sizeof(int), smem_bytes<Form::q4_zero_point, 16, 2>());
}

// Variant::shape: {warps, steps a slot} (the ring's slots as many as kRingBudget holds, at
// most 8); the table for f16 Q4 with zero points, shape 0 (the default) for every form.
template <class T, Form F>
void run_gemv_bulk(const Params& p, const Variant& v, cudaStream_t stream) {
  LOWBIT_CHECK(p.m <= kGemvMaxRows, "weight_only: the bulk-copy GEMV takes M <= ", kGemvMaxRows, ", got ", p.m);
  if constexpr (std::is_same_v<T, __half> && F == Form::q4_zero_point) {
    switch (v.shape) {
      case 1: return launch_rows<T, F, 16, 4>(p, v, stream);
      case 2: return launch_rows<T, F, 8, 4>(p, v, stream);
      case 3: return launch_rows<T, F, 8, 8>(p, v, stream);
      default: break;
    }
  }
  launch_rows<T, F, 16, 2>(p, v, stream);
}

LOWBIT_WEIGHT_ONLY_PAIRS(run_gemv_bulk);
LOWBIT_WEIGHT_ONLY_BLOCK_FORMS(run_gemv_bulk);

}  // namespace lowbit::cuda::weight_only
