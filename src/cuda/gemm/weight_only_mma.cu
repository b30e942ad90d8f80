// Weight-only GEMM for larger M (> 16): a tiled tensor-core kernel.
//
// Block tile 128 (M) x 128 (N, 16 packed tiles of 8) x 128 (K, one packed step),
// 256 threads = 8 warps as 2 (M) x 4 (N), each warp 64 x 32: 4 x 4 mma.sync
// m16n8k16 tiles, 64 FP32 accumulators per lane. A 3-stage cp.async pipeline brings
// each step's X tile (32 KB), packed codes (8 / 16 KB: the block's 16 units, copied
// as they are) and scales / mins into shared memory; the weights are dequantized in
// registers right before the mma (never written back), by the two warps of an N
// column each.
//
// X in shared memory: a row of the step is 16 chunks of 8 elements; lane (r, c) reads
// chunks 4c .. 4c+3 of its rows (the packed k permutation: the lane's 32 consecutive
// k), 16 bytes at a time. Chunk j of row `row` is stored at position
// j ^ ((j >> 3) << 1) ^ (row & 1) of the row, which puts the 8 lanes of each
// shared-memory phase (rows r, r+1; c = 0..3) on 8 distinct 16-byte bank groups.
#include <cstdint>

#include "cuda/gemm/weight_only_common.cuh"
#include "cuda/gemm/weight_only_launch.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::weight_only {
namespace {

constexpr int kThreads = 256;
constexpr int kBlockM = 128;
constexpr int kBlockTiles = 16;  // packed n-tiles of 8 per block: BN = 128
constexpr int kStages = 3;
constexpr int kWarpM = 64, kWarpTiles = 4;  // warp tile 64 x 32
constexpr int kMmaM = kWarpM / 16;

constexpr int kXBytes = kBlockM * formats::kPackStepK * 2;          // 32 KB
constexpr int kScaleBytes = kBlockTiles * 4 * 8 * 2;                 // up to 4 groups per step: 1 KB
template <Form F>
constexpr int unit_bytes() {
  return F == Form::int8 ? 1024 : 512;
}
template <Form F>
constexpr int stage_bytes() {
  return kXBytes + kBlockTiles * unit_bytes<F>() + 2 * kScaleBytes;
}

__device__ __forceinline__ int x_chunk_position(int row, int j) { return j ^ ((j >> 3) << 1) ^ (row & 1); }

template <Form F>
struct StageView {
  std::uint8_t* x;
  std::uint8_t* codes;
  std::uint16_t* scales;
  std::uint16_t* mins;
  __device__ StageView(std::uint8_t* base, int stage) {
    std::uint8_t* s = base + stage * stage_bytes<F>();
    x = s;
    codes = s + kXBytes;
    scales = reinterpret_cast<std::uint16_t*>(codes + kBlockTiles * unit_bytes<F>());
    mins = scales + kScaleBytes / 2;
  }
};

template <Form F>
__device__ void load_stage(const Params& p, std::uint8_t* smem, int stage, std::int64_t step, std::int64_t m0,
                           std::int64_t tile0) {
  const StageView<F> st(smem, stage);
  const int tid = threadIdx.x;
  // X: 128 rows x 16 chunks.
  constexpr int kChunks = kBlockM * 16;
  for (int id = tid; id < kChunks; id += kThreads) {
    const int row = id / 16, j = id % 16;
    std::uint8_t* dst = st.x + row * 256 + x_chunk_position(row, j) * 16;
    const std::int64_t grow = m0 + row, k = step * formats::kPackStepK + j * 8;
    const auto* src = static_cast<const std::uint16_t*>(p.x) + grow * p.ldx + k;
    if (grow < p.m && k + 8 <= p.k && p.x_vec16) {
      cp_async16(dst, src, 16);
    } else if (grow < p.m && k < p.k) {  // the ragged end of K, or unaligned rows
      std::uint16_t v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = k + e < p.k ? src[e] : std::uint16_t{0};
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
    } else {
      cp_async16(dst, p.x, 0);
    }
  }
  // Codes: the block's 16 units of this step, copied as they are.
  constexpr int kUnitChunks = unit_bytes<F>() / 16;
  for (int id = tid; id < kBlockTiles * kUnitChunks; id += kThreads) {
    const int t = id / kUnitChunks, chunk = id % kUnitChunks;
    const std::int64_t tile = tile0 + t;
    std::uint8_t* dst = st.codes + t * unit_bytes<F>() + chunk * 16;
    if (tile < p.n_tiles) {
      cp_async16(dst, p.codes + (tile * p.k_steps + step) * unit_bytes<F>() + chunk * 16, 16);
    } else {
      cp_async16(dst, p.codes, 0);
    }
  }
  // Scales (and mins): per tile, the step's groups, 8 n each (16 bytes a group).
  const int groups_here = p.groups_per_step > 0 ? p.groups_per_step : 1;
  const std::int64_t group0 = step * p.groups_per_step;  // 0 for a per-channel scale
  const int lists = F == Form::q4_zero_point ? 2 : 1;
  for (int id = tid; id < lists * kBlockTiles * groups_here; id += kThreads) {
    const int list = id / (kBlockTiles * groups_here), rest = id % (kBlockTiles * groups_here);
    const int t = rest / groups_here, g = rest % groups_here;
    const std::int64_t tile = tile0 + t;
    std::uint16_t* base = list == 0 ? st.scales : st.mins;
    const std::uint16_t* src = list == 0 ? p.scales : p.mins;
    std::uint16_t* dst = base + (t * 4 + g) * 8;
    if (tile < p.n_tiles) {
      cp_async16(dst, src + (tile * p.groups + group0 + g) * 8, 16);
    } else {
      cp_async16(dst, src, 0);
    }
  }
}

template <class T, Form F>
__device__ __forceinline__ void compute_stage(const Params& p, std::uint8_t* smem, int stage, int warp_m, int warp_n,
                                              int lane, float (&acc)[kMmaM][kWarpTiles][4]) {
  const StageView<F> st(smem, stage);
  const int r = lane / 4, c = lane % 4;
  Scale2<T> sc[kWarpTiles];
  const int g = c >> p.group_shift;
#pragma unroll
  for (int jn = 0; jn < kWarpTiles; ++jn) {
    const int t = warp_n * kWarpTiles + jn;
    sc[jn].s = Act<T>::splat(st.scales[(t * 4 + g) * 8 + r]);
    sc[jn].m = F == Form::q4_zero_point ? Act<T>::splat(st.mins[(t * 4 + g) * 8 + r]) : sc[jn].s;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // chunk i of the lane's 32 k: mma products 2i and 2i + 1
    std::uint32_t a[kMmaM][2][4];  // [m tile][row half][words]
#pragma unroll
    for (int mt = 0; mt < kMmaM; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_m * kWarpM + mt * 16 + h * 8 + r;
        const uint4 v = *reinterpret_cast<const uint4*>(st.x + row * 256 + x_chunk_position(row, 4 * c + i) * 16);
        a[mt][h][0] = v.x;
        a[mt][h][1] = v.y;
        a[mt][h][2] = v.z;
        a[mt][h][3] = v.w;
      }
    }
#pragma unroll
    for (int jn = 0; jn < kWarpTiles; ++jn) {
      const int t = warp_n * kWarpTiles + jn;
      std::uint32_t b[4];
      if constexpr (F == Form::int8) {
        // Load h = i / 2 of the lane; its words 2 (i % 2) and + 1 are products 2i, 2i + 1.
        const uint2 words =
            *reinterpret_cast<const uint2*>(st.codes + t * 1024 + ((i / 2) * 32 + lane) * 16 + (i % 2) * 8);
        std::uint32_t b01[2], b23[2];
        dequant_int8_word<T>(words.x, sc[jn], b01);
        dequant_int8_word<T>(words.y, sc[jn], b23);
        b[0] = b01[0];
        b[1] = b01[1];
        b[2] = b23[0];
        b[3] = b23[1];
      } else {
        const std::uint32_t word = *reinterpret_cast<const std::uint32_t*>(st.codes + t * 512 + lane * 16 + i * 4);
        dequant_int4_word<T, F>(word, sc[jn], b);
      }
#pragma unroll
      for (int mt = 0; mt < kMmaM; ++mt) {
        // Product 2i: activation words 0, 1 of the chunk; product 2i + 1: words 2, 3.
        mma_16816<T>(acc[mt][jn], a[mt][0][0], a[mt][1][0], a[mt][0][1], a[mt][1][1], b[0], b[1]);
        mma_16816<T>(acc[mt][jn], a[mt][0][2], a[mt][1][2], a[mt][0][3], a[mt][1][3], b[2], b[3]);
      }
    }
  }
}

template <class T, Form F>
__global__ void __launch_bounds__(kThreads, 1) mma_kernel(const Params p) {
  extern __shared__ __align__(128) std::uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / 4, warp_n = warp % 4;
  const std::int64_t tile0 = static_cast<std::int64_t>(blockIdx.x) * kBlockTiles;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * kBlockM;

  float acc[kMmaM][kWarpTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMmaM; ++mt) {
#pragma unroll
    for (int jn = 0; jn < kWarpTiles; ++jn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][jn][e] = 0.0f;
    }
  }

  // Prologue: steps 0 .. kStages - 2 in flight (one commit group each, empty or not,
  // so that wait_group counts steps).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < p.k_steps) load_stage<F>(p, smem, s, s, m0, tile0);
    cp_async_commit();
  }
  for (std::int64_t step = 0; step < p.k_steps; ++step) {
    cp_async_wait<kStages - 2>();  // this step's group has landed
    __syncthreads();               // ... for every thread; and the stage refilled below is free
    const std::int64_t ahead = step + kStages - 1;
    if (ahead < p.k_steps) load_stage<F>(p, smem, static_cast<int>(ahead % kStages), ahead, m0, tile0);
    cp_async_commit();
    compute_stage<T, F>(p, smem, static_cast<int>(step % kStages), warp_m, warp_n, lane, acc);
  }
  cp_async_wait<0>();

  const int r = lane / 4, c = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMmaM; ++mt) {
#pragma unroll
    for (int jn = 0; jn < kWarpTiles; ++jn) {
      const std::int64_t col = (tile0 + warp_n * kWarpTiles + jn) * 8 + 2 * c;
      const std::int64_t row = m0 + warp_m * kWarpM + mt * 16 + r;
#pragma unroll
      for (int e = 0; e < 4; ++e) store_out<T>(p, row + 8 * (e / 2), col + (e % 2), acc[mt][jn][e]);
    }
  }
}

template <class T, Form F>
void launch(const Params& p, cudaStream_t stream) {
  constexpr int kSmem = kStages * stage_bytes<F>();
  LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(mma_kernel<T, F>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>((p.n_tiles + kBlockTiles - 1) / kBlockTiles),
                  static_cast<unsigned>((p.m + kBlockM - 1) / kBlockM));
  mma_kernel<T, F><<<grid, kThreads, kSmem, stream>>>(p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_form(const Params& p, Form form, cudaStream_t stream) {
  switch (form) {
    case Form::q4_zero_point: return launch<T, Form::q4_zero_point>(p, stream);
    case Form::q4_symmetric: return launch<T, Form::q4_symmetric>(p, stream);
    case Form::int8: return launch<T, Form::int8>(p, stream);
  }
}

}  // namespace

void launch_mma(const Params& p, bool bf16, Form form, cudaStream_t stream) {
  if (bf16) {
    launch_form<__nv_bfloat16>(p, form, stream);
  } else {
    launch_form<__half>(p, form, stream);
  }
}

}  // namespace lowbit::cuda::weight_only
