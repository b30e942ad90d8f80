// flash_attention_over_mixed_cache (flash_cuda.h): the selective, window, int8 and int4
// caches' prefill attention on Hopper's wgmma flash kernel (flash_wgmma.cu's consumers:
// S = Q K^T, the online softmax, O += P V, two or three warpgroups ping-ponged), with the
// rows kernel's exact semantics (cuda/kv/attention_rows_mma.cu).
//
// A block owns 128 query rows (192 at head_dim 64) of one head: rows [tmin, tmax] by
// position. Its keys are one virtual sequence of segments (core::KvFlashSegments): the
// sink (FP16 cache slots), the body (quantized codes), with key blocks the open positions
// (K FP16 from the chunk or a snapshot, V codes) and the recent positions (FP16 from the
// chunk's rows or the ring's snapshot), each starting on a tile of 128 keys and masked by
// its own rule for the row at t, so that every row sees each position once, in the form
// the cache held at t. A segment's positions past its end are zeros in the tile (0 * NaN
// would reach O) and masked. Key blocks (KB, 4-bit bodies): a body tile's K dequantized
// per channel with its blocks' scales and mins, copied beside its codes.
//
// The producers are whole warpgroups (the full path's is one TMA thread): at head_dim 128
// one for K and one for V, at 64 one for both (the registers of a third consumer). K and V
// are in rings of two stages as flash_wgmma.cu's: 128 threads copy by cp.async in 16-byte chunks,
// consecutive lanes along a row: FP16 rows straight into the 128-byte-swizzled tile (TMA's
// layout, which the consumers' descriptors read) a tile ahead, body codes into a ring of
// their own (up to 4 stages) 1-3 tiles ahead, so that their load latency hides behind the
// tiles between; for a body tile the part's warpgroup meets at a named barrier and thread p
// dequantizes row p with its f16 scale (+ min) (cuda/kv/dequantize_f16.cuh, the rows
// kernel's arithmetic) into the tile: the body never reaches global memory as f16. A tile
// is published by each producer thread's arrival on the stage's full barrier, after its
// copies landed and fence.proxy.async made its writes visible to wgmma. Q is one TMA load.
#include <cuda.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kv_layout.h"
#include "cuda/async_copy.cuh"
#include "cuda/flash/block_order.cuh"
#include "cuda/flash/flash_cuda.h"
#include "cuda/flash/flash_kernels.h"
#include "cuda/flash/wgmma_attention.cuh"
#include "cuda/flash_tile.cuh"
#include "cuda/gemm/tma.h"
#include "cuda/gemm/wgmma.cuh"
#include "cuda/kv/dequantize_f16.cuh"
#include "cuda/sm90_kernel.h"
#include "cuda/wgmma_rs.cuh"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::cuda::flash {
namespace {

constexpr int kBN = 128;  // keys a tile
constexpr int kBox = 64;  // channels a 128-byte swizzle row

// Bits: 0 (window: FP16 segments only), 8 or 4 (selective, int8, int4). KB: K in key
// blocks (4 bits only): a body tile's K dequantized with its channels' scales and mins,
// staged beside its codes.
template <int HD, int Bits, bool KB>
struct MixedLayout {
  static_assert(!KB || Bits == 4, "key blocks on the 4-bit body only");
  static constexpr int kConsumers = HD == 64 ? 3 : 2;  // as flash_wgmma.cu's WgLayout
  static constexpr int kBM = 64 * kConsumers;
  // The dequantization is the producers' own instruction stream (over a thousand
  // instructions a tile for K and V at head_dim 128, INT4), a serial chain a warp a
  // scheduler: at 128 K and V each get a warpgroup, which the registers allow there.
  static constexpr int kProducers = kConsumers == 3 ? 1 : 2;
  static constexpr int kThreads = 128 * (kProducers + kConsumers);
  // Registers a thread by role (setmaxnreg), within what the launch gets (128 x 512 at
  // head_dim 128 and at 64). The producers compute addresses, hold the scales of a tile
  // and dequantize: 48 at 128 (the consumers 208, which they fit; ptxas spills 20-32
  // bytes of the producers' addresses, 88 at 40) and 32 at 64 (the consumers keep
  // flash_wgmma.cu's 160; at 152 they spill; the producer there, K and V in one
  // warpgroup, spills 44-80 bytes).
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : 48;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 208;
  // The lazy max (softmax_tile's kMaxSlack) and the softmax under P V at head_dim 128,
  // as flash_wgmma.cu's WgLayout.
  static constexpr int kMaxSlack = HD == 128 ? 8 : 0;
  static_assert(128 * kProducers * kProducerRegs + 128 * kConsumers * kConsumerRegs <=
                    kThreads * ((65536 / kThreads) & ~7),
                "the launch's registers");
  static constexpr int kBoxes = HD / kBox;
  static constexpr int kChunks = HD / 8;  // 16-byte chunks of an f16 row
  static constexpr int kQ = kBM * HD * 2;
  static constexpr int kKV = kBN * HD * 2;
  static constexpr int kCodeBytes = Bits == 8 ? HD : Bits == 4 ? HD / 2 : 0;  // a body row's codes
  static constexpr int kStaged = kBN * kCodeBytes;  // one part's codes of a tile
  // Key blocks: a K tile's blocks' scales and mins, [block][scale, min][HD] f16, for up to
  // kBN / 16 blocks (blocks of 16 .. 128 keys dividing kBN, or multiples of kBN: one).
  static constexpr int kMaxTileBlocks = kBN / 16;
  static constexpr int kParams = KB ? kMaxTileBlocks * 2 * HD * 2 : 0;
  static constexpr int kStages = 2;  // of the f16 tiles the consumers read
  // The body's codes have their own ring, deeper than the tiles' (their slot is free once
  // the producer has dequantized from it, without the consumers): as many stages as fit
  // beside Q and the tiles (1 KB kept for the static barriers and segments), at most 4
  // (3 at head_dim 64: the producer's 32 registers); with key blocks each stage also
  // holds K's parameters (3 stages at head_dim 128).
  static constexpr int kFixed = kQ + kStages * 2 * kKV + 1024;  // + slack to align to 1024 bytes
  static constexpr int kMaxCodeStages = HD == 64 ? 3 : 4;
  static constexpr int kCodeStages =
      Bits == 0 ? 1 : std::min(kMaxCodeStages, (226 * 1024 - kFixed) / (2 * kStaged + kParams));
  static_assert(Bits == 0 || kCodeStages >= 2, "two stages of codes at least");
  static constexpr int kAhead = Bits == 0 ? 1 : kCodeStages - 1;  // tiles a body tile's codes are copied ahead
  // Q, {K, V} x stages, staged codes {K, V} x code stages, K's parameters x code stages.
  static constexpr int kSmem = kFixed + kCodeStages * (2 * kStaged + kParams);
  static_assert(kSmem <= 226 * 1024, "shared memory");
};

struct Barriers {
  std::uint64_t q;
  std::uint64_t k_full[2], k_empty[2];
  std::uint64_t v_full[2], v_empty[2];
};

struct MixedArgs {
  const std::uint16_t* chunk_k;
  const std::uint16_t* chunk_v;
  long long chunk_ld;
  const std::uint16_t* snap_k;
  const std::uint16_t* snap_v;
  const std::uint16_t* snap_staged;  // key blocks: the staging ring before the chunk
  const std::uint16_t* f16_k;
  const std::uint16_t* f16_v;
  long long f16_slots;
  const std::uint8_t* codes_k;
  const std::uint8_t* codes_v;
  const std::uint16_t* scales_k;
  const std::uint16_t* scales_v;
  const std::uint16_t* mins_k;
  const std::uint16_t* mins_v;
  std::uint16_t* out;
  long long ldo;
  int rows, pos0, group, kv_heads;
  int sink, window, body_base, key_block;
  float sl2;
  int head_group;  // block_order.cuh
};

// A body row's f16 scale and (4 bits) min, as loaded: the low 16 bits.
struct Params {
  std::uint32_t scale, min;
};

using Segments = core::KvFlashSegments;  // the segments and their masks
constexpr int kSink = Segments::sink_segment, kBody = Segments::body_segment, kOpen = Segments::open_segment;

// The block's segments (rows at [tmin, tmax]) in tiles of kBN keys.
template <int Bits, bool KB>
__device__ __forceinline__ Segments block_segments(const MixedArgs& a, int tmin, int tmax) {
  return Segments(a.sink, a.window, a.body_base, Bits != 0, tmin, tmax, kBN, KB ? a.key_block : 0);
}

// Whether a part's tile of `segment` comes from the body's codes: the body's, and with
// key blocks V's in the open segment (quantized per token as ever; its K is FP16).
template <bool KB>
__device__ __forceinline__ bool coded(int part, int segment) {
  return segment == kBody || (KB && part == 1 && segment == kOpen);
}

// Byte offset of 16-byte chunk ch (8 channels) of key row p in a tile as TMA writes it
// with the 128-byte swizzle: boxes of 64 channels x kBN rows, a row's chunks XORed with
// p % 8 (what sw128_descriptor and sw128_mn_descriptor read).
__device__ __forceinline__ std::uint32_t tile_chunk(int p, int ch) {
  return static_cast<std::uint32_t>((ch / 8) * kBN * 128 + p * 128 + (((ch % 8) ^ (p % 8)) * 16));
}

// Byte offset of chunk b of key row p's staged codes: rows packed, the chunk XORed with
// the row's place among the 8 rows of 128 bytes, so that 8 threads (8 rows) reading or
// writing the same chunk hit 8 different 16-byte bank groups.
template <int kCodeBytes>
__device__ __forceinline__ std::uint32_t staged_chunk(int p, int b) {
  static_assert(kCodeBytes >= 32, "a body's row of codes");
  constexpr int kRowsPerLine = 128 / kCodeBytes, kChunks = kCodeBytes / 16;
  return static_cast<std::uint32_t>(p * kCodeBytes + ((b ^ ((p / kRowsPerLine) % kChunks)) * 16));
}

template <int HD, int Bits, bool KB>
__global__ void __launch_bounds__(MixedLayout<HD, Bits, KB>::kThreads, 1)
    flash_mixed_cache_kernel(const __grid_constant__ CUtensorMap q_map, const MixedArgs a) {
#if defined(LOWBIT_SM90A_DEVICE)
  using namespace gemm::sm90;
  using L = MixedLayout<HD, Bits, KB>;
  static_assert(L::kStages == 2, "Barriers holds two stages");
  __shared__ Barriers bars;  // also the sm_90a body's static marker (cuda/sm90_kernel.h)
  extern __shared__ std::uint8_t dynamic_smem[];
  const std::uint32_t sq = (gemm::sm90::smem_address(dynamic_smem) + 1023u) & ~1023u, skv = sq + L::kQ;
  const std::uint32_t staged = skv + L::kStages * 2 * L::kKV;
  const std::uint32_t params = staged + L::kCodeStages * 2 * L::kStaged;  // key blocks: K's, a code stage each
  const BlockTile block = block_tile(a, L::kBM);
  const int h = block.head, g = h / a.group, t0 = block.t0;
  constexpr int kBM = L::kBM, kConsumers = L::kConsumers;
  if (t0 >= a.rows) return;
  const int tmin = a.pos0 + t0, tmax = a.pos0 + min(t0 + kBM, a.rows) - 1;  // the block's rows' positions
  // The segments in shared memory (set with the barriers): the producer's registers are
  // few, and every thread reads them once a tile.
  __shared__ Segments keys;
  const int tiles = block_segments<Bits, KB>(a, tmin, tmax).tiles;  // >= 1: a row sees at least itself
  const std::uint32_t q_bar = gemm::sm90::smem_address(&bars.q);
  const std::uint32_t k_full = gemm::sm90::smem_address(&bars.k_full[0]);
  const std::uint32_t k_empty = gemm::sm90::smem_address(&bars.k_empty[0]);
  const std::uint32_t v_full = gemm::sm90::smem_address(&bars.v_full[0]);
  const std::uint32_t v_empty = gemm::sm90::smem_address(&bars.v_empty[0]);
  // Stage t % 2 holds tile t: K at skv + stage * 2 kKV, V kKV further. Body tile u's
  // codes (K, V) are in code slot u % kCodeStages from `staged`.
  auto k_tile = [&](int t) { return skv + (t % L::kStages) * 2 * L::kKV; };
  auto v_tile = [&](int t) { return k_tile(t) + L::kKV; };
  auto part_tile = [&](int part, int t) { return part ? v_tile(t) : k_tile(t); };
  auto staged_part = [&](int part, int u) { return staged + ((u % L::kCodeStages) * 2 + part) * L::kStaged; };
  auto param_slot = [&](int u) { return params + (u % L::kCodeStages) * L::kParams; };
  auto bar = [](std::uint32_t ring, int t) { return ring + 8 * (t % L::kStages); };
  auto parity = [](int t) { return static_cast<std::uint32_t>((t / L::kStages) & 1); };

  if (threadIdx.x == 0) {
    keys = block_segments<Bits, KB>(a, tmin, tmax);
    mbarrier_init(q_bar, 1);
#pragma unroll
    for (int s = 0; s < L::kStages; ++s) {
      mbarrier_init(k_full + 8 * s, 128);  // every producer thread, once its rows landed
      mbarrier_init(v_full + 8 * s, 128);
      mbarrier_init(k_empty + 8 * s, kConsumers * 4);  // one arrive per consumer warp
      mbarrier_init(v_empty + 8 * s, kConsumers * 4);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (warpgroup < L::kProducers) {
    if constexpr (!(KB && L::kProducers == 2)) release_registers<L::kProducerRegs>();
    const int p = static_cast<int>(threadIdx.x) % 128;  // the key row this thread loads in every tile
    const int barrier_id = 1 + kConsumers + warpgroup;  // this producer warpgroup's named barrier
    if (threadIdx.x == 0) {
      prefetch_tensor_map(&q_map);
      mbarrier_arrive_expect_tx(q_bar, L::kQ);
#pragma unroll
      for (int x = 0; x < L::kBoxes; ++x) tma_load_2d(sq + x * kBM * 128, &q_map, q_bar, h * HD + x * kBox, t0);
    }
    // The FP16 row of position s in the sink, recent or (K) open segment, KV head g: a
    // position before the chunk in the ring's snapshot, or (key blocks: a body position
    // of the block open before the chunk) in the staging ring's.
    auto f16_row = [&](int part, int segment, int s) -> const std::uint16_t* {
      if (segment == kSink) return (part ? a.f16_v : a.f16_k) + (g * a.f16_slots + s) * HD;
      if (s >= a.pos0) return (part ? a.chunk_v : a.chunk_k) + (s - a.pos0) * a.chunk_ld + g * HD;
      if constexpr (KB) {
        if (s <= a.pos0 - 1 - a.window) {
          return a.snap_staged + (static_cast<long long>(g) * a.key_block + (s - a.body_base) % a.key_block) * HD;
        }
      }
      return (part ? a.snap_v : a.snap_k) + (static_cast<long long>(g) * a.window + s % a.window) * HD;
    };
    // Body tile u's codes of one part (K 0, V 1), kAhead tiles before its publication:
    // cp.async of 16-byte chunks, thread p taking chunks p, p + 128, ... row by row
    // (consecutive lanes read consecutive bytes of a row: a warp's copy spans 4 lines, not
    // 32 rows) into the code slot. One commit group, empty unless u is a body tile.
    auto issue_codes = [&](int part, int u) {
      if constexpr (Bits != 0) {
        const Segments::Tile k = keys.template at<KB>(u);
        if (u < keys.tiles && coded<KB>(part, k.segment)) {
          // Thread p copies chunk p % kRowChunks of rows p / kRowChunks + kStep i: the same
          // chunk of the swizzle in each (kStep rows are whole swizzle periods), so one
          // shared address plus a constant per row.
          constexpr int kRowChunks = L::kCodeBytes / 16, kStep = 128 / kRowChunks;
          static_assert(kStep * L::kCodeBytes % (128 * kRowChunks) == 0, "rows kStep apart swizzle alike");
          const int b = p % kRowChunks, row = p / kRowChunks;
          const long long row_bytes = static_cast<long long>(a.kv_heads) * L::kCodeBytes;  // a position's codes
          const std::uint8_t* src = (part ? a.codes_v : a.codes_k) +
                                    (k.first + row - a.body_base) * row_bytes + g * L::kCodeBytes + 16 * b;
          const std::uint32_t dst = staged_part(part, u) + staged_chunk<L::kCodeBytes>(row, b);
#pragma unroll
          for (int i = 0; i < kRowChunks; ++i) {
            if (k.first + row + kStep * i < k.end) cp_async16(dst + i * kStep * L::kCodeBytes, src + i * kStep * row_bytes, 16);
          }
          if constexpr (KB) {
            // K's blocks in the tile (complete ones: the body ends on a block): their
            // scales and mins, 16-byte chunk i of [block][scale, min][HD] from thread i % 128.
            if (part == 0) {
              const int j0 = (k.first - a.body_base) / a.key_block;
              const int blocks = (min(k.first + kBN, k.end) - 1 - a.body_base) / a.key_block - j0 + 1;
              constexpr int kBlockChunks = 2 * HD / 8;
              for (int i = p; i < blocks * kBlockChunks; i += 128) {
                const int blk = i / kBlockChunks, which = (i % kBlockChunks) / (HD / 8), c8 = i % (HD / 8);
                const long long at = (static_cast<long long>(j0 + blk) * a.kv_heads + g) * HD + 8 * c8;
                cp_async16(param_slot(u) + (blk * 2 + which) * HD * 2 + 16 * c8, (which ? a.mins_k : a.scales_k) + at, 16);
              }
            }
          }
        }
      }
      cp_async_commit();
    };
    // Thread p's row's scale (and min) of body tile u, a tile before its publication.
    // Loaded into registers and used as loaded (the 16 bits zero-extended): an
    // instruction that read them here would wait for the load (~1 us) and stall the
    // whole producer; publish converts them a tile later.
    auto load_params = [&](int part, int u, Params& param) {
      if constexpr (Bits != 0) {
        const Segments::Tile k = keys.template at<KB>(u);
        if (u < keys.tiles && coded<KB>(part, k.segment) && !(KB && part == 0) && k.first + p < k.end) {
          const long long at = static_cast<long long>(k.first + p - a.body_base) * a.kv_heads + g;
          param.scale = __ldg(reinterpret_cast<const unsigned short*>(part ? a.scales_v : a.scales_k) + at);
          if constexpr (Bits == 4) param.min = __ldg(reinterpret_cast<const unsigned short*>(part ? a.mins_v : a.mins_k) + at);
        }
      }
    };
    // FP16 tile u of one part (sink or recent), one tile before its publication, once the
    // consumers freed its stage: its rows (zeros past the segment's end) copied into the
    // swizzled tile. One commit group, empty unless u is such a tile.
    auto issue_f16 = [&](int part, int u) {
      const Segments::Tile k = keys.template at<KB>(u);
      if (u < keys.tiles && !coded<KB>(part, k.segment)) {
        mbarrier_wait(bar(part ? v_empty : k_empty, u), parity(u) ^ 1);
        // Thread p copies chunk p % kChunks of rows p / kChunks + kStep i.
        constexpr int kStep = 128 / L::kChunks;
        const std::uint32_t dst = part_tile(part, u);
        const int ch = p % L::kChunks;
#pragma unroll 1
        for (int row = p / L::kChunks; row < kBN; row += kStep) {
          const int s = k.first + row;
          const bool valid = s < k.end;
          // Past the segment's end: zero bytes read (src not dereferenced), the chunk zero-filled.
          const std::uint16_t* src = valid ? f16_row(part, k.segment, s) + ch * 8 : a.chunk_k;
          cp_async16(dst + tile_chunk(row, ch), src, valid ? 16 : 0);
        }
      }
      cp_async_commit();
    };
    // Tile t of one part has landed (this thread's groups waited for). A body tile: the
    // warpgroup meets at its named barrier (every thread's copies of it landed,
    // every thread done with tile t - 1's codes, whose slot is copied into next), then,
    // once the consumers freed the stage, thread p dequantizes row p into the tile (zeros
    // past the body's end). Then the stage's full barrier gets this thread's arrival.
    auto publish = [&](int part, int t, const Params& param) {
      if constexpr (Bits != 0) {
        const Segments::Tile k = keys.template at<KB>(t);
        if (coded<KB>(part, k.segment)) {
          named_barrier(barrier_id, 128);
          mbarrier_wait(bar(part ? v_empty : k_empty, t), parity(t) ^ 1);
          const std::uint32_t dst = part_tile(part, t);
          if (KB && part == 0 && k.first + p < k.end) {
            if constexpr (KB) {  // key blocks: row p's channels with its block's scales and mins
              const int blk = (k.first + p - a.body_base) / a.key_block - (k.first - a.body_base) / a.key_block;
              const std::uint32_t block_params = param_slot(t) + blk * 2 * HD * 2;
#pragma unroll
              for (int b = 0; b < L::kCodeBytes / 16; ++b) {
                const uint4 codes = kv::ld_shared16(staged_part(part, t) + staged_chunk<L::kCodeBytes>(p, b));
                kv::dequantize16_channels<4>(
                    codes,
                    [&](int i, uint4& scales, uint4& mins) {
                      scales = kv::ld_shared16(block_params + (32 * b + 8 * i) * 2);
                      mins = kv::ld_shared16(block_params + HD * 2 + (32 * b + 8 * i) * 2);
                    },
                    [&](int i, uint4 v) { kv::st_shared16(dst + tile_chunk(p, b * 4 + i), v); });
              }
            }
          } else if (k.first + p < k.end) {
            const __half2 s2 = __half2half2(__ushort_as_half(static_cast<unsigned short>(param.scale)));
            const __half2 m2 = __half2half2(__ushort_as_half(static_cast<unsigned short>(param.min)));
            constexpr int kPer16 = Bits == 8 ? 2 : 4;  // f16 chunks from 16 code bytes
#pragma unroll
            for (int b = 0; b < L::kCodeBytes / 16; ++b) {
              const uint4 codes = kv::ld_shared16(staged_part(part, t) + staged_chunk<L::kCodeBytes>(p, b));
              kv::dequantize16<Bits>(codes, s2, m2, [&](int i, uint4 v) {
                kv::st_shared16(dst + tile_chunk(p, b * kPer16 + i), v);
              });
            }
          } else {
#pragma unroll
            for (int ch = 0; ch < L::kChunks; ++ch) kv::st_shared16(dst + tile_chunk(p, ch), make_uint4(0, 0, 0, 0));
          }
        }
      }
      (void)param;
      fence_proxy_async_shared();  // the tile's generic-proxy writes, visible to wgmma
      mbarrier_arrive(bar(part ? v_full : k_full, t));
    };
    // A producer warpgroup's parts (K, V, or both: K before V, since the consumers
    // release K_t after S_t but V_t only after P_t V_t, which runs beside S_t+1) commit
    // two groups a part a tile: the next FP16 tile's, then the codes of the body tile
    // kAhead further. publish(part, t) needs that part's FP16 group of tile t, committed a
    // tile earlier, and its codes, older still (kAhead >= 2) or committed right after it
    // (kAhead = 1): the groups newer than those stay in flight.
    constexpr int kParts = 2 / L::kProducers, kAhead = L::kAhead;
    constexpr int kInFlight = 2 * kParts - 1 - (kAhead == 1 ? 1 : 0);
    // The parts first, first + 1, ... as compile-time constants (a part chosen at run
    // time kept both parts' pointers in the producer's few registers).
    auto produce = [&](auto first) {
      auto part_of = [](int j) { return decltype(first)::value + j; };
      Params param[kParts] = {};  // tile t's, a part each
#pragma unroll
      for (int u = 0; u + 1 < kAhead; ++u) {
#pragma unroll
        for (int j = 0; j < kParts; ++j) issue_codes(part_of(j), u);
      }
#pragma unroll
      for (int j = 0; j < kParts; ++j) {
        load_params(part_of(j), 0, param[j]);
        issue_f16(part_of(j), 0);
        issue_codes(part_of(j), kAhead - 1);
      }
      for (int t = 0; t < tiles; ++t) {
#pragma unroll
        for (int j = 0; j < kParts; ++j) {
          cp_async_wait<kInFlight>();
          publish(part_of(j), t, param[j]);
          load_params(part_of(j), t + 1, param[j]);
          issue_f16(part_of(j), t + 1);
          issue_codes(part_of(j), t + kAhead);
        }
      }
    };
    if constexpr (kParts == 2) {
      produce(std::integral_constant<int, 0>{});
    } else if (warpgroup == 0) {
      // Key blocks: K's producer dequantizes per channel; it takes 8 registers of V's.
      if constexpr (KB) release_registers<L::kProducerRegs + 8>();
      produce(std::integral_constant<int, 0>{});
    } else {
      if constexpr (KB) release_registers<L::kProducerRegs - 8>();
      produce(std::integral_constant<int, 1>{});
    }
    cp_async_wait<0>();  // the last (empty) groups: nothing in flight at exit
    return;
  }

  // The consumers: flash_wgmma.cu's loop with this kernel's mask and no causal skip. A
  // copy on purpose: moving the loop into a header both kernels call renamed registers in
  // flash_wgmma.cu's SASS (same instructions, some reordered at head_dim 64), and the full
  // path's code is to stay as measured until a GPU run times such a change.
  claim_registers<L::kConsumerRegs>();
  const int wg = warpgroup - L::kProducers, warp = (static_cast<int>(threadIdx.x) / 32) % 4, lane = static_cast<int>(threadIdx.x) % 32;
  const int r = lane / 4, c = lane % 4;
  const int row_lo = t0 + wg * 64 + warp * 16;  // the warp's first query (chunk row)
  const int t_lo = a.pos0 + row_lo;  // its position; the warp's rows are t_lo .. t_lo + 15
  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float sc[kBN / 8][4];
  std::uint32_t pa[kBN / 16][4];

  auto issue_s = [&](int t) {
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      const std::uint32_t col = (ks % 4) * 32;
      const std::uint64_t qd = sw128_descriptor(sq + (ks / 4) * kBM * 128 + wg * 64 * 128 + col);
      const std::uint64_t kd = sw128_descriptor(k_tile(t) + (ks / 4) * kBN * 128 + col);
      sm90::wgmma_ss<__half, kBN>(sc, qd, kd, ks > 0);
    }
  };
  auto issue_pv = [&](int t) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      sm90::wgmma_rs_n_major<__half, HD>(o, pa[kk], sm90::sw128_mn_descriptor(v_tile(t) + kk * 16 * 128, kBN * 128),
                                         1);
    }
  };
  // The segment's mask, skipped where every row of the warp sees the whole tile. The
  // quantized ends of this thread's two rows, once.
  const int q_row[2] = {keys.template quantized_end<KB>(t_lo + r), keys.template quantized_end<KB>(t_lo + r + 8)};
  auto softmax = [&](int t, float (&corr)[2]) {
    const Segments::Tile k = keys.template at<KB>(t);
    if (!keys.template whole<KB>(k, t_lo, t_lo + 15)) {
      // Each row's visible positions [lo, hi) of the tile, relative to this thread's first
      // column (k.first + 2 c), so that a score's test is two compares with constants.
      int lo[2], hi[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        keys.template visible_span<KB>(k.segment, t_lo + r + 8 * h, q_row[h], lo[h], hi[h]);
        lo[h] -= k.first + 2 * c;
        hi[h] = min(hi[h], k.end) - (k.first + 2 * c);
      }
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = j * 8 + (e & 1);
          if (col < lo[e >> 1] || col >= hi[e >> 1]) sc[j][e] = -INFINITY;
        }
    }
    softmax_tile<kBN, L::kMaxSlack>(sc, m, l, a.sl2, corr);
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      pa[kk][0] = pack_pair<__half>(sc[2 * kk][0], sc[2 * kk][1]);
      pa[kk][1] = pack_pair<__half>(sc[2 * kk][2], sc[2 * kk][3]);
      pa[kk][2] = pack_pair<__half>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      pa[kk][3] = pack_pair<__half>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
    }
  };
  auto release = [&](std::uint32_t ring, int t) {
    if (lane == 0) mbarrier_arrive(bar(ring, t));
  };
  // Ping-pong as flash_wgmma.cu's (named barrier 1 + w is consumer w's turn); every
  // consumer computes every tile (a tile no row of its warps sees is all masked).
  int turns = 0;
  auto take_turn = [&] { named_barrier(1 + wg, 256); };
  auto hand_over = [&] {
    if (++turns <= tiles || wg != kConsumers - 1) named_barrier_arrive(1 + (wg + 1) % kConsumers, 256);
  };
  if (wg == kConsumers - 1) named_barrier_arrive(1, 256);

  mbarrier_wait(q_bar, 0);
  mbarrier_wait(bar(k_full, 0), 0);
  take_turn();
  wgmma_fence();
  issue_s(0);
  wgmma_commit();
  hand_over();
  wgmma_wait<0>();
  fence_accumulators(sc);
  release(k_empty, 0);
  {
    float corr[2];
    softmax(0, corr);
  }
  pack_p();
  for (int t = 1; t < tiles; ++t) {
    mbarrier_wait(bar(k_full, t), parity(t));
    mbarrier_wait(bar(v_full, t - 1), parity(t - 1));
    take_turn();
    wgmma_fence();
    issue_s(t);
    wgmma_commit();
    issue_pv(t - 1);
    wgmma_commit();
    hand_over();
    wgmma_wait<1>();
    fence_accumulators(sc);
    release(k_empty, t);
    float corr[2];
    softmax(t, corr);
    sm90::wait_pv_rescale<L::kMaxSlack, HD>(o, corr);
    release(v_empty, t - 1);
    pack_p();
  }
  mbarrier_wait(bar(v_full, tiles - 1), parity(tiles - 1));
  take_turn();
  wgmma_fence();
  issue_pv(tiles - 1);
  wgmma_commit();
  hand_over();
  wgmma_wait<0>();
  fence_accumulators(o);
  release(v_empty, tiles - 1);

  store_rows<HD, __half>(o, l, a.out, a.ldo, 0, h * HD, row_lo + r, a.rows, c);
#else
  (void)q_map, (void)a;
#endif  // LOWBIT_SM90A_DEVICE
}

template <int HD, int Bits, bool KB>
bool instance_ready() {
  static Sm90KernelReady ready;
  return ready(reinterpret_cast<const void*>(flash_mixed_cache_kernel<HD, Bits, KB>), sizeof(Barriers),
               MixedLayout<HD, Bits, KB>::kSmem);
}

// q's tensor map, or false where TMA refuses it.
template <int HD, int Bits, bool KB>
bool encode_q(CUtensorMap* q_map, const void* q, long long ldq, int heads, int rows) {
  return gemm::encode_swizzled_128(q_map, CU_TENSOR_MAP_DATA_TYPE_UINT16, q, static_cast<std::int64_t>(heads) * HD,
                                   rows, ldq * 2, kBox, MixedLayout<HD, Bits, KB>::kBM) == nullptr;
}

// Launches the instance, or (launch false) says whether it would run.
template <int HD, int Bits, bool KB>
bool launch_instance(const MixedArgs& a, const void* q, long long ldq, int heads, cudaStream_t stream, bool launch) {
  using L = MixedLayout<HD, Bits, KB>;
  if (!instance_ready<HD, Bits, KB>()) return false;
  CUtensorMap q_map;
  if (!encode_q<HD, Bits, KB>(&q_map, q, ldq, heads, a.rows)) return false;
  const std::int64_t q_tiles = (a.rows + L::kBM - 1) / L::kBM;
  check_block_count(q_tiles, heads);
  if (!launch) return true;
  MixedArgs ordered = a;
  // One head a group of the block order (its KV head's tiles shared in L2 by the blocks
  // resident together), at 64 as at 128: the causal balance of flash_wgmma.cu's choice
  // at 64 matters less here, where every block's body runs to its rows' window.
  ordered.head_group = 1;
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(heads), 1);
  flash_mixed_cache_kernel<HD, Bits, KB><<<grid, L::kThreads, L::kSmem, stream>>>(q_map, ordered);
  LOWBIT_CUDA_CHECK_LAUNCH();
  return true;
}

template <int HD>
bool launch_bits(const MixedArgs& a, const void* q, long long ldq, int heads, int bits, cudaStream_t stream,
                 bool launch) {
  if (a.key_block > 0) return launch_instance<HD, 4, true>(a, q, ldq, heads, stream, launch);  // 4 bits (checked)
  switch (bits) {
    case 8: return launch_instance<HD, 8, false>(a, q, ldq, heads, stream, launch);
    case 4: return launch_instance<HD, 4, false>(a, q, ldq, heads, stream, launch);
    default: return launch_instance<HD, 0, false>(a, q, ldq, heads, stream, launch);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// flash_attention_over_mixed_cache, or (launch false) whether it would run.
bool run_mixed(const MixedCacheAttention& c, cuda_stream_t stream, bool launch) {
  const std::int64_t d = c.head_dim, q_cols = c.heads * d;
  const char* what = "flash_attention_over_mixed_cache";
  LOWBIT_CHECK(c.q && c.chunk_k && c.chunk_v && c.out, what, ": null q, chunk_k, chunk_v or out");
  LOWBIT_CHECK(c.kv_heads >= 1 && c.heads >= c.kv_heads && c.heads <= 65535 && c.heads % c.kv_heads == 0, what,
               ": heads ", c.heads, " must be a multiple of kv_heads ", c.kv_heads, " (at most 65535)");
  LOWBIT_CHECK(c.rows >= 1 && c.pos0 >= 0 && c.pos0 + c.rows < (std::int64_t{1} << 30), what, ": ", c.rows,
               " rows at position ", c.pos0, " (>= 1 rows, positions below 2^30)");
  LOWBIT_CHECK(c.ldq >= q_cols && c.ldo >= q_cols && c.ldo % 2 == 0 && reinterpret_cast<std::uintptr_t>(c.out) % 4 == 0,
               what, ": ldq ", c.ldq, " and ldo ", c.ldo, " must hold the ", q_cols,
               " query columns (ldo even, out 4-byte aligned)");
  LOWBIT_CHECK(c.body_bits == 0 || c.body_bits == 4 || c.body_bits == 8, what, ": body_bits ", c.body_bits,
               ", expected 0, 4 or 8");
  LOWBIT_CHECK(c.sink >= 0 && c.window >= 0 && (c.body_bits != 0 || c.window > 0), what, ": sink ", c.sink,
               " and window ", c.window, " (a cache without a body needs a window: the full policy is "
               "flash_attention_over_cache's)");
  const bool selective = c.body_bits != 0 && c.window > 0, whole_body = c.body_bits != 0 && c.window == 0;
  LOWBIT_CHECK(!selective || c.body_base == c.sink, what, ": body_base ", c.body_base, " (selective: the sink, ",
               c.sink, ")");
  LOWBIT_CHECK(!whole_body || (c.sink == 0 && c.body_base == 0), what, ": sink ", c.sink, " and body_base ",
               c.body_base, " (int8 / int4: 0)");
  const bool f16 = c.body_bits == 0 || c.window > 0;
  LOWBIT_CHECK(!f16 || (c.f16_k && c.f16_v && c.f16_slots >= c.sink + c.window), what,
               ": the FP16 slots (f16_k, f16_v, f16_slots ", c.f16_slots, " >= sink + window)");
  LOWBIT_CHECK(c.window == 0 || c.pos0 <= c.sink || (c.snap_k && c.snap_v), what,
               ": the ring's positions before the chunk need its snapshot (snap_k, snap_v)");
  LOWBIT_CHECK(c.key_block >= 0 && (c.key_block == 0 || c.body_bits != 0), what, ": key_block ", c.key_block,
               " (>= 0; a cache without a body has none)");
  if (c.key_block > 0 && !flash_mixed_cache_key_block(c.body_bits, c.key_block)) return false;
  // The body is read where the chunk's last row has one (a short selective cache may hold
  // none); with key blocks its K where the last row has a complete block.
  const std::int64_t body_end = c.pos0 + c.rows - c.window;  // the last row's
  const bool reads_body = c.body_bits != 0 && body_end > c.body_base;
  const bool reads_k_body = reads_body && (c.key_block == 0 || body_end - c.body_base >= c.key_block);
  LOWBIT_CHECK((!reads_body || (c.codes_v && c.scales_v && (c.body_bits == 8 || c.mins_v))) &&
                   (!reads_k_body || (c.codes_k && c.scales_k && (c.body_bits == 8 || c.mins_k))),
               what, ": the body's codes, scales (and 4-bit mins)");
  LOWBIT_CHECK(c.chunk_ld >= c.kv_heads * d && c.chunk_ld % 8 == 0, what, ": chunk_ld ", c.chunk_ld,
               " must hold the KV heads and be a multiple of 8");
  // 16-byte copies: every FP16 row and every code row starts on 16 bytes (key blocks: K's
  // scales and mins too, and the staging ring's snapshot, read where a body position
  // precedes the chunk).
  LOWBIT_CHECK(aligned16(c.chunk_k) && aligned16(c.chunk_v) && aligned16(c.f16_k) && aligned16(c.f16_v) &&
                   aligned16(c.snap_k) && aligned16(c.snap_v) && aligned16(c.codes_k) && aligned16(c.codes_v),
               what, ": the chunk's K / V, the FP16 slots, the snapshot and the codes must be 16-byte aligned");
  LOWBIT_CHECK(c.key_block == 0 || (aligned16(c.scales_k) && aligned16(c.mins_k)), what,
               ": key blocks: K's scales and mins must be 16-byte aligned");
  LOWBIT_CHECK(c.key_block == 0 || c.pos0 - c.window <= c.body_base ||
                   (c.snap_staged && aligned16(c.snap_staged)),
               what, ": key blocks: the staging ring's snapshot (snap_staged, 16-byte aligned)");
  if ((d != 64 && d != 128) || !wgmma_ready()) return false;
  const MixedArgs a{static_cast<const std::uint16_t*>(c.chunk_k),
                    static_cast<const std::uint16_t*>(c.chunk_v),
                    c.chunk_ld,
                    static_cast<const std::uint16_t*>(c.snap_k),
                    static_cast<const std::uint16_t*>(c.snap_v),
                    static_cast<const std::uint16_t*>(c.snap_staged),
                    static_cast<const std::uint16_t*>(c.f16_k),
                    static_cast<const std::uint16_t*>(c.f16_v),
                    c.f16_slots,
                    static_cast<const std::uint8_t*>(c.codes_k),
                    static_cast<const std::uint8_t*>(c.codes_v),
                    static_cast<const std::uint16_t*>(c.scales_k),
                    static_cast<const std::uint16_t*>(c.scales_v),
                    static_cast<const std::uint16_t*>(c.mins_k),
                    static_cast<const std::uint16_t*>(c.mins_v),
                    static_cast<std::uint16_t*>(c.out),
                    c.ldo,
                    static_cast<int>(c.rows),
                    static_cast<int>(c.pos0),
                    static_cast<int>(c.heads / c.kv_heads),
                    static_cast<int>(c.kv_heads),
                    static_cast<int>(std::min<std::int64_t>(c.sink, std::int64_t{1} << 30)),
                    static_cast<int>(c.window),
                    static_cast<int>(c.body_base),
                    static_cast<int>(c.key_block),
                    1.4426950408889634f / std::sqrt(static_cast<float>(d)),
                    1};
  const auto s = static_cast<cudaStream_t>(stream);
  const int heads = static_cast<int>(c.heads), bits = c.body_bits;
  return d == 64 ? launch_bits<64>(a, c.q, c.ldq, heads, bits, s, launch)
                 : launch_bits<128>(a, c.q, c.ldq, heads, bits, s, launch);
}

}  // namespace

bool flash_mixed_cache_key_block(int body_bits, std::int64_t key_block) {
  return body_bits == 4 && key_block % 16 == 0 && key_block > 0 && (kBN % key_block == 0 || key_block % kBN == 0);
}

bool flash_attention_over_mixed_cache(const MixedCacheAttention& c, cuda_stream_t stream) {
  return run_mixed(c, stream, true);
}

bool flash_mixed_cache_takes(const MixedCacheAttention& c) { return run_mixed(c, nullptr, false); }

}  // namespace lowbit::cuda::flash
