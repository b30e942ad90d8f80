// The streaming GEMV's step (gemv.cu and gemv_bulk.cu): a warp's ring of weight units in
// shared memory, the activations of a step in registers, and the dequantize-and-multiply of
// one step from a ring slot into the warp's accumulators. The two kernels differ only in
// how the ring is filled (per-lane cp.async, or bulk copies completing on an mbarrier).
#pragma once

#include <cstdint>

#include "cuda/weight_only/common.cuh"

namespace lowbit::cuda::weight_only::gemv_step {

// A warp's slice of the shared-memory ring: kStages slots of kChunk steps x kTN units
// of codes with their scales and mins. Each warp streams its own units, so a warp only
// ever waits for its own copies and syncs with __syncwarp.
constexpr int kMaxChunks = 4;  // 16-byte scale chunks per tile per step (group 32)
template <Form F, int kTN, int kStages, int kChunk>
struct Ring {
  static constexpr int kVecs = form_unit_bytes<F>() / 16;  // 16-byte vectors per unit
  static constexpr int kLoads = (kVecs + 31) / 32;        // 16-byte code loads per lane per unit
  uint4 codes[kStages][kChunk][kTN][kVecs];  // vector h * 32 + lane: the lane's load h
  std::uint16_t scales[kStages][kChunk][kTN][kMaxChunks][8];
  std::uint16_t mins[kStages][kChunk][kTN][kMaxChunks][8];
  // Step c of tile j in a slot: its unit, and the scale / min of group g (of the step), row r.
  __device__ const uint4* unit(int slot, int c, int j) const { return codes[slot][c][j]; }
  __device__ std::uint16_t scale(int slot, int c, int j, int g, int r, int) const { return scales[slot][c][j][g][r]; }
  __device__ std::uint16_t minimum(int slot, int c, int j, int g, int r, int) const { return mins[slot][c][j][g][r]; }
};

// The same for a pair of tiles, tile-major: a tile's kChunk steps of units, and of scales /
// mins, are contiguous in a slot as in the packed weights (groups_per_step groups a step),
// so one bulk copy a tile and list fills a slot (gemv_bulk.cu).
template <Form F, int kStages, int kChunk>
struct PairRing {
  static constexpr int kVecs = form_unit_bytes<F>() / 16;
  static constexpr int kLoads = (kVecs + 31) / 32;
  uint4 codes[kStages][2][kChunk][kVecs];
  std::uint16_t scales[kStages][2][kChunk * kMaxChunks][8];  // group c * groups_per_step + g
  std::uint16_t mins[kStages][2][kChunk * kMaxChunks][8];
  __device__ const uint4* unit(int slot, int c, int j) const { return codes[slot][j][c]; }
  __device__ std::uint16_t scale(int slot, int c, int j, int g, int r, int groups_per_step) const {
    return scales[slot][j][c * groups_per_step + g][r];
  }
  __device__ std::uint16_t minimum(int slot, int c, int j, int g, int r, int groups_per_step) const {
    return mins[slot][j][c * groups_per_step + g][r];
  }
};

// The slow path (the ragged end of K, or rows not 16-byte aligned), kept out of line
// so that its registers do not burden the streaming loop.
static __device__ __noinline__ void load_x_run_ragged(const std::uint16_t* x, std::int64_t valid, std::uint32_t (&w)[16]) {
  for (int i = 0; i < 16; ++i) {
    const std::uint32_t lo = 2 * i < valid ? __ldg(x + 2 * i) : 0u;
    const std::uint32_t hi = 2 * i + 1 < valid ? __ldg(x + 2 * i + 1) : 0u;
    w[i] = lo | (hi << 16);
  }
}

// Dequantizes and multiplies one step (chunk entry c of a slot): per tile pair and
// packed word, 8 weights x 2 tiles of A fragments against the activation rows in B.
template <class T, Form F, int kRowGroups, int kTN, class RingT>
__device__ __forceinline__ void compute_step(const Params& p, const std::uint32_t (&x)[kRowGroups][16], int lane,
                                             int slot, int c, const RingT& ring, float (&acc)[kTN / 2][kRowGroups][4]) {
  if constexpr (is_block_form(F)) {  // the unit holds the lane's scales: see BlockLane
#pragma unroll
    for (int jp = 0; jp < kTN / 2; ++jp) {
      BlockLane<F> bl[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        bl[u] = load_block_lane<F>(reinterpret_cast<const std::uint8_t*>(ring.unit(slot, c, 2 * jp + u)), lane);
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
      sc[u].s = Act<T>::splat(ring.scale(slot, c, j, g, r, p.groups_per_step));
      sc[u].m = Act<T>::splat(F == Form::q4_zero_point ? ring.minimum(slot, c, j, g, r, p.groups_per_step) : std::uint16_t{0});
#pragma unroll
      for (int h = 0; h < RingT::kLoads; ++h) v[u][h] = ring.unit(slot, c, j)[h * 32 + lane];
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
template <Form F, int kTN, class RingT>
__device__ __forceinline__ void compute_step_sub(const std::uint32_t (&x)[16], int lane, int slot, int c,
                                                 const RingT& ring, float (&acc)[kTN / 2][1][4]) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  constexpr bool kHalves = formats::block_halves(kB);  // two sub-blocks of 16 a lane: words 0-1, 2-3
  constexpr int kLow = formats::block_low_bytes(kB);
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
    uint4 q[2];
    std::uint32_t h0[2] = {0, 0}, h1[2] = {0, 0};
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      unit[u] = reinterpret_cast<const std::uint8_t*>(ring.unit(slot, c, 2 * jp + u));
      q[u] = load_low_plane<kB>(unit[u], lane);
      if constexpr (formats::block_high_planes(kB) >= 1) h0[u] = *reinterpret_cast<const std::uint32_t*>(unit[u] + kLow + 4 * lane);
      if constexpr (formats::block_high_planes(kB) >= 2) {
        h1[u] = *reinterpret_cast<const std::uint32_t*>(unit[u] + kLow + 128 + 4 * lane);
      }
    }
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // halves: k 16..31 in d_hi
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      std::uint32_t b[2][4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
#pragma unroll
        for (int i = 0; i < 4; ++i) b[u][i] = block_code_pair<F>(q[u], h0[u], h1[u], w, i);
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

// The lane's activation runs of one step: rows r and r + 8, k = 128 * step + 32c.
template <int kRowGroups>
__device__ __forceinline__ void load_x(const Params& p, const std::uint16_t* const (&xs)[kRowGroups],
                                       const bool (&row_ok)[kRowGroups], std::int64_t step, std::int64_t fast_end,
                                       int c, std::uint32_t (&x)[kRowGroups][16]) {
#pragma unroll
  for (int rg = 0; rg < kRowGroups; ++rg) {
    if (!row_ok[rg]) {
#pragma unroll
      for (int i = 0; i < 16; ++i) x[rg][i] = 0;
    } else if (step < fast_end) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const uint4 chunk = __ldg(reinterpret_cast<const uint4*>(xs[rg]) + v);
        x[rg][4 * v + 0] = chunk.x, x[rg][4 * v + 1] = chunk.y, x[rg][4 * v + 2] = chunk.z, x[rg][4 * v + 3] = chunk.w;
      }
    } else {
      std::uint32_t ragged[16];  // in local memory: keeps x itself in registers
      load_x_run_ragged(xs[rg], p.k - (step * formats::kPackStepK + 32 * c), ragged);
#pragma unroll
      for (int i = 0; i < 16; ++i) x[rg][i] = ragged[i];
    }
  }
}

// ---- host side: the choices both kernels share ----

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
inline int default_pdl(const Variant& v) { return v.pdl >= 0 ? v.pdl : kDefaultPdl; }

// M <= 2 on a GGML block form: the sub-block decode (Variant::block_decode 1; 0 the per-weight
// f16 decode). The default takes it for the K-quants only: H100, M = 1, 4096 x 14336 / 14336 x
// 4096, Q4_K 41/55 -> 48/62% of copy, Q6_K 45/62 -> 50/66%, but Q5_1 57/68 -> 51/67% and Q5_0
// 53/65 -> 51/66% (bench/notes/weight_only.md "sub-block decode"); Q3_K and Q2_K by analogy
// with Q6_K and Q4_K (not measured yet).
template <Form F>
bool sub_block_decode(const Params& p, const Variant& v) {
  constexpr bool kDefault = F == Form::q4_k || F == Form::q5_k || F == Form::q6_k || F == Form::q3_k || F == Form::q2_k;
  return is_block_form(F) && p.m <= 2 && (v.block_decode == 1 || (v.block_decode < 0 && kDefault));
}

}  // namespace lowbit::cuda::weight_only::gemv_step
