// Weight-only GEMM for larger M (> 16): a tiled tensor-core kernel.
//
// Block tile kBM (M: 32 or 64) x 256 (N: 32 packed tiles of 8) x 128 (K: one packed
// step), 256 threads = 8 warps. Each warp owns 4 packed tiles (32 n) for all kBM
// rows: the weights are the A operand of mma.sync m16n8k16 (the B fragments of two
// packed tiles are the two row halves of an A fragment), the activations the B
// operand (8 rows per mma). So every unit is dequantized exactly once per block, in
// registers, and reused for kBM / 8 mma per product; one 16-byte activation read
// from shared memory feeds 4 mma (2 tile pairs x 2 products).
//
// A 3-stage cp.async pipeline brings each step's X tile (kBM x 256 bytes), packed
// codes (16 / 32 KB: the block's 32 units, copied as they are) and scales / mins
// into shared memory; the copies' pointers are bumped once per step. Two blocks fit
// an SM (smem <= ~108 KB, <= 128 registers).
//
// X in shared memory: a row of the step is 16 chunks of 8 elements; lane (r, c) reads
// chunk 4c + w of row r of each 8-row group (the packed k permutation: the lane's 32
// consecutive k), 16 bytes at a time. Chunk j of row `row` is stored at position
// j ^ ((j >> 3) << 1) ^ (row & 1) of the row, which puts the 8 lanes of each
// shared-memory phase (rows r, r+1; c = 0..3) on 8 distinct 16-byte bank groups.
// Codes: lane L reads its 16 bytes of a unit at L * 16: conflict-free 16-byte loads.
//
// Split-K across a thread-block cluster: when N / 256 x M / kBM blocks would not
// fill the GPU (8192 x 28672, 4096 x 4096), the k_steps are split over the `splits`
// blocks of a cluster (1, 2, 4 or 8). Each block leaves its FP32 partials in its own
// shared memory; after a cluster barrier, block s sums warps s, s + splits, ... of
// all blocks over distributed shared memory in rank order (deterministic, no
// atomics, no workspace) and stores them.
#include <cooperative_groups.h>

#include <cstdint>

#include "core/device.h"
#include "core/pdl.cuh"
#include "core/split_k.h"
#include "cuda/weight_only/common.cuh"
#include "cuda/weight_only/launch.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::weight_only {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlockTiles = 32;  // packed n-tiles of 8 per block: BN = 256
constexpr int kWarpTiles = kBlockTiles / kWarps;  // 4: two tile pairs
constexpr int kStages = 3;
constexpr int kMaxGroups = 4;  // scale chunks per tile per step (group 32)

template <Form F>
constexpr int unit_bytes() {
  return form_unit_bytes<F>();
}
constexpr int kScaleBytes = kBlockTiles * kMaxGroups * 8 * 2;  // 2 KB
template <Form F, int kBM>
struct Layout {
  static constexpr int kX = kBM * formats::kPackStepK * 2;
  static constexpr int kCodes = kBlockTiles * unit_bytes<F>();
  static constexpr int kStage = kX + kCodes + 2 * kScaleBytes;
  static constexpr int kSmem = kStages * kStage;
  static constexpr int kPartial = kWarps * kBM * 32 * 4;  // FP32 partials: [warp][acc][lane]
  static_assert(kPartial <= kSmem, "the partials reuse the pipeline's shared memory");
};

__device__ __forceinline__ int x_chunk_position(int row, int j) { return j ^ ((j >> 3) << 1) ^ (row & 1); }

// The copies one thread issues per step: chunk i of each kind sits a fixed stride
// after chunk 0 (X: 16 rows; codes: 256 / (unit / 16) tiles), so a thread keeps one
// pointer per kind, bumped once per step, and a bit mask of the chunks in range.
template <Form F, int kBM>
struct Loader {
  static constexpr int kXChunks = kBM * 16 / kThreads;                               // 2 or 4
  static constexpr int kPerUnit = unit_bytes<F>() / 16;                              // 32 or 64
  static constexpr int kCodeChunks = kBlockTiles * kPerUnit / kThreads;              // 4 or 8
  static constexpr int kCodeTileStride = kThreads / kPerUnit;                        // 8 or 4
  // Block forms (units of 22..53 vectors): chunk i of the block's 32 units is vector
  // threadIdx.x + 256 i of them, unit (tile) i / kPerUnit.
  static constexpr int kBlockChunks = (kBlockTiles * kPerUnit + kThreads - 1) / kThreads;
  static_assert(kBlockChunks > 0 && kCodeTileStride > 0 && (is_block_form(F) || kCodeChunks * kThreads == kBlockTiles * kPerUnit),
                "the grouped forms' units split evenly over the threads");
  const std::uint16_t* x;     // chunk 0 of this step
  std::int64_t x_stride;      // elements from chunk i to i + 1 (16 rows)
  std::uint32_t x_dst;        // byte offset of chunk 0 within a stage
  std::uint32_t x_ok;         // bit i: chunk i's row < M
  const std::uint8_t* codes;  // chunk 0 of this step
  std::int64_t code_stride;   // bytes from chunk i to i + 1
  std::uint32_t code_ok;      // bit i: chunk i's tile < N
  const std::uint16_t* scale_src;  // null: this thread copies no scale chunk
  std::uint32_t scale_dst;
  int scale_step;

  __device__ Loader(const Params& p, std::int64_t m0, std::int64_t tile0, std::int64_t step0) {
    const int tid = threadIdx.x;
    const int row = tid / 16, j = tid % 16;
    x_ok = 0;
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) x_ok |= (m0 + row + 16 * i < p.m ? 1u : 0u) << i;
    x = static_cast<const std::uint16_t*>(p.x) + (m0 + row < p.m ? (m0 + row) * p.ldx : 0) +
        step0 * formats::kPackStepK + j * 8;
    x_stride = 16 * p.ldx;
    x_dst = row * 256 + x_chunk_position(row, j) * 16;  // rows 16 apart share the swizzle
    code_ok = 0;
    if constexpr (is_block_form(F)) {
#pragma unroll
      for (int i = 0; i < kBlockChunks; ++i) {
        const int idx = tid + kThreads * i;
        code_ok |= (idx < kBlockTiles * kPerUnit && tile0 + idx / kPerUnit < p.n_tiles ? 1u : 0u) << i;
      }
      codes = p.codes + (tile0 * p.k_steps + step0) * unit_bytes<F>();  // tile0's unit of the step
      code_stride = p.k_steps * unit_bytes<F>();                         // from a tile's unit to the next's
    } else {
      const int t = tid / kPerUnit, chunk = tid % kPerUnit;
#pragma unroll
      for (int i = 0; i < kCodeChunks; ++i) code_ok |= (tile0 + t + kCodeTileStride * i < p.n_tiles ? 1u : 0u) << i;
      codes = p.codes + ((tile0 + t) * p.k_steps + step0) * unit_bytes<F>() + chunk * 16;
      code_stride = kCodeTileStride * p.k_steps * unit_bytes<F>();
    }
    // Scale chunks: list (0 scales, 1 mins) x 32 tiles x 4 groups = 256 = one per thread.
    const int list = tid / 128, st = (tid / kMaxGroups) % kBlockTiles, g = tid % kMaxGroups;
    const int groups_here = p.groups_per_step > 0 ? p.groups_per_step : 1;
    scale_src = nullptr;
    scale_dst = Layout<F, kBM>::kX + Layout<F, kBM>::kCodes + list * kScaleBytes + (st * kMaxGroups + g) * 16;
    scale_step = p.groups_per_step * 8;
    if (!is_block_form(F) && g < groups_here && (list == 0 || F == Form::q4_zero_point) && tile0 + st < p.n_tiles) {
      scale_src = (list == 0 ? p.scales : p.mins) + ((tile0 + st) * p.groups + step0 * p.groups_per_step + g) * 8;
    }
  }

  // Copies step `step` (the loader's current one) into `stage` and advances.
  __device__ __forceinline__ void issue(const Params& p, std::uint8_t* stage, std::int64_t step) {
    const bool x_fast = p.x_vec16 && (step + 1) * formats::kPackStepK <= p.k;
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) {
      const bool ok = (x_ok >> i) & 1u;
      const std::uint16_t* src = x + (ok ? i * x_stride : 0);
      if (x_fast || !ok) {
        cp_async16(stage + x_dst + i * 16 * 256, src, ok ? 16 : 0);
      } else {
        store_x_ragged(p, stage + x_dst + i * 16 * 256, src, step * formats::kPackStepK + (threadIdx.x % 16) * 8);
      }
    }
    x += formats::kPackStepK;
    if constexpr (is_block_form(F)) {
#pragma unroll
      for (int i = 0; i < kBlockChunks; ++i) {
        const int idx = threadIdx.x + i * kThreads;
        if (idx < kBlockTiles * kPerUnit) {
          const bool ok = (code_ok >> i) & 1u;
          const int t = idx / kPerUnit, v = idx % kPerUnit;
          cp_async16(stage + Layout<F, kBM>::kX + idx * 16, ok ? codes + t * code_stride + v * 16 : codes, ok ? 16 : 0);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kCodeChunks; ++i) {
        const bool ok = (code_ok >> i) & 1u;
        cp_async16(stage + Layout<F, kBM>::kX + (threadIdx.x + i * kThreads) * 16, codes + (ok ? i * code_stride : 0),
                   ok ? 16 : 0);
      }
    }
    codes += unit_bytes<F>();
    if (scale_src != nullptr) {
      cp_async16(stage + scale_dst, scale_src, 16);
      scale_src += scale_step;
    }
  }
};

// The products of packed word w: the warp's 4 tiles' A fragments (b) against each 8-row
// block of the stage's activations (one 16-byte read feeds 4 mma).
template <class T, int kBM>
__device__ __forceinline__ void mma_word(const std::uint8_t* xs, int r, int c, int w,
                                         const std::uint32_t (&b)[kWarpTiles][4], float (&acc)[2][kBM / 8][4]) {
#pragma unroll
  for (int mb = 0; mb < kBM / 8; ++mb) {
    const int row = mb * 8 + r;
    const uint4 x = *reinterpret_cast<const uint4*>(xs + row * 256 + x_chunk_position(row, 4 * c + w) * 16);
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const std::uint32_t(&lo)[4] = b[2 * jp];
      const std::uint32_t(&hi)[4] = b[2 * jp + 1];
      mma_16816<T>(acc[jp][mb], lo[0], hi[0], lo[1], hi[1], x.x, x.y);
      mma_16816<T>(acc[jp][mb], lo[2], hi[2], lo[3], hi[3], x.z, x.w);
    }
  }
}

template <class T, Form F, int kBM>
__device__ __forceinline__ void compute_stage(const Params& p, const std::uint8_t* stage, int warp, int lane,
                                              float (&acc)[2][kBM / 8][4]) {
  const int r = lane / 4, c = lane % 4;
  const std::uint8_t* xs = stage;
  const std::uint8_t* codes = stage + 2 * kBM * formats::kPackStepK;
  const auto* scales = reinterpret_cast<const std::uint16_t*>(codes + kBlockTiles * unit_bytes<F>());
  const auto* mins = scales + kScaleBytes / 2;
  if constexpr (is_block_form(F)) {  // the units hold the lanes' scales: see BlockLane
    BlockLane<F> bl[kWarpTiles];
#pragma unroll
    for (int u = 0; u < kWarpTiles; ++u) bl[u] = load_block_lane<F>(codes + (warp * kWarpTiles + u) * unit_bytes<F>(), lane);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      std::uint32_t b[kWarpTiles][4];
#pragma unroll
      for (int u = 0; u < kWarpTiles; ++u) dequant_block_word<F>(bl[u], w, b[u]);
      mma_word<T, kBM>(xs, r, c, w, b, acc);
    }
    return;
  }
  const int g = c >> p.group_shift;
  Scale2<T> sc[kWarpTiles];
#pragma unroll
  for (int u = 0; u < kWarpTiles; ++u) {
    const int t = warp * kWarpTiles + u;
    sc[u].s = Act<T>::splat(scales[(t * kMaxGroups + g) * 8 + r]);
    sc[u].m = Act<T>::splat(F == Form::q4_zero_point ? mins[(t * kMaxGroups + g) * 8 + r] : std::uint16_t{0});
  }
  // Chunk w of the lane's 32 k (k 32c + 8w .. + 7): products 2w and 2w + 1. The codes
  // come as 8-byte loads (INT4: words w, w + 1 for even w; INT8: the chunk's two
  // words), which keeps 8 registers of codes live instead of 16.
  uint2 v[kWarpTiles];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    if (F == Form::int8 || w % 2 == 0) {
#pragma unroll
      for (int u = 0; u < kWarpTiles; ++u) {
        const int t = warp * kWarpTiles + u;
        const int offset = F == Form::int8 ? ((w / 2) * 32 + lane) * 16 + (w % 2) * 8 : lane * 16 + w * 4;
        v[u] = *reinterpret_cast<const uint2*>(codes + t * unit_bytes<F>() + offset);
      }
    }
    std::uint32_t b[kWarpTiles][4];
#pragma unroll
    for (int u = 0; u < kWarpTiles; ++u) {
      if constexpr (F == Form::int8) {
        std::uint32_t lo[2], hi[2];
        dequant_int8_word<T>(v[u].x, sc[u], lo);
        dequant_int8_word<T>(v[u].y, sc[u], hi);
        b[u][0] = lo[0], b[u][1] = lo[1], b[u][2] = hi[0], b[u][3] = hi[1];
      } else {
        dequant_int4_word<T, F>(w % 2 == 0 ? v[u].x : v[u].y, sc[u], b[u]);
      }
    }
    mma_word<T, kBM>(xs, r, c, w, b, acc);
  }
}

// D fragment element e of (pair jp, row block mb): n = 8 * (tile0 + 4 warp + 2 jp +
// e / 2) + r, M row m0 + 8 mb + 2c + e % 2.
template <int kBM>
__device__ __forceinline__ void acc_position(int warp, int lane, int a, int* n_offset, int* row_offset) {
  const int jp = a / (kBM / 8 * 4), mb = (a / 4) % (kBM / 8), e = a % 4;
  *n_offset = (warp * kWarpTiles + 2 * jp + e / 2) * 8 + lane / 4;
  *row_offset = mb * 8 + 2 * (lane % 4) + e % 2;
}

template <class T, Form F, int kBM>
__global__ void __launch_bounds__(kThreads, 2) mma_kernel(const Params p, int splits) {
  extern __shared__ __align__(128) std::uint8_t smem[];
  using L = Layout<F, kBM>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = static_cast<int>(blockIdx.x) % splits;
  const std::int64_t tile0 = static_cast<std::int64_t>(blockIdx.x / splits) * kBlockTiles;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * kBM;
  const std::int64_t step_begin = p.k_steps * split / splits, step_end = p.k_steps * (split + 1) / splits;

  float acc[2][kBM / 8][4];
#pragma unroll
  for (int jp = 0; jp < 2; ++jp) {
#pragma unroll
    for (int mb = 0; mb < kBM / 8; ++mb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[jp][mb][e] = 0.0f;
    }
  }

  Loader<F, kBM> loader(p, m0, tile0, step_begin);
  // Prologue: kStages - 1 steps in flight (one commit group each, empty or not, so
  // that wait_group counts steps).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (step_begin + s < step_end) loader.issue(p, smem + s * L::kStage, step_begin + s);
    cp_async_commit();
  }
  int stage = 0;
  for (std::int64_t step = step_begin; step < step_end; ++step) {
    cp_async_wait<kStages - 2>();  // this step's group has landed
    __syncthreads();               // ... for every thread; and the stage refilled below is free
    const std::int64_t ahead = step + kStages - 1;
    const int ahead_stage = stage == 0 ? kStages - 1 : stage - 1;
    if (ahead < step_end) loader.issue(p, smem + ahead_stage * L::kStage, ahead);
    cp_async_commit();
    compute_stage<T, F, kBM>(p, smem + stage * L::kStage, warp, lane, acc);
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  cp_async_wait<0>();

  constexpr int kAcc = 2 * kBM / 8 * 4;
  if (splits == 1) {
#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
      int n_off, row_off;
      acc_position<kBM>(warp, lane, a, &n_off, &row_off);
      store_out<T>(p, m0 + row_off, tile0 * 8 + n_off, (&acc[0][0][0])[a]);
    }
    return;
  }
  // Split-K: partials to this block's shared memory, then block `split` of the
  // cluster reduces warps split, split + splits, ... over all ranks in rank order.
  __syncthreads();  // every warp is done with the pipeline's shared memory
  float* partial = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int a = 0; a < kAcc; ++a) partial[(warp * kAcc + a) * 32 + lane] = (&acc[0][0][0])[a];
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  for (int w = split; w < kWarps; w += splits) {
    for (int item = threadIdx.x; item < kAcc * 32; item += kThreads) {
      const int a = item / 32, l = item % 32;
      float sum = 0.0f;
      for (int s = 0; s < splits; ++s) sum += cluster.map_shared_rank(partial, s)[(w * kAcc + a) * 32 + l];
      int n_off, row_off;
      acc_position<kBM>(w, l, a, &n_off, &row_off);
      store_out<T>(p, m0 + row_off, tile0 * 8 + n_off, sum);
    }
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

template <class T, Form F, int kBM>
void launch(const Params& p, cudaStream_t stream) {
  using L = Layout<F, kBM>;
  const int sms = core::multiprocessor_count();
  const std::int64_t n_blocks = (p.n_tiles + kBlockTiles - 1) / kBlockTiles;
  const std::int64_t m_blocks = (p.m + kBM - 1) / kBM;
  // Split K over a cluster: the split whose grid best fills the resident block slots
  // (2 per SM), fewest waves on a tie, at least 4 steps per split (a sweep on the H100:
  // 28672 x 8192 takes 2 at M = 64 and 1 at M = 128; 8192 x 28672 8 and 4 (8 was
  // 19% faster there at M = 128: a tie-break to revisit); 4096 x 4096, 8).
  const std::int64_t slots = 2 * static_cast<std::int64_t>(sms);
  int splits = 1;
  double best = 0.0;
  for (int s = 1; s <= 8 && (s == 1 || p.k_steps >= 4 * s); s *= 2) {
    const std::int64_t blocks = n_blocks * m_blocks * s;
    const double filled = core::wave_fill(blocks, slots);
    if (filled > best + 1e-9) best = filled, splits = s;
  }
  auto kernel = mma_kernel<T, F, kBM>;
  LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem));
  launch_cluster_kernel(kernel, dim3(static_cast<unsigned>(n_blocks * splits), static_cast<unsigned>(m_blocks)),
                        dim3(kThreads), L::kSmem, stream, false, static_cast<unsigned>(splits), p, splits);
}

}  // namespace

template <class T, Form F>
void run_mma(const Params& p, const Variant&, cudaStream_t stream) {
  if (p.m <= 32) {
    launch<T, F, 32>(p, stream);
  } else {
    launch<T, F, 64>(p, stream);
  }
}
LOWBIT_WEIGHT_ONLY_PAIRS(run_mma);
LOWBIT_WEIGHT_ONLY_BLOCK_FORMS(run_mma);

}  // namespace lowbit::cuda::weight_only
