// Weight-only GEMM for M > 16 on Hopper's wgmma (sm_90a): lowbit's grouped INT4 (Q4_1,
// Q4_0) and INT8 forms, f16 and bf16 activations, and the GGML block forms (Q5_0, Q5_1,
// the K-quants; f16 activations, TMA loads only).
//
// The transposed product: out^T [N x M] = W [N x K] * X^T. The weights are wgmma's A
// operand, dequantized into registers; the activations its B operand, K-major in shared
// memory (X's rows as they are). A block runs two warpgroups over kBN activation rows
// (32, 64 or 128 by M); each warpgroup owns kMi m64 blocks of weight rows (kBN 128: 2,
// a 128 x 128 tile a warpgroup, 256 weight rows a block; else 1, 128 a block): per k16
// kMi wgmma m64 n(kBN) k16, A from registers.
//
// Pipeline: a kStages-deep ring of K steps of 128 (one packed unit): X's kBN x 128 tile
// written with the 128-byte swizzle the wgmma descriptor reads (two 64-wide atoms), the
// block's 16 or 32 units of codes copied as they are, and their scales / mins. A stage
// arrives either as four TMA boxes on the stage's full-barrier (kTma, the default where
// the activations allow it: 1.06-1.36x on the H200) or as every thread's cp.async
// (Loader). TMA: a producer issues the boxes as soon as the stage's empty-barrier says
// every consumer warp is done with the step it held (a warp arrives for step i - 1 at the
// end of step i: its wait_group 1 before k16 block 1 left only step i's groups in
// flight), so the consumers never wait on each other or on a consumer's issue of the
// loads. The producer is a ninth warp at 32 / 64 activation rows; at 128 (two m64 blocks
// a warpgroup, ~200 registers a consumer thread) a third warpgroup that gives its
// registers to the consumers (setmaxnreg), since registers are allotted in whole
// warpgroups. cp.async: steps are prefetched kStages - 2 ahead after a block barrier a
// step, so the stage refilled at step i last held step i - 2, whose wgmmas a thread has
// waited for (wait_group 1 in step i - 1) before the barrier of step i.
//
// A fragments from the packed layout (formats/weight_pack.h). The layout gives lane (r,
// c') of a tile its row r's k 32c' .. 32c' + 31; wgmma's lane (g, c) needs, of k16 block
// j, rows g and g + 8 at k 16j + {2c, 2c + 1, 2c + 8, 2c + 9}: the k pair c of each 8-k
// run. So a lane reads the 16-byte chunks (g, j / 2) of its two tiles from shared memory
// (the 4 lanes of a quad read the same chunk: broadcasts) and takes its nibbles:
//   INT4: word 2 (j % 2) (+ 1 for k + 8) holds the pair c at nibbles c and c + 4, so each
//         A register comes straight from its word: a shift by 4c, a LOP3 with the magic
//         number, a subtraction (int4_code_pair_at), then the scale;
//   INT8: bytes 2c, 2c + 1 and 2c + 8, 2c + 9 of the chunk (16h + b = k of half h = j % 2),
//         one select per word and a PRMT.
//   block forms: the unit's lane (g, j / 2) codes and factors (load_block_lane), pairs c
//         of words 2 (j % 2) and 2 (j % 2) + 1 (code_pair_1024_at: the pair is the lane's
//         quad column, a run-time value), scaled as the GEMVs' per-weight decode does
//         (scale_block_pair): the same f16 weights.
// That reads 4x the code bytes from shared memory that a wgmma-native layout would; it
// keeps ONE packed layout for the GEMVs and this kernel (no second copy of the weights),
// and costs no speed: the native read, tried, was no faster at any M (H200, session 46).
// Dequantization of k16 block j + 1 overlaps the wgmma of block j (wait_group 1: two A
// fragments in flight), or, where the two consumer warpgroups ping-pong (Turns, 128
// activation rows), one warpgroup's half step of dequantization overlaps the other's
// wgmmas.
//
// Split-K across a thread-block cluster where the waves' model says it pays (1, 2, 4
// or 8 blocks along K; core/split_k.h): every block leaves its FP32 tile in its own
// shared memory and after a cluster barrier block s sums the rows s, s + splits, ... over
// all ranks in rank order (deterministic, no atomics, no workspace). The same
// shared-memory tile makes the output stores whole 16-byte rows of N. A block that holds
// all of K (no split) instead writes its tile in T with stmatrix and stores it by TMA
// (store_tile), where the output's rows allow: the split path's pass cost ~9 us of a
// 128-row block's ~103 at 2048 x 28672 x 8192, with the SM's tensor cores idle.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/device_buffer.h"
#include "core/pdl.cuh"
#include "core/split_k.h"
#include "cuda/gemm/tma.h"
#include "cuda/named_barrier.cuh"
#include "cuda/sm90_kernel.h"
#include "cuda/weight_only/common.cuh"
#include "cuda/weight_only/launch.cuh"
#include "cuda/wgmma_rs.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::weight_only {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;  // two warpgroups: the consumers (+ the TMA form's producer warp)
constexpr int kMaxGroups = 4;  // scale groups per tile per step (group 32)
constexpr int kGroupM = 8;     // m blocks per rasterization group (L2 reuse of the weight panel)
constexpr int kMaxSplits = 8;  // blocks of a split-K cluster (the portable cluster size)

// The block's shape for kBN activation rows: each warpgroup owns kMi m64 blocks of weight
// rows (the rule, wgmma_tile_n: 2 for kBN 128, 128 x 128 a warpgroup, which halves the
// activation bytes read from L2 per FLOP against 64 x 128; 1 below, where the weights'
// bandwidth, not L2, binds and more, smaller blocks fill the GPU, except INT8 at kBN 64,
// whose codes weigh as much as X a step; bench/notes/weight_only.md).
template <Form F, int kBN, int kMi_>
struct Layout {
  static constexpr int kMi = kMi_;
  static constexpr int kTiles = 16 * kMi;  // packed n-tiles of 8: 128 or 256 weight rows
  static constexpr int kScaleBytes = is_block_form(F) ? 0 : kTiles * kMaxGroups * 8 * 2;  // block forms: in the units
  static constexpr int kX = kBN * 256;  // two 64-k atoms of kBN x 128 bytes
  static constexpr int kCodes = kTiles * form_unit_bytes<F>();
  static constexpr int kStage = (kX + kCodes + 2 * kScaleBytes + 1023) / 1024 * 1024;  // atoms 1024-aligned
  // kBN 128: as many stages as fit (4 for INT4, 3 for INT8: steps are long there); below,
  // 4, so that two or three blocks share an SM (one, for kMi 2's stages of ~37-53 KB).
  static constexpr int kStages = kBN >= 128 ? (220 * 1024 / kStage < 5 ? 220 * 1024 / kStage : 5) : 4;
  static constexpr int kAhead = kStages - 2;
  static constexpr int kSmem = kStages * kStage + 1024;  // + slack to align the ring to 1024 bytes
  static constexpr int kPartialStride = kTiles * 8 + 4;  // floats a row of the FP32 output tile (conflict-free)
  static constexpr int kPartial = kBN * kPartialStride * 4;
  static_assert(kAhead >= 1, "at least one step in flight");
  static_assert(kPartial <= kStages * kStage, "the output tile reuses the ring");
  static_assert(kSmem <= 227 * 1024, "shared memory per block");
};

// Byte offset of 16-byte chunk j (8 k, 0..15) of X row `row` within a stage: atom j / 8,
// the 128-byte swizzle (chunk ^ row % 8) inside it.
template <int kBN>
__device__ __forceinline__ std::uint32_t x_chunk_offset(int row, int j) {
  return static_cast<std::uint32_t>((j / 8) * kBN * 128 + row * 128 + (((j % 8) ^ (row % 8)) * 16));
}

// The copies one thread issues per step, as mma.cu's Loader: chunk i of each kind a fixed
// stride after chunk 0, one pointer per kind bumped per step, masks of chunks in range.
template <Form F, int kBN, int kMi>
struct Loader {
  using L = Layout<F, kBN, kMi>;
  static constexpr int kXChunks = kBN * 16 / kThreads;                   // 2, 4, 8
  static constexpr int kPerUnit = form_unit_bytes<F>() / 16;             // 32 or 64
  static constexpr int kCodeChunks = L::kTiles * kPerUnit / kThreads;  // 2 .. 8
  static constexpr int kCodeTileStride = kThreads / kPerUnit;          // 8 or 4
  static constexpr int kScaleChunks = 2 * L::kTiles * kMaxGroups;      // 128 or 256: one a thread at most
  static_assert(kCodeChunks * kThreads == L::kTiles * kPerUnit, "units split evenly over the threads");
  const std::uint16_t* x;
  std::int64_t x_stride;  // elements from chunk i to i + 1 (16 rows)
  std::uint32_t x_ok;     // bit i: chunk i's row < M
  const std::uint8_t* codes;
  std::int64_t code_stride;
  std::uint32_t code_ok;
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
    const int t = tid / kPerUnit, chunk = tid % kPerUnit;
    code_ok = 0;
#pragma unroll
    for (int i = 0; i < kCodeChunks; ++i) code_ok |= (tile0 + t + kCodeTileStride * i < p.n_tiles ? 1u : 0u) << i;
    codes = p.codes + ((tile0 + t) * p.k_steps + step0) * form_unit_bytes<F>() + chunk * 16;
    code_stride = kCodeTileStride * p.k_steps * form_unit_bytes<F>();
    // Scale chunks: list (0 scales, 1 mins) x tiles x 4 groups, one a thread.
    const int list = tid / (L::kTiles * kMaxGroups), st = (tid / kMaxGroups) % L::kTiles, g = tid % kMaxGroups;
    const int groups_here = p.groups_per_step > 0 ? p.groups_per_step : 1;
    scale_src = nullptr;
    scale_dst = L::kX + L::kCodes + list * L::kScaleBytes + (st * kMaxGroups + g) * 16;
    scale_step = p.groups_per_step * 8;
    if (tid < kScaleChunks && g < groups_here && (list == 0 || F == Form::q4_zero_point) && tile0 + st < p.n_tiles) {
      scale_src = (list == 0 ? p.scales : p.mins) + ((tile0 + st) * p.groups + step0 * p.groups_per_step + g) * 8;
    }
  }

  __device__ __forceinline__ void issue(const Params& p, std::uint8_t* stage, std::int64_t step) {
    const bool x_fast = p.x_vec16 && (step + 1) * formats::kPackStepK <= p.k;
    const int row = threadIdx.x / 16, j = threadIdx.x % 16;
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) {
      const bool ok = (x_ok >> i) & 1u;
      const std::uint16_t* src = x + (ok ? i * x_stride : 0);
      std::uint8_t* dst = stage + x_chunk_offset<kBN>(row + 16 * i, j);
      if (x_fast || !ok) {
        cp_async16(dst, src, ok ? 16 : 0);
      } else {
        store_x_ragged(p, dst, src, step * formats::kPackStepK + j * 8);
      }
    }
    x += formats::kPackStepK;
#pragma unroll
    for (int i = 0; i < kCodeChunks; ++i) {
      const bool ok = (code_ok >> i) & 1u;
      cp_async16(stage + L::kX + (threadIdx.x + i * kThreads) * 16, codes + (ok ? i * code_stride : 0), ok ? 16 : 0);
    }
    codes += form_unit_bytes<F>();
    if (scale_src != nullptr) {
      cp_async16(stage + scale_dst, scale_src, 16);
      scale_src += scale_step;
    }
  }
};

// The TMA form of Loader: one thread fills a stage with a step, into the same places
// (so compute_step reads it unchanged), and the stage's full-barrier counts its bytes.
// X: two boxes of kBN rows x 128 bytes (the two 64-k atoms), in the 128-byte swizzle the
// B descriptor reads; codes: one box of the block's kTiles rows x the step's unit (the
// packed codes as rows of k_steps units a tile); scales (and mins): one box of kTiles rows
// x kMaxGroups groups from the step's first (past a step's own groups, at group 64 / 128 or
// per channel, it reads a few neighbours' bytes it never uses). Everything past M, K or N
// loads as zeros and counts toward the bytes.
struct WgmmaMaps {  // CUtensorMap keeps them 64-byte aligned, as TMA needs
  CUtensorMap x, codes, scales, mins;
  CUtensorMap out;  // the output in boxes of kBN rows x 64 columns (make_out_map)
};

// The output's store map, where one block writes whole tiles (no split) and TMA takes the
// output (wgmma_tma_store_takes). Whether it was made.
template <int kBN>
bool make_out_map(const Params& p, CUtensorMap* map) {
  return wgmma_tma_store_takes(p) &&
         gemm::encode_swizzled_128(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, p.out, p.n, p.m, 2 * p.ldo, 64, kBN) == nullptr;
}

// The maps of one launch (host; ~1-2 us each).
template <Form F, int kBN, int kMi>
WgmmaMaps make_maps(const Params& p) {
  using L = Layout<F, kBN, kMi>;
  static_assert(is_block_form(F) || L::kScaleBytes == L::kTiles * kMaxGroups * 16, "a tile's scale row is kMaxGroups chunks");
  WgmmaMaps maps{};
  const auto check = [](const char* refused, const char* what) {
    LOWBIT_CHECK(refused == nullptr, "weight_only: the wgmma kernel's TMA map of the ", what, ": ", refused);
  };
  // The boxes' coordinates are 32-bit: K's bytes, and the codes' 8-byte words of a tile.
  LOWBIT_CHECK(p.k_steps * form_unit_bytes<F>() / 8 < (std::int64_t{1} << 31) && 2 * p.k < (std::int64_t{1} << 31),
               "weight_only: K of ", p.k, " is too long for the wgmma kernel's TMA loads");
  // X as bytes: rows of 2K bytes, ldx * 2 apart, boxes of kBN rows x 128 bytes.
  check(gemm::encode_int8_k_major(&maps.x, p.x, p.m, 2 * p.k, 2 * p.ldx, kBN, 128), "activations");
  const std::int64_t unit = form_unit_bytes<F>(), tile_bytes = p.k_steps * unit;
  check(gemm::encode_rows(&maps.codes, CU_TENSOR_MAP_DATA_TYPE_UINT64, p.codes, tile_bytes / 8, p.n_tiles, tile_bytes,
                          static_cast<int>(unit / 8), L::kTiles),
        "codes");
  if constexpr (is_block_form(F)) return maps;  // the factors are in the units
  const std::int64_t scale_row = p.groups * 8;  // u16 elements of a tile
  check(gemm::encode_rows(&maps.scales, CU_TENSOR_MAP_DATA_TYPE_UINT16, p.scales, scale_row, p.n_tiles, scale_row * 2,
                          kMaxGroups * 8, L::kTiles),
        "scales");
  if (F == Form::q4_zero_point) {
    check(gemm::encode_rows(&maps.mins, CU_TENSOR_MAP_DATA_TYPE_UINT16, p.mins, scale_row, p.n_tiles, scale_row * 2,
                            kMaxGroups * 8, L::kTiles),
          "mins");
  }
  return maps;
}

#if defined(LOWBIT_SM90A_DEVICE)

template <Form F, int kBN, int kMi>
struct TmaLoader {
  using L = Layout<F, kBN, kMi>;
  static constexpr bool kMins = F == Form::q4_zero_point;
  static constexpr std::uint32_t kStepBytes = L::kX + L::kCodes + (kMins ? 2 : 1) * L::kScaleBytes;

  __device__ static void issue(const Params& p, const WgmmaMaps& maps, std::uint32_t stage_addr, std::uint32_t bar,
                               std::int64_t tile0, std::int64_t m0, std::int64_t step) {
    gemm::sm90::mbarrier_arrive_expect_tx(bar, kStepBytes);
    const int k_byte = static_cast<int>(step * formats::kPackStepK * 2);
    gemm::sm90::tma_load_2d(stage_addr, &maps.x, bar, k_byte, static_cast<int>(m0));
    gemm::sm90::tma_load_2d(stage_addr + kBN * 128, &maps.x, bar, k_byte + 128, static_cast<int>(m0));
    constexpr int kUnitWords = form_unit_bytes<F>() / 8;  // the codes map's elements are 8 bytes
    gemm::sm90::tma_load_2d(stage_addr + L::kX, &maps.codes, bar, static_cast<int>(step * kUnitWords),
                            static_cast<int>(tile0));
    if constexpr (is_block_form(F)) return;
    const int group = static_cast<int>(step * p.groups_per_step * 8);  // in u16 elements
    gemm::sm90::tma_load_2d(stage_addr + L::kX + L::kCodes, &maps.scales, bar, group, static_cast<int>(tile0));
    if constexpr (kMins) {
      gemm::sm90::tma_load_2d(stage_addr + L::kX + L::kCodes + L::kScaleBytes, &maps.mins, bar, group,
                              static_cast<int>(tile0));
    }
  }
};

// The INT8 codes of lane c in a 16-byte chunk (k 0..15 of one row): bytes 2c, 2c + 1 and
// 2c + 8, 2c + 9, as one word in dequant_int8_word's order.
__device__ __forceinline__ std::uint32_t gather_int8(const uint4& v, int c) {
  const std::uint32_t lo = c >= 2 ? v.y : v.x, hi = c >= 2 ? v.w : v.z;
  return __byte_perm(lo, hi, (c & 1) ? 0x7632 : 0x5410);
}

template <class T, Form F>
__device__ __forceinline__ Scale2<T> lane_scale(const std::uint16_t* scales, const std::uint16_t* mins, int tile,
                                                int group, int r) {
  Scale2<T> sc;
  sc.s = Act<T>::splat(scales[(tile * kMaxGroups + group) * 8 + r]);
  sc.m = Act<T>::splat(F == Form::q4_zero_point ? mins[(tile * kMaxGroups + group) * 8 + r] : std::uint16_t{0});
  return sc;
}

// FlashAttention-3's ping-pong between the two consumer warpgroups: they take turns to
// issue a batch of wgmmas, so that one's dequantization runs while the other's products
// hold the tensor cores. Named barrier 2 + w is warpgroup w's turn: it waits there
// (bar.sync) and hands the turn to the other with bar.arrive. Warpgroup 1 gives
// warpgroup 0 its first turn (start) and keeps its own last one (hand_over of the last
// step's last batch), so every barrier's arrivals match its waits.
struct Turns {
  int wg;
  bool last_step;  // the warpgroup's last K step
  __device__ void start() const {
    if (wg == 1) named_barrier_arrive(2, kThreads);
  }
  __device__ void take() const { named_barrier(2 + wg, kThreads); }
  __device__ void hand_over(bool last_batch) const {
    if (!(wg == 1 && last_step && last_batch)) named_barrier_arrive(2 + (wg ^ 1), kThreads);
  }
};

// One K step of a warpgroup: 8 k16 blocks, 2 of each packed lane column cp; column(cp)
// reads the column's codes and factors from the stage and returns fill(mi, h, a), which
// builds block 2 cp + h's A fragment of m64 block mi in place.
// Without ping-pong each block's kMi wgmmas are one group, issued once the group two
// blocks back (which read the registers a reuses) is done: block j + 1's fragments are
// built while block j's group runs. With it, a half step's 4 blocks are built, then
// issued in the warpgroup's turn as one group, which the next half step waits for before
// it overwrites their registers: the other warpgroup's batch runs meanwhile.
template <class T, int kBN, int kMi, bool kPingPong, class Column>
__device__ __forceinline__ void issue_step(std::uint64_t x_desc, float (&acc)[kMi][kBN / 2], bool first,
                                           const Turns& turns, const Column& column) {
  // Block j's descriptor: the stage's plus the block's offset >> 4 in the start-address
  // field (bits 0-13: shared addresses stay below 2^18, so the sum never carries out of
  // it), one add instead of the address masks and shifts a block.
  const auto desc_of = [&](int j) {
    return x_desc + static_cast<std::uint64_t>(((j / 4) * kBN * 128 + (j % 4) * 32) >> 4);
  };
  if constexpr (!kPingPong) {
#pragma unroll
    for (int cp = 0; cp < 4; ++cp) {
      const auto fill = column(cp);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        std::uint32_t a[kMi][4];
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) fill(mi, h, a[mi]);
        gemm::sm90::wgmma_wait<1>();
        gemm::sm90::wgmma_fence();
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
          gemm::sm90::wgmma_rs<T, kBN>(acc[mi], a[mi], desc_of(2 * cp + h), first && cp == 0 && h == 0 ? 0 : 1);
        }
        gemm::sm90::wgmma_commit();
      }
    }
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      std::uint32_t a[2][2][kMi][4];  // [column of the half][h][mi]
      gemm::sm90::wgmma_wait<0>();     // the last batch is done with its registers
#pragma unroll
      for (int c2 = 0; c2 < 2; ++c2) {
        const auto fill = column(2 * half + c2);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int mi = 0; mi < kMi; ++mi) fill(mi, h, a[c2][h][mi]);
        }
      }
      turns.take();
      gemm::sm90::wgmma_fence();
#pragma unroll
      for (int c2 = 0; c2 < 2; ++c2) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int j = 4 * half + 2 * c2 + h;
#pragma unroll
          for (int mi = 0; mi < kMi; ++mi) {
            gemm::sm90::wgmma_rs<T, kBN>(acc[mi], a[c2][h][mi], desc_of(j), first && j == 0 ? 0 : 1);
          }
        }
      }
      gemm::sm90::wgmma_commit();
      turns.hand_over(half == 1);
    }
  }
}

// The grouped forms' columns: the lane's code words and scales of both tiles of each m64
// block.
template <class T, Form F, int kBN, int kMi, bool kPingPong>
__device__ __forceinline__ void compute_grouped_step(const Params& p, const std::uint8_t* stage, std::uint32_t x_addr,
                                                     int wg, int warp, int lane, float (&acc)[kMi][kBN / 2],
                                                     bool first, const Turns& turns) {
  using L = Layout<F, kBN, kMi>;
  const int g = lane / 4, c = lane % 4;
  const auto shift = static_cast<std::uint32_t>(4 * c);  // the lane's nibbles c, c + 4 of a word
  const std::uint8_t* codes = stage + L::kX;
  const auto* scales = reinterpret_cast<const std::uint16_t*>(codes + L::kCodes);
  const auto* mins = scales + L::kScaleBytes / 2;
  constexpr int kUnit = form_unit_bytes<F>();
  // Tiles of m64 block mi: rows g and g + 8 of the warp's 16.
  const auto tile_lo = [=](int mi) { return 8 * kMi * wg + 8 * mi + 2 * warp; };
  const auto column = [&](int cp) {  // the packed lane column: k16 blocks j = 2 cp, 2 cp + 1
    const int group = cp >> p.group_shift;
    Scale2<T> s_lo[kMi], s_hi[kMi];
    uint4 lo4[kMi], hi4[kMi];
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) {
      const int t = tile_lo(mi);
      s_lo[mi] = lane_scale<T, F>(scales, mins, t, group, g);
      s_hi[mi] = lane_scale<T, F>(scales, mins, t + 1, group, g);
      if constexpr (F != Form::int8) {
        lo4[mi] = *reinterpret_cast<const uint4*>(codes + t * kUnit + (4 * g + cp) * 16);
        hi4[mi] = *reinterpret_cast<const uint4*>(codes + (t + 1) * kUnit + (4 * g + cp) * 16);
      }
    }
    return [=](int mi, int h, std::uint32_t(&a)[4]) {
      if constexpr (F == Form::int8) {
        // Half h of the lane column: chunk (h * 32 + 4 g + cp) of each unit.
        const int t = tile_lo(mi);
        const uint4 lo = *reinterpret_cast<const uint4*>(codes + t * kUnit + (h * 32 + 4 * g + cp) * 16);
        const uint4 hi = *reinterpret_cast<const uint4*>(codes + (t + 1) * kUnit + (h * 32 + 4 * g + cp) * 16);
        std::uint32_t b_lo[2], b_hi[2];
        dequant_int8_word<T>(gather_int8(lo, c), s_lo[mi], b_lo);
        dequant_int8_word<T>(gather_int8(hi, c), s_hi[mi], b_hi);
        a[0] = b_lo[0], a[1] = b_hi[0], a[2] = b_lo[1], a[3] = b_hi[1];
      } else {
        // Register i from word i of (row g at k, row g + 8 at k, row g at k + 8, row
        // g + 8 at k + 8): its nibbles c, c + 4.
        const std::uint32_t w0 = h == 0 ? lo4[mi].x : lo4[mi].z, w1 = h == 0 ? hi4[mi].x : hi4[mi].z;
        const std::uint32_t w2 = h == 0 ? lo4[mi].y : lo4[mi].w, w3 = h == 0 ? hi4[mi].y : hi4[mi].w;
        a[0] = scale_pair<T, F>(int4_code_pair_at<T, F>(w0, shift), s_lo[mi]);
        a[1] = scale_pair<T, F>(int4_code_pair_at<T, F>(w1, shift), s_hi[mi]);
        a[2] = scale_pair<T, F>(int4_code_pair_at<T, F>(w2, shift), s_lo[mi]);
        a[3] = scale_pair<T, F>(int4_code_pair_at<T, F>(w3, shift), s_hi[mi]);
      }
    };
  };
  issue_step<T, kBN, kMi, kPingPong>(gemm::sm90::sw128_descriptor(x_addr), acc, first, turns, column);
}

// The GGML block forms' columns: each tile's lane (g, cp) of the unit (codes, sub-block
// factors, row factors) read once, then its pairs c of words 2h, 2h + 1 for k16 block
// 2 cp + h.
template <class T, Form F, int kBN, int kMi, bool kPingPong>
__device__ __forceinline__ void compute_block_step(const std::uint8_t* stage, std::uint32_t x_addr, int wg, int warp,
                                                   int lane, const QuadColumn& quad, float (&acc)[kMi][kBN / 2],
                                                   bool first, const Turns& turns) {
  constexpr formats::WeightBlocks kB = blocks_of(F);
  constexpr int kUnit = form_unit_bytes<F>();
  const int g = lane / 4;
  const std::uint8_t* codes = stage + Layout<F, kBN, kMi>::kX;
  const auto column = [&](int cp) {
    BlockLane<F> lo[kMi], hi[kMi];
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) {
      const int t = 8 * kMi * wg + 8 * mi + 2 * warp;
      lo[mi] = load_block_lane<F>(codes + t * kUnit, 4 * g + cp);
      hi[mi] = load_block_lane<F>(codes + (t + 1) * kUnit, 4 * g + cp);
    }
    // Registers: (row g at k, row g + 8 at k, row g at k + 8, row g + 8 at k + 8).
    return [=, &quad](int mi, int h, std::uint32_t(&a)[4]) {
      a[0] = scale_block_pair<F>(lo[mi], 2 * h, code_pair_1024_at<kB>(lo[mi].c, 2 * h, quad));
      a[1] = scale_block_pair<F>(hi[mi], 2 * h, code_pair_1024_at<kB>(hi[mi].c, 2 * h, quad));
      a[2] = scale_block_pair<F>(lo[mi], 2 * h + 1, code_pair_1024_at<kB>(lo[mi].c, 2 * h + 1, quad));
      a[3] = scale_block_pair<F>(hi[mi], 2 * h + 1, code_pair_1024_at<kB>(hi[mi].c, 2 * h + 1, quad));
    };
  };
  issue_step<T, kBN, kMi, kPingPong>(gemm::sm90::sw128_descriptor(x_addr), acc, first, turns, column);
}

template <class T, Form F, int kBN, int kMi, bool kPingPong>
__device__ __forceinline__ void compute_step(const Params& p, const std::uint8_t* stage, std::uint32_t x_addr,
                                             int wg, int warp, int lane, const QuadColumn& quad,
                                             float (&acc)[kMi][kBN / 2], bool first, const Turns& turns) {
  if constexpr (is_block_form(F)) {
    compute_block_step<T, F, kBN, kMi, kPingPong>(stage, x_addr, wg, warp, lane, quad, acc, first, turns);
  } else {
    compute_grouped_step<T, F, kBN, kMi, kPingPong>(p, stage, x_addr, wg, warp, lane, acc, first, turns);
  }
}

// The output tile of a block that holds all of K, stored by TMA: the consumers convert
// their accumulators (+ bias) to T and write them transposed (stmatrix) into the ring as
// kTiles / 8 boxes of [kBN activation rows][64 weight rows] with the 128-byte swizzle
// (16-byte chunk ch of row m at ch ^ m % 8: a matrix's 8 rows hit 8 distinct chunks), then
// one thread stores the boxes; TMA drops what lies past M and N (a multiple of 8). The
// values are the reduction path's exactly: (0 + acc) + bias, rounded once.
template <class T, int kBN, int kMi>
__device__ __forceinline__ void store_tile(const Params& p, const CUtensorMap* out_map, std::uint32_t ring_addr,
                                           float (&acc)[kMi][kBN / 2], int wg, int warp, int lane,
                                           std::int64_t tile0, std::int64_t m0) {
  constexpr std::uint32_t kBox = kBN * 128;  // bytes of a box: kBN rows of 64 values
  constexpr int kTiles = 16 * kMi;
  const int g = lane / 4, q = lane / 8, i = lane % 8;
  const auto pack = [](float lo, float hi) {
    return static_cast<std::uint32_t>(Act<T>::from_float(lo)) |
           static_cast<std::uint32_t>(Act<T>::from_float(hi)) << 16;
  };
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
    const int n_warp = 64 * (kMi * wg + mi) + 16 * warp;  // the warp's 16 weight rows of the tile
    float bias[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t n = tile0 * 8 + n_warp + 8 * h + g;
      bias[h] = p.bias != nullptr && n < p.n ? Act<T>::to_float(p.bias[n * p.bias_stride]) : 0.0f;
    }
    // Matrix q of a store: activation rows 8 (j + q / 2) .., weight rows n_warp + 8 (q % 2) ..;
    // lane 8q + i gives its row i's address.
    const int n_chunk = n_warp + 8 * (q % 2);
    const std::uint32_t row_base = ring_addr + static_cast<std::uint32_t>(n_chunk / 64) * kBox;
    const int ch = (n_chunk % 64) / 8;
#pragma unroll
    for (int j = 0; j < kBN / 8; j += 2) {
      const int m = 8 * (j + q / 2) + i;
      std::uint32_t r[4];
#pragma unroll
      for (int mq = 0; mq < 4; ++mq) {
        const int jj = j + mq / 2, h = mq % 2;
        r[mq] = pack((0.0f + acc[mi][4 * jj + 2 * h]) + bias[h], (0.0f + acc[mi][4 * jj + 2 * h + 1]) + bias[h]);
      }
      gemm::sm90::stmatrix_x4_trans(row_base + static_cast<std::uint32_t>(m * 128 + ((ch ^ i) * 16)), r);
    }
  }
  gemm::sm90::fence_proxy_async_shared();  // the generic-proxy writes, visible to TMA's reads
  named_barrier(1, kThreads);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int b = 0; b < kTiles / 8; ++b) {
      gemm::sm90::tma_store_2d(out_map, ring_addr + b * kBox, static_cast<int>(tile0 * 8 + 64 * b),
                               static_cast<int>(m0));
    }
    gemm::sm90::bulk_commit();
    gemm::sm90::bulk_wait_read_all();  // the block's shared memory stays until the stores read it
  }
}

#endif  // LOWBIT_SM90A_DEVICE

// Grouped rasterization: kGroupM m blocks run over all n blocks before the next group,
// so the blocks resident at once share a panel of weights and one of activations in L2.
// 32-bit: the grid has fewer than 2^31 blocks and kGroupM n_blocks fit too (launch
// checks), and 64-bit divisions cost a call each in the prologue.
__device__ __forceinline__ void tile_of(std::uint32_t tile, std::uint32_t n_blocks, std::uint32_t m_blocks,
                                        std::int64_t* n_block, std::int64_t* m_block) {
  const std::uint32_t span = kGroupM * n_blocks;
  const std::uint32_t group = tile / span, first_m = group * kGroupM;
  const std::uint32_t group_m = m_blocks - first_m < kGroupM ? m_blocks - first_m : kGroupM;
  const std::uint32_t in_group = tile - group * span;
  *m_block = first_m + in_group % group_m;
  *n_block = in_group / group_m;
}

// The TMA form's producer: a warp at 32 / 64 activation rows; at 128 a warpgroup (two m64
// blocks a consumer warpgroup need ~200 registers a thread, and a ninth warp would cap
// them at 168: the file is allotted in whole warpgroups), whose registers go to the
// consumers.
constexpr int producer_threads(bool tma, int bn) { return !tma ? 0 : bn <= 64 ? 32 : 128; }
// Threads a block: the consumers and the producer.
constexpr int block_threads(bool tma, int bn) { return kThreads + producer_threads(tma, bn); }

#if defined(LOWBIT_SM90A_DEVICE)
// The TMA ring's barriers, by thread 0: full[s] waits for the producer's arrival and the
// stage's bytes, empty[s] for every consumer warp. The caller syncs before any wait.
template <int kStages>
__device__ __forceinline__ void init_ring_barriers(std::uint64_t* full, std::uint64_t* empty) {
  if (threadIdx.x != 0) return;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    gemm::sm90::mbarrier_init(gemm::sm90::smem_address(&full[s]), 1);
    gemm::sm90::mbarrier_init(gemm::sm90::smem_address(&empty[s]), kThreads / 32);
  }
  gemm::sm90::fence_barrier_init();
}

// The producer's tensor maps into the descriptor cache before its first copies.
template <Form F, int kBN, int kMi>
__device__ __forceinline__ void prefetch_maps(const WgmmaMaps& maps) {
  gemm::sm90::prefetch_tensor_map(&maps.x);
  gemm::sm90::prefetch_tensor_map(&maps.codes);
  if constexpr (!is_block_form(F)) gemm::sm90::prefetch_tensor_map(&maps.scales);
  if constexpr (TmaLoader<F, kBN, kMi>::kMins) gemm::sm90::prefetch_tensor_map(&maps.mins);
}
#endif
// Registers a thread of the producer warpgroup keeps and a consumer's after the hand-over:
// 128 x 40 + 256 x 232 of the 65,536.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

// kTma: the loads as TMA on a full-barrier a stage, issued by the producer (TmaLoader,
// maps); else cp.async by every thread (Loader; maps unused).
template <class T, Form F, int kBN, int kMi, bool kTma>
__global__ void __launch_bounds__(block_threads(kTma, kBN), 1) wgmma_kernel(const Params p, int splits,
                                                                       std::int64_t n_blocks, std::int64_t m_blocks,
                                                                       const __grid_constant__ WgmmaMaps maps,
                                                                       bool store_out) {
#if defined(LOWBIT_SM90A_DEVICE)
  using L = Layout<F, kBN, kMi>;
  // A static marker: its size tells the host that this image has the sm_90a body (a
  // volatile store, so that the compiler keeps it).
  __shared__ int sm90a_body;
  if (threadIdx.x == 0) *static_cast<volatile int*>(&sm90a_body) = 0;
  extern __shared__ std::uint8_t dynamic_smem[];
  std::uint8_t* const ring = dynamic_smem + ((1024u - gemm::sm90::smem_address(dynamic_smem) % 1024u) % 1024u);
  const std::uint32_t ring_addr = gemm::sm90::smem_address(ring);

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int split = static_cast<int>(blockIdx.x % static_cast<unsigned>(splits));
  std::int64_t n_block, m_block;
  tile_of(blockIdx.x / static_cast<unsigned>(splits), static_cast<std::uint32_t>(n_blocks),
          static_cast<std::uint32_t>(m_blocks), &n_block, &m_block);
  const std::int64_t tile0 = n_block * L::kTiles, m0 = m_block * kBN;
  const auto k_steps = static_cast<std::uint32_t>(p.k_steps);  // < 2^28 (launch checks)
  const std::int64_t step_begin = k_steps * split / splits, step_end = k_steps * (split + 1) / splits;

  float acc[L::kMi][kBN / 2];  // zeroed by the first wgmma (scale-d 0): no other instruction writes it
  const QuadColumn quad = make_quad_column<blocks_of(F)>(lane % 4);  // (block forms)
  // The consumers' ping-pong (Turns): where the producer warpgroup gave them the registers
  // for a half step's fragments, but INT8, whose fragments are read from shared memory
  // block by block (H200, 28672 x 8192: 0-6% slower at M 256-2048 with it).
  constexpr bool kPingPong = producer_threads(kTma, kBN) == 128 && F != Form::int8;

  cg::cluster_group cluster = cg::this_cluster();
  if constexpr (kTma) {
    __shared__ alignas(8) std::uint64_t full[L::kStages];   // a stage's step has landed
    __shared__ alignas(8) std::uint64_t empty[L::kStages];  // every consumer warp is done with it
    init_ring_barriers<L::kStages>(full, empty);
    __syncthreads();  // the barriers' initialization, before anyone waits on them
    if (threadIdx.x >= kThreads) {
      constexpr bool kProducerWarpgroup = producer_threads(kTma, kBN) == 128;
      if constexpr (kProducerWarpgroup) gemm::sm90::release_registers<kProducerRegs>();
      // The producer's first warp: step i into stage i % kStages once the step that stage
      // held (i - kStages) is released; the whole warp waits, lane 0 issues.
      if (threadIdx.x < kThreads + 32) {
        if (lane == 0) prefetch_maps<F, kBN, kMi>(maps);
        int stage = 0;
        std::uint32_t phase = 0;  // flips each time the ring wraps
        for (std::int64_t step = step_begin; step < step_end; ++step) {
          // The fill before this one was released (a fresh barrier's parity-1 wait returns at once).
          gemm::sm90::mbarrier_wait(gemm::sm90::smem_address(&empty[stage]), phase ^ 1u);
          if (lane == 0) {
            TmaLoader<F, kBN, kMi>::issue(p, maps, ring_addr + stage * L::kStage,
                                          gemm::sm90::smem_address(&full[stage]), tile0, m0, step);
          }
          __syncwarp();
          if (++stage == L::kStages) stage = 0, phase ^= 1u;
        }
      }
      // The consumers' epilogue synchronizes among themselves (named barrier 1); the
      // cluster's barriers are met by every thread of the block.
      if (splits > 1) {
        cluster.sync();
        cluster.sync();
      }
      return;
    }
    if constexpr (producer_threads(kTma, kBN) == 128) gemm::sm90::claim_registers<kConsumerRegs>();
    if constexpr (kPingPong) Turns{wg, false}.start();
    int stage = 0, last_stage = 0;
    std::uint32_t phase = 0;  // of the current stage's full-barrier: flips each time the ring wraps
    for (std::int64_t step = step_begin; step < step_end; ++step) {
      gemm::sm90::mbarrier_wait(gemm::sm90::smem_address(&full[stage]), phase);  // this step has landed
      compute_step<T, F, kBN, kMi, kPingPong>(p, ring + stage * L::kStage, ring_addr + stage * L::kStage, wg, warp,
                                              lane, quad, acc, step == step_begin, Turns{wg, step + 1 == step_end});
      // Its k16 block 1's wait_group 1 (ping-pong: its second half's wait_group 0) left
      // only this step's groups in flight: the step before is done with its stage.
      __syncwarp();
      if (step > step_begin && lane == 0) gemm::sm90::mbarrier_arrive(gemm::sm90::smem_address(&empty[last_stage]));
      last_stage = stage;
      if (++stage == L::kStages) stage = 0, phase ^= 1u;
    }
  } else {
    Loader<F, kBN, kMi> loader(p, m0, tile0, step_begin);
#pragma unroll
    for (int s = 0; s < L::kAhead; ++s) {
      if (step_begin + s < step_end) loader.issue(p, ring + s * L::kStage, step_begin + s);
      cp_async_commit();
    }
    int stage = 0;
    for (std::int64_t step = step_begin; step < step_end; ++step) {
      cp_async_wait<L::kAhead - 1>();          // this step's copies have landed (this thread's)
      gemm::sm90::fence_proxy_async_shared();  // ... and are visible to wgmma's reads
      __syncthreads();  // every thread's; the stage refilled below held step - 2, whose wgmmas are done
      const std::int64_t ahead = step + L::kAhead;
      const int ahead_stage = (stage + L::kAhead) % L::kStages;
      if (ahead < step_end) loader.issue(p, ring + ahead_stage * L::kStage, ahead);
      cp_async_commit();
      compute_step<T, F, kBN, kMi, false>(p, ring + stage * L::kStage, ring_addr + stage * L::kStage, wg, warp, lane,
                                          quad, acc, step == step_begin, Turns{wg, false});
      stage = stage + 1 == L::kStages ? 0 : stage + 1;
    }
  }
  gemm::sm90::wgmma_wait<0>();
#pragma unroll
  for (int mi = 0; mi < L::kMi; ++mi) gemm::sm90::fence_accumulators(acc[mi]);
  cp_async_wait<0>();
  named_barrier(1, kThreads);  // the ring is free: it becomes the output tile
  if (store_out) {  // one block holds all of K (no split)
    store_tile<T, kBN, L::kMi>(p, &maps.out, ring_addr, acc, wg, warp, lane, tile0, m0);
    return;
  }

  // The tile [kBN activation rows][kTiles * 8 weight rows] in FP32: acc[mi][4j + e] is
  // weight row 64 (kMi wg + mi) + 16 warp + g (+ 8 for e >= 2), activation row 8j + 2c + e % 2.
  float* const partial = reinterpret_cast<float*>(ring);
  {
    const int g = lane / 4, c = lane % 4;
#pragma unroll
    for (int mi = 0; mi < L::kMi; ++mi) {
      const int n_local = 64 * (L::kMi * wg + mi) + 16 * warp + g;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          partial[(8 * j + 2 * c + e % 2) * L::kPartialStride + n_local + 8 * (e / 2)] = acc[mi][4 * j + e];
        }
      }
    }
  }
  if (splits > 1) {
    cluster.sync();
  } else {
    named_barrier(1, kThreads);
  }
  // Block `split` stores activation rows split, split + splits, ...: kTiles runs of 8
  // weight rows (16 bytes of output) per row, its own rows' (row, run) items spread over
  // all threads (one a thread where kBN / splits x kTiles fills the block), the ranks'
  // partials summed in rank order, two loads in flight: a fully unrolled rank loop cost
  // the kMi 1 main loop ~70 rematerialized instructions a step (its register allocation
  // changed), more than the DSMEM latencies it saved.
  const bool vector = p.ldo % 8 == 0 && reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0;
  for (int item = threadIdx.x; item < kBN * L::kTiles; item += kThreads) {
    const int row = split + splits * (item / L::kTiles), run = item % L::kTiles;
    if (row >= kBN) break;  // this block's rows are the first kBN / splits x kTiles items
    if (m0 + row >= p.m) continue;
    const std::int64_t n = tile0 * 8 + run * 8;
    if (n >= p.n) continue;
    float sum[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) sum[e] = 0.0f;
#pragma unroll 2
    for (int s = 0; s < splits; ++s) {
      const float* src = (splits > 1 ? cluster.map_shared_rank(partial, s) : partial) + row * L::kPartialStride + run * 8;
      const float4 v0 = *reinterpret_cast<const float4*>(src), v1 = *reinterpret_cast<const float4*>(src + 4);
      sum[0] += v0.x, sum[1] += v0.y, sum[2] += v0.z, sum[3] += v0.w;
      sum[4] += v1.x, sum[5] += v1.y, sum[6] += v1.z, sum[7] += v1.w;
    }
    auto* out = static_cast<std::uint16_t*>(p.out) + (m0 + row) * p.ldo + n;
    if (vector && n + 8 <= p.n) {
      std::uint16_t v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float b = p.bias ? Act<T>::to_float(p.bias[(n + e) * p.bias_stride]) : 0.0f;
        v[e] = Act<T>::from_float(sum[e] + b);
      }
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(v);
    } else {
      for (int e = 0; e < 8 && n + e < p.n; ++e) {
        const float b = p.bias ? Act<T>::to_float(p.bias[(n + e) * p.bias_stride]) : 0.0f;
        out[e] = Act<T>::from_float(sum[e] + b);
      }
    }
  }
  if (splits > 1) cluster.sync();  // no block leaves while another still reads its shared memory
  (void)sm90a_body;
#else
  (void)p, (void)splits, (void)n_blocks, (void)m_blocks, (void)maps, (void)store_out;
#endif  // LOWBIT_SM90A_DEVICE
}

// Stream-K (TMA loads; every tile shape of the tiled kernel: 32, 64 and 128 activation
// rows, one or two m64 blocks a warpgroup): a grid of
// persistent blocks, one a resident slot, splits the (tile, K step) units evenly: block q
// takes units [first(q), first(q + 1)), first(q) = q (U / P) + min(q, U % P), tile-major,
// so a tile's K range can span several blocks. A block's units are a tail (the end of a
// tile begun in earlier blocks), whole tiles and a head (the start of a tile that later
// blocks end), each possibly empty. It walks the head first: it stores that FP32 partial
// to its workspace slot and releases its flag, waiting on nothing. Then the whole tiles,
// stored from registers. Then the tail, whose tile it finishes: it waits for the flags of
// the earlier blocks that hold the rest of the tile (their heads, published at their
// start), adds their partials in K order (deterministic for a given grid), resets the
// flags (so the workspace needs no clearing between launches, CUDA graphs included), and
// stores (0 + sum) + bias, rounded once. A block waits only on earlier blocks, which the
// GPU dispatches before it (a grid's blocks go out in index order), so they are resident
// or done: the grid needs no co-residency, and finishes beside other grids that hold SMs
// (other streams' persistent kernels, NCCL's, an SM-limited MPS client) however few SMs
// they leave it, as CUTLASS's stream-K and decoupled look-back scans rely on too.
struct StreamK {
  float* partials = nullptr;      // [grid][elements a thread][kThreads]: the blocks' heads
  unsigned* flags = nullptr;      // [grid]: a block's head published (reset by its finisher)
  std::uint32_t units = 0;        // tiles x k_steps (< 2^31: the launch checks)
  std::uint32_t per_block = 0;    // units / grid; the first `extra` blocks take one more
  std::uint32_t extra = 0;
};

#if defined(LOWBIT_SM90A_DEVICE)
__device__ __forceinline__ unsigned load_acquire(const unsigned* flag) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(unsigned* flag, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(flag), "r"(v) : "memory");
}
#endif

// Resident blocks an SM the stream-K kernel is built for: 3 at 32 rows (72 registers), 2
// at 64, 1 with two m64 blocks a warpgroup (the tiled kernel's shapes of 64 and 128 rows
// on 256 weight rows).
constexpr int stream_k_min_blocks(int bn, int mi) { return mi == 2 ? 1 : bn == 32 ? 3 : 2; }

template <class T, Form F, int kBN, int kMi>
__global__ void __launch_bounds__(block_threads(true, kBN), stream_k_min_blocks(kBN, kMi))
    wgmma_stream_k_kernel(const Params p, std::int64_t n_blocks, std::int64_t m_blocks,
                          const __grid_constant__ WgmmaMaps maps, const StreamK sk) {
#if defined(LOWBIT_SM90A_DEVICE)
  static_assert((kMi == 1 && kBN <= 64) || (kMi == 2 && kBN >= 64), "the tiled kernel's tile shapes");
  using L = Layout<F, kBN, kMi>;
  constexpr int kElements = kMi * kBN / 2;
  // As in wgmma_kernel: a producer warpgroup at 128 rows gives the consumers its registers,
  // and they ping-pong but for INT8.
  constexpr bool kProducerWarpgroup = producer_threads(true, kBN) == 128;
  constexpr bool kPingPong = kProducerWarpgroup && F != Form::int8;
  __shared__ int sm90a_body;
  if (threadIdx.x == 0) *static_cast<volatile int*>(&sm90a_body) = 0;
  extern __shared__ std::uint8_t dynamic_smem[];
  std::uint8_t* const ring = dynamic_smem + ((1024u - gemm::sm90::smem_address(dynamic_smem) % 1024u) % 1024u);
  const std::uint32_t ring_addr = gemm::sm90::smem_address(ring);
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const std::uint32_t b = blockIdx.x, k_steps = static_cast<std::uint32_t>(p.k_steps);
  // Block q's first unit, without a division: 32-bit arithmetic of uniform values keeps
  // the loops' bounds, and with them the stage and the wgmma descriptors, in uniform registers.
  const auto unit_begin = [&](std::uint32_t q) { return q * sk.per_block + min(q, sk.extra); };
  const std::uint32_t u_begin = unit_begin(b), u_end = unit_begin(b + 1);
  // A segment: the units of one tile the block holds, its first and last + 1 step.
  // Steps in 32 bits (k_steps < 2^28: the launch checks), so the step loops stay lean.
  struct Segment {
    std::uint32_t tile;
    std::int64_t tile0, m0;
    int s0, s1;
  };
  // The block walks its units from the last down, a segment at a time (the steps within
  // each in K order): first its head (the start of a tile that a later block ends:
  // published at once), then its whole tiles, then its tail (the end of a tile begun in
  // earlier blocks: finished last, when their heads are long published). One bound in
  // registers, as an upward walk (a walk in three runs cost the 32-row kernel spills).
  // f(segment, whether it is the block's last).
  const auto for_each_segment = [&](auto&& f) {
    for (std::uint32_t u = u_end; u > u_begin;) {
      Segment g;
      g.tile = (u - 1) / k_steps;
      const std::uint32_t tile_begin = g.tile * k_steps;
      g.s1 = static_cast<int>(u - tile_begin);
      // Two equal forms of the first step, selects rather than min / max (which took the
      // step loops' bounds out of uniform registers): with the other form, ptxas lengthens
      // the one m64 block kernels' step loops by 3 instructions, the 64-row two-block ones' by 53.
      if constexpr (kMi == 1) {
        const std::uint32_t held = u - u_begin;
        g.s0 = held >= static_cast<std::uint32_t>(g.s1) ? 0 : g.s1 - static_cast<int>(held);
      } else {
        g.s0 = u_begin > tile_begin ? static_cast<int>(u_begin - tile_begin) : 0;
      }
      std::int64_t n_block, m_block;
      tile_of(g.tile, static_cast<std::uint32_t>(n_blocks), static_cast<std::uint32_t>(m_blocks), &n_block, &m_block);
      g.tile0 = n_block * L::kTiles;
      g.m0 = m_block * kBN;
      u -= static_cast<std::uint32_t>(g.s1 - g.s0);
      f(g, u == u_begin);
    }
  };

  __shared__ alignas(8) std::uint64_t full[L::kStages];
  __shared__ alignas(8) std::uint64_t empty[L::kStages];
  init_ring_barriers<L::kStages>(full, empty);
  __syncthreads();
  if (threadIdx.x >= kThreads) {  // the producer's first warp: the segments' steps into the ring, in order
    if constexpr (kProducerWarpgroup) gemm::sm90::release_registers<kProducerRegs>();
    if (kProducerWarpgroup && threadIdx.x >= kThreads + 32) return;
    if (lane == 0) prefetch_maps<F, kBN, kMi>(maps);
    int stage = 0;
    std::uint32_t phase = 0;
    for_each_segment([&](const Segment& g, bool) {
      for (int step = g.s0; step < g.s1; ++step) {
        gemm::sm90::mbarrier_wait(gemm::sm90::smem_address(&empty[stage]), phase ^ 1u);
        if (lane == 0) {
          TmaLoader<F, kBN, kMi>::issue(p, maps, ring_addr + stage * L::kStage, gemm::sm90::smem_address(&full[stage]),
                                        g.tile0, g.m0, step);
        }
        __syncwarp();
        if (++stage == L::kStages) stage = 0, phase ^= 1u;
      }
    });
    return;
  }
  if constexpr (kProducerWarpgroup) gemm::sm90::claim_registers<kConsumerRegs>();
  // One chain of turns over all the block's steps, segments included (both warpgroups walk
  // the same steps; the epilogues between segments meet at barrier 1, not on the turns).
  if constexpr (kPingPong) Turns{wg, false}.start();

  const QuadColumn quad = make_quad_column<blocks_of(F)>(lane % 4);
  const int g_lane = lane / 4, c_lane = lane % 4;
  int stage = 0;
  std::uint32_t phase = 0;
  for_each_segment([&](const Segment& g, bool block_last) {
    float acc[kMi][kBN / 2];
    int last_stage = stage;
    for (int step = g.s0; step < g.s1; ++step) {
      gemm::sm90::mbarrier_wait(gemm::sm90::smem_address(&full[stage]), phase);
      compute_step<T, F, kBN, kMi, kPingPong>(p, ring + stage * L::kStage, ring_addr + stage * L::kStage, wg, warp,
                                              lane, quad, acc, step == g.s0,
                                              Turns{wg, kPingPong && block_last && step + 1 == g.s1});
      __syncwarp();
      if (step > g.s0 && lane == 0) gemm::sm90::mbarrier_arrive(gemm::sm90::smem_address(&empty[last_stage]));
      last_stage = stage;
      if (++stage == L::kStages) stage = 0, phase ^= 1u;
    }
    gemm::sm90::wgmma_wait<0>();
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) gemm::sm90::fence_accumulators(acc[mi]);
    __syncwarp();
    if (lane == 0) gemm::sm90::mbarrier_arrive(gemm::sm90::smem_address(&empty[last_stage]));  // the segment's last stage

    if (g.s1 < static_cast<int>(k_steps)) {  // a part of a tile that a later block finishes: publish it
      float* const own = sk.partials + std::size_t{b} * kElements * kThreads + threadIdx.x;
#pragma unroll
      for (int e = 0; e < kElements; ++e) __stcg(own + e * kThreads, acc[e / (kBN / 2)][e % (kBN / 2)]);
      // The barrier orders every thread's stores before thread 0's release (cumulative).
      named_barrier(1, kThreads);
      if (threadIdx.x == 0) store_release(sk.flags + b, 1u);
      return;
    }
    if (g.s0 > 0) {
      // The tile's last part: blocks q0 .. b - 1, all earlier (dispatched before this one,
      // so resident or done), published the rest of its K range as their heads. All their
      // flags first, then all their partials' loads, added in K order.
      const std::uint32_t tile_begin = g.tile * k_steps;
      std::uint32_t q0 = b - 1;
      while (unit_begin(q0) > tile_begin) --q0;
      if (threadIdx.x == 0) {
        for (std::uint32_t q = q0; q < b; ++q) {
          while (load_acquire(sk.flags + q) == 0u) __nanosleep(32);
        }
      }
      named_barrier(1, kThreads);
      // In pieces of at most 32 loads in flight: two m64 blocks' 128 would not fit the registers.
      constexpr int kPiece = kElements < 32 ? kElements : 32;
      for (std::uint32_t q = q0; q < b; ++q) {
        const float* theirs = sk.partials + std::size_t{q} * kElements * kThreads + threadIdx.x;
#pragma unroll
        for (int e0 = 0; e0 < kElements; e0 += kPiece) {
          float part[kPiece];
#pragma unroll
          for (int e = 0; e < kPiece; ++e) part[e] = __ldcg(theirs + (e0 + e) * kThreads);
#pragma unroll
          for (int e = 0; e < kPiece; ++e) acc[(e0 + e) / (kBN / 2)][(e0 + e) % (kBN / 2)] += part[e];
        }
      }
      named_barrier(1, kThreads);  // every thread has read the partials before their flags clear
      if (threadIdx.x == 0) {
        for (std::uint32_t q = q0; q < b; ++q) sk.flags[q] = 0u;
      }
    }
    // (0 + sum) + bias, rounded once: acc[mi][4j + 2h + e] is weight row 64 (kMi wg + mi)
    // + 16 warp + 8h + g, activation row 8j + 2c + e.
    auto* out = static_cast<std::uint16_t*>(p.out);
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t n = g.tile0 * 8 + 64 * (kMi * wg + mi) + 16 * warp + 8 * h + g_lane;
        if (n >= p.n) continue;
        const float bias = p.bias != nullptr ? Act<T>::to_float(p.bias[n * p.bias_stride]) : 0.0f;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const std::int64_t m = g.m0 + 8 * j + 2 * c_lane + e;
            if (m < p.m) out[m * p.ldo + n] = Act<T>::from_float((0.0f + acc[mi][4 * j + 2 * h + e]) + bias);
          }
        }
      }
    }
  });
  (void)sm90a_body;
#else
  (void)p, (void)n_blocks, (void)m_blocks, (void)maps, (void)sk;
#endif  // LOWBIT_SM90A_DEVICE
}

// Whether this device runs the kernel (cuda/sm90_kernel.h: compute capability 9.0, the
// sm_90a body's static marker, the shared memory opt-in), once per device.
template <class T, Form F, int kBN, int kMi, bool kTma>
bool kernel_ready() {
  static Sm90KernelReady ready;
  return ready(reinterpret_cast<const void*>(wgmma_kernel<T, F, kBN, kMi, kTma>), sizeof(int),
               Layout<F, kBN, kMi>::kSmem);
}

// Resident blocks per SM of a kernel (an occupancy query; at least 1). Callers keep the
// answer in a static: once per process and instantiation.
int resident_blocks(const void* kernel, int threads, int smem_bytes) {
  int b = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, smem_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    b = 1;
  }
  return b < 1 ? 1 : b;
}

template <class T, Form F, int kBN, int kMi, bool kTma>
int blocks_per_sm() {
  static const int blocks = resident_blocks(reinterpret_cast<const void*>(wgmma_kernel<T, F, kBN, kMi, kTma>),
                                            block_threads(kTma, kBN), Layout<F, kBN, kMi>::kSmem);
  return blocks;
}

// The tiled grid's wave model (core/split_k.h) for these tiles.
template <class T, Form F, int kBN, int kMi, bool kTma>
core::SplitKProblem split_problem(const Params& p, std::int64_t tiles) {
  core::SplitKProblem problem;
  problem.tiles = tiles;
  problem.slots = static_cast<std::int64_t>(blocks_per_sm<T, F, kBN, kMi, kTma>()) * core::multiprocessor_count();
  problem.k_steps = p.k_steps;
  // A block's prologue, epilogue and reduction cost about 8 of its 128-k steps: the value
  // that orders the H200's split sweep at 28672 x 8192 (M 512: 2; 2048, 8192: 1).
  problem.fixed_steps = 8.0;
  // Three blocks a SM (32 activation rows): clusters of 8 keep three quarters of the
  // slots, not the quarter fitted at one and two (H200: 32 x 4096 x 14336 split 8 29.2 us
  // against split 4's 35.2, 32 x 4096 x 4096 15.1 against 15.3; bench/notes/weight_only.md).
  if (blocks_per_sm<T, F, kBN, kMi, kTma>() >= 3) problem.cluster_share[3] = 0.75;
  return problem;
}

// Split K over a cluster: the split of least modelled time, at least 4 steps per split.
// `forced` > 0: that split (a benchmark sweep), still bounded by the K steps.
int choose_splits(const core::SplitKProblem& problem, int forced) {
  if (forced > 0) {
    int s = forced;
    while (s > 1 && problem.k_steps < 4 * s) s /= 2;
    return s;
  }
  return core::pick_k_splits(problem);
}

// A stream's stream-K workspace: partial slots for kStreamKSlotFloats floats a thread of
// every multiprocessor's resident blocks (3 of 32 rows' 16 accumulators, 2 of 64 rows' 32,
// 1 of two m64 blocks' 64 or 128), then a flag a slot: ~17 MB on 132 SMs. One a (device,
// stream): launches in stream order share it (finishers leave the flags at zero), launches on
// two streams never do. Kept for the
// process, for at most kStreamKStreams streams a device (the engines hold one stream each;
// past that, the rule's launches stay tiled). The first use may fall inside a graph
// capture (a decode step's): the allocation and the flags' clearing then run outside it,
// in relaxed capture mode on a side stream, and the graph holds the pointer, so replaying
// it concurrently with other stream-K work on the stream it was captured on would share
// the slots (the engines replay their graphs on that stream).
constexpr int kStreamKSlotFloats = 128;
constexpr int kStreamKStreams = 8;

// The stream's workspace; a new one only where `create` (false: none, if it has none).
bool stream_k_workspace(cudaStream_t stream, StreamK* sk, bool create = true) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, core::DeviceBuffer> buffers;
  const std::lock_guard<std::mutex> lock(mutex);
  const int device = core::current_device();
  const std::int64_t sms = core::multiprocessor_count();
  const std::size_t partial_bytes = static_cast<std::size_t>(sms) * kStreamKSlotFloats * kThreads * sizeof(float);
  auto it = buffers.find({device, stream});
  if (it == buffers.end()) {
    if (!create) return false;
    const auto held = std::count_if(buffers.begin(), buffers.end(), [&](const auto& b) { return b.first.first == device; });
    if (held >= kStreamKStreams) return false;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    LOWBIT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    core::DeviceBuffer fresh(partial_bytes + static_cast<std::size_t>(sms) * kStreamKSlotFloats * sizeof(unsigned));
    cudaStream_t side;  // not the legacy stream, which a capture would take as a dependency
    LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(fresh.data(), 0, fresh.bytes(), side));
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(side));
    LOWBIT_CUDA_CHECK(cudaStreamDestroy(side));
    LOWBIT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    it = buffers.emplace(std::pair{device, stream}, std::move(fresh)).first;
  }
  sk->partials = it->second.as<float>();
  sk->flags = reinterpret_cast<unsigned*>(it->second.as<std::uint8_t>() + partial_bytes);
  return true;
}

// The stream-K grid for `units` (tiles x K steps): every resident slot a block (as many as
// the workspace holds), but at least 4 steps a block.
template <class T, Form F, int kBN, int kMi>
std::int64_t stream_k_grid(std::int64_t units) {
  constexpr int kElements = kMi * kBN / 2;  // accumulators a thread
  static_assert(kElements <= kStreamKSlotFloats, "a block's partial fits its slot");
  static const int per_sm = resident_blocks(reinterpret_cast<const void*>(wgmma_stream_k_kernel<T, F, kBN, kMi>),
                                            block_threads(true, kBN), Layout<F, kBN, kMi>::kSmem);
  const std::int64_t sms = core::multiprocessor_count();
  const std::int64_t grid = std::min<std::int64_t>(per_sm, kStreamKSlotFloats / kElements) * sms;
  return std::max<std::int64_t>(1, std::min(grid, units / 4));
}

// The stream-K launch of `grid` blocks (stream_k_grid) over the n_blocks x m_blocks tiles.
// False where this stream gets no workspace (kStreamKStreams taken): the caller runs tiled.
template <class T, Form F, int kBN, int kMi>
bool launch_stream_k(const Params& p, std::int64_t n_blocks, std::int64_t m_blocks, std::int64_t grid,
                     cudaStream_t stream) {
  using L = Layout<F, kBN, kMi>;
  const auto kernel = wgmma_stream_k_kernel<T, F, kBN, kMi>;
  static Sm90KernelReady ready_check;
  LOWBIT_CHECK(ready_check(reinterpret_cast<const void*>(kernel), sizeof(int), L::kSmem),
               "weight_only: the stream-K kernel needs a compute capability 9.0 GPU and an sm_90a image");
  const std::int64_t units = n_blocks * m_blocks * p.k_steps;
  LOWBIT_CHECK(n_blocks * m_blocks < (std::int64_t{1} << 31) && n_blocks * kGroupM < (std::int64_t{1} << 32),
               "weight_only: M x N needs more tiles (", n_blocks * m_blocks, ") than the stream-K kernel indexes");
  LOWBIT_CHECK(p.k_steps < (std::int64_t{1} << 28), "weight_only: K of ", p.k, " is too long for the wgmma kernel");
  LOWBIT_CHECK(units < (std::int64_t{1} << 31), "weight_only: ", units,
               " stream-K units (tiles x K steps) overflow the kernel's 32-bit unit index");
  StreamK sk;
  if (!stream_k_workspace(stream, &sk)) return false;
  sk.units = static_cast<std::uint32_t>(units);
  sk.per_block = static_cast<std::uint32_t>(units / grid);
  sk.extra = static_cast<std::uint32_t>(units % grid);
  WgmmaMaps maps = make_maps<F, kBN, kMi>(p);
  launch_cluster_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(block_threads(true, kBN)), L::kSmem, stream,
                        false, 1u, p, n_blocks, m_blocks, maps, sk);
  return true;
}

}  // namespace

bool stream_k_flags_clear(cuda_stream_t stream) {
  StreamK sk;
  if (!stream_k_workspace(stream, &sk, false)) return true;
  std::vector<unsigned> flags(static_cast<std::size_t>(core::multiprocessor_count()) * kStreamKSlotFloats);
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  LOWBIT_CUDA_CHECK(cudaMemcpy(flags.data(), sk.flags, flags.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  return std::all_of(flags.begin(), flags.end(), [](unsigned f) { return f == 0u; });
}

namespace {

// Whether stream-K takes a launch the variant leaves to the rule. One m64 block a
// warpgroup (32 and 64 rows on 128 weight rows): where the tiled grid splits K over
// clusters of 4 or 8 (their reductions and the slots lost to placing them
// whole in a GPC), and at 32 rows where it does not split but has more tiles than
// multiprocessors (three-block SMs beside two-block ones). H200, session 48 (bench/notes/
// weight_only.md): 32 x 28672 x 8192 Q4_1 67 -> 62 us, 32 x 4096 x 14336 28.3 -> 26.8, Q8_0
// 37.5 -> 28.3, 32 x 4096 x 4096 14.9 -> 14.3, 64 x 4096 x 14336 38.1 -> 29.9; where the tiled
// grid splits 2 ways or holds 64 rows unsplit, stream-K lost 2-8% (14336 x 4096 at 32 and
// 64 rows, 64 x 28672 x 8192).
// Two m64 blocks a warpgroup (one block an SM): core::stream_k_beats_tiled, the wave
// model's choice where the tiled grid leaves SMs idle. H200, session 49 (bench/notes/
// weight_only.md): 128 x 4096 x 14336 -10%, 256 rows -28%, 128 x 6144 x 4096 -5 to -10%; the model
// keeps the tiled grid where stream-K lost: short tiles (14336 x 4096, 4096 x 4096 at 128
// rows: +13-18%, their fixups), and full waves (the power limit).
bool stream_k_pays(int tile_m, int mi, int splits, const core::SplitKProblem& problem, std::int64_t sk_grid) {
  if (mi == 2) return core::stream_k_beats_tiled(problem, splits, sk_grid);
  return splits >= 4 || (tile_m == 32 && splits == 1 && problem.tiles > core::multiprocessor_count());
}

template <class T, Form F, int kBN, int kMi, bool kTma>
void launch(const Params& p, const Variant& v, cudaStream_t stream) {
  using L = Layout<F, kBN, kMi>;
  const bool ready = kernel_ready<T, F, kBN, kMi, kTma>();
  LOWBIT_CHECK(ready, "weight_only: the wgmma kernel needs a compute capability 9.0 GPU and an "
                                          "sm_90a image (CMAKE_CUDA_ARCHITECTURES 90a)");
  const std::int64_t n_blocks = (p.n_tiles + L::kTiles - 1) / L::kTiles;
  const std::int64_t m_blocks = (p.m + kBN - 1) / kBN;
  const core::SplitKProblem problem = split_problem<T, F, kBN, kMi, kTma>(p, n_blocks * m_blocks);
  const int splits = choose_splits(problem, v.k_slices);
  if constexpr (kTma) {
    const std::int64_t sk_grid = stream_k_grid<T, F, kBN, kMi>(n_blocks * m_blocks * p.k_steps);
    const bool stream_k = v.stream_k == 1 || (v.stream_k < 0 && v.k_slices == 0 &&
                                              stream_k_pays(kBN, kMi, splits, problem, sk_grid));
    if (stream_k && launch_stream_k<T, F, kBN, kMi>(p, n_blocks, m_blocks, sk_grid, stream)) return;
    LOWBIT_CHECK(v.stream_k != 1, "weight_only: the stream-K variant has no workspace for this stream (",
                 kStreamKStreams, " streams a device hold one)");
  }
  LOWBIT_CHECK(n_blocks * m_blocks * splits < (std::int64_t{1} << 31) && n_blocks * kGroupM < (std::int64_t{1} << 32),
               "weight_only: M x N needs more blocks (", n_blocks * m_blocks * splits,
               ") than one grid dimension holds");
  LOWBIT_CHECK(splits >= 1 && splits <= kMaxSplits, "weight_only: a split-K cluster of ", splits,
               " blocks (the wgmma kernel takes 1 to ", kMaxSplits, ")");
  LOWBIT_CHECK(p.k_steps < (std::int64_t{1} << 28), "weight_only: K of ", p.k, " is too long for the wgmma kernel");
  WgmmaMaps maps = kTma ? make_maps<F, kBN, kMi>(p) : WgmmaMaps{};
  // Whole tiles leave by TMA stores, split ones through the cluster's reduction.
  const bool store_out = kTma && splits == 1 && make_out_map<kBN>(p, &maps.out);
  launch_cluster_kernel(wgmma_kernel<T, F, kBN, kMi, kTma>, dim3(static_cast<unsigned>(n_blocks * m_blocks * splits)),
                        dim3(block_threads(kTma, kBN)), L::kSmem, stream, false, static_cast<unsigned>(splits), p,
                        splits, n_blocks, m_blocks, maps, store_out);
}

}  // namespace

// The activation rows a block takes: the smallest of 32, 64, 128 that holds M (or the
// variant's tile_m).
int wgmma_tile_m(const Params& p, const Variant& v) {
  if (v.tile_m == 32 || v.tile_m == 64 || v.tile_m == 128) return v.tile_m;
  return p.m <= 32 ? 32 : p.m <= 64 ? 64 : 128;
}

// 16-byte aligned rows of ldo * 2 bytes, and N a multiple of 8: TMA's stores drop what lies
// past N in whole 16 bytes (the H200 wrote a partial last chunk of a row, past N).
bool wgmma_tma_store_takes(const Params& p) {
  return reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0 && p.ldo % 8 == 0 && p.n % 8 == 0 &&
         p.m < (std::int64_t{1} << 31) && p.n < (std::int64_t{1} << 31) && gemm::tensor_map_encoder_available();
}

bool wgmma_available() {
  // One instantiation stands for all: they are built together, for the same targets.
  return kernel_ready<__half, Form::q4_zero_point, 32, 1, false>();
}

// The weight rows a block takes: 256 with 128 activation rows, and with 64 for INT8
// (whose 1 KB units make the codes as many bytes a step as X: H200, Q8_0 at 64 rows,
// 28672 x 8192 124 -> 91 us, 4096 x 14336 55 -> 46, 14336 x 4096 34 -> 30; the INT4 forms
// within 2% either way, bench/notes/weight_only.md); else 128. The variant's tile_n
// where the pair is built: 64 activation rows take either.
int wgmma_tile_n(int tile_m, const Variant& v, Form form) {
  if (tile_m == 64 && (v.tile_n == 128 || v.tile_n == 256)) return v.tile_n;
  return tile_m == 128 || (tile_m == 64 && form == Form::int8) ? 256 : 128;
}

template <class T, Form F, bool kTma>
void run_wgmma_loads(const Params& p, const Variant& v, cudaStream_t stream) {
  const int tile_m = wgmma_tile_m(p, v);
  switch (tile_m) {
    case 32: return launch<T, F, 32, 1, kTma>(p, v, stream);
    case 64:
      return wgmma_tile_n(tile_m, v, F) == 256 ? launch<T, F, 64, 2, kTma>(p, v, stream)
                                               : launch<T, F, 64, 1, kTma>(p, v, stream);
    default: return launch<T, F, 128, 2, kTma>(p, v, stream);
  }
}

// The block forms load by TMA only (their units are not a whole number of 16-byte chunks
// a thread; dispatch's takes() refuses the cp.async variant).
template <class T, Form F>
void run_wgmma(const Params& p, const Variant& v, cudaStream_t stream) {
  if (v.tma) return run_wgmma_loads<T, F, true>(p, v, stream);
  if constexpr (!is_block_form(F)) run_wgmma_loads<T, F, false>(p, v, stream);
}
LOWBIT_WEIGHT_ONLY_PAIRS(run_wgmma);
LOWBIT_WEIGHT_ONLY_BLOCK_FORMS(run_wgmma);

}  // namespace lowbit::cuda::weight_only
