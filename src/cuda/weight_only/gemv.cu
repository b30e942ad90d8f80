// Weight-only GEMM for small M (1..16, decode): a weight-streaming kernel on tensor
// cores.
//
// The time is the weight bytes (28672 x 8192 INT4 at g32: 117 MB of codes + 29 MB of
// scales and mins), so everything serves the stream: each warp owns kTN tiles of 8
// output rows and a contiguous range of K (one k-slice), and per 128-wide step copies
// one 16-byte vector per lane per tile (INT8: two), i.e. 512 contiguous bytes per
// tile, plus the tiles' scales and mins, with cp.async into its own ring of kStages
// shared-memory slots: kStages - 1 steps are in flight while it dequantizes and
// multiplies the oldest, without spending registers on them.
//
// The product is mma.sync m16n8k16 with A = the dequantized weights of two packed
// tiles (the B fragments of tiles j and j + 1 are exactly the rows g and g + 8 of an
// A fragment) and B = the activations (8 rows per mma; a second mma for rows 8..15
// only when M > 8): 4 mma per 512-byte unit for M <= 8. Thanks to the k permutation
// of the packed layout, a lane's activations for a step are 32 consecutive elements
// of its row (four 16-byte loads, L1-cached: every warp of the block reads them), and
// its weights need one scale (and min) per tile per step. The INT4 path is bounded by
// instructions per byte, so the loop keeps the per-step overhead to pointer bumps.
//
// Split-K inside the block: the 8 warps are k_slices x (8 / k_slices); the warps of
// one column of tiles each sum a slice of K, then add their FP32 partials through
// shared memory (the rings, reused) in a fixed order (deterministic, no atomics).
// k_slices is chosen on the host: INT4 the count whose grid best fills the resident
// block slots (fewest waves), INT8 the most (see launch()).
//
// Chunks: a ring slot holds kChunk consecutive steps of each of the warp's tiles, so
// one copy burst per tile is kChunk x 512 contiguous bytes (and its scales and mins
// kChunk x 64 B at group 32) instead of 512 B pieces at 32 KB strides.
//
// GGML block forms (Q5_0 .. Q6_K, Q3_K, Q2_K; formats/weight_pack.h): the same stream of
// units, each 352-848 bytes with its scales inside (no scale copies); a lane reads its part
// of the unit from the ring (BlockLane) and decodes words with dequant_block_word
// (common.cuh).
// At M <= 2 the default is the sub-block decode instead (common.cuh, block_code_pair;
// compute_step_sub): the codes go into the mma unscaled, the activations as B columns of
// (M row, sub-block), the sub-block factors on the FP32 partials: ggml's exact weights
// (no f16 rounding), about half the loop's instructions for the K forms (SASS counts in
// bench/notes/weight_only.md). Variant::block_decode 0 keeps the per-weight decode.
#include <cooperative_groups.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "core/device.h"
#include "core/gemv_split.h"
#include "core/pdl.cuh"
#include "cuda/named_barrier.cuh"
#include "cuda/weight_only/common.cuh"
#include "cuda/weight_only/launch.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::weight_only {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// A warp's slice of the shared-memory ring: kStages slots of kChunk steps x kTN units
// of codes with their scales and mins. Each warp streams its own units, so a warp only
// ever waits for its own copies (cp.async groups) and syncs with __syncwarp.
constexpr int kMaxChunks = 4;  // 16-byte scale chunks per tile per step (group 32)
template <Form F, int kTN, int kStages, int kChunk>
struct Ring {
  static constexpr int kVecs = form_unit_bytes<F>() / 16;  // 16-byte vectors per unit
  static constexpr int kLoads = (kVecs + 31) / 32;        // 16-byte code loads per lane per unit
  // The block forms' scales are in their units: their scale slots are one unused chunk,
  // not 4 (the 4 cost Q6_K's {2 tiles, 2 slots of 4 steps} ring 2 KB a warp, 125 KB a
  // block: one block an SM instead of two).
  static constexpr int kScaleChunks = is_block_form(F) ? 1 : kMaxChunks;
  uint4 codes[kStages][kChunk][kTN][kVecs];  // vector h * 32 + lane: the lane's load h
  std::uint16_t scales[kStages][kChunk][kTN][kScaleChunks][8];
  std::uint16_t mins[kStages][kChunk][kTN][kScaleChunks][8];
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

// What a warp streams, as pointers bumped once per chunk (no 64-bit index math in the
// loop). Tiles past N and steps past the slice read tile 0 with a zero-filling copy.
template <Form F, int kTN, int kStages, int kChunk>
struct Stream {
  using RingT = Ring<F, kTN, kStages, kChunk>;
  static constexpr int kUnit = form_unit_bytes<F>();
  // Scale / min copies of one step: 2 lists x kTN tiles x 4 chunks, spread over lanes.
  static constexpr int kScaleCopies = (2 * kTN * kMaxChunks + 31) / 32;
  const std::uint8_t* codes0;      // this lane's bytes of (tile0, first step)
  const std::uint8_t* base;        // a valid address for the zero-filling copies
  std::int64_t tile_stride;        // bytes from one tile's row of units to the next
  int real_tiles;                  // tiles < N among the kTN
  int scale_step;                  // elements per step
  const std::uint16_t* scale_src[kScaleCopies];  // this lane's 16-byte scale / min chunks of the first step, or null
  std::uint16_t* scale_dst[kScaleCopies];        // in slot 0, chunk 0

  __device__ Stream(const Params& p, std::int64_t tile0, std::int64_t step, int lane, RingT& ring) {
    real_tiles = p.n_tiles - tile0 < kTN ? static_cast<int>(p.n_tiles - tile0) : kTN;
    base = p.codes + lane * 16;
    codes0 = p.codes + (tile0 * p.k_steps + step) * kUnit + lane * 16;
    tile_stride = p.k_steps * kUnit;
    const int chunks = p.groups_per_step > 0 ? p.groups_per_step : 1;
    scale_step = p.groups_per_step * 8;
#pragma unroll
    for (int t = 0; t < kScaleCopies; ++t) {
      const int idx = lane + 32 * t;
      const int list = idx / (kTN * kMaxChunks), j = (idx / kMaxChunks) % kTN, q = idx % kMaxChunks;
      scale_src[t] = nullptr;
      scale_dst[t] = nullptr;
      if constexpr (!is_block_form(F)) {
        scale_dst[t] = list == 0 ? ring.scales[0][0][j][q] : ring.mins[0][0][j][q];
        if (list < 2 && j < real_tiles && q < chunks && (list == 0 || F == Form::q4_zero_point)) {
          scale_src[t] = (list == 0 ? p.scales : p.mins) + ((tile0 + j) * p.groups + step * p.groups_per_step + q) * 8;
        }
      }
    }
  }

  // Copies chunk `chunk` (kChunk steps from the stream's first, of which `valid` are
  // real; the rest zero-filled) into ring slot `slot`.
  __device__ __forceinline__ void issue(int lane, int slot, int chunk, int valid, RingT& ring) {
    const std::uint8_t* codes = codes0 + static_cast<std::uint32_t>(chunk) * std::uint32_t{kChunk * kUnit};
#pragma unroll
    for (int c = 0; c < kChunk; ++c) {
#pragma unroll
      for (int j = 0; j < kTN; ++j) {
        const bool real = j < real_tiles && c < valid;
        const std::uint8_t* src = real ? codes + j * tile_stride + c * kUnit : base;
#pragma unroll
        for (int h = 0; h < RingT::kLoads; ++h) {
          if (RingT::kVecs % 32 == 0 || h * 32 + lane < RingT::kVecs) {  // block forms: a partial last load
            cp_async16(&ring.codes[slot][c][j][h * 32 + lane], src + (real ? h * 512 : 0), real ? 16 : 0);
          }
        }
      }
    }
    constexpr int kSlotScales = static_cast<int>(sizeof(RingT::scales[0]) / sizeof(std::uint16_t));
    constexpr int kChunkScales = static_cast<int>(sizeof(RingT::scales[0][0]) / sizeof(std::uint16_t));
#pragma unroll
    for (int t = 0; t < kScaleCopies; ++t) {
      if (scale_src[t] != nullptr) {
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
          if (c < valid) {
            cp_async16(scale_dst[t] + slot * kSlotScales + c * kChunkScales,
                       scale_src[t] + static_cast<std::uint32_t>((chunk * kChunk + c) * scale_step), 16);
          }
        }
      }
    }
  }
  // Single-step slots filled in step order (the xs kernel): codes0 and the scale
  // sources serve as cursors, bumped once per step, so a step costs the copies and
  // two pointer bumps.
  __device__ __forceinline__ void issue_next(int lane, int slot, RingT& ring) {
    static_assert(kChunk == 1 && RingT::kLoads == 1, "single-step INT4 slots");
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const bool real = j < real_tiles;
      cp_async16(&ring.codes[slot][0][j][lane], real ? codes0 + j * tile_stride : base, real ? 16 : 0);
    }
    constexpr int kSlotScales = static_cast<int>(sizeof(RingT::scales[0]) / sizeof(std::uint16_t));
#pragma unroll
    for (int t = 0; t < kScaleCopies; ++t) {
      if (scale_src[t] != nullptr) {
        cp_async16(scale_dst[t] + slot * kSlotScales, scale_src[t], 16);
        scale_src[t] += scale_step;
      }
    }
    codes0 += kUnit;
  }
};

// Dequantizes and multiplies one step (chunk entry c of a slot): per tile pair and
// packed word, 8 weights x 2 tiles of A fragments against the activation rows in B.
template <class T, Form F, int kRowGroups, int kTN, int kStages, int kChunk>
__device__ __forceinline__ void compute_step(const Params& p, const std::uint32_t (&x)[kRowGroups][16], int lane,
                                             int slot, int c, const Ring<F, kTN, kStages, kChunk>& ring,
                                             float (&acc)[kTN / 2][kRowGroups][4]) {
  using RingT = Ring<F, kTN, kStages, kChunk>;
  if constexpr (is_block_form(F)) {  // the unit holds the lane's scales: see BlockLane
#pragma unroll
    for (int jp = 0; jp < kTN / 2; ++jp) {
      BlockLane<F> bl[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        bl[u] = load_block_lane<F>(reinterpret_cast<const std::uint8_t*>(ring.codes[slot][c][2 * jp + u]), lane);
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        std::uint32_t b[2][4];
        dequant_block_word<F>(bl[0], w, b[0]);
        dequant_block_word<F>(bl[1], w, b[1]);
#pragma unroll
        for (int rg = 0; rg < kRowGroups; ++rg) {
          mma_16816<T>(acc[jp][rg], b[0][0], b[1][0], b[0][1], b[1][1], x[rg][4 * w], x[rg][4 * w + 1]);
          mma_16816<T>(acc[jp][rg], b[0][2], b[1][2], b[0][3], b[1][3], x[rg][4 * w + 2], x[rg][4 * w + 3]);
        }
      }
    }
    return;
  }
  const int r = lane / 4, cl = lane % 4;
  const int g = cl >> p.group_shift;
#pragma unroll
  for (int jp = 0; jp < kTN / 2; ++jp) {
    Scale2<T> sc[2];
    uint4 v[2][RingT::kLoads];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int j = 2 * jp + u;
      sc[u].s = Act<T>::splat(ring.scales[slot][c][j][g][r]);
      sc[u].m = Act<T>::splat(F == Form::q4_zero_point ? ring.mins[slot][c][j][g][r] : std::uint16_t{0});
#pragma unroll
      for (int h = 0; h < RingT::kLoads; ++h) v[u][h] = ring.codes[slot][c][j][h * 32 + lane];
    }
    // Chunk w (k 32c + 8w .. + 7 of the lane) is products t = 2w, 2w + 1.
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      std::uint32_t b[2][4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if constexpr (F == Form::int8) {
          const uint4& q = v[u][w / 2];
          const std::uint32_t w0 = (w % 2) ? q.z : q.x, w1 = (w % 2) ? q.w : q.y;
          std::uint32_t lo[2], hi[2];
          dequant_int8_word<T>(w0, sc[u], lo);
          dequant_int8_word<T>(w1, sc[u], hi);
          b[u][0] = lo[0], b[u][1] = lo[1], b[u][2] = hi[0], b[u][3] = hi[1];
        } else {
          const uint4& q = v[u][0];
          dequant_int4_word<T, F>(w == 0 ? q.x : w == 1 ? q.y : w == 2 ? q.z : q.w, sc[u], b[u]);
        }
      }
#pragma unroll
      for (int rg = 0; rg < kRowGroups; ++rg) {
        mma_16816<T>(acc[jp][rg], b[0][0], b[1][0], b[0][1], b[1][1], x[rg][4 * w], x[rg][4 * w + 1]);
        mma_16816<T>(acc[jp][rg], b[0][2], b[1][2], b[0][3], b[1][3], x[rg][4 * w + 2], x[rg][4 * w + 3]);
      }
    }
  }
}

// The sub-block decode of one step (common.cuh, block_code_pair): x is the lane's masked
// B column (row r / 4 of x where c == r % 4, else 0); acc[jp][0][i] is the FP32 sum of
// tile 2 jp + i / 2, row r, B column 2c + i % 2 (one sub-block column of one M row),
// turned into gemv_kernel's D layout after the loop (sub_to_rows).
template <Form F, int kTN, int kStages, int kChunk>
__device__ __forceinline__ void compute_step_sub(const std::uint32_t (&x)[16], int lane, int slot, int c,
                                                 const Ring<F, kTN, kStages, kChunk>& ring,
                                                 float (&acc)[kTN / 2][1][4]) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  constexpr bool kHalves = formats::block_halves(kB);  // two sub-blocks of 16 a lane: words 0-1, 2-3
  // The sub-blocks' sums of x (columns 2c, 2c + 1 in xsum[0], [1]), shared by the tiles;
  // the halves forms' of words 0-1 there, of words 2-3 in xsum_hi.
  float xsum[4] = {0.0f, 0.0f, 0.0f, 0.0f}, xsum_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (block_has_min(F)) {
    constexpr std::uint32_t kOnes = 0x3c003c00u;  // 1.0 in both halves
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      if (kHalves && w >= 2) {
        mma_16816<__half>(xsum_hi, kOnes, kOnes, kOnes, kOnes, x[4 * w], x[4 * w + 1]);
        mma_16816<__half>(xsum_hi, kOnes, kOnes, kOnes, kOnes, x[4 * w + 2], x[4 * w + 3]);
      } else {
        mma_16816<__half>(xsum, kOnes, kOnes, kOnes, kOnes, x[4 * w], x[4 * w + 1]);
        mma_16816<__half>(xsum, kOnes, kOnes, kOnes, kOnes, x[4 * w + 2], x[4 * w + 3]);
      }
    }
  }
#pragma unroll
  for (int jp = 0; jp < kTN / 2; ++jp) {
    const std::uint8_t* unit[2];
    LaneCodes codes[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      unit[u] = reinterpret_cast<const std::uint8_t*>(ring.codes[slot][c][2 * jp + u]);
      codes[u] = load_lane_codes<kB>(unit[u], lane);
    }
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // halves: k 16..31 in d_hi
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      std::uint32_t b[2][4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
#pragma unroll
        for (int i = 0; i < 4; ++i) b[u][i] = block_code_pair<F>(codes[u], w, i);
      }
      if (kHalves && w >= 2) {
        mma_16816<__half>(d_hi, b[0][0], b[1][0], b[0][1], b[1][1], x[4 * w], x[4 * w + 1]);
        mma_16816<__half>(d_hi, b[0][2], b[1][2], b[0][3], b[1][3], x[4 * w + 2], x[4 * w + 3]);
      } else {
        mma_16816<__half>(d, b[0][0], b[1][0], b[0][1], b[1][1], x[4 * w], x[4 * w + 1]);
        mma_16816<__half>(d, b[0][2], b[1][2], b[0][3], b[1][3], x[4 * w + 2], x[4 * w + 3]);
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const SubFactors f = load_sub_factors<F>(unit[u], lane);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float a = __fmaf_rn(f.s[e], d[2 * u + e], acc[jp][0][2 * u + e]);
        if constexpr (kHalves) a = __fmaf_rn(f.s_hi[e], d_hi[2 * u + e], a);
        if constexpr (block_has_min(F)) a = __fmaf_rn(-f.m[e], xsum[e], a);
        if constexpr (block_has_min(F) && kHalves) a = __fmaf_rn(-f.m_hi[e], xsum_hi[e], a);
        acc[jp][0][2 * u + e] = a;
      }
    }
  }
}

// The sub-block decode's sums (see compute_step_sub) -> gemv_kernel's D layout: the four
// sub-block columns of M row a are lanes c = 2a, 2a + 1, elements e = 0, 1; lane c = 0
// takes M rows 0 and 1 (fixed order: deterministic), the other lanes 0 (M rows >= 2).
template <int kTN>
__device__ __forceinline__ void sub_to_rows(float (&acc)[kTN / 2][1][4], int c) {
#pragma unroll
  for (int jp = 0; jp < kTN / 2; ++jp) {
    float t[2], t1[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      t[u] = acc[jp][0][2 * u] + acc[jp][0][2 * u + 1];
      t[u] += __shfl_xor_sync(0xffffffffu, t[u], 1);
      t1[u] = __shfl_down_sync(0xffffffffu, t[u], 2);  // M row 1, from lane c = 2
    }
    const bool lead = c == 0;
    acc[jp][0][0] = lead ? t[0] : 0.0f;
    acc[jp][0][1] = lead ? t1[0] : 0.0f;
    acc[jp][0][2] = lead ? t[1] : 0.0f;
    acc[jp][0][3] = lead ? t1[1] : 0.0f;
  }
}

// The lane's activation runs of one step: rows r and r + 8, k = 128 (step_begin + step)
// + 32c; steps below fast_steps take the 16-byte loads.
template <int kRowGroups>
__device__ __forceinline__ void load_x(const Params& p, const std::uint16_t* const (&xs)[kRowGroups],
                                       const bool (&row_ok)[kRowGroups], int step, int fast_steps,
                                       std::int64_t step_begin, int c, std::uint32_t (&x)[kRowGroups][16]) {
#pragma unroll
  for (int rg = 0; rg < kRowGroups; ++rg) {
    if (!row_ok[rg]) {
#pragma unroll
      for (int i = 0; i < 16; ++i) x[rg][i] = 0;
    } else if (step < fast_steps) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const uint4 chunk = __ldg(reinterpret_cast<const uint4*>(xs[rg]) + v);
        x[rg][4 * v + 0] = chunk.x, x[rg][4 * v + 1] = chunk.y, x[rg][4 * v + 2] = chunk.z, x[rg][4 * v + 3] = chunk.w;
      }
    } else {
      std::uint32_t ragged[16];  // in local memory: keeps x itself in registers
      load_x_run_ragged(xs[rg], p.k - ((step_begin + step) * formats::kPackStepK + 32 * c), ragged);
#pragma unroll
      for (int i = 0; i < 16; ++i) x[rg][i] = ragged[i];
    }
  }
}

template <Form F, int kTN, int kStages, int kChunk>
constexpr int ring_bytes() {
  return kWarps * static_cast<int>(sizeof(Ring<F, kTN, kStages, kChunk>));
}
// Resident blocks per SM the launch bounds ask for: as many as the rings allow, at
// most 3 (2 with the second row group, 1 with four, whose accumulators and activations
// need the registers).
template <Form F, int kRowGroups, int kTN, int kStages, int kChunk>
constexpr int min_blocks() {
  const int by_smem = (220 * 1024) / ring_bytes<F, kTN, kStages, kChunk>();
  const int most = kRowGroups == 1 ? 3 : kRowGroups == 2 ? 2 : 1;
  return by_smem < 1 ? 1 : by_smem > most ? most : by_smem;
}

// A warp's FP32 accumulators into `partial` ([warp][kAcc][32] floats) for a k-slice sum.
template <int kRowGroups, int kTN>
__device__ __forceinline__ void store_partials(const float (&acc)[kTN / 2][kRowGroups][4], float* partial, int warp,
                                               int lane) {
  constexpr int kAcc = kTN / 2 * kRowGroups * 4;
#pragma unroll
  for (int a = 0; a < kAcc; ++a) partial[(warp * kAcc + a) * 32 + lane] = acc[a / (kRowGroups * 4)][a / 4 % kRowGroups][a % 4];
}

// Both GEMV kernels' epilogue: D fragment element i of pair jp, row group rg is n = 8 *
// (tile0 + 2 jp + i / 2) + r, M row 8 rg + 2c + i % 2; with k_slices > 1 the warps of a
// column add their FP32 partials through shared memory (`smem`, the rings once they are
// done) in slice order (deterministic).
template <class T, int kRowGroups, int kTN>
__device__ __forceinline__ void write_out(const Params& p, const float (&acc)[kTN / 2][kRowGroups][4],
                                          std::uint8_t* smem, int warp, int lane, int k_slices, int k_slice,
                                          int column, std::int64_t tile0) {
  const int r = lane / 4, c = lane % 4;
  constexpr int kAcc = kTN / 2 * kRowGroups * 4;
  float* partial = reinterpret_cast<float*>(smem);  // [warp][kAcc][32], once the rings are done
  if (k_slices > 1) {
    __syncthreads();
    store_partials<kRowGroups, kTN>(acc, partial, warp, lane);
    __syncthreads();
    if (k_slice != 0) return;
  }
#pragma unroll
  for (int jp = 0; jp < kTN / 2; ++jp) {
#pragma unroll
    for (int rg = 0; rg < kRowGroups; ++rg) {
      float sum[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int a = (jp * kRowGroups + rg) * 4 + i;
        sum[i] = acc[jp][rg][i];
        if (k_slices > 1) {
          sum[i] = 0.0f;
          for (int s = 0; s < k_slices; ++s) sum[i] += partial[((column * k_slices + s) * kAcc + a) * 32 + lane];
        }
      }
      store_quad<T>(p, 8 * rg + 2 * c, (tile0 + 2 * jp) * 8 + r, sum[0], sum[1], sum[2], sum[3]);
    }
  }
}

// The epilogue of K parts over a cluster (gemv_xs_kernel, parts > 1): every warp's FP32
// partials go to its block's shared memory; after a cluster barrier block q sums the
// columns q, q + parts, ... over (rank, k-slice) in that order (deterministic) and stores
// them; a second barrier keeps every block's shared memory alive until it has been read.
// block_tile0: the block's first tile (column c has tiles block_tile0 + c kTN ..).
template <class T, int kRowGroups, int kTN>
__device__ __forceinline__ void write_out_cluster(const Params& p, const float (&acc)[kTN / 2][kRowGroups][4],
                                                  std::uint8_t* smem, int warp, int lane, int k_slices, int columns,
                                                  int part, int parts, std::int64_t block_tile0) {
  constexpr int kAcc = kTN / 2 * kRowGroups * 4;
  float* partial = reinterpret_cast<float*>(smem);  // [warp][kAcc][32], once the rings are done
  __syncthreads();
  store_partials<kRowGroups, kTN>(acc, partial, warp, lane);
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  // Items (column, pair, row group, lane) of this block's columns, over its threads.
  const int mine = (columns - part + parts - 1) / parts;
  const int items = mine * (kTN / 2) * kRowGroups * 32;
  for (int item = static_cast<int>(threadIdx.x); item < items; item += static_cast<int>(blockDim.x)) {
    const int l = item % 32, rg = item / 32 % kRowGroups, jp = item / (32 * kRowGroups) % (kTN / 2);
    const int column = part + parts * (item / (32 * kRowGroups * (kTN / 2)));
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int q = 0; q < parts; ++q) {
      const float* rank_partial = cluster.map_shared_rank(partial, q) + (jp * kRowGroups + rg) * 4 * 32 + l;
      // Unrolled to kWarps with a guard, so that a rank's loads are issued together.
#pragma unroll
      for (int s = 0; s < kWarps; ++s) {
        if (s < k_slices) {
#pragma unroll
          for (int i = 0; i < 4; ++i) sum[i] += rank_partial[((column * k_slices + s) * kAcc + i) * 32];
        }
      }
    }
    store_quad<T>(p, 8 * rg + 2 * (l % 4), (block_tile0 + column * kTN + 2 * jp) * 8 + l / 4, sum[0], sum[1], sum[2],
                  sum[3]);
  }
  cluster.sync();
}

// kSub: the GGML block forms' sub-block decode (M <= 2, kRowGroups 1; compute_step_sub).
template <class T, Form F, int kRowGroups, int kTN, int kStages, int kChunk, bool kSub = false>
__global__ void __launch_bounds__(kThreads, (min_blocks<F, kRowGroups, kTN, kStages, kChunk>()))
    gemv_kernel(const Params p, int k_slices, int rotate, int pdl) {
  static_assert(!kSub || (is_block_form(F) && kRowGroups == 1 && std::is_same_v<T, __half>), "sub-block decode");
  // Programmatic dependent launch (pdl > 0, launched with the attribute): the next
  // kernel on the stream may start its blocks as ours retire. pdl 1 waits for the
  // previous grid before touching global memory; pdl 2 first fills the ring with
  // weights (constant data, never written by a kernel this one depends on), then waits
  // before reading the activations or writing the output. pdl 1 and 2 let the next
  // kernel launch at once; 3 (as 2, the default) only after the main loop.
  if (pdl == 1 || pdl == 2) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (pdl == 1) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  using RingT = Ring<F, kTN, kStages, kChunk>;
  extern __shared__ __align__(16) std::uint8_t ring_bytes_[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 4, c = lane % 4;
  RingT& ring = reinterpret_cast<RingT*>(ring_bytes_)[warp];
  const int k_slice = warp % k_slices, column = warp / k_slices;
  const int columns = kWarps / k_slices;
  const std::int64_t tile0 = (static_cast<std::int64_t>(blockIdx.x) * columns + column) * kTN;
  const std::int64_t step_begin = p.k_steps * k_slice / k_slices;
  const std::int64_t step_end = p.k_steps * (k_slice + 1) / k_slices;
  // Steps whose 32-element activation runs are all inside K and 16-byte aligned.
  const std::int64_t fast_end = p.x_vec16 ? p.k / formats::kPackStepK : 0;

  float acc[kTN / 2][kRowGroups][4];
#pragma unroll
  for (int jp = 0; jp < kTN / 2; ++jp) {
#pragma unroll
    for (int rg = 0; rg < kRowGroups; ++rg) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[jp][rg][i] = 0.0f;
    }
  }
  if (tile0 < p.n_tiles && step_begin < step_end) {
    Stream<F, kTN, kStages, kChunk> stream(p, tile0, step_begin, lane, ring);
    const std::uint16_t* xs[kRowGroups];
    bool row_ok[kRowGroups];
#pragma unroll
    for (int rg = 0; rg < kRowGroups; ++rg) {
      // kSub: B column r is M row r / 4 masked to lane column r % 4 (compute_step_sub).
      const std::int64_t row = kSub ? r / 4 : r + 8 * rg;
      row_ok[rg] = row < p.m && (!kSub || c == r % 4);
      xs[rg] = static_cast<const std::uint16_t*>(p.x) + (row_ok[rg] ? row * p.ldx : 0) +
               step_begin * formats::kPackStepK + 32 * c;
    }
    const std::uint16_t* xs0[kRowGroups];
#pragma unroll
    for (int rg = 0; rg < kRowGroups; ++rg) xs0[rg] = xs[rg];
    // Chunk and step indices and the offsets they make in 32 bits, relative to step_begin
    // (a row of tiles spans < 2 GiB, the launch checks): 64-bit index math cost the step
    // loop ~30 instructions of its ~400 (bench/notes/decode.md, session 50).
    const int steps = static_cast<int>(step_end - step_begin);
    const int n_chunks = (steps + kChunk - 1) / kChunk;
    // Steps (relative) whose activation runs take the 16-byte loads.
    const int fast_steps =
        static_cast<int>(fast_end > step_end ? steps : fast_end > step_begin ? fast_end - step_begin : 0);
    auto valid_of = [&](int chunk) {
      const int left = steps - chunk * kChunk;
      return left < kChunk ? left : kChunk;
    };
    // The warp walks its chunks from `rot` on, wrapping around (rotate != 0 staggers
    // the warps' positions in their streams).
    const int rot =
        rotate ? static_cast<int>((static_cast<std::int64_t>(blockIdx.x) * kWarps + warp) * 13 % n_chunks) : 0;
    auto chunk_at = [&](int i) { return i + rot < n_chunks ? i + rot : i + rot - n_chunks; };
    // One commit group per chunk, empty or not, so that wait_group counts chunks.
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_chunks) stream.issue(lane, s, chunk_at(s), valid_of(chunk_at(s)), ring);
      cp_async_commit();
    }
    if (pdl >= 2) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    int slot = 0;
    for (int i = 0; i < n_chunks; ++i) {
      const int chunk = chunk_at(i);
      const int valid = valid_of(chunk);
      int step = chunk * kChunk;  // relative to step_begin
      if (rotate) {
#pragma unroll
        for (int rg = 0; rg < kRowGroups; ++rg) {
          xs[rg] = xs0[rg] + static_cast<std::uint32_t>(step) * std::uint32_t{formats::kPackStepK};
        }
      }
      std::uint32_t x[kRowGroups][16];
      load_x<kRowGroups>(p, xs, row_ok, step, fast_steps, step_begin, c, x);
      cp_async_wait<kStages - 2>();  // this lane's copies of `chunk` have landed
      __syncwarp();                  // ... and every lane's (scales are shared)
#pragma unroll
      for (int cc = 0; cc < kChunk; ++cc) {
        if (cc > 0) {
          if (cc >= valid) break;
          load_x<kRowGroups>(p, xs, row_ok, step, fast_steps, step_begin, c, x);
        }
        if constexpr (kSub) {
          compute_step_sub<F, kTN, kStages, kChunk>(x[0], lane, slot, cc, ring, acc);
        } else {
          compute_step<T, F, kRowGroups, kTN, kStages, kChunk>(p, x, lane, slot, cc, ring, acc);
        }
        ++step;
#pragma unroll
        for (int rg = 0; rg < kRowGroups; ++rg) xs[rg] += formats::kPackStepK;
      }
      __syncwarp();  // the slot refilled next (read last iteration) is free
      const int ahead_slot = slot == 0 ? kStages - 1 : slot - 1;
      if (i + kStages - 1 < n_chunks) {
        const int ahead = chunk_at(i + kStages - 1);
        stream.issue(lane, ahead_slot, ahead, valid_of(ahead), ring);
      }
      cp_async_commit();
      slot = slot + 1 == kStages ? 0 : slot + 1;
    }
  }
  cp_async_wait<0>();
  if (pdl >= 2) asm volatile("griddepcontrol.wait;\n" ::: "memory");  // (idle warps; a no-op after the first)
  if (pdl == 3) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if constexpr (kSub) sub_to_rows<kTN>(acc, c);

  static_assert(kWarps * (kTN / 2 * kRowGroups * 4) * 32 * 4 <= ring_bytes<F, kTN, kStages, kChunk>(),
                "partials fit the rings");
  write_out<T, kRowGroups, kTN>(p, acc, ring_bytes_, warp, lane, k_slices, k_slice, column, tile0);
}

// ---- M > 8: the activations staged once per k-slice group in shared memory ----------
//
// gemv_kernel's lanes each load their own 64-byte runs of rows r and r + 8: one LDG.128
// of the warp touches 16 cache lines (8 rows x 2) for 512 useful bytes, and at M = 16
// each warp does 8 of them per step, which made the L1 data path, not the weight
// stream, the limit (bench/notes/weight_only.md). Here the warps of one k-slice (they
// walk the same steps) copy each step's activations once, 16-byte chunks with cp.async
// into a shared ring of the weights' depth, in the same commit groups, and read them
// back with conflict-free LDS.128. One named barrier per step and group makes every
// chunk visible and frees the slot refilled next (the CUTLASS multistage order: wait,
// barrier, issue the slot read last step, compute).

constexpr int kXRowBytes = formats::kPackStepK * 2;  // one row of a step's activations

template <int kRowGroups>
constexpr int x_slot_bytes() {
  return 8 * kRowGroups * kXRowBytes;
}

// Byte offset of 16-byte chunk ch (elements 8ch .. 8ch + 7 of the step) of a slot row.
// The swizzle spreads each quarter warp's LDS.128 (rows 2q, 2q + 1; lanes c read chunks
// 4c + w) over the 8 distinct 16-byte bank groups, and the copies' 8 consecutive chunks
// of one row too.
__device__ __forceinline__ int x_chunk_offset(int row, int ch) {
  return row * kXRowBytes + 16 * (ch ^ (((ch >> 3) & 1) << 1) ^ (row & 1));
}

// Copies (or, at the ragged end of K and for rows not 16-byte aligned, loads and
// stores) the activations of `step` into a slot: the group's lane gl of group_threads
// takes every group_threads-th chunk. Rows past M are zero-filled.
template <int kRowGroups>
__device__ __forceinline__ void stage_x(const Params& p, std::int64_t step, std::int64_t fast_end, int gl,
                                        int group_threads, std::uint8_t* slot) {
  constexpr int kChunks = 8 * kRowGroups * (formats::kPackStepK / 8);
  const auto* x = static_cast<const std::uint16_t*>(p.x);
  for (int q = gl; q < kChunks; q += group_threads) {
    const int row = q / 16, ch = q % 16;
    std::uint8_t* dst = slot + x_chunk_offset(row, ch);
    const std::int64_t k0 = step * formats::kPackStepK + 8 * ch;
    if (row >= p.m) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);  // (a zero-filling copy needs an aligned source)
    } else if (step < fast_end) {
      cp_async16(dst, x + row * p.ldx + k0, 16);
    } else {
      std::uint32_t w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const std::uint32_t lo = k0 + 2 * e < p.k ? __ldg(x + row * p.ldx + k0 + 2 * e) : 0u;
        const std::uint32_t hi = k0 + 2 * e + 1 < p.k ? __ldg(x + row * p.ldx + k0 + 2 * e + 1) : 0u;
        w[e] = lo | (hi << 16);
      }
      *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

// One step from a slot: per packed word w, the lane's 8 activations of each row group
// (one LDS.128 each), then every tile pair's A fragments of that word against them.
// Per accumulator the mma order is gemv_kernel's (w, then the two k16 halves).
template <class T, Form F, int kRowGroups, int kTN, int kStages>
__device__ __forceinline__ void compute_step_xs(const Params& p, const std::uint8_t* xslot, int lane, int slot,
                                                const Ring<F, kTN, kStages, 1>& ring,
                                                float (&acc)[kTN / 2][kRowGroups][4]) {
  static_assert(F != Form::int8, "the staged-activation kernel takes the INT4 forms");
  const int r = lane / 4, cl = lane % 4;
  const int g = cl >> p.group_shift;
  Scale2<T> sc[kTN];
  uint4 v[kTN];
#pragma unroll
  for (int j = 0; j < kTN; ++j) {
    sc[j].s = Act<T>::splat(ring.scales[slot][0][j][g][r]);
    sc[j].m = Act<T>::splat(F == Form::q4_zero_point ? ring.mins[slot][0][j][g][r] : std::uint16_t{0});
    v[j] = ring.codes[slot][0][j][lane];
  }
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    std::uint32_t x[kRowGroups][4];
#pragma unroll
    for (int rg = 0; rg < kRowGroups; ++rg) {
      const uint4 q = *reinterpret_cast<const uint4*>(xslot + x_chunk_offset(r + 8 * rg, 4 * cl + w));
      x[rg][0] = q.x, x[rg][1] = q.y, x[rg][2] = q.z, x[rg][3] = q.w;
    }
#pragma unroll
    for (int jp = 0; jp < kTN / 2; ++jp) {
      std::uint32_t b[2][4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint4& q = v[2 * jp + u];
        dequant_int4_word<T, F>(w == 0 ? q.x : w == 1 ? q.y : w == 2 ? q.z : q.w, sc[2 * jp + u], b[u]);
      }
#pragma unroll
      for (int rg = 0; rg < kRowGroups; ++rg) {
        mma_16816<T>(acc[jp][rg], b[0][0], b[1][0], b[0][1], b[1][1], x[rg][0], x[rg][1]);
        mma_16816<T>(acc[jp][rg], b[0][2], b[1][2], b[0][3], b[1][3], x[rg][2], x[rg][3]);
      }
    }
  }
}

// Shared memory of a block of `warps` warps (a ring each) and k_slices activation rings.
template <Form F, int kRowGroups, int kTN, int kStages>
constexpr int xs_smem_bytes(int warps, int k_slices) {
  return warps * static_cast<int>(sizeof(Ring<F, kTN, kStages, 1>)) +
         k_slices * kStages * x_slot_bytes<kRowGroups>();
}

// blockDim.x / 32 warps = columns x k_slices, at most kXsMaxWarps: 8 (two blocks a SM),
// or, balanced, one block a SM of as many columns as spread N evenly over the SMs.
// 128 registers a thread either way.
constexpr int kXsMaxWarps = 16;
// kParts: the grid's blocks come in clusters of `parts`, block rank q of a cluster takes
// the q-th part of K for the same tiles, and the cluster's partials are summed over
// distributed shared memory (write_out_cluster). This gives a narrow N (the 8B O and down
// projections: 512 tiles of 8 rows) a full grid while the columns of a block still share
// each staged step of activations. Without it (parts is 1) the kernel keeps no cluster
// code: the wide shapes ran 3-5% slower with it (bench/notes/weight_only.md).
template <class T, Form F, int kRowGroups, int kTN, int kStages, bool kParts>
__global__ void __launch_bounds__(kXsMaxWarps * 32, 1)
    gemv_xs_kernel(const Params p, int k_slices, int parts_arg, int pdl) {
  const int parts = kParts ? parts_arg : 1;
  // pdl as in gemv_kernel: weights before griddepcontrol.wait, activations after.
  if (pdl == 1 || pdl == 2) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (pdl == 1) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  using RingT = Ring<F, kTN, kStages, 1>;
  constexpr int kXSlot = x_slot_bytes<kRowGroups>();
  static_assert((kTN / 2 * kRowGroups * 4) * 32 * 4 <= sizeof(RingT), "a warp's partials fit its ring");
  extern __shared__ __align__(16) std::uint8_t smem_[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  RingT& ring = reinterpret_cast<RingT*>(smem_)[warp];
  const int k_slice = warp % k_slices, column = warp / k_slices;
  const int warps = static_cast<int>(blockDim.x) / 32, columns = warps / k_slices;
  std::uint8_t* xring = smem_ + warps * static_cast<int>(sizeof(RingT)) + k_slice * kStages * kXSlot;
  const int gl = column * 32 + lane, group_threads = columns * 32;
  const int part = static_cast<int>(blockIdx.x) % parts;
  const std::int64_t tile0 = (static_cast<std::int64_t>(blockIdx.x) / parts * columns + column) * kTN;
  const bool have = tile0 < p.n_tiles;  // a warp past N still stages activations for its group
  // K in parts x k_slices ranges: this warp's is range part * k_slices + k_slice.
  const std::int64_t ranges = static_cast<std::int64_t>(parts) * k_slices, range = part * k_slices + k_slice;
  const std::int64_t step_begin = p.k_steps * range / ranges;
  const std::int64_t steps = p.k_steps * (range + 1) / ranges - step_begin;
  const std::int64_t fast_end = p.x_vec16 ? p.k / formats::kPackStepK : 0;
  float acc[kTN / 2][kRowGroups][4] = {};
  Stream<F, kTN, kStages, 1> stream(p, have ? tile0 : 0, step_begin, lane, ring);
  // The thread's activation chunks of a step (at most two on the fast path: 16-byte
  // aligned rows, whole steps): fixed rows and columns, so a step costs one address
  // and one copy each; rows past M are zero-filled (x is aligned there).
  constexpr int kXChunks = 8 * kRowGroups * (formats::kPackStepK / 8);
  const bool x_fast = p.x_vec16 && kXChunks <= 2 * group_threads;
  const std::uint16_t* x_src[2];
  int x_dst[2], x_bytes[2], x_stride[2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int q = gl + t * group_threads, row = q / 16, ch = q % 16;
    const bool real = q < kXChunks && row < p.m;
    x_dst[t] = q < kXChunks ? x_chunk_offset(row, ch) : -1;
    x_bytes[t] = real ? 16 : 0;
    x_stride[t] = real ? formats::kPackStepK : 0;
    x_src[t] = static_cast<const std::uint16_t*>(p.x) +
               (real ? row * p.ldx + step_begin * formats::kPackStepK + 8 * ch : 0);
  }
  auto stage = [&](std::int64_t i, std::uint8_t* slot) {  // the activations of step step_begin + i
    if (x_fast && step_begin + i < fast_end) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        if (x_dst[t] >= 0) cp_async16(slot + x_dst[t], x_src[t] + i * x_stride[t], x_bytes[t]);
      }
    } else {
      stage_x<kRowGroups>(p, step_begin + i, fast_end, gl, group_threads, slot);
    }
  };
  // Commit groups: the weights of steps 0 .. kStages - 2 (before the dependency wait),
  // then their activations, then one group (weights + activations) per step: the
  // group of step i always has kStages - 2 younger ones when step i is computed.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (have && s < steps) stream.issue_next(lane, s, ring);
    cp_async_commit();
  }
  if (pdl >= 2) asm volatile("griddepcontrol.wait;\n" ::: "memory");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) stage(s, xring + s * kXSlot);
    cp_async_commit();
  }
  int slot = 0;
  for (std::int64_t i = 0; i < steps; ++i) {
    cp_async_wait<kStages - 2>();                 // this thread's copies of step i have landed
    named_barrier(1 + k_slice, group_threads);    // ... everyone's; and slot i - 1 is read
    const int ahead_slot = slot == 0 ? kStages - 1 : slot - 1;
    if (i + kStages - 1 < steps) {
      if (have) stream.issue_next(lane, ahead_slot, ring);
      stage(i + kStages - 1, xring + ahead_slot * kXSlot);
    }
    cp_async_commit();
    if (have) compute_step_xs<T, F, kRowGroups, kTN, kStages>(p, xring + slot * kXSlot, lane, slot, ring, acc);
    slot = slot + 1 == kStages ? 0 : slot + 1;
  }
  // Every k-slice passes its named barrier as often as the longest slice. These phases order
  // nothing across slices (the partials' order is write_out's __syncthreads); they keep
  // compute-sanitizer's racecheck from reporting write_out's partials as RAW hazards, which
  // it does when slices of unequal step counts used cp.async (H100: 32,729 reports in
  // GemvVariants, 0 with this loop; the twin kernel in bench/notes/weight_only.md).
  for (std::int64_t i = steps; i < (p.k_steps + ranges - 1) / ranges; ++i) named_barrier(1 + k_slice, group_threads);
  cp_async_wait<0>();
  if (pdl == 3) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if constexpr (kParts) {
    write_out_cluster<T, kRowGroups, kTN>(p, acc, smem_, warp, lane, k_slices, columns, part, parts,
                                          (static_cast<std::int64_t>(blockIdx.x) / parts * columns) * kTN);
  } else {
    write_out<T, kRowGroups, kTN>(p, acc, smem_, warp, lane, k_slices, k_slice, column, tile0);
  }
}

// Programmatic dependent launch by default, weights prefetched before the wait: in
// back-to-back decode launches (H100, 28672 x 8192) the next GEMV fills its rings while
// the previous one drains: M = 1 Q4_1 g32 0.0585 -> 0.0554 ms, g128 0.0497 -> 0.0460 ms
// (mode 1, waiting first, gave 0.0588 / 0.0491). The successor is let launch after the
// main loop (mode 3), not at the first instruction (mode 2): a grid launched at once
// waits, holding its blocks' slots and shared memory, through the whole of this one; on
// the whole 8B model (H200) mode 3 decodes 3% faster at B = 1 (406 -> 419 tok/s) and 12%
// at B = 16 (2,655 -> 2,980), the same at 64 (bench/notes/batch.md). The cost is a
// contract: the packed weights must not be written by the kernel that immediately
// precedes this one on the stream (they are read before griddepcontrol.wait);
// activations, bias and output are touched only after it. Weights uploaded with
// cudaMemcpy are safe (a copy is never a programmatic predecessor).
constexpr int kDefaultPdl = 3;
int default_pdl(const Variant& v) { return v.pdl >= 0 ? v.pdl : kDefaultPdl; }

// The K split rules' view of a launch (core/gemv_split.h).
inline core::GemvGrid grid_of(const Params& p, int kTN) {
  core::GemvGrid g;
  g.n_tiles = p.n_tiles;
  g.k_steps = p.k_steps;
  g.tiles_per_warp = kTN;
  g.warps = kWarps;
  g.multiprocessors = core::multiprocessor_count();
  return g;
}

// The resident blocks an SM of one gemv_kernel instantiation; once per instantiation (and
// device, in practice one), with its shared-memory opt-in.
template <class T, Form F, int kRowGroups, int kTN, int kStages, int kChunk, bool kSub = false>
int resident_blocks() {
  static const int per_sm = [] {
    auto* kernel = gemv_kernel<T, F, kRowGroups, kTN, kStages, kChunk, kSub>;
    constexpr int kRingBytes = ring_bytes<F, kTN, kStages, kChunk>();
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes));
    int blocks = 0;
    LOWBIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, kRingBytes));
    return std::max(blocks, 1);
  }();
  return per_sm;
}

// How full launch<>'s grid leaves the resident block slots (core::filled_slots).
template <class T, Form F, int kRowGroups, int kTN, int kStages, int kChunk>
double filled_slots(const Params& p) {
  const int per_sm = resident_blocks<T, F, kRowGroups, kTN, kStages, kChunk>();
  return core::filled_slots(grid_of(p, kTN), [&](int) { return per_sm; });
}

template <class T, Form F, int kRowGroups, int kTN, int kStages, int kChunk, bool kSub = false>
void launch(const Params& p, const Variant& v, cudaStream_t stream) {
  auto* kernel = gemv_kernel<T, F, kRowGroups, kTN, kStages, kChunk, kSub>;
  constexpr int kRingBytes = ring_bytes<F, kTN, kStages, kChunk>();
  LOWBIT_CHECK(p.k_steps * form_unit_bytes<F>() < (std::int64_t{1} << 31), "weight_only: K of ", p.k,
               " is too long for the GEMV (a row of tiles must span less than 2 GiB: its offsets are 32-bit)");
  const int per_sm = resident_blocks<T, F, kRowGroups, kTN, kStages, kChunk, kSub>();
  const core::GemvGrid grid = grid_of(p, kTN);
  int k_slices = 1;
  if (v.k_slices > 0) {
    k_slices = v.k_slices;
  } else if constexpr (F == Form::int8) {
    // INT8 (half the work per byte) streams best with the most slices: 93% of copy
    // at 28672 x 8192 against 79% with 2 (a sweep on the H100).
    while (k_slices < kWarps && 2 * k_slices <= p.k_steps) k_slices *= 2;
  } else {
    k_slices = core::fill_k_slices(grid, [&](int) { return per_sm; });
  }
  const int pdl = default_pdl(v);
  launch_kernel(kernel, dim3(static_cast<unsigned>(core::gemv_blocks(grid, k_slices))), dim3(kThreads), kRingBytes,
                stream, pdl > 0, p, k_slices, v.rotate ? 1 : 0, pdl);
}

// The xs kernel (M > 8, or any M through the tuning hook). Two shapes of block:
// - 8 warps (4 columns x 2 k-slices at 28672 x 8192), two blocks a SM, k-slices by the
//   fill rule; 224 blocks leave 40 of the 132 SMs one block: they idle half the time.
// - balanced: one block a SM, columns = N tiles / (kTN x SMs) rounded up (7 at 28672),
//   k-slices as many as 16 warps and the shared memory allow, so every SM streams
//   about the same bytes (28 tiles of 8 rows a SM against 32 or 16).
template <class T, Form F, int kRowGroups, int kTN, int kStages>
void launch_xs(const Params& p, const Variant& v, cudaStream_t stream, bool balanced) {
  auto* kernel = gemv_xs_kernel<T, F, kRowGroups, kTN, kStages, false>;
  auto* parts_kernel = gemv_xs_kernel<T, F, kRowGroups, kTN, kStages, true>;
  auto smem = [](int warps, int slices) { return xs_smem_bytes<F, kRowGroups, kTN, kStages>(warps, slices); };
  static const int optin = [&] {
    int bytes = 0;
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, core::current_device()));
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(parts_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return bytes;
  }();
  static const std::array<int, 4> per_sm = [&] {  // 8-warp blocks of 1, 2, 4, 8 k-slices; 0: does not fit
    std::array<int, 4> out{};
    for (int i = 0; i < 4; ++i) {
      if (smem(kWarps, 1 << i) <= optin) {
        LOWBIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&out[i], kernel, kThreads, smem(kWarps, 1 << i)));
      }
    }
    return out;
  }();
  const int pdl = default_pdl(v);
  if (balanced) {
    const std::int64_t sms = core::multiprocessor_count();
    const int columns = static_cast<int>(std::min<std::int64_t>((p.n_tiles + kTN * sms - 1) / (kTN * sms), kXsMaxWarps));
    int k_slices = v.k_slices > 0 ? v.k_slices : std::max(1, kXsMaxWarps / columns);
    // Named barriers 1 .. k_slices (0 is __syncthreads'): at most 15 slices.
    k_slices = static_cast<int>(std::min<std::int64_t>({k_slices, kXsMaxWarps - 1, std::max<std::int64_t>(p.k_steps, 1)}));
    while (k_slices > 1 && (columns * k_slices > kXsMaxWarps || smem(columns * k_slices, k_slices) > optin)) --k_slices;
    const std::int64_t blocks = (p.n_tiles + columns * kTN - 1) / (columns * kTN);
    launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * columns * k_slices),
                  smem(columns * k_slices, k_slices), stream, pdl > 0, p, k_slices, 1, pdl);
    return;
  }
  // K split over k-slices and, where N is narrow, a cluster's blocks (core/gemv_split.h).
  const core::GemvGrid grid = grid_of(p, kTN);
  const core::GemvSplit split = core::pick_gemv_split(grid, per_sm, v.k_slices, v.k_parts);
  const int k_slices = split.k_slices, parts = split.parts;
  const auto blocks = static_cast<unsigned>(core::gemv_blocks(grid, k_slices) * parts);
  launch_cluster_kernel(parts > 1 ? parts_kernel : kernel, dim3(blocks), dim3(kThreads), smem(kWarps, k_slices), stream,
                        pdl > 0, static_cast<unsigned>(parts), p, k_slices, parts, pdl);
}

template <class T, Form F, int kTN, int kStages, int kChunk>
void launch_rows(const Params& p, const Variant& v, cudaStream_t stream) {
  if (p.m > 8) {
    launch<T, F, 2, kTN, kStages, kChunk>(p, v, stream);
  } else {
    launch<T, F, 1, kTN, kStages, kChunk>(p, v, stream);
  }
}

template <class T, Form F, int kTN, int kStages>
void launch_xs_rows(const Params& p, const Variant& v, cudaStream_t stream, bool balanced) {
  if (p.m > 8) {
    launch_xs<T, F, 2, kTN, kStages>(p, v, stream, balanced);
  } else {
    launch_xs<T, F, 1, kTN, kStages>(p, v, stream, balanced);
  }
}

// The shape table's launches: one, two or four row groups by M (the table takes up to
// kGemvShapeMaxRows; the rules below stop at kGemvMaxRows).
template <class T, Form F, int kTN, int kStages, int kChunk>
void launch_table_rows(const Params& p, const Variant& v, cudaStream_t stream) {
  if (p.m > kGemvMaxRows) {
    launch<T, F, 4, kTN, kStages, kChunk>(p, v, stream);
  } else {
    launch_rows<T, F, kTN, kStages, kChunk>(p, v, stream);
  }
}

template <class T, Form F, int kTN, int kStages>
void launch_table_xs(const Params& p, const Variant& v, cudaStream_t stream, bool balanced) {
  if (p.m > kGemvMaxRows) {
    launch_xs<T, F, 4, kTN, kStages>(p, v, stream, balanced);
  } else {
    launch_xs_rows<T, F, kTN, kStages>(p, v, stream, balanced);
  }
}

// The shapes a variant can name (f16 Q4 with zero point only): gemv_kernel {kTN,
// kStages, kChunk} (0-8), gemv_xs_kernel {kTN, kStages} (9-15).
template <class T, Form F>
bool launch_shape(const Params& p, const Variant& v, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, __half> && F == Form::q4_zero_point) {
    switch (v.shape) {
      case 0: launch_table_rows<T, F, 4, 4, 1>(p, v, stream); return true;
      case 1: launch_table_rows<T, F, 2, 3, 2>(p, v, stream); return true;
      case 2: launch_table_rows<T, F, 2, 4, 2>(p, v, stream); return true;
      case 3: launch_table_rows<T, F, 4, 2, 2>(p, v, stream); return true;
      case 4: launch_table_rows<T, F, 2, 2, 4>(p, v, stream); return true;
      case 5: launch_table_rows<T, F, 4, 3, 2>(p, v, stream); return true;
      case 6: launch_table_rows<T, F, 8, 2, 1>(p, v, stream); return true;
      case 7: launch_table_rows<T, F, 8, 3, 1>(p, v, stream); return true;
      case 8: launch_table_rows<T, F, 2, 6, 1>(p, v, stream); return true;
      // The xs kernel (activations staged per k-slice group): {kTN, kStages}, 8-warp
      // blocks (9-12) or one balanced block a SM (13-15).
      case 9: launch_table_xs<T, F, 4, 4>(p, v, stream, false); return true;
      case 10: launch_table_xs<T, F, 4, 3>(p, v, stream, false); return true;
      case 11: launch_table_xs<T, F, 8, 2>(p, v, stream, false); return true;
      case 12: launch_table_xs<T, F, 8, 3>(p, v, stream, false); return true;
      case 13: launch_table_xs<T, F, 4, 4>(p, v, stream, true); return true;
      case 14: launch_table_xs<T, F, 4, 3>(p, v, stream, true); return true;
      case 15: launch_table_xs<T, F, 8, 2>(p, v, stream, true); return true;
      default: return false;
    }
  }
  return false;
}

}  // namespace

// Variant::shape >= 0 runs that entry of the shape table; otherwise the rules below
// choose the kernel and its shape from M, N and the group size.
template <class T, Form F>
void run_gemv(const Params& p, const Variant& v, cudaStream_t stream) {
  if (v.shape >= 0 && launch_shape<T, F>(p, v, stream)) return;
  const int sms = core::multiprocessor_count();
  const bool narrow = p.n_tiles <= 4 * sms;  // under ~4 tiles a SM: the 8B O, down and V, the 1B layers
  LOWBIT_CHECK(p.m <= kGemvMaxRows, "weight_only: the GEMV takes M = ", p.m, " > ", kGemvMaxRows,
               " only as a shape of its tuning table (f16 activations, Q4 weights with zero points)");
  if constexpr (is_block_form(F)) {
    // GGML block forms: 2 tiles a warp, 4 single-step slots (units of 352-848 bytes: three
    // 8-warp blocks a SM at M <= 8), k-slices by the fill rule; the sub-block decode at
    // narrow N takes 2 slots of 4 steps (below). Otherwise not tuned on a GPU yet.
    // M <= 2: the sub-block decode (Variant::block_decode 1; 0 the per-weight f16 decode).
    // The default takes it for the K-quants: H100, M = 1, 4096 x 14336 / 14336 x 4096,
    // Q4_K 41/55 -> 48/62% of copy, Q6_K 45/62 -> 50/66% (bench/notes/weight_only.md
    // "sub-block decode"); Q3_K and Q2_K by analogy with Q6_K and Q4_K. Q5_0 and Q5_1 at
    // narrow N only: 4096 x 14336 us, per-weight -> sub-block, H100 22.6 -> 20.3 / 23.2 ->
    // 21.6, H200 22.0 -> 17.7 / 22.3 -> 18.9; at 14336 x 4096 H100 21.9 -> 21.4 / 22.5 ->
    // 22.7, H200 19.4 -> 19.8 / 20.0 -> 21.5 (weight-only-blocks-h100.md, -h200.md); 8B
    // decode at 2K, H100: Q5_1 +4.5%, Q5_0 +4.8% (its down and O GEMVs; session 51).
    constexpr bool kSubBlockDefault =
        F == Form::q4_k || F == Form::q5_k || F == Form::q6_k || F == Form::q3_k || F == Form::q2_k;
    const bool sub_default = kSubBlockDefault || ((F == Form::q5_0 || F == Form::q5_1) && narrow);
    if (p.m <= 2 && (v.block_decode == 1 || (v.block_decode < 0 && sub_default))) {
      if constexpr (std::is_same_v<T, __half>) {
        // Narrow N (under ~4 tiles a SM: an 8B down or V) in 2 slots of 4 steps, as Q4_1's
        // narrow rule: H200, M = 1, 4096 x 14336, Q4_K 21.4 -> 16.6 us; 8B Q4_K_M decode
        // +5% (bench/notes/weight_only.md, session 32). Q6_K's larger units (848 bytes) in
        // 3 slots of 2 steps: 19.5 -> 17.8 us; {2 tiles, 6 single-step slots} 18.4, {2, 4,
        // 2} 18.6, {4, 2, 2} 20.6 (H200, session 34).
        if (narrow) {
          if constexpr (F == Form::q6_k) return launch<T, F, 1, 2, 3, 2, true>(p, v, stream);
          return launch<T, F, 1, 2, 2, 4, true>(p, v, stream);
        }
        // Wide N: Q4_K / Q5_K / Q6_K 4 tiles a warp, 4 single-step slots (Q4_1's wide
        // launch): 14336 x 4096 M = 1 18.8 / 22.4 / 20.4 -> 16.9 / 21.4 / 18.9 us; 8B decode
        // at 2048 Q5_K 323 -> 331, Q6_K 359 -> 371 tok/s. Q3_K / Q2_K lose there (20.2 /
        // 19.0 -> 20.7 / 21.1): 2 tiles (H200, session 34).
        if constexpr (F == Form::q4_k || F == Form::q5_k || F == Form::q6_k) {
          return launch<T, F, 1, 4, 4, 1, true>(p, v, stream);
        }
        return launch<T, F, 1, 2, 4, 1, true>(p, v, stream);
      }
    }
    launch_rows<T, F, 2, 4, 1>(p, v, stream);
  } else if constexpr (F == Form::int8) {
    // INT8 streams best from 3 stages (3 blocks per SM at M <= 8).
    launch_rows<T, F, 2, 3, 1>(p, v, stream);
  } else {
    // The rules as the H200 sweep ordered them (`bench gemm --section
    // weight_only_variants`, Q4_1 g32, median ms; weight-only-variants-h200.md).
    if (p.m > 8) {
      // M = 9..16: the activations staged once per k-slice group, two 8-warp blocks a SM,
      // K split over a cluster where N alone would not fill the grid (launch_xs's rule).
      launch_xs<T, F, 2, 4, 4>(p, v, stream, false);
    } else if (p.groups_per_step == 4 && !narrow && p.m <= 4 && p.n_tiles <= 16 * sms && p.k_steps >= 32 &&
               filled_slots<T, F, 1, 2, 3, 2>(p) >= filled_slots<T, F, 1, 4, 4, 1>(p)) {
      // Group 32, between 4 and 16 tiles a SM, M <= 4, K of 32 steps or more (the 8B QKV,
      // 6144 x 4096): 2 tiles a warp, 3 slots of 2 steps. M = 1 0.0094 -> 0.0084 ms, M = 4
      // 0.0100 -> 0.0090; bench decode 8B at 2K +0.7% (H200). Not at shorter K: 16384 x 2048
      // (the 1B gate|up, 16 steps) 0.0094 -> 0.0125. Only where its grid fills the resident
      // slots at least as well as the {4, 4, 1} launch's: M = 1, H200, ms ({2, 3, 2} / {4,
      // 4, 1}), taken: 10240 x 8192 (70B QKV) 0.0224 / 0.0243, 5120 x 13824 (Qwen2.5-14B
      // down) 0.0195 / 0.0210; left: 8192 x 8192 (70B O) 0.0207 / 0.0158, 8192 x 28672 (70B
      // down) 0.0632 / 0.0429, 7168 x 5120 (Qwen2.5-14B QKV) 0.0131 / 0.0112.
      launch_rows<T, F, 2, 3, 2>(p, v, stream);
    } else if (p.groups_per_step == 4 && narrow) {
      // Group 32, narrow N, M <= 8: 2 tiles a warp, 2 slots of 4 steps, which keeps more
      // bytes in flight a block when the grid is short. M = 1: 4096 x 14336 0.0149 ms,
      // 4096 x 4096 0.0061, 2048 x 8192 0.0079 (within 5% of the best shape).
      launch_rows<T, F, 2, 2, 4>(p, v, stream);
    } else {
      // M <= 8 otherwise: 4 tiles a warp, 4 single-step slots (M = 1
      // g32: 28672 x 4096 0.0230 ms, 28672 x 8192 0.0426 against 0.0252 / 0.0467 for 2
      // slots of 2 steps; 6144 x 4096 and 16384 x 2048 within 2% of the best; g128 28672
      // x 8192 0.0424, 8192 x 28672 0.0390).
      launch_rows<T, F, 4, 4, 1>(p, v, stream);
    }
  }
}

LOWBIT_WEIGHT_ONLY_PAIRS(run_gemv);
LOWBIT_WEIGHT_ONLY_BLOCK_FORMS(run_gemv);

}  // namespace lowbit::cuda::weight_only
