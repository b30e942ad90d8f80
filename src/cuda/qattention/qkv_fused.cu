// Ours, kernel 1: [Q|K|V] = X [Wq|Wk|Wv]^T + bias with the block decode fused into a
// tensor-core matmul; decoded weights live only in registers.
//
// Tile 128 (L) x 128 (columns) x 64 (d_model), 256 threads = 8 warps as 2 x 4, warp
// tile 64 x 32 (4 x 4 mma.sync m16n8k16, f32 accumulators). A 4-stage cp.async
// pipeline brings X (16 KB, 16-byte chunks swizzled per row so ldmatrix is
// conflict-free) and the raw 4-bit codes (4 KB: 32 bytes per weight row) into shared
// memory. The B fragment of lane (r, c) for k16 step s is the codes' bytes 8s + c and
// 8s + 4 + c of weight row r: one 8-byte shared load per row and step, one byte per
// fragment register, two nibbles -> two f16 through a 16-entry float table (NF4
// levels or E2M1 values, conflict-free: 16 distinct banks) times the block scale (and
// the NVFP4 tensor scale), in the order src/formats decodes, then one rounding to f16:
// the very weights block_decode() to f16 writes. Block scales come straight from
// global memory (L2), one 4-byte (2 for MXFP4) word per row and K step, loaded a step
// ahead.
#include <cstdint>

#include "cuda/qattention/kernels.h"
#include "cuda/qattention/qkv_decode.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::attention {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64, kThreads = 256, kStages = 4;
constexpr int kXStage = kBM * kBK * 2;      // 16 KB
constexpr int kCodeStage = kBN * kBK / 2;   // 4 KB
constexpr int kStage = kXStage + kCodeStage;
constexpr int kSmem = kStages * kStage + 16 * 4;

template <class F>
__global__ void __launch_bounds__(kThreads, 1) qkv_fused_kernel(const ProjectionArgs p) {
  extern __shared__ __align__(128) std::uint8_t smem[];
  float* table = reinterpret_cast<float*>(smem + kStages * kStage);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int r = lane / 4, c = lane % 4, wm = warp / 4, wn = warp % 4;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int steps = p.k / kBK;
  if (tid == 0) {  // constant indices: a dynamic one would put the level array in local memory
#pragma unroll
    for (int i = 0; i < 16; ++i) table[i] = F::table(i);
  }

  // Loader: X chunks (row tid / 8 + 32 i, chunk tid % 8), one code chunk (row tid / 2, half tid % 2).
  const int xr = tid / 8, xc = tid % 8;
  std::uint32_t xok = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) xok |= (m0 + xr + 32 * i < p.m ? 1u : 0u) << i;
  const __half* xsrc = p.x + static_cast<std::int64_t>(m0 + xr) * p.ldx + xc * 8;  // chunk i: + 32 i rows
  const std::int64_t x32 = 32 * p.ldx;
  const int cr = tid / 2, cc = tid % 2, ccol = n0 + cr;
  const bool cok = ccol < p.n;
  const std::uint8_t* csrc;
  {
    const int s = segment_of(p, cok ? ccol : 0);
    const int base = segment_base(p, s);
    const FusedSegment& seg = segment_at(p, s);
    csrc = seg.codes + static_cast<std::int64_t>(cok ? ccol - base : 0) * seg.code_stride + cc * 16;
  }
  const std::uint32_t cdst = kXStage + cr * 32 + ((cc ^ ((cr >> 2) & 1)) * 16);
  auto issue = [&](int step) {
    std::uint8_t* stage = smem + (step % kStages) * kStage;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = xr + 32 * i;
      const bool ok = (xok >> i) & 1u;
      cp_async16(stage + row * 128 + swizzle(row, xc) * 16, ok ? xsrc + i * x32 + step * kBK : p.x, ok ? 16 : 0);
    }
    cp_async16(stage + cdst, csrc + (cok ? step * 32 : 0), cok ? 16 : 0);
  };

  // This lane's weight rows (all in one segment: boundaries are multiples of 64).
  const int wcol = n0 + wn * 32;
  const bool wok = wcol < p.n;
  const int ws = segment_of(p, wok ? wcol : 0);
  const FusedSegment& seg = segment_at(p, ws);
  const int wbase = segment_base(p, ws);
  const auto* words = static_cast<const typename F::Word*>(seg.scales) +
                      static_cast<std::int64_t>(wok ? wcol - wbase + r : 0) * steps;
  const std::int64_t row8 = 8LL * steps;  // words between rows j and j + 1 of the lane
  const float g = F::kGlobal ? *seg.global : 1.0f;

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) issue(s);
    cp_async_commit();
  }
  std::uint32_t word[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) word[j] = wok ? __ldg(words + j * row8) : 0u;

  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (step + kStages - 1 < steps) issue(step + kStages - 1);
    cp_async_commit();
    std::uint32_t next[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) next[j] = wok && step + 1 < steps ? __ldg(words + j * row8 + step + 1) : 0u;

    const std::uint8_t* stage = smem + (step % kStages) * kStage;
    const std::uint32_t xs = smem_address(stage);
#pragma unroll
    for (int s = 0; s < kBK / 16; ++s) {
      std::uint32_t b[4][2];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int row = wn * 32 + j * 8 + r;
        const uint2 w2 = *reinterpret_cast<const uint2*>(stage + kXStage + row * 32 +
                                                          (((s / 2) ^ ((row >> 2) & 1)) * 16) + (s % 2) * 8);
        const float f = F::factor(word[j], s);
        b[j][0] = decode_pair<F>(table, (w2.x >> (8 * c)) & 0xffu, f, g);
        b[j][1] = decode_pair<F>(table, (w2.y >> (8 * c)) & 0xffu, f, g);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = wm * 64 + i * 16 + lane % 16;
        std::uint32_t a[4];
        ldmatrix_x4(a, xs + row * 128 + swizzle(row, 2 * s + lane / 16) * 16);
#pragma unroll
        for (int j = 0; j < 4; ++j) mma(acc[i][j], a, b[j][0], b[j][1]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) word[j] = next[j];
  }
  cp_async_wait<0>();

  if (!wok) return;
  const __half* bias = seg.bias;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int col = wcol + j * 8 + 2 * c;
    float b0 = 0.0f, b1 = 0.0f;
    if (bias) {
      b0 = __half2float(bias[col - wbase]);
      b1 = __half2float(bias[col - wbase + 1]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm * 64 + i * 16 + r + 8 * h;
        if (row < p.m) {
          *reinterpret_cast<std::uint32_t*>(p.out + static_cast<std::int64_t>(row) * p.ldo + col) =
              pack_half2(acc[i][j][2 * h] + b0, acc[i][j][2 * h + 1] + b1);
        }
      }
    }
  }
}

template <class F>
void launch(const ProjectionArgs& p, cudaStream_t stream) {
  static bool configured = false;  // the attribute is per kernel, set once per process
  if (!configured) {
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(qkv_fused_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    configured = true;
  }
  const dim3 grid((p.n + kBN - 1) / kBN, (p.m + kBM - 1) / kBM);
  qkv_fused_kernel<F><<<grid, kThreads, kSmem, stream>>>(p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void qkv_fused(const ProjectionArgs& p, BlockFormat format, cudaStream_t stream) {
  switch (format) {
    case BlockFormat::nf4: return launch<Nf4Fmt>(p, stream);
    case BlockFormat::mxfp4: return launch<Mxfp4Fmt>(p, stream);
    case BlockFormat::nvfp4: return launch<Nvfp4Fmt>(p, stream);
  }
}

}  // namespace lowbit::cuda::attention
