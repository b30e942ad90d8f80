// Ours, kernel 1 on Hopper's wgmma (sm_90a): [Q|K|V] = X [Wq|Wk|Wv]^T + bias with the
// block decode (NF4 / MXFP4 / NVFP4) fused in, as qkv_fused.cu computes it.
//
// The transposed product: out^T [N x L] = W [N x d_model] X^T. The weights are wgmma's
// A operand, decoded into registers (RS wgmma); X is its B operand, K-major in shared
// memory as its rows already are, with the 128-byte swizzle the descriptor reads (a
// 64-wide K step of f16 is exactly one 128-byte row). A block is two warpgroups over
// 256 activation rows; each warpgroup owns 64 weight rows and issues one m64 n256 k16
// wgmma per k16 block. n256 rather than two n128 halves the decode per FLOP: the decode
// (a shared-memory table lookup per weight) and wgmma's B reads share the SM's shared
// memory bandwidth, and at 128 activation rows a block the two together would bind it.
//
// Pipeline: a kStages ring of 64-wide K steps (X: 256 rows x 128 bytes, 32 KB; codes:
// 128 weight rows x 32 bytes, 4 KB), copied by every thread with cp.async (rows past L
// or N zero-filled), prefetched kStages - 2 ahead: the stage refilled at step i held
// step i - 2, whose wgmmas every thread has waited for (wait_group 1 in step i - 1)
// before the barrier of step i. Block scales come from global memory (L2) a step ahead,
// one word per weight row and step, as in qkv_fused.cu.
//
// A fragments: wgmma's lane (g, c) of warp w needs weight rows 16 w + g and + 8 at k
// 16 j + {2c, 2c + 1} and {2c + 8, 2c + 9}: bytes 8 j + c and 8 j + 4 + c of the rows'
// codes in the step, one 8-byte shared load per row (the quad's four lanes read the same
// bytes: broadcasts), decoded by decode_pair (qkv_decode.cuh): the same f16 weights as
// the mma.sync kernel and block_decode(). The decode of k16 block j + 1 overlaps the
// wgmma of block j (wait_group 1 before each issue: two groups in flight).
//
// Epilogue: accumulators + bias rounded once to f16 (as qkv_fused.cu) into a shared
// tile [256 activation rows][128 columns] over the ring, then stored as 16-byte row
// pieces of Q|K|V.
#include <cstdint>

#include "cuda/qattention/kernels.h"
#include "cuda/qattention/qattention_cuda.h"
#include "cuda/qattention/qkv_decode.cuh"
#include "cuda/sm90_kernel.h"
#include "cuda/wgmma_rs.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::attention {
namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kBM = 256;       // activation rows a block (wgmma's N)
constexpr int kRows = 128;     // weight rows (Q|K|V columns) a block: 64 a warpgroup
constexpr int kBK = 64;        // K step: one 128-byte swizzle row of f16
constexpr int kStages = 5, kAhead = kStages - 2;
constexpr int kXBytes = kBM * kBK * 2;        // 32 KB, 1024-byte swizzle atoms
constexpr int kCodeBytes = kRows * kBK / 2;   // 4 KB
constexpr int kStage = kXBytes + kCodeBytes;  // a multiple of 1024: every stage's X tile stays atom-aligned
constexpr int kSmem = kStages * kStage + 1024;  // + slack to align the ring to 1024 bytes
constexpr int kOutStride = kRows + 8;           // halves a row of the output tile (conflict-free writes)
static_assert(kStage % 1024 == 0, "swizzle atoms are 1024-byte aligned");
static_assert(kBM * kOutStride * 2 <= kStages * kStage, "the output tile reuses the ring");
static_assert(kSmem + 1088 <= 227 * 1024, "shared memory per block (dynamic + the tables)");
static_assert(kThreads == 256, "one thread per entry of the scale table");

#if defined(LOWBIT_SM90A_DEVICE)

// Byte offset in a stage of the 8 code bytes of k16 block j of weight row `row`: the
// row's 32 bytes as two 16-byte halves, swapped on rows with bit 2 set so that the 8
// rows a warp reads at once (g = 0..7) hit distinct banks.
__device__ __forceinline__ int code_offset(int row, int j) {
  return kXBytes + row * 32 + (((j / 2) ^ ((row >> 2) & 1)) * 16) + (j % 2) * 8;
}

// The factor of k16 block s of a scale word (qkv_decode.cuh): from the word, or from
// the shared table of the 8-bit scales' values.
template <class F>
__device__ __forceinline__ float factor_of(const float* scales, std::uint32_t word, int s) {
  if constexpr (F::kScaleTable) {
    return scales[F::scale_byte(word, s)];
  } else {
    return F::factor(word, s);
  }
}

#endif  // LOWBIT_SM90A_DEVICE

template <class F>
__global__ void __launch_bounds__(kThreads, 1) qkv_wgmma_kernel(const ProjectionArgs p) {
#if defined(LOWBIT_SM90A_DEVICE)
  namespace sm90 = gemm::sm90;
  // The format's 16 values. Also the sm_90a body's marker: its static size tells the host
  // that this image has the body (cuda/sm90_kernel.h).
  __shared__ float table[16];
  __shared__ float scales[F::kScaleTable ? 256 : 1];  // 8-bit scale byte -> value
  extern __shared__ std::uint8_t dynamic_smem[];
  std::uint8_t* const ring = dynamic_smem + ((1024u - sm90::smem_address(dynamic_smem) % 1024u) % 1024u);
  const std::uint32_t ring_addr = sm90::smem_address(ring);
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;
  const int n0 = blockIdx.x * kRows, m0 = blockIdx.y * kBM;
  const int steps = p.k / kBK;
  if (tid == 0) {  // constant indices: a dynamic one would put the level array in local memory
#pragma unroll
    for (int i = 0; i < 16; ++i) table[i] = F::table(i);
  }
  if constexpr (F::kScaleTable) scales[tid] = F::scale_value(tid);

  // Loader: X chunks (row tid / 8 + 32 i, chunk tid % 8), one code chunk (row tid / 2, half tid % 2).
  const int xr = tid / 8, xc = tid % 8;
  std::uint32_t xok = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) xok |= (m0 + xr + 32 * i < p.m ? 1u : 0u) << i;
  const __half* xsrc = p.x + static_cast<std::int64_t>(m0 + xr < p.m ? m0 + xr : 0) * p.ldx + xc * 8;
  const std::int64_t x32 = 32 * p.ldx;
  const std::uint32_t xdst = xr * 128 + ((xc ^ (xr % 8)) * 16);  // + 32 i rows: the same swizzle (row % 8)
  const int cr = tid / 2, cc = tid % 2, ccol = n0 + cr;
  const bool cok = ccol < p.n;
  const std::uint8_t* csrc;
  {
    const int s = segment_of(p, cok ? ccol : 0);
    const FusedSegment& seg = segment_at(p, s);
    csrc = seg.codes + static_cast<std::int64_t>(cok ? ccol - segment_base(p, s) : 0) * seg.code_stride + cc * 16;
  }
  const std::uint32_t cdst = kXBytes + cr * 32 + ((cc ^ ((cr >> 2) & 1)) * 16);
  auto issue = [&](int step) {
    std::uint8_t* stage = ring + (step % kStages) * kStage;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool ok = (xok >> i) & 1u;
      cp_async16(stage + xdst + i * 32 * 128, ok ? xsrc + i * x32 + step * kBK : p.x, ok ? 16 : 0);
    }
    cp_async16(stage + cdst, csrc + (cok ? step * 32 : 0), cok ? 16 : 0);
  };

  // This thread's weight rows: 16 warp + g and + 8 of its warpgroup's 64, all in one
  // segment (the launcher checks that segment boundaries are multiples of 64).
  const int row0 = 64 * wg + 16 * warp + g, row1 = row0 + 8;
  const int wcol = n0 + 64 * wg;
  const bool wok = wcol < p.n;  // this warpgroup has weight rows (N is a multiple of 64)
  const int ws = segment_of(p, wok ? wcol : 0);
  const FusedSegment& seg = segment_at(p, ws);
  const int wbase = segment_base(p, ws);
  const auto* words = static_cast<const typename F::Word*>(seg.scales) +
                      static_cast<std::int64_t>(wok ? n0 + row0 - wbase : 0) * steps;
  const std::int64_t row8 = 8LL * steps;  // words from row0 to row1
  const float gs = F::kGlobal ? *seg.global : 1.0f;

  float acc[128];  // zeroed by the first wgmma (scale-d 0)

#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < steps) issue(s);
    cp_async_commit();
  }
  std::uint32_t word0 = wok ? __ldg(words) : 0u, word1 = wok ? __ldg(words + row8) : 0u;

  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kAhead - 1>();      // this step's copies have landed (this thread's)
    sm90::fence_proxy_async_shared();  // ... and are visible to wgmma's reads of X
    __syncthreads();                   // every thread's; the stage refilled below held step - 2
    if (step + kAhead < steps) issue(step + kAhead);
    cp_async_commit();
    const bool more = wok && step + 1 < steps;
    const std::uint32_t next0 = more ? __ldg(words + step + 1) : 0u;
    const std::uint32_t next1 = more ? __ldg(words + row8 + step + 1) : 0u;
    if (wok) {  // uniform over the warpgroup, as wgmma needs
      const std::uint8_t* stage = ring + (step % kStages) * kStage;
      const std::uint32_t x_addr = ring_addr + (step % kStages) * kStage;
#pragma unroll
      for (int j = 0; j < kBK / 16; ++j) {
        const uint2 c0 = *reinterpret_cast<const uint2*>(stage + code_offset(row0, j));
        const uint2 c1 = *reinterpret_cast<const uint2*>(stage + code_offset(row1, j));
        const float f0 = factor_of<F>(scales, word0, j), f1 = factor_of<F>(scales, word1, j);
        const std::uint32_t a[4] = {decode_pair<F>(table, (c0.x >> (8 * c)) & 0xffu, f0, gs),
                                    decode_pair<F>(table, (c1.x >> (8 * c)) & 0xffu, f1, gs),
                                    decode_pair<F>(table, (c0.y >> (8 * c)) & 0xffu, f0, gs),
                                    decode_pair<F>(table, (c1.y >> (8 * c)) & 0xffu, f1, gs)};
        // B: k16 block j of the X tile, 32 bytes into each swizzled 128-byte row.
        const std::uint64_t desc = sm90::sw128_descriptor(x_addr + j * 32);
        sm90::wgmma_wait<1>();  // the group two blocks back (whose A registers these reuse) is done
        sm90::wgmma_fence();
        sm90::wgmma_rs<__half, 256>(acc, a, desc, step == 0 && j == 0 ? 0 : 1);
        sm90::wgmma_commit();
      }
    }
    word0 = next0, word1 = next1;
  }
  sm90::wgmma_wait<0>();
  sm90::fence_accumulators(acc);
  cp_async_wait<0>();
  __syncthreads();  // the ring is free: it becomes the output tile

  // acc[4 j + e]: weight row row0 (e < 2) or row1, activation row 8 j + 2c + e % 2.
  auto* tile = reinterpret_cast<__half*>(ring);
  if (wok) {
    float b0 = 0.0f, b1 = 0.0f;
    if (seg.bias) {
      b0 = __half2float(seg.bias[n0 + row0 - wbase]);
      b1 = __half2float(seg.bias[n0 + row1 - wbase]);
    }
#pragma unroll
    for (int j = 0; j < kBM / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        tile[(8 * j + 2 * c + e % 2) * kOutStride + (e < 2 ? row0 : row1)] =
            __float2half_rn(acc[4 * j + e] + (e < 2 ? b0 : b1));
      }
    }
  }
  __syncthreads();
  // 16-byte pieces (8 columns) of the tile's rows; N and the row stride are multiples of 8.
  for (int item = tid; item < kBM * (kRows / 8); item += kThreads) {
    const int row = item / (kRows / 8), col = (item % (kRows / 8)) * 8;
    if (m0 + row >= p.m || n0 + col >= p.n) continue;
    *reinterpret_cast<uint4*>(p.out + static_cast<std::int64_t>(m0 + row) * p.ldo + n0 + col) =
        *reinterpret_cast<const uint4*>(tile + row * kOutStride + col);
  }
#else
  (void)p;
#endif  // LOWBIT_SM90A_DEVICE
}

// Whether this device runs the kernel (cuda/sm90_kernel.h), once per device.
template <class F>
bool kernel_ready() {
  static Sm90KernelReady ready;
  return ready(reinterpret_cast<const void*>(qkv_wgmma_kernel<F>), 16 * sizeof(float), kSmem);
}

template <class F>
void launch(const ProjectionArgs& p, cudaStream_t stream) {
  LOWBIT_CHECK(kernel_ready<F>(), "qkv_fused_wgmma: the wgmma kernel 1 needs a compute capability 9.0 GPU and an "
                                  "sm_90a image (CMAKE_CUDA_ARCHITECTURES 90a)");
  LOWBIT_CHECK(p.m >= 1 && p.k >= kBK && p.k % kBK == 0, "qkv_fused_wgmma: expected L >= 1 and d_model a multiple of ",
               kBK, ", got L ", p.m, ", d_model ", p.k);
  for (const FusedSegment& s : p.seg) {
    LOWBIT_CHECK(s.rows % 64 == 0, "qkv_fused_wgmma: a projection of ", s.rows,
                 " rows (each 64-row wgmma tile must lie in one of Wq, Wk, Wv)");
  }
  LOWBIT_CHECK(p.n == p.seg[0].rows + p.seg[1].rows + p.seg[2].rows, "qkv_fused_wgmma: ", p.n,
               " output columns, but the projections have ", p.seg[0].rows, " + ", p.seg[1].rows, " + ",
               p.seg[2].rows, " rows");
  LOWBIT_CHECK(p.ldo % 8 == 0 && reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0 && p.ldx % 8 == 0 &&
                   reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0,
               "qkv_fused_wgmma: X and Q|K|V need 16-byte aligned rows (row strides ", p.ldx, " and ", p.ldo,
               " elements)");
  const unsigned m_blocks = static_cast<unsigned>((p.m + kBM - 1) / kBM);
  LOWBIT_CHECK(m_blocks <= 65535, "qkv_fused_wgmma: L of ", p.m, " needs more than 65535 blocks of ", kBM, " rows");
  const dim3 grid(static_cast<unsigned>((p.n + kRows - 1) / kRows), m_blocks);
  qkv_wgmma_kernel<F><<<grid, kThreads, kSmem, stream>>>(p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool qkv_wgmma_available() {
  // One instantiation stands for all: they are built together, for the same targets.
  return kernel_ready<Nf4Fmt>();
}

void qkv_fused_wgmma(const ProjectionArgs& p, BlockFormat format, cudaStream_t stream) {
  switch (format) {
    case BlockFormat::nf4: return launch<Nf4Fmt>(p, stream);
    case BlockFormat::mxfp4: return launch<Mxfp4Fmt>(p, stream);
    case BlockFormat::nvfp4: return launch<Nvfp4Fmt>(p, stream);
  }
  LOWBIT_CHECK(false, "qkv_fused_wgmma: unknown block format ", static_cast<int>(format));
}

}  // namespace lowbit::cuda::attention
