// Weight-only GEMM for small M (1..16, decode): a weight-streaming kernel on tensor
// cores.
//
// The time is the weight bytes (28672 x 8192 INT4 at g32: 117 MB of codes + 29 MB of
// scales and mins), so everything serves the stream: each warp owns kTN tiles of 8
// output rows and a contiguous range of K (one k-slice), and per 128-wide step copies
// one 16-byte vector per lane per tile (INT8: two), i.e. 512 contiguous bytes per
// tile, plus the tiles' scales and mins, with cp.async into its own ring of kStages
// shared-memory slots: kStages - 1 steps (6 KB per warp, ~100 KB per SM) are in
// flight while it dequantizes and multiplies the oldest, without spending registers
// on them (a register double buffer kept only one step, 32 KB per SM, in flight and
// streamed at 58% of the copy bandwidth). Activations are read per step (L1-resident).
//
// The product is mma.sync m16n8k16 with A = the activations (M rows, padded to 16
// with zero registers; rows 8..15 only exist when M > 8), B = the dequantized weights
// in registers: M = 16 costs what M = 1 does. Thanks to the k permutation of the
// packed layout, a lane's activations for a step are 32 consecutive elements of its
// row (four 16-byte loads, L1-cached: every warp of the block reads them), and its
// weights need one scale (and min) per tile per step.
//
// Split-K inside the block: the 8 warps are k_slices x (8 / k_slices); the warps of
// one column of tiles each sum a slice of K, then add their FP32 partials through
// shared memory in a fixed order (deterministic, no atomics). k_slices is chosen on
// the host so that the grid has at least ~2 blocks per SM.
#include <algorithm>
#include <cstdint>

#include "cuda/device.h"
#include "cuda/gemm/weight_only_common.cuh"
#include "cuda/gemm/weight_only_launch.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::weight_only {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ std::uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// A warp's slice of the shared-memory ring: kStages steps of kTN units of codes
// with their scales and mins. Each warp streams its own units, so a warp only ever
// waits for its own copies (cp.async groups) and syncs with __syncwarp.
constexpr int kStages = 4;  // steps in flight per warp: kStages - 1
constexpr int kMaxChunks = 4;  // 16-byte scale chunks per tile per step (group 32)
template <Form F, int kTN>
struct Ring {
  static constexpr int kLoads = F == Form::int8 ? 2 : 1;  // 16-byte code loads per lane per unit
  uint4 codes[kStages][kTN][kLoads][32];
  std::uint16_t scales[kStages][kTN][kMaxChunks][8];
  std::uint16_t mins[kStages][kTN][kMaxChunks][8];
};

// The slow path (the ragged end of K, or rows not 16-byte aligned), kept out of line
// so that its registers do not burden the streaming loop.
__device__ __noinline__ void load_x_run_ragged(const std::uint16_t* x, std::int64_t valid, std::uint32_t (&w)[16]) {
  for (int i = 0; i < 16; ++i) {
    const std::uint32_t lo = 2 * i < valid ? __ldg(x + 2 * i) : 0u;
    const std::uint32_t hi = 2 * i + 1 < valid ? __ldg(x + 2 * i + 1) : 0u;
    w[i] = lo | (hi << 16);
  }
}

// Activations X[row][k0 .. k0 + 31] as 16 words (pairs of elements); zero past K or
// for rows >= M.
__device__ __forceinline__ void load_x_run(const Params& p, std::int64_t row, std::int64_t k0,
                                           std::uint32_t (&w)[16]) {
  if (row >= p.m) {
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = 0;
    return;
  }
  const auto* x = static_cast<const std::uint16_t*>(p.x) + row * p.ldx + k0;
  if (p.x_vec16 && k0 + 32 <= p.k) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const uint4 chunk = __ldg(reinterpret_cast<const uint4*>(x) + v);
      w[4 * v + 0] = chunk.x;
      w[4 * v + 1] = chunk.y;
      w[4 * v + 2] = chunk.z;
      w[4 * v + 3] = chunk.w;
    }
    return;
  }
  std::uint32_t ragged[16];  // in local memory: keeps w itself in registers
  load_x_run_ragged(x, p.k - k0, ragged);
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = ragged[i];
}

// Issues the copies of one step into ring slot `slot`: each lane copies its own code
// vectors; lanes (list, j, q) copy 16-byte chunks of scales (list 0) and mins (list 1).
// Tiles past N are zero-filled.
template <Form F, int kTN>
__device__ __forceinline__ void load_stage(const Params& p, std::int64_t tile0, std::int64_t step, int lane, int slot,
                                           Ring<F, kTN>& ring) {
  constexpr std::int64_t kUnit = F == Form::int8 ? 1024 : 512;
#pragma unroll
  for (int j = 0; j < kTN; ++j) {
    const std::int64_t tile = tile0 + j;
    const bool real = tile < p.n_tiles;
    const std::uint8_t* unit = p.codes + (real ? (tile * p.k_steps + step) * kUnit : 0);
#pragma unroll
    for (int h = 0; h < Ring<F, kTN>::kLoads; ++h) {
      cp_async16(&ring.codes[slot][j][h][lane], unit + (h * 32 + lane) * 16, real ? 16 : 0);
    }
  }
  const int list = lane / 16, j = (lane / 4) % 4, q = lane % 4;
  const int chunks = p.groups_per_step > 0 ? p.groups_per_step : 1;
  if (j < kTN && q < chunks && (list == 0 || F == Form::q4_zero_point)) {
    const std::int64_t tile = tile0 + j;
    const bool real = tile < p.n_tiles;
    const std::uint16_t* src = list == 0 ? p.scales : p.mins;
    const std::int64_t offset = real ? (tile * p.groups + step * p.groups_per_step + q) * 8 : 0;
    cp_async16(list == 0 ? ring.scales[slot][j][q] : ring.mins[slot][j][q], src + offset, real ? 16 : 0);
  }
}

// The activations are loaded here rather than prefetched with the codes: they are
// L1 / L2 hits (every warp of the block and of the grid reads the same X), and
// double-buffering them as well would cost 32 registers more and spill.
template <class T, Form F, int kRowGroups, int kTN>
__device__ __forceinline__ void compute_stage(const Params& p, std::int64_t step, int lane, int slot,
                                              const Ring<F, kTN>& ring, float (&acc)[kTN][4]) {
  const int r = lane / 4, c = lane % 4;
  std::uint32_t x[kRowGroups][16];  // the lane's 32 activations of rows r and r + 8
  const std::int64_t k0 = step * formats::kPackStepK + 32 * c;
#pragma unroll
  for (int g = 0; g < kRowGroups; ++g) load_x_run(p, r + 8 * g, k0, x[g]);
#pragma unroll
  for (int j = 0; j < kTN; ++j) {
    const int g = c >> p.group_shift;
    const Scale2<T> sc{Act<T>::splat(ring.scales[slot][j][g][r]),
                       Act<T>::splat(F == Form::q4_zero_point ? ring.mins[slot][j][g][r] : std::uint16_t{0})};
    // Product t uses activation words 2t (k 4t, 4t+1) and 2t + 1 (k 4t+2, 4t+3).
    auto mma_t = [&](int t, std::uint32_t b0, std::uint32_t b1) {
      const std::uint32_t a1 = kRowGroups > 1 ? x[kRowGroups - 1][2 * t] : 0u;
      const std::uint32_t a3 = kRowGroups > 1 ? x[kRowGroups - 1][2 * t + 1] : 0u;
      mma_16816<T>(acc[j], x[0][2 * t], a1, x[0][2 * t + 1], a3, b0, b1);
    };
    if constexpr (F == Form::int8) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          std::uint32_t b[2];
          dequant_int8_word<T>(word_of(ring.codes[slot][j][h][lane], w), sc, b);
          mma_t(4 * h + w, b[0], b[1]);
        }
      }
    } else {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        std::uint32_t b[4];
        dequant_int4_word<T, F>(word_of(ring.codes[slot][j][0][lane], w), sc, b);
        mma_t(2 * w, b[0], b[1]);
        mma_t(2 * w + 1, b[2], b[3]);
      }
    }
  }
}

template <class T, Form F, int kRowGroups, int kTN>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const Params p, int k_slices) {
  __shared__ float partial[kWarps][kTN][4][32];
  extern __shared__ __align__(16) std::uint8_t ring_bytes[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Ring<F, kTN>& ring = reinterpret_cast<Ring<F, kTN>*>(ring_bytes)[warp];
  const int k_slice = warp % k_slices, column = warp / k_slices;
  const int columns = kWarps / k_slices;
  const std::int64_t tile0 = (static_cast<std::int64_t>(blockIdx.x) * columns + column) * kTN;
  const std::int64_t step_begin = p.k_steps * k_slice / k_slices;
  const std::int64_t step_end = p.k_steps * (k_slice + 1) / k_slices;

  float acc[kTN][4];
#pragma unroll
  for (int j = 0; j < kTN; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  }
  if (tile0 < p.n_tiles && step_begin < step_end) {
    // One commit group per step, empty or not, so that wait_group counts steps.
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (step_begin + s < step_end) load_stage(p, tile0, step_begin + s, lane, s, ring);
      cp_async_commit();
    }
    int slot = 0;
    for (std::int64_t step = step_begin; step < step_end; ++step) {
      cp_async_wait<kStages - 2>();  // this lane's copies of `step` have landed
      __syncwarp();                  // ... and every lane's (scales are shared)
      compute_stage<T, F, kRowGroups>(p, step, lane, slot, ring, acc);
      __syncwarp();  // the slot refilled next (read last iteration) is free
      const std::int64_t ahead = step + kStages - 1;
      const int ahead_slot = slot == 0 ? kStages - 1 : slot - 1;
      if (ahead < step_end) load_stage(p, tile0, ahead, lane, ahead_slot, ring);
      cp_async_commit();
      slot = slot + 1 == kStages ? 0 : slot + 1;
    }
    cp_async_wait<0>();
  }

#pragma unroll
  for (int j = 0; j < kTN; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][j][i][lane] = acc[j][i];
  }
  __syncthreads();
  if (k_slice != 0) return;
  const int r = lane / 4, c = lane % 4;
#pragma unroll
  for (int j = 0; j < kTN; ++j) {
    const std::int64_t tile = tile0 + j;
    if (tile >= p.n_tiles) break;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float sum = 0.0f;
      for (int s = 0; s < k_slices; ++s) sum += partial[column * k_slices + s][j][i][lane];  // fixed order
      store_out<T>(p, r + 8 * (i / 2), tile * 8 + 2 * c + (i % 2), sum);
    }
  }
}

template <class T, Form F, int kRowGroups, int kTN>
void launch(const Params& p, cudaStream_t stream) {
  const int sms = multiprocessor_count();
  // Fewest k-slices (longest contiguous runs per warp) that still give ~2 blocks per
  // SM; never more slices than steps.
  int k_slices = 1;
  auto blocks_for = [&](int slices) { return (p.n_tiles + (kWarps / slices) * kTN - 1) / ((kWarps / slices) * kTN); };
  while (k_slices < kWarps && blocks_for(k_slices) < 2 * sms && 2 * k_slices <= p.k_steps) k_slices *= 2;
  const std::int64_t blocks = blocks_for(k_slices);
  constexpr int kRingBytes = kWarps * static_cast<int>(sizeof(Ring<F, kTN>));
  LOWBIT_CUDA_CHECK(
      cudaFuncSetAttribute(gemv_kernel<T, F, kRowGroups, kTN>, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes));
  gemv_kernel<T, F, kRowGroups, kTN><<<static_cast<unsigned>(blocks), kThreads, kRingBytes, stream>>>(p, k_slices);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

template <class T, Form F>
void launch_rows(const Params& p, cudaStream_t stream) {
  constexpr int kTN = F == Form::int8 ? 2 : 4;  // 64 bytes of codes per lane per step either way
  if (p.m > 8) {
    launch<T, F, 2, kTN>(p, stream);
  } else {
    launch<T, F, 1, kTN>(p, stream);
  }
}

template <class T>
void launch_form(const Params& p, Form form, cudaStream_t stream) {
  switch (form) {
    case Form::q4_zero_point: return launch_rows<T, Form::q4_zero_point>(p, stream);
    case Form::q4_symmetric: return launch_rows<T, Form::q4_symmetric>(p, stream);
    case Form::int8: return launch_rows<T, Form::int8>(p, stream);
  }
}

}  // namespace

void launch_gemv(const Params& p, bool bf16, Form form, cudaStream_t stream) {
  if (bf16) {
    launch_form<__nv_bfloat16>(p, form, stream);
  } else {
    launch_form<__half>(p, form, stream);
  }
}

}  // namespace lowbit::cuda::weight_only
