// Weight-only GEMM for small M (1..16, decode): a weight-streaming kernel on tensor
// cores.
//
// The time is the weight bytes (28672 x 8192 INT4 at g32: 117 MB of codes + 29 MB of
// scales and mins), so everything serves the stream: each warp owns kTN tiles of 8
// output rows and a contiguous range of K (one k-slice), and per 128-wide step loads
// one 16-byte vector per lane per tile (INT8: two), i.e. 512 contiguous bytes per
// tile, prefetching the next step's codes, scales and activations while it
// dequantizes and multiplies the current ones (2 steps in flight). Codes bypass L1.
// Activations are read per step (L1-resident), not prefetched.
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

template <Form F, int kRowGroups, int kTN>
struct Stage {
  static constexpr int kLoads = F == Form::int8 ? 2 : 1;
  uint4 codes[kTN][kLoads];
  std::uint16_t s[kTN], m[kTN];
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

template <Form F, int kRowGroups, int kTN>
__device__ __forceinline__ void load_stage(const Params& p, std::int64_t tile0, std::int64_t step, int lane,
                                           Stage<F, kRowGroups, kTN>& st) {
  const int r = lane / 4, c = lane % 4;  // this lane's n within a tile, and k column
  constexpr std::int64_t kUnit = F == Form::int8 ? 1024 : 512;
#pragma unroll
  for (int j = 0; j < kTN; ++j) {
    const std::int64_t tile = tile0 + j;
    if (tile < p.n_tiles) {
      const std::uint8_t* unit = p.codes + (tile * p.k_steps + step) * kUnit;
#pragma unroll
      for (int h = 0; h < Stage<F, kRowGroups, kTN>::kLoads; ++h) st.codes[j][h] = load_stream16(unit + (h * 32 + lane) * 16);
      const std::int64_t group = step * p.groups_per_step + (c >> p.group_shift);
      const std::int64_t index = (tile * p.groups + group) * 8 + r;
      st.s[j] = __ldg(p.scales + index);
      st.m[j] = F == Form::q4_zero_point ? __ldg(p.mins + index) : std::uint16_t{0};
    } else {
#pragma unroll
      for (int h = 0; h < Stage<F, kRowGroups, kTN>::kLoads; ++h) st.codes[j][h] = make_uint4(0, 0, 0, 0);
      st.s[j] = 0;
      st.m[j] = 0;
    }
  }
}

// The activations are loaded here rather than prefetched with the codes: they are
// L1 / L2 hits (every warp of the block and of the grid reads the same X), and
// double-buffering them as well would cost 32 registers more and spill.
template <class T, Form F, int kRowGroups, int kTN>
__device__ __forceinline__ void compute_stage(const Params& p, std::int64_t step, int lane,
                                              const Stage<F, kRowGroups, kTN>& st, float (&acc)[kTN][4]) {
  const int r = lane / 4, c = lane % 4;
  std::uint32_t x[kRowGroups][16];  // the lane's 32 activations of rows r and r + 8
  const std::int64_t k0 = step * formats::kPackStepK + 32 * c;
#pragma unroll
  for (int g = 0; g < kRowGroups; ++g) load_x_run(p, r + 8 * g, k0, x[g]);
#pragma unroll
  for (int j = 0; j < kTN; ++j) {
    const Scale2<T> sc{Act<T>::splat(st.s[j]), Act<T>::splat(st.m[j])};
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
          dequant_int8_word<T>(word_of(st.codes[j][h], w), sc, b);
          mma_t(4 * h + w, b[0], b[1]);
        }
      }
    } else {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        std::uint32_t b[4];
        dequant_int4_word<T, F>(word_of(st.codes[j][0], w), sc, b);
        mma_t(2 * w, b[0], b[1]);
        mma_t(2 * w + 1, b[2], b[3]);
      }
    }
  }
}

template <class T, Form F, int kRowGroups, int kTN>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const Params p, int k_slices) {
  __shared__ float partial[kWarps][kTN][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
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
    Stage<F, kRowGroups, kTN> current, next;
    load_stage(p, tile0, step_begin, lane, current);
    for (std::int64_t step = step_begin; step < step_end; ++step) {
      if (step + 1 < step_end) load_stage(p, tile0, step + 1, lane, next);
      compute_stage<T>(p, step, lane, current, acc);
      current = next;
    }
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
  gemv_kernel<T, F, kRowGroups, kTN><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, k_slices);
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
