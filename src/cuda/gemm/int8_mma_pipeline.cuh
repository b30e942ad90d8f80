// The production integer GEMM: a block tile of BM x BN outputs, K in steps of 64,
// computed by 64 x 64 warp tiles with mma.sync m16n8k32 (s8 x s8 -> s32).
//
// Data path, per 64-wide step of K:
//   global --cp.async 16 B (zero-fill past M, N, K)--> shared stage (kStages deep ring)
//   [operands not stored as int8 rows along K: one transform pass in shared memory
//    into an int8 [rows x 64] tile: byte transposes for B k_by_n, nibble
//    sign-extension for packed int4]
//   shared --ldmatrix.x4--> registers --mma.sync--> INT32 accumulators
// and at the end the fused epilogue (formats::apply_epilogue) with guarded stores.
//
// Every int8 tile that ldmatrix reads is [rows][64 bytes], its four 16-byte chunks
// XOR-swizzled by bits 1..2 of the row: the 8 rows of one 8x8 ldmatrix matrix then
// fall in 8 different 16-byte bank groups (no bank conflicts), and cp.async writes
// stay whole 16-byte chunks.
//
// int8_mma.cu instantiates it for int8 A and B (both layouts), int4_gemm.cu
// for packed int4 A and B (both layouts).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "core/device.h"
#include "cuda/async_copy.cuh"
#include "cuda/gemm/gemm_common.cuh"
#include "cuda/mma.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::gemm {

// ---------------------------------------------------------------- PTX wrappers

using cuda::cp_async_commit;  // cp.async helpers (cuda/async_copy.cuh)
using cuda::cp_async_wait;
using cuda::smem_address;
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, int src_bytes) {
  cuda::cp_async16(dst, src, src_bytes);
}

// ldmatrix_x4 (cuda/mma.cuh): four 8x8 matrices of 16-bit elements = four 8-row x 16-byte int8 blocks.
using cuda::ldmatrix_x4;

// c += a (16x32, row) * b (32x8, col), s8 inputs, s32 accumulators.
__device__ __forceinline__ void mma_s8_16x8x32(int (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                               std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t selector) {
  std::uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

// ---------------------------------------------------------------- byte shuffles

// 4x4 byte transpose: o[j] = (w0.byte j, w1.byte j, w2.byte j, w3.byte j).
__device__ __forceinline__ void transpose_4x4(std::uint32_t w0, std::uint32_t w1, std::uint32_t w2, std::uint32_t w3,
                                              std::uint32_t (&o)[4]) {
  const std::uint32_t t0 = prmt(w0, w1, 0x5140), t1 = prmt(w2, w3, 0x5140);  // bytes 0 and 1 interleaved
  const std::uint32_t t2 = prmt(w0, w1, 0x7362), t3 = prmt(w2, w3, 0x7362);  // bytes 2 and 3 interleaved
  o[0] = prmt(t0, t1, 0x5410);
  o[1] = prmt(t0, t1, 0x7632);
  o[2] = prmt(t2, t3, 0x5410);
  o[3] = prmt(t2, t3, 0x7632);
}

// Four nibbles (one per byte, in bits 0..3) sign-extended to four int8 bytes:
// ((v ^ 8) + 0x78) ^ 0x80 maps 0..7 to 0..7 and 8..15 to -8..-1 without a carry
// leaving any byte.
__device__ __forceinline__ std::uint32_t sign_extend_nibbles(std::uint32_t nibbles) {
  return ((nibbles ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u;
}
__device__ __forceinline__ std::uint32_t low_nibbles(std::uint32_t w) { return sign_extend_nibbles(w & 0x0f0f0f0fu); }
__device__ __forceinline__ std::uint32_t high_nibbles(std::uint32_t w) {
  return sign_extend_nibbles((w >> 4) & 0x0f0f0f0fu);
}

// Four packed bytes (8 values along K, low nibble first) -> two words of 4 int8 each.
__device__ __forceinline__ void unpack_int4_word(std::uint32_t w, std::uint32_t& k0_3, std::uint32_t& k4_7) {
  const std::uint32_t lo = low_nibbles(w), hi = high_nibbles(w);  // k 0,2,4,6 and k 1,3,5,7
  k0_3 = prmt(lo, hi, 0x5140);
  k4_7 = prmt(lo, hi, 0x7362);
}

// ---------------------------------------------------------------- tiles

constexpr int kBK = 64;          // K per pipeline step (int8 values)
constexpr int kRowBytes = kBK;   // one row of an int8 compute tile

// Byte offset of 16-byte chunk `chunk` (0..3) of row `row` in a swizzled [rows][64] tile.
__device__ __forceinline__ int swizzle(int row, int chunk) { return row * kRowBytes + ((chunk ^ ((row >> 1) & 3)) << 4); }

// How an operand is stored in global memory.
enum class Operand : int {
  int8_rows,  // int8, rows along M (A) or N (B n_by_k), K contiguous: cp.async straight into the compute tile
  int8_cols,  // int8 B k_by_n: K rows of N contiguous bytes; transposed in shared memory
  int4_rows,  // packed int4 rows along K; unpacked in shared memory
  int4_cols,  // packed int4 B k_by_n: ceil(K/2) rows of N bytes; unpacked and transposed
};

// One operand's tile of kRows rows (BM for A, BN for B) and its part of the pipeline.
// `tile` points at the operand's first row (rows forms) or first column (cols forms)
// of this block; `rows_valid` counts the rows (columns) of the tile inside the
// matrix; `k_bytes` is the stored length along K (K, or ceil(K/2) for int4).
template <Operand kOp, int kRows, int kThreads>
struct OperandTile {
  static constexpr bool kDirect = kOp == Operand::int8_rows;
  static constexpr bool kInt4 = kOp == Operand::int4_rows || kOp == Operand::int4_cols;
  static constexpr bool kRowsForm = kOp == Operand::int8_rows || kOp == Operand::int4_rows;
  // Stored bytes along K per step: 64 int8 or 32 packed bytes.
  static constexpr int kStepBytes = kInt4 ? kBK / 2 : kBK;
  static constexpr int kStageBytes = kRows * kStepBytes;
  static constexpr int kComputeBytes = kDirect ? 0 : kRows * kRowBytes;
  static constexpr int kChunks = kStageBytes / 16;
  static_assert(kChunks % kThreads == 0, "every thread issues the same number of cp.async");
  static_assert(kRows % 64 == 0, "tiles are made of 64-row warp tiles");

  // Issues this thread's cp.async of step kt into the stage at shared address `stage`.
  __device__ __forceinline__ static void load(std::uint32_t stage, const std::uint8_t* tile, long long ld,
                                              int rows_valid, int k_bytes, int kt, int tid, const void* safe) {
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i) {
      const int id = tid + i * kThreads;
      if constexpr (kRowsForm) {
        constexpr int kPerRow = kStepBytes / 16;  // 4 (int8) or 2 (int4)
        const int r = id / kPerRow, c = id % kPerRow;
        const int kb = kt * kStepBytes + c * 16;  // stored byte offset along K
        const int bytes = r < rows_valid ? min(max(k_bytes - kb, 0), 16) : 0;
        const void* src = bytes ? static_cast<const void*>(tile + r * ld + kb) : safe;
        cp_async_16(stage + (kDirect ? swizzle(r, c) : id * 16), src, bytes);
      } else {
        constexpr int kPerRow = kRows / 16;  // 16-byte chunks along N
        const int kr = id / kPerRow, c = id % kPerRow;
        const int kb = kt * kStepBytes + kr;  // stored row along K
        const int bytes = kb < k_bytes ? min(max(rows_valid - c * 16, 0), 16) : 0;
        const void* src = bytes ? static_cast<const void*>(tile + kb * ld + c * 16) : safe;
        cp_async_16(stage + id * 16, src, bytes);  // raw [kStepBytes][kRows], unswizzled
      }
    }
  }

  // Non-direct forms: the stage (raw) -> the swizzled int8 compute tile. For int4 A
  // (kMaskK), values at K and beyond become 0: that covers the padding nibble of an
  // odd K (whatever B holds there, the product is then 0); cp.async already
  // zero-filled every byte past the stored row.
  template <bool kMaskK>
  __device__ __forceinline__ static void transform(const std::uint8_t* raw, std::uint8_t* dst, int kt, int k,
                                                   int tid) {
    if constexpr (kOp == Operand::int8_cols) {
      // Item: 16 K x 4 N. Lanes take consecutive N quads: conflict-free reads.
      constexpr int kQuads = kRows / 4;
      for (int id = tid; id < 4 * kQuads; id += kThreads) {
        const int kc = id / kQuads, nq = id % kQuads;
        std::uint32_t w[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) w[r] = *reinterpret_cast<const std::uint32_t*>(raw + (kc * 16 + r) * kRows + nq * 4);
        std::uint32_t t[4][4];
#pragma unroll
        for (int g = 0; g < 4; ++g) transpose_4x4(w[4 * g], w[4 * g + 1], w[4 * g + 2], w[4 * g + 3], t[g]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          *reinterpret_cast<uint4*>(dst + swizzle(nq * 4 + j, kc)) = make_uint4(t[0][j], t[1][j], t[2][j], t[3][j]);
        }
      }
    } else if constexpr (kOp == Operand::int4_rows) {
      // Item: 16 packed bytes of one row = 32 values = output chunks 2c and 2c + 1.
      for (int id = tid; id < kRows * 2; id += kThreads) {
        const int r = id >> 1, c = id & 1;
        const uint4 p = *reinterpret_cast<const uint4*>(raw + id * 16);
        std::uint32_t o[8];
        unpack_int4_word(p.x, o[0], o[1]);
        unpack_int4_word(p.y, o[2], o[3]);
        unpack_int4_word(p.z, o[4], o[5]);
        unpack_int4_word(p.w, o[6], o[7]);
        if constexpr (kMaskK) {
          const int k0 = kt * kBK + c * 32;  // K index of o[0]'s first byte
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            const int valid = k - (k0 + 4 * q);
            if (valid < 4) o[q] = valid <= 0 ? 0u : o[q] & (0xffffffffu >> (8 * (4 - valid)));
          }
        }
        *reinterpret_cast<uint4*>(dst + swizzle(r, 2 * c)) = make_uint4(o[0], o[1], o[2], o[3]);
        *reinterpret_cast<uint4*>(dst + swizzle(r, 2 * c + 1)) = make_uint4(o[4], o[5], o[6], o[7]);
      }
    } else if constexpr (kOp == Operand::int4_cols) {
      // Item: 8 packed rows (16 K) x 4 N.
      constexpr int kQuads = kRows / 4;
      for (int id = tid; id < 4 * kQuads; id += kThreads) {
        const int kc = id / kQuads, nq = id % kQuads;
        std::uint32_t lo[8], hi[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const std::uint32_t w = *reinterpret_cast<const std::uint32_t*>(raw + (kc * 8 + r) * kRows + nq * 4);
          lo[r] = low_nibbles(w);   // K = 2r for the 4 columns
          hi[r] = high_nibbles(w);  // K = 2r + 1
        }
        std::uint32_t t[4][4];
#pragma unroll
        for (int g = 0; g < 4; ++g) transpose_4x4(lo[2 * g], hi[2 * g], lo[2 * g + 1], hi[2 * g + 1], t[g]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          *reinterpret_cast<uint4*>(dst + swizzle(nq * 4 + j, kc)) = make_uint4(t[0][j], t[1][j], t[2][j], t[3][j]);
        }
      }
    }
  }
};

// A block tile: BM x BN outputs, kWarpsM x kWarpsN warps of 64 x 64, kStages-deep ring.
template <int kBM_, int kBN_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_>
struct TileConfig {
  static constexpr int kBM = kBM_, kBN = kBN_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static_assert(kBM == 64 * kWarpsM && kBN == 64 * kWarpsN, "64 x 64 warp tiles");
  // Tiles are visited in groups of kGroupM tile rows (all tile columns of a group
  // before the next group), so that a wave of blocks shares A and B panels in L2.
  static constexpr int kGroupM = 16;
};

// 128 x 256, 8 warps, 4 stages: 96 KB of stages for int8 (1 block per SM, register-bound).
using LargeTiles = TileConfig<128, 256, 2, 4, 4, 1>;
// 128 x 128, 4 warps, 4 stages: 64 KB, 2 blocks per SM; for grids too small to fill
// the GPU with large tiles.
using SmallTiles = TileConfig<128, 128, 2, 2, 4, 2>;

struct MmaParams {
  const std::uint8_t* a;
  const std::uint8_t* b;
  long long lda, ldb;
  int k;                 // logical K
  int a_k_bytes, b_k_bytes;  // stored bytes along K
  int ktiles;
  int tiles_m, tiles_n;
  Epilogue e;
};

template <class Cfg, Operand kA, Operand kB>
struct MmaKernelTraits {
  using TA = OperandTile<kA, Cfg::kBM, Cfg::kThreads>;
  using TB = OperandTile<kB, Cfg::kBN, Cfg::kThreads>;
  static constexpr int kStageBytes = TA::kStageBytes + TB::kStageBytes;
  static constexpr int kSmemBytes = Cfg::kStages * kStageBytes + TA::kComputeBytes + TB::kComputeBytes;
};

// One 64-wide K step of a warp's 64 x 64 tile: 2 x (4 A + 4 B ldmatrix.x4, 32 mma).
__device__ __forceinline__ void warp_step(std::uint32_t a_tile, std::uint32_t b_tile, const int (&a_off)[2],
                                          const int (&b_off)[2], int (&acc)[4][8][4]) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    std::uint32_t af[4][4], bf[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) ldmatrix_x4(af[i], a_tile + a_off[ks] + i * 16 * kRowBytes);
#pragma unroll
    for (int j = 0; j < 4; ++j) ldmatrix_x4(bf[j], b_tile + b_off[ks] + j * 16 * kRowBytes);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) mma_s8_16x8x32(acc[i][j], af[i], bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
    }
  }
}

template <class Cfg, Operand kA, Operand kB>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) mma_gemm_kernel(const MmaParams p) {
  using Traits = MmaKernelTraits<Cfg, kA, kB>;
  using TA = typename Traits::TA;
  using TB = typename Traits::TB;
  static_assert(kA == Operand::int8_rows || kA == Operand::int4_rows, "A is stored in rows along K");
  constexpr int kStages = Cfg::kStages;

  extern __shared__ __align__(128) std::uint8_t smem[];
  std::uint8_t* const a_compute = smem + kStages * Traits::kStageBytes;
  std::uint8_t* const b_compute = a_compute + TA::kComputeBytes;
  const std::uint32_t smem_base = smem_address(smem);

  // Grouped rasterization of the 1-D grid.
  const int span = Cfg::kGroupM * p.tiles_n;
  const int group = static_cast<int>(blockIdx.x) / span;
  const int first_m = group * Cfg::kGroupM;
  const int group_m = min(p.tiles_m - first_m, Cfg::kGroupM);
  const int in_group = static_cast<int>(blockIdx.x) - group * span;
  const int m0 = (first_m + in_group % group_m) * Cfg::kBM;
  const int n0 = (in_group / group_m) * Cfg::kBN;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int wm = warp / Cfg::kWarpsN, wn = warp % Cfg::kWarpsN;

  const std::uint8_t* const a_tile = p.a + static_cast<long long>(m0) * p.lda;
  const std::uint8_t* const b_tile = TB::kRowsForm ? p.b + static_cast<long long>(n0) * p.ldb : p.b + n0;
  const int a_valid = p.e.m - m0, b_valid = p.e.n - n0;

  auto load_step = [&](int kt) {
    const std::uint32_t stage = smem_base + (kt % kStages) * Traits::kStageBytes;
    TA::load(stage, a_tile, p.lda, a_valid, p.a_k_bytes, kt, tid, p.a);
    TB::load(stage + TA::kStageBytes, b_tile, p.ldb, b_valid, p.b_k_bytes, kt, tid, p.b);
  };

  // ldmatrix lane addresses (byte offsets in a swizzled tile) for the two 32-wide
  // halves of a step. A: matrices (rows 0-7 | 8-15) x (k 0-15 | 16-31) = a0..a3.
  // B: (n 0-7, k 0-15), (n 0-7, k 16-31), (n 8-15, k 0-15), (n 8-15, k 16-31) =
  // b0, b1 of two adjacent n8 tiles.
  int a_off[2], b_off[2];
  {
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
    const int b_row = (lane & 7) + (lane >> 4) * 8, b_chunk = (lane >> 3) & 1;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      a_off[ks] = wm * 64 * kRowBytes + swizzle(a_row, 2 * ks + a_chunk);
      b_off[ks] = wn * 64 * kRowBytes + swizzle(b_row, 2 * ks + b_chunk);
    }
  }

  int acc[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0;
    }
  }

  // Prologue: steps 0 .. kStages-2 in flight (one commit group each, empty past K).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < p.ktiles) load_step(s);
    cp_async_commit();
  }

  for (int kt = 0; kt < p.ktiles; ++kt) {
    cp_async_wait<kStages - 2>();  // step kt has landed (for this thread) ...
    __syncthreads();               // ... for every thread; and step kt-1's stage is free
    if (kt + kStages - 1 < p.ktiles) load_step(kt + kStages - 1);
    cp_async_commit();

    const int stage_offset = (kt % kStages) * Traits::kStageBytes;
    std::uint32_t a_src = smem_base + stage_offset;
    std::uint32_t b_src = a_src + TA::kStageBytes;
    if constexpr (!TA::kDirect || !TB::kDirect) {
      if constexpr (!TA::kDirect) {
        TA::template transform<true>(smem + stage_offset, a_compute, kt, p.k, tid);
        a_src = smem_address(a_compute);
      }
      if constexpr (!TB::kDirect) {
        TB::template transform<false>(smem + stage_offset + TA::kStageBytes, b_compute, kt, p.k, tid);
        b_src = smem_address(b_compute);
      }
      __syncthreads();
    }
    warp_step(a_src, b_src, a_off, b_off, acc);
  }
  cp_async_wait<0>();

  // Epilogue. Accumulator (i, j): rows i*16 + g (+8), columns j*8 + 2t (+1).
  const int g = lane >> 2, t = lane & 3;
  const int row_base = m0 + wm * 64 + g, col_base = n0 + wn * 64 + 2 * t;
  float sa[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + i * 16 + h * 8;
      sa[i][h] = (p.e.kind != OutKind::i32 && row < p.e.m) ? row_scale(p.e, row) : 1.0f;
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int col = col_base + j * 8;
    const ColParams cp = col_params(p.e, col);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = row_base + i * 16;
      store_pair(p.e, row, col, acc[i][j][0], acc[i][j][1], sa[i][0], cp);
      store_pair(p.e, row + 8, col, acc[i][j][2], acc[i][j][3], sa[i][1], cp);
    }
  }
}

// Host side: the grid, the dynamic shared memory opt-in (once per device and
// instantiation), and the launch.
template <class Cfg, Operand kA, Operand kB>
void launch_mma_gemm(const IntGemmArgs& args, int a_k_bytes, int b_k_bytes, cudaStream_t stream) {
  using Traits = MmaKernelTraits<Cfg, kA, kB>;
  auto* kernel = mma_gemm_kernel<Cfg, kA, kB>;
  static std::array<std::atomic<bool>, 64> configured{};
  auto& flag = configured[static_cast<std::size_t>(core::current_device()) % configured.size()];
  if (!flag.load(std::memory_order_acquire)) {
    LOWBIT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
    flag.store(true, std::memory_order_release);
  }
  MmaParams p{};
  p.a = static_cast<const std::uint8_t*>(args.a);
  p.b = static_cast<const std::uint8_t*>(args.b);
  p.lda = args.lda;
  p.ldb = args.ldb;
  p.k = static_cast<int>(args.k);
  p.a_k_bytes = a_k_bytes;
  p.b_k_bytes = b_k_bytes;
  p.ktiles = static_cast<int>((args.k + kBK - 1) / kBK);
  p.tiles_m = static_cast<int>((args.m + Cfg::kBM - 1) / Cfg::kBM);
  p.tiles_n = static_cast<int>((args.n + Cfg::kBN - 1) / Cfg::kBN);
  p.e = make_epilogue(args);
  const long long tiles = static_cast<long long>(p.tiles_m) * p.tiles_n;
  LOWBIT_CHECK(tiles <= 0x7fffffffLL, "int gemm: ", args.m, " x ", args.n, " needs ", tiles,
               " thread blocks, more than one launch takes");
  mma_gemm_kernel<Cfg, kA, kB><<<static_cast<unsigned>(tiles), Cfg::kThreads, Traits::kSmemBytes, stream>>>(p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

// Large tiles when they alone fill every SM at least once; else small ones.
template <Operand kA, Operand kB>
void launch_mma_gemm_auto(const IntGemmArgs& args, int a_k_bytes, int b_k_bytes, cudaStream_t stream) {
  const long long large_tiles = ((args.m + LargeTiles::kBM - 1) / LargeTiles::kBM) *
                                ((args.n + LargeTiles::kBN - 1) / LargeTiles::kBN);
  if (large_tiles >= core::multiprocessor_count()) {
    launch_mma_gemm<LargeTiles, kA, kB>(args, a_k_bytes, b_k_bytes, stream);
  } else {
    launch_mma_gemm<SmallTiles, kA, kB>(args, a_k_bytes, b_k_bytes, stream);
  }
}

}  // namespace lowbit::cuda::gemm
