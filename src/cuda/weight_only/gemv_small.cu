// Weight-only GEMV for small matrices at small M (the layers of a small model at decode:
// N and K up to a few thousand, under 1 MB of codes), where the streaming kernel
// (gemv.cu) is latency-bound: its ring pipeline is built for matrices that
// take many waves, and a 576 x 576 layer gives each warp less than one step of it.
//
// Here one warp owns one tile pair (16 output rows, the A operand of m16n8k16, as in the
// streaming kernel) and a range of at most kMaxSteps 128-wide steps of K; a block is the
// k_splits warps of one tile pair. Each warp loads all its codes, scales and mins into
// registers at once, written before griddepcontrol.wait (the weights are constant, the
// PDL contract of weight_only_gemm), so that after the wait only the activation loads,
// the mma chain, one shared-memory sum over the K splits (fixed order) and the store are
// left on the critical path. The wait is conditional on a kernel argument (always 1 from
// the launch): an unconditional wait is hoisted by ptxas above every weight load (nothing
// after it depends on it as far as ptxas knows), which puts the weights' DRAM latency after
// the predecessor's end (bench/notes/weight_only.md, session 31). Same packed
// layout, same dequantization (exact per the format's definition) and the same mma as the
// streaming kernel; only the order of the FP32 sum over K differs.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/pdl.cuh"
#include "cuda/weight_only/common.cuh"
#include "cuda/weight_only/launch.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::weight_only {
namespace {

template <Form F>
constexpr int kLoads = F == Form::int8 ? 2 : 1;  // 16-byte code loads per lane per tile per step
template <Form F>
constexpr int kMaxSteps = F == Form::int8 ? 2 : 4;  // steps a warp holds: 32 registers of codes
constexpr int kMaxSplits = 8;                       // warps per block
// Above: the streaming kernel (M = 1, H100: 2048 x 2048 and 3072 x 2048, 2-3 MB of
// codes, took 0.0058 / 0.0063 ms here against 0.0040 / 0.0037 streaming).
constexpr std::int64_t kMaxCodeBytes = 1 << 20;

// The lane's activations of one step: rows r and r + 8, k = 128 step + 32 c .. + 31,
// zero past K and past M. `__ldca`, not `__ldg`: x is the predecessor's output, and ptxas
// may move a read-only load above the PDL wait (docs/DESIGN.md).
template <int kRowGroups>
__device__ __forceinline__ void load_x_step(const Params& p, int r, int c, std::int64_t step,
                                            std::uint32_t (&x)[kRowGroups][16]) {
  const std::int64_t k0 = step * formats::kPackStepK + 32 * c;
  const bool whole = p.x_vec16 && (step + 1) * formats::kPackStepK <= p.k;
#pragma unroll
  for (int rg = 0; rg < kRowGroups; ++rg) {
    const std::int64_t row = r + 8 * rg;
    const std::uint16_t* xs = static_cast<const std::uint16_t*>(p.x) + (row < p.m ? row * p.ldx : 0) + k0;
    if (row >= p.m) {
#pragma unroll
      for (int i = 0; i < 16; ++i) x[rg][i] = 0;
    } else if (whole) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const uint4 q = __ldca(reinterpret_cast<const uint4*>(xs) + v);
        x[rg][4 * v] = q.x, x[rg][4 * v + 1] = q.y, x[rg][4 * v + 2] = q.z, x[rg][4 * v + 3] = q.w;
      }
    } else {
      for (int i = 0; i < 16; ++i) {
        const std::uint32_t lo = k0 + 2 * i < p.k ? __ldca(xs + 2 * i) : 0u;
        const std::uint32_t hi = k0 + 2 * i + 1 < p.k ? __ldca(xs + 2 * i + 1) : 0u;
        x[rg][i] = lo | (hi << 16);
      }
    }
  }
}

template <class T, Form F, int kRowGroups>
__global__ void __launch_bounds__(32 * kMaxSplits) small_gemv_kernel(const Params p, int steps_per_split, int pdl) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  constexpr int kS = kMaxSteps<F>, kL = kLoads<F>;
  constexpr std::int64_t kUnit = F == Form::int8 ? 1024 : 512;
  const int split = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int r = lane / 4, c = lane % 4;
  const std::int64_t tile0 = 2 * static_cast<std::int64_t>(blockIdx.x);
  const std::int64_t s0 = static_cast<std::int64_t>(split) * steps_per_split;
  const int group_in_step = c >> p.group_shift;

  // Weights first: tiles past N and steps past K are zeros (they are never multiplied).
  uint4 codes[kS][2][kL];
  std::uint16_t scale[kS][2], min[kS][2];
#pragma unroll
  for (int i = 0; i < kS; ++i) {
    const std::int64_t step = s0 + i;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const std::int64_t tile = tile0 + u;
      const bool real = i < steps_per_split && step < p.k_steps && tile < p.n_tiles;
      const std::uint8_t* src = p.codes + (real ? (tile * p.k_steps + step) * kUnit : 0) + lane * 16;
#pragma unroll
      for (int h = 0; h < kL; ++h) {
        codes[i][u][h] = real ? __ldg(reinterpret_cast<const uint4*>(src + h * 512)) : make_uint4(0, 0, 0, 0);
      }
      const std::int64_t at = real ? (tile * p.groups + step * p.groups_per_step + group_in_step) * 8 + r : 0;
      scale[i][u] = real ? __ldg(p.scales + at) : std::uint16_t{0};
      min[i][u] = real && F == Form::q4_zero_point ? __ldg(p.mins + at) : std::uint16_t{0};
    }
  }
  if (pdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");  // activations and output from here on

  float acc[kRowGroups][4] = {};
#pragma unroll
  for (int i = 0; i < kS; ++i) {
    const std::int64_t step = s0 + i;
    if (i >= steps_per_split || step >= p.k_steps) break;  // warp-uniform
    std::uint32_t x[kRowGroups][16];
    load_x_step<kRowGroups>(p, r, c, step, x);
    Scale2<T> sc[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) sc[u].s = Act<T>::splat(scale[i][u]), sc[u].m = Act<T>::splat(min[i][u]);
    // As the streaming kernel's compute_step: words w of the two tiles are the A
    // fragment rows g and g + 8; x runs 4w .. 4w + 3 the B fragments.
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      std::uint32_t b[2][4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if constexpr (F == Form::int8) {
          const uint4& q = codes[i][u][w / 2];
          std::uint32_t lo[2], hi[2];
          dequant_int8_word<T>((w % 2) ? q.z : q.x, sc[u], lo);
          dequant_int8_word<T>((w % 2) ? q.w : q.y, sc[u], hi);
          b[u][0] = lo[0], b[u][1] = lo[1], b[u][2] = hi[0], b[u][3] = hi[1];
        } else {
          const uint4& q = codes[i][u][0];
          dequant_int4_word<T, F>(w == 0 ? q.x : w == 1 ? q.y : w == 2 ? q.z : q.w, sc[u], b[u]);
        }
      }
#pragma unroll
      for (int rg = 0; rg < kRowGroups; ++rg) {
        mma_16816<T>(acc[rg], b[0][0], b[1][0], b[0][1], b[1][1], x[rg][4 * w], x[rg][4 * w + 1]);
        mma_16816<T>(acc[rg], b[0][2], b[1][2], b[0][3], b[1][3], x[rg][4 * w + 2], x[rg][4 * w + 3]);
      }
    }
  }

  // The K splits' sums, added by split 0 in split order (deterministic).
  if (blockDim.x > 32) {
    __shared__ float partial[kMaxSplits][kRowGroups * 4][32];
#pragma unroll
    for (int rg = 0; rg < kRowGroups; ++rg) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[split][rg * 4 + i][lane] = acc[rg][i];
    }
    __syncthreads();
    if (split != 0) return;
    const int splits = static_cast<int>(blockDim.x) / 32;
#pragma unroll
    for (int rg = 0; rg < kRowGroups; ++rg) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float sum = 0.0f;
        for (int s = 0; s < splits; ++s) sum += partial[s][rg * 4 + i][lane];
        acc[rg][i] = sum;
      }
    }
  }
  // D fragment: element i of row group rg is n = 8 (tile0 + i / 2) + r, M row 8 rg + 2c + i % 2.
#pragma unroll
  for (int rg = 0; rg < kRowGroups; ++rg) {
#pragma unroll
    for (int i = 0; i < 4; ++i) store_out<T>(p, 8 * rg + 2 * c + i % 2, (tile0 + i / 2) * 8 + r, acc[rg][i]);
  }
}

int splits_for(const Params& p, Form form) {
  const std::int64_t most = form == Form::int8 ? kMaxSteps<Form::int8> : kMaxSteps<Form::q4_zero_point>;
  return static_cast<int>((p.k_steps + most - 1) / most);
}

template <class T, Form F, int kRowGroups>
void launch(const Params& p, cudaStream_t stream) {
  const int k_splits = splits_for(p, F);
  const int steps = static_cast<int>((p.k_steps + k_splits - 1) / k_splits);
  launch_pdl(small_gemv_kernel<T, F, kRowGroups>, dim3(static_cast<unsigned>((p.n_tiles + 1) / 2)),
             dim3(static_cast<unsigned>(32 * k_splits)), 0, stream, p, steps, 1);
}

}  // namespace

template <class T, Form F>
void run_small_gemv(const Params& p, const Variant&, cudaStream_t stream) {
  if (p.m > 8) {
    launch<T, F, 2>(p, stream);
  } else {
    launch<T, F, 1>(p, stream);
  }
}
LOWBIT_WEIGHT_ONLY_PAIRS(run_small_gemv);

bool small_gemv_takes(const Params& p, Form form) {
  return !is_block_form(form) && p.m <= kGemvMaxRows && splits_for(p, form) <= kMaxSplits;
}

bool small_gemv_pays(const Params& p, Form form) {
  return p.n_tiles * p.k_steps * (form == Form::int8 ? 1024 : 512) <= kMaxCodeBytes;
}

}  // namespace lowbit::cuda::weight_only
