// Prefill attention over the decode cache on tensor cores: kv_attention_rows' kernel
// (AttentionKernel::automatic / mma; the SIMT rows form of attention.cu stays as simt).
//
// A block takes one KV head, all G of its query heads and R = 64 / G rows of the chunk:
// M = 64 query rows, 4 warps x 16 (M-row m is chunk row r0 + m / G, query head m % G, so
// the block reads each K / V tile once for the whole GQA group). It streams tiles of 64
// positions through shared memory, double-buffered, FlashAttention-2 on mma.sync m16n8k16
// (cuda/flash_tile.cuh, as cuda/flash/flash_attention.cu): S = Q K^T, the online softmax in
// the exp2 domain (q's scale log2(e) / sqrt(D) folded in), O += P V with P rounded to f16.
//
// The selective semantics are kept exactly (kv_cuda.h): the row at position t sees an
// older position s as the cache held it at t: the sink (s < sink) and the recent ones
// (s > t - window) in FP16, the body between them quantized. So a tile is read in up to
// two views, and each view's pass masks the (row, position) pairs that are not in its
// form, so that every pair enters the softmax exactly once:
//   FP16 view  the sink from the cache (full: every position, from the cache), the
//              ring's positions from the chunk (s >= pos0) or the ring's snapshot
//              (s < pos0), by cp.async;
//   body view  the codes by cp.async into a staging area, then dequantized into the
//              tile as f16 (INT8 q * s, INT4 q * s + min in f16 arithmetic: the exact
//              value rounded once), never in global memory.
// Only the tiles that the window's edge crosses for some of the block's rows take both.
// With key blocks (core::KvRowForms) the body view's K is dequantized by channel, with
// the scales (and mins) of the tile's blocks copied beside the codes, and a third view,
// open, holds the positions whose block is not complete at the row: K's FP16 row from
// the chunk, the ring's snapshot or the staging ring's snapshot (the block open before
// the chunk), V's codes as the body's. So the whole chunk is appended first
// (kv_append_rows) and attended at once: every row reads each position as the cache held
// it at its own position.
// Positions no row of the block reads in a view are zero in its tile (their rows may
// hold poison: 0 * NaN would reach O).
//
// Split-K (grid.z): when the row tiles x KV heads do not fill the device (a short chunk
// at a long context), each block takes a range of tiles and writes the decode kernels'
// partials (max, sum, unnormalized O a query head and split), which their combine kernel
// turns into the rows' outputs.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/device.h"
#include "cuda/async_copy.cuh"
#include "cuda/flash_tile.cuh"
#include "cuda/kv/attention_common.cuh"
#include "cuda/kv/dequantize_f16.cuh"
#include "cuda/mma.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::kv {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kBM = 16 * kWarps;  // query rows (row x head) a block
constexpr int kBN = 64;           // positions a tile

// Key blocks a tile of 64 positions meets at most (blocks of 16 or more).
constexpr int kMaxTileBlocks = kBN / 16 + 1;

template <int D, int Bits, bool KB>
struct RowsLayout {
  static constexpr int kRow = 2 * D;  // bytes of an f16 tile row
  static constexpr int kQ = kBM * kRow;
  static constexpr int kPart = kBN * kRow;  // K or V of one tile
  static constexpr int kCodeBytes = Bits == 8 ? D : Bits == 4 ? D / 2 : 0;
  // A staging row is padded by 16 bytes, so that the 8 lanes of a quarter warp reading
  // 16 bytes of 8 consecutive rows hit 8 different bank groups.
  static constexpr int kRawRow = kCodeBytes + 16;
  static constexpr int kRaw = Bits != 0 ? 2 * kBN * kRawRow : 0;
  static constexpr int kParams = KB ? kMaxTileBlocks * 2 * kRow : 0;  // key blocks: scales, mins a block
  static constexpr int kSmem = kQ + 4 * kPart + kRaw + kParams;  // Q, {K, V} x 2 buffers, staging, K's blocks
  __device__ static std::uint32_t tile(std::uint32_t base, int buf, int part) {
    return base + kQ + (2 * buf + part) * kPart;
  }
  __device__ static std::uint32_t raw(std::uint32_t base, int part) {
    return base + kQ + 4 * kPart + part * kBN * kRawRow;
  }
  // Block `which` of the tile's: D f16 scales (vec 0) or mins (vec 1).
  __device__ static std::uint32_t params(std::uint32_t base, int which, int vec) {
    return base + kQ + 4 * kPart + kRaw + (2 * which + vec) * kRow;
  }
};

using flash::pack_half2;
using flash::swizzle;

// The FP16 row of position s (a view-FP16 position) of KV head kh: the sink's (full:
// every position's) in the cache or the pool, the ring's in the chunk or the snapshot.
template <int D, bool Paged>
__device__ __forceinline__ const void* f16_row(const RowsMmaArgs& a, int part, int kh, int s) {
  const KvLayerShape& sh = a.shape;
  if (sh.window > 0 && s >= sh.sink) {
    if (s >= a.pos0) return a.chunk + (static_cast<long long>(s - a.pos0) * a.ld + (part ? a.v_col : a.k_col) + kh * D);
    return (part ? a.snap_v : a.snap_k) + (static_cast<long long>(kh) * sh.window + s % sh.window) * D;
  }
  if constexpr (Paged) {
    if (sh.window == 0) return paged_f16_row(a.paged, a.table, part != 0, kh, s);
  }
  const KvPart p = part ? a.layer.v : a.layer.k;  // by value: a reference picked at run time forces local memory
  return p.f16 + (static_cast<long long>(kh) * sh.f16_slots() + s) * D;
}

// K's FP16 row of an open position s (its block not complete at the row; key blocks):
// the chunk's (s >= pos0), the ring's snapshot (still in the window before the chunk) or
// the staging ring's snapshot (it had left the window: the block open before the chunk).
template <int D>
__device__ __forceinline__ const std::uint16_t* open_key_row(const RowsMmaArgs& a, int kh, int s) {
  const KvLayerShape& sh = a.shape;
  if (s >= a.pos0) {
    const long long at = static_cast<long long>(s - a.pos0) * a.ld + a.k_col + kh * D;
    return reinterpret_cast<const std::uint16_t*>(a.chunk + at);
  }
  if (sh.window > 0 && s > a.pos0 - 1 - sh.window) {
    return a.snap_k + (static_cast<long long>(kh) * sh.window + s % sh.window) * D;
  }
  return a.snap_staged + (static_cast<long long>(kh) * sh.key_block + sh.staged_slot(s)) * D;
}

// The scales (vec 0) or mins (vec 1) of K's block j, head kh: D f16 (core/kv_layout.h;
// paged: in the page of the block's first position, core/kv_pages.h).
template <int D, bool Paged>
__device__ __forceinline__ const std::uint16_t* key_block_params(const RowsMmaArgs& a, int kh, int j, int vec) {
  if constexpr (Paged) {
    const KvPageLayout& l = a.paged.layout;
    const std::uint8_t* page = page_of(a.paged, a.table, l.key_block_page(j));
    const long long offset = vec ? l.mins_offset(false) : l.scales_offset(false);
    return reinterpret_cast<const std::uint16_t*>(page + offset) + kh * D;
  } else {
    return (vec ? a.layer.k.mins : a.layer.k.scales) + (static_cast<long long>(j) * a.shape.kv_heads + kh) * D;
  }
}

template <bool Paged>
__device__ __forceinline__ BodyRow body_row(const RowsMmaArgs& a, int part, int s) {
  if constexpr (Paged) return paged_body_row(a.paged, a.table, part != 0, s);
  return contiguous_body_row(a.shape, part ? a.layer.v : a.layer.k, s);
}
template <bool Paged>
__device__ __forceinline__ BodyRows body_rows(const RowsMmaArgs& a, int s) {
  if constexpr (Paged) return paged_body_rows(a.paged, a.table, s);
  return BodyRows{body_row<Paged>(a, 0, s), body_row<Paged>(a, 1, s)};
}

// 16 bytes of codes -> their f16 values (dequantize_f16.cuh), written as 16-byte chunks
// first_chunk.. of a swizzled tile row.
template <int Bits>
__device__ __forceinline__ void dequantize16_to_tile(uint4 codes, __half2 s2, __half2 m2, std::uint32_t row_address,
                                                     int row, int first_chunk) {
  dequantize16<Bits>(codes, s2, m2,
                     [&](int h, uint4 v) { st_shared16(row_address + swizzle(row, first_chunk + h) * 16, v); });
}

template <int D, int Bits, bool Paged, bool KB>
__global__ void __launch_bounds__(kThreads, 2) rows_mma_kernel(const RowsMmaArgs a) {
  using L = RowsLayout<D, Bits, KB>;
  using Forms = core::KvRowForms;
  constexpr int kChunks = D / 8;  // 16-byte chunks of an f16 row
  constexpr int kViews = KB ? 3 : 2;
  extern __shared__ __align__(128) std::uint8_t smem[];
  const std::uint32_t base = smem_address(smem);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, r = lane / 4, c = lane % 4;
  const int G = a.group, R = a.rows_per_block;
  const int kh = static_cast<int>(blockIdx.y);
  const int r0 = static_cast<int>(gridDim.x - 1 - blockIdx.x) * R;  // the longest rows first
  const int tmin = a.pos0 + r0, tmax = a.pos0 + min(r0 + R, a.rows) - 1;
  const Forms forms(a.shape);
  const int split = static_cast<int>(blockIdx.z);
  const int end_tile = min(tmax / kBN + 1, (split + 1) * a.split_tiles);

  // The lane's two M-rows (r, r + 8 of the warp's 16) and the warp's: position t (-1
  // when the M-row is padding or past the chunk).
  auto row_position = [&](int m) {
    const int rr = m / G;
    return m < R * G && r0 + rr < a.rows ? tmin + rr : -1;
  };
  const int t_lane[2] = {row_position(warp * 16 + r), row_position(warp * 16 + r + 8)};
  // Quantized ends (key blocks: a division each) of the block's, the warp's and the lane's rows.
  const int q_min = forms.quantized_end(tmin), q_max = forms.quantized_end(tmax);
  const int q_lane[2] = {forms.quantized_end(t_lane[0]), forms.quantized_end(t_lane[1])};
  const int tw_min = row_position(warp * 16);
  const int tw_last = row_position(warp * 16 + 15);
  const bool warp_full = tw_last >= 0;  // every M-row of the warp is a row
  int tw_max = tw_min;
  for (int m = warp * 16 + 1; m < warp * 16 + 16; ++m) tw_max = max(tw_max, row_position(m));
  const int qw_min = forms.quantized_end(tw_min), qw_max = forms.quantized_end(tw_max);

  // Q: M-row m = (row, head) of the chunk; padding reads as zeros.
#pragma unroll
  for (int i = 0; i < kBM * kChunks / kThreads; ++i) {
    const int id = tid + i * kThreads, m = id / kChunks, ch = id % kChunks;
    const bool ok = row_position(m) >= 0;
    const long long at = ok ? static_cast<long long>(r0 + m / G) * a.ld + (kh * G + m % G) * D + ch * 8 : 0;
    cp_async16(base + m * L::kRow + swizzle(m, ch) * 16, a.chunk + at, ok ? 16 : 0);
  }

  // Key blocks: the first of the blocks whose K a body tile at n0 reads (its parameters
  // are copied from there on), and how many.
  auto tile_blocks = [&](int n0, int& first, int& count) {
    const int lo = max(n0, forms.body_lo()), hi = min(n0 + kBN, q_max) - 1;
    first = (lo - forms.body_base) / forms.key_block;
    count = lo <= hi ? (hi - forms.body_base) / forms.key_block - first + 1 : 0;
  };

  // Issues the loads of an item into tile buffer `buf`; a body item's codes (an open
  // item's V codes) go to the staging area and this thread's scale / min (of position
  // tid % 64 of part tid / 64; not K's by channel) to registers, for dequantize_item. Thread
  // tid takes position p = tid / 2 of the tile, K and V, and the 16-byte chunks tid % 2,
  // tid % 2 + 2, ... of each: a row's address (the ring, chunk, snapshot, sink or page it
  // lives in) is worked out once for all of its chunks, not once a chunk, and the lane
  // pair reads 32 contiguous bytes a step.
  static_assert(kThreads == 2 * kBN, "two threads a tile position");
  std::uint16_t pending_scale = 0, pending_min = 0;
  auto issue_f16_row = [&](std::uint32_t dst, const std::uint16_t* row, int p, int half, bool ok) {
#pragma unroll
    for (int j = 0; j < kChunks / 2; ++j) {
      const int ch = 2 * j + half;
      // Not needed: zero bytes read (src not dereferenced), the chunk zero-filled.
      cp_async16(dst + swizzle(p, ch) * 16, ok ? static_cast<const void*>(row + ch * 8) : a.chunk, ok ? 16 : 0);
    }
  };
  auto issue_item = [&](int item, int buf) {
    const int view = item % kViews, n0 = item / kViews * kBN, p = tid / 2, half = tid % 2, s = n0 + p;
    if (view == Forms::kFp16) {
      const bool ok = forms.needed(Forms::kFp16, tmin, tmax, q_min, q_max, s);
      const void* rows[2] = {nullptr, nullptr};
      if (ok) {
        if (Paged && a.shape.window == 0) {  // full: K's and V's rows from one page lookup
          const F16Rows kv = paged_f16_rows(a.paged, a.table, kh, s);
          rows[0] = kv.k, rows[1] = kv.v;
        } else {
          rows[0] = f16_row<D, Paged>(a, 0, kh, s), rows[1] = f16_row<D, Paged>(a, 1, kh, s);
        }
      }
#pragma unroll
      for (int part = 0; part < 2; ++part) {
        issue_f16_row(L::tile(base, buf, part) + p * L::kRow, static_cast<const std::uint16_t*>(rows[part]), p, half,
                      ok);
      }
    } else if constexpr (Bits != 0) {
      constexpr int kCodeChunks = L::kCodeBytes / 16;
      static_assert(kCodeChunks % 2 == 0, "code chunks split over a lane pair");
      const bool open = KB && view == Forms::kOpen;  // K's FP16 row into the tile, V's codes
      if (forms.needed(view, tmin, tmax, q_min, q_max, s)) {
        const BodyRows kv = body_rows<Paged>(a, s);  // paged: one page lookup for K and V
        if (open) issue_f16_row(L::tile(base, buf, 0) + p * L::kRow, open_key_row<D>(a, kh, s), p, half, true);
#pragma unroll
        for (int part = open ? 1 : 0; part < 2; ++part) {
          const std::uint8_t* codes = (part ? kv.v : kv.k).codes + kh * L::kCodeBytes;
#pragma unroll
          for (int j = 0; j < kCodeChunks / 2; ++j) {
            const int ch = 2 * j + half;
            cp_async16(L::raw(base, part) + p * L::kRawRow + ch * 16, codes + ch * 16, 16);
          }
        }
      }
      const int part = tid / kBN, sp = n0 + tid % kBN;
      if (!(KB && part == 0) && forms.needed(view, tmin, tmax, q_min, q_max, sp)) {
        const BodyRow row = body_row<Paged>(a, part, sp);
        pending_scale = __ldg(row.scales + kh);
        if constexpr (Bits == 4) pending_min = __ldg(row.mins + kh);
      }
      if constexpr (KB) {
        if (!open) {  // the scales (and mins) of the tile's blocks: D f16 each
          constexpr int kVecs = Bits == 4 ? 2 : 1, kPerBlock = kVecs * kChunks;
          int first, count;
          tile_blocks(n0, first, count);
          for (int u = tid; u < count * kPerBlock; u += kThreads) {
            const int which = u / kPerBlock, vec = u % kPerBlock / kChunks, ch = u % kChunks;
            cp_async16(L::params(base, which, vec) + ch * 16,
                       key_block_params<D, Paged>(a, kh, first + which, vec) + ch * 8, 16);
          }
        }
      }
    }
    cp_async_commit();
  };
  // A body or open item's staged codes -> its tile (after the staging landed: wait +
  // barrier); thread tid writes row tid % 64 of part tid / 64, zeros where no row reads
  // it (an open item's K rows: only those; the rest came as FP16), but for K by channel.
  auto dequantize_item = [&](int item, int buf) {
    if constexpr (Bits != 0) {
      const int view = item % kViews, n0 = item / kViews * kBN;
      const int part = tid / kBN, p = tid % kBN, s = n0 + p;
      const std::uint32_t dst = L::tile(base, buf, part) + p * L::kRow;
      const bool needed = forms.needed(view, tmin, tmax, q_min, q_max, s);
      constexpr int kPer16 = Bits == 8 ? 2 : 4;  // f16 chunks from 16 code bytes
      if constexpr (KB) {
        if (part == 0 && view == Forms::kBody) {
          // K by channel, channel-major: thread tid takes 16-byte chunk ch (8 channels) of
          // positions g, g + kGroups, ...: it loads its chunk's scales and mins once a block,
          // not all D of them a position, and 4 or 8 bytes of codes a position.
          constexpr int kGroups = kBN / kChunks;
          const int ch = tid % kChunks, g = tid / kChunks;
          int first, count;
          tile_blocks(n0, first, count);
          int cached = -1, which = 0;
          int next_block = forms.body_base + (first + 1) * forms.key_block;  // which's end
          uint4 scales = make_uint4(0, 0, 0, 0), mins = scales;
#pragma unroll 2
          for (int i = 0; i < kChunks; ++i) {
            const int pc = i * kGroups + g, sc = n0 + pc;
            const std::uint32_t at = L::tile(base, buf, 0) + pc * L::kRow + swizzle(pc, ch) * 16;
            if (!forms.needed(Forms::kBody, tmin, tmax, q_min, q_max, sc)) {
              st_shared16(at, make_uint4(0, 0, 0, 0));
              continue;
            }
            for (; sc >= next_block; next_block += forms.key_block) ++which;  // positions rise
            if (which != cached) {
              scales = ld_shared16(L::params(base, which, 0) + ch * 16);
              if constexpr (Bits == 4) mins = ld_shared16(L::params(base, which, 1) + ch * 16);
              cached = which;
            }
            const std::uint32_t codes = L::raw(base, 0) + pc * L::kRawRow + ch * (Bits == 8 ? 8 : 4);
            const uint2 q = Bits == 8 ? ld_shared8(codes) : make_uint2(ld_shared4(codes), 0u);
            st_shared16(at, dequantize8_channels<Bits>(q, scales, mins));
          }
          return;
        }
      }
      if (!needed) {
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch) st_shared16(dst + ch * 16, make_uint4(0, 0, 0, 0));
        return;
      }
      if (KB && part == 0) return;  // an open item's K: its FP16 rows came by cp.async
      const __half2 s2 = __half2half2(__ushort_as_half(pending_scale));
      const __half2 m2 = __half2half2(__ushort_as_half(pending_min));
#pragma unroll
      for (int b = 0; b < L::kCodeBytes / 16; ++b) {
        const uint4 codes = ld_shared16(L::raw(base, part) + p * L::kRawRow + b * 16);
        dequantize16_to_tile<Bits>(codes, s2, m2, dst, p, b * kPer16);
      }
    }
  };

  int item = core::next_rows_item(forms, kViews, kViews * split * a.split_tiles - 1, end_tile, tmin, tmax, kBN);
  if (item >= 0) {
    issue_item(item, 0);
  } else {
    cp_async_commit();
  }
  cp_async_wait<0>();
  __syncthreads();
  if (item >= 0 && item % kViews != Forms::kFp16) {
    dequantize_item(item, 0);
    __syncthreads();
  }
  std::uint32_t qf[D / 16][4];
  flash::load_q<D>(qf, base, warp, lane);
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int it = 0; item >= 0; ++it) {
    const int buf = it & 1;
    const int next = core::next_rows_item(forms, kViews, item, end_tile, tmin, tmax, kBN);
    if (next >= 0) issue_item(next, buf ^ 1);
    const int n0 = item / kViews * kBN, view = item % kViews;
    if (tw_min >= 0 && n0 <= tw_max) {
      float s[kBN / 8][4];
      flash::qk_tile<D, kBN>(s, qf, L::tile(base, buf, 0), lane);
      if (!(warp_full && forms.tile_whole(view, tw_min, tw_max, qw_min, qw_max, n0, kBN))) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (!forms.at(view, t_lane[e >> 1], q_lane[e >> 1], n0 + j * 8 + 2 * c + (e & 1))) s[j][e] = -INFINITY;
          }
        }
      }
      float corr[2];
      flash::softmax_tile<kBN>(s, m, l, a.q_scale, corr);
      flash::pv_tile<D, kBN>(o, corr, s, L::tile(base, buf, 1), lane);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with `buf`; the next item's loads have landed
    if (next >= 0 && next % kViews != Forms::kFp16) {
      dequantize_item(next, buf ^ 1);
      __syncthreads();
    }
    item = next;
  }

#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float sum = l[hr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (t_lane[hr] < 0) continue;
    const int mrow = warp * 16 + r + 8 * hr;
    const long long row = r0 + mrow / G;
    const int h = kh * G + mrow % G;
    if (a.splits == 1) {
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      std::uint32_t* dst = reinterpret_cast<std::uint32_t*>(a.out + row * a.out_ld + h * D + 2 * c);
#pragma unroll
      for (int d = 0; d < D / 8; ++d) dst[d * 4] = pack_half2(o[d][2 * hr] * inv, o[d][2 * hr + 1] * inv);
    } else {
      const long long at = (row * a.n_heads + h) * a.splits + split;
      float2* acc = reinterpret_cast<float2*>(a.acc + at * D + 2 * c);
#pragma unroll
      for (int d = 0; d < D / 8; ++d) acc[d * 4] = make_float2(o[d][2 * hr], o[d][2 * hr + 1]);
      if (c == 0) reinterpret_cast<float2*>(a.max_sum)[at] = make_float2(m[hr], sum);
    }
  }
}

template <int D, int Bits, bool Paged, bool KB = false>
void launch(const RowsMmaArgs& a, dim3 grid, cudaStream_t stream) {
  using L = RowsLayout<D, Bits, KB>;
  static const bool configured = [] {
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(rows_mma_kernel<D, Bits, Paged, KB>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem));
    return true;
  }();
  (void)configured;
  rows_mma_kernel<D, Bits, Paged, KB><<<grid, kThreads, L::kSmem, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

template <int D, bool Paged>
void launch_bits(const RowsMmaArgs& a, dim3 grid, cudaStream_t stream) {
  const bool kb = a.shape.key_blocks();
  switch (a.shape.body) {
    case KvBody::none: launch<D, 0, Paged>(a, grid, stream); break;
    case KvBody::int8: kb ? launch<D, 8, Paged, true>(a, grid, stream) : launch<D, 8, Paged>(a, grid, stream); break;
    case KvBody::int4: kb ? launch<D, 4, Paged, true>(a, grid, stream) : launch<D, 4, Paged>(a, grid, stream); break;
  }
}

}  // namespace

bool rows_mma_takes(const KvLayerShape& shape, std::int64_t n_heads) {
  return n_heads / shape.kv_heads <= kBM && (shape.head_dim == 64 || shape.head_dim == 128) &&
         (!shape.key_blocks() || shape.key_block >= 16);  // a tile meets at most kMaxTileBlocks
}

void launch_rows_mma(RowsMmaArgs a, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const std::int64_t d = a.shape.head_dim;
  LOWBIT_CHECK(rows_mma_takes(a.shape, a.n_heads),
               "kv_attention_rows: the tensor-core kernel takes GQA groups of up to ", kBM,
               " query heads and key blocks of 16 or more, got ", a.n_heads / a.shape.kv_heads, " and ",
               a.shape.key_block);
  const std::int64_t end = static_cast<std::int64_t>(a.pos0) + a.rows;
  LOWBIT_CHECK(end < (std::int64_t{1} << 30), "kv_attention_rows: positions up to ", end, ", expected below 2^30");
  a.group = a.n_heads / static_cast<int>(a.shape.kv_heads);
  // Split-K while the blocks do not fill two a SM (2 resident), and only as many splits
  // as the workspace holds partials for.
  const std::size_t per_split = decode_workspace_bytes(a.n_heads, d, 1) * static_cast<std::size_t>(a.rows);
  const core::RowsTilePlan plan =
      core::plan_rows_tiles(a.rows, a.pos0, a.shape.kv_heads, a.group, kBM, kBN, 2LL * core::multiprocessor_count(),
                            static_cast<std::int64_t>(workspace_bytes / per_split));
  a.rows_per_block = static_cast<int>(plan.rows_per_block);
  const std::int64_t row_tiles = plan.row_tiles, splits = plan.splits;
  a.splits = static_cast<int>(splits);
  a.split_tiles = static_cast<int>(plan.split_tiles);
  if (splits > 1) {
    a.acc = static_cast<float*>(workspace);
    a.max_sum = a.acc + static_cast<std::int64_t>(a.rows) * a.n_heads * splits * d;
  }
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(a.shape.kv_heads),
                  static_cast<unsigned>(splits));
  const bool paged = a.table != nullptr;
  if (d == 64) {
    paged ? launch_bits<64, true>(a, grid, stream) : launch_bits<64, false>(a, grid, stream);
  } else {
    paged ? launch_bits<128, true>(a, grid, stream) : launch_bits<128, false>(a, grid, stream);
  }
  if (splits > 1) {
    launch_combine(a.acc, a.max_sum, a.splits, static_cast<int>(d), a.out, a.n_heads, a.out_ld, a.rows, stream);
  }
}

}  // namespace lowbit::cuda::kv
