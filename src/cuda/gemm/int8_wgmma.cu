// The Hopper INT8 GEMM (sm_90a): out = epilogue(A [M x K] * B^T), A and B both
// K-major (B n_by_k), which is what 8-bit wgmma requires of both operands.
//
// Persistent and warp-specialized, one CTA of 3 warpgroups per SM, 128 x 256 output
// tiles, K in steps of 128 bytes (one 128-byte swizzle row):
//   warpgroup 0, the producer (40 registers): one thread streams a 128 x 128-byte box
//     of A and a 256 x 128-byte box of B per step with TMA into a 4-stage ring (48 KB a
//     stage); "full" mbarriers count the bytes, "empty" ones hand a stage back. It runs
//     ahead across tiles, so the next tile's loads overlap this tile's epilogue.
//   warpgroups 1 and 2, the consumers (232 registers): each owns 64 rows x 256 columns,
//     128 INT32 accumulators a thread; per stage 4 wgmma m64n256k32 with both operands
//     read from shared memory; one wgmma group stays in flight, and a stage goes back
//     to the producer once the wgmmas that read it have completed.
//   The epilogue goes from the accumulator registers straight to global memory,
//     guarded on M and N: pairs of columns as one store where the output allows
//     (i32, f32), 4 columns after a quad shuffle for f16 / bf16 (whole sectors).
//     Its cost is the L2 write traffic of every SM storing a tile at the same time
//     (~15% of the i32 run at 4096^3, measured by leaving the stores out).
// TMA zero-fills boxes past M, N and K, and zeros add nothing to an integer sum, so
// every shape works; K < 2^17 (common_reason) keeps the INT32 sums exact.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/device.h"
#include "cuda/gemm/gemm_common.cuh"
#include "cuda/gemm/tma.h"
#include "cuda/gemm/wgmma.cuh"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::cuda::gemm {

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 128;  // kBK in bytes = int8 values
constexpr int kStages = 4;
[[maybe_unused]] constexpr int kGroupM = 16;  // tile rows per rasterization group (L2 reuse of A and B panels)
constexpr int kConsumers = 2;  // warpgroups of 64 x 256
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kABytes = kBM * kBK, kBBytes = kBN * kBK, kStageBytes = kABytes + kBBytes;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack to align the ring to 1024 bytes
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file");
static_assert(kBM == 64 * kConsumers, "one m64 wgmma row block per consumer warpgroup");

struct WgmmaParams {
  int ktiles;
  int tiles_m, tiles_n;
  Epilogue e;
};

// Static shared memory: the pipeline's barriers and the current tile's per-column
// epilogue parameters. Only the sm_90a body declares it, so a nonzero static size
// tells the host that the kernel image has that body (see device_reason).
struct SharedControl {
  std::uint64_t full[kStages];
  std::uint64_t empty[kStages];
  alignas(16) float2 columns[kConsumers][kBN];  // per consumer: {scale_b, bias} of each column of the tile
};

#if defined(LOWBIT_SM90A_DEVICE)

// Grouped rasterization: all tile columns of kGroupM tile rows before the next group.
__device__ __forceinline__ void tile_origin(const WgmmaParams& p, int tile, int& m0, int& n0) {
  const int span = kGroupM * p.tiles_n;
  const int group = tile / span;
  const int first_m = group * kGroupM;
  const int group_m = min(p.tiles_m - first_m, kGroupM);
  const int in_group = tile - group * span;
  m0 = (first_m + in_group % group_m) * kBM;
  n0 = (in_group / group_m) * kBN;
}

// p[0] = v0 and, when `both`, p[1] = v1: one 8- or 4-byte store when `vector`.
__device__ __forceinline__ void put2(std::int32_t* p, std::int32_t v0, std::int32_t v1, bool both, bool vector) {
  if (both && vector) {
    *reinterpret_cast<int2*>(p) = make_int2(v0, v1);
    return;
  }
  p[0] = v0;
  if (both) p[1] = v1;
}
__device__ __forceinline__ void put2(float* p, float v0, float v1, bool both, bool vector) {
  if (both && vector) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    return;
  }
  p[0] = v0;
  if (both) p[1] = v1;
}
// Two floats rounded (RNE) to f16 or bf16 by one cvt.rn.{f16,bf16}x2.f32: the same bits
// as two narrow_bits calls, at half the cost of the conversion unit, which is what
// limits this epilogue.
template <OutKind kKind>
__device__ __forceinline__ std::uint32_t narrow_pair(float v0, float v1) {
  if constexpr (kKind == OutKind::f16) {
    const __half2 h = __floats2half2_rn(v0, v1);  // .x = v0 (low half)
    return *reinterpret_cast<const std::uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
}

// One consumer thread's 2 rows x 64 columns: acc[4j + 0/1] at (row, col + 8j + 0/1),
// acc[4j + 2/3] at (row + 8, same columns). sa0/sa1: the rows' scale_a; columns: the
// tile's {scale_b, bias}, indexed from the tile's first column (local_col = col - n0).
template <OutKind kKind>
__device__ __forceinline__ void store_fragment(const Epilogue& e, const int (&acc)[128], int row, int col,
                                               float sa0, float sa1, const float2* columns, int local_col) {
  using T = std::conditional_t<kKind == OutKind::i32, std::int32_t,
                               std::conditional_t<kKind == OutKind::f32, float, std::uint16_t>>;
  const bool row0 = row < e.m, row1 = row + 8 < e.m;
  T* const out0 = static_cast<T*>(e.out) + static_cast<long long>(row) * e.ldc + col;
  T* const out1 = out0 + 8 * e.ldc;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int c = col + 8 * j;
    if (c >= e.n) break;
    const bool both = c + 1 < e.n;
    if constexpr (kKind == OutKind::i32) {
      if (row0) put2(out0 + 8 * j, acc[4 * j], acc[4 * j + 1], both, e.pair_ok);
      if (row1) put2(out1 + 8 * j, acc[4 * j + 2], acc[4 * j + 3], both, e.pair_ok);
    } else {
      // {scale_b[c], bias[c], scale_b[c + 1], bias[c + 1]}: one shared-memory load.
      const float4 cp = *reinterpret_cast<const float4*>(columns + local_col + 8 * j);
      const float v00 = formats::apply_epilogue(acc[4 * j], sa0, cp.x, e.scale_c, cp.y, e.relu);
      const float v01 = formats::apply_epilogue(acc[4 * j + 1], sa0, cp.z, e.scale_c, cp.w, e.relu);
      const float v10 = formats::apply_epilogue(acc[4 * j + 2], sa1, cp.x, e.scale_c, cp.y, e.relu);
      const float v11 = formats::apply_epilogue(acc[4 * j + 3], sa1, cp.z, e.scale_c, cp.w, e.relu);
      static_assert(kKind == OutKind::f32, "16-bit outputs: store_fragment_16");
      if (row0) put2(out0 + 8 * j, v00, v01, both, e.pair_ok);
      if (row1) put2(out1 + 8 * j, v10, v11, both, e.pair_ok);
    }
  }
}

// 4 values (cols c .. c + 3) of one 16-bit output row: lo = cols c, c + 1; hi = c + 2, c + 3.
__device__ __forceinline__ void put4(std::uint16_t* p, int c, int n, std::uint32_t lo, std::uint32_t hi, bool vector) {
  if (vector && c + 3 < n) {
    *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
    return;
  }
  const std::uint32_t w[2] = {lo, hi};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (c + i < n) p[i] = static_cast<std::uint16_t>(w[i / 2] >> (16 * (i % 2)));
  }
}

// store_fragment for f16 / bf16. Stored as they come, a warp's 4-byte pairs fill
// half of each 32-byte sector they touch, and the L2 write transactions, not the
// bytes, are what the epilogue costs (it runs on every SM at once). So the lanes of a
// quad first swap pairs (one shuffle per two pairs) until each lane holds 4 adjacent
// columns: then every store writes whole sectors, and half as many of them.
// Per 16 columns (j = 2h, 2h + 1): lane q holds pairs P0 (cols 2q, 2q+1) and P1 (cols
// 8 + 2q, 8 + 2q + 1); lanes q and q ^ 1 trade P1 (even lane) for P0 (odd lane), after
// which lane q holds cols 4 * (q >> 1) + 8 * (q & 1) .. + 3.
template <OutKind kKind>
__device__ __forceinline__ void store_fragment_16(const Epilogue& e, const int (&acc)[128], int row, int n0,
                                                  int lane, float sa0, float sa1, const float2* columns) {
  const int q = lane & 3;
  const bool odd = q & 1;
  const int quad_col = 4 * (q >> 1) + 8 * (q & 1);  // after the swap
  const bool row0 = row < e.m, row1 = row + 8 < e.m;
  // 8-byte stores need the 4-column groups 8-byte aligned.
  const bool vector = (reinterpret_cast<std::uintptr_t>(e.out) & 7) == 0 && (e.ldc & 3) == 0;
  std::uint16_t* const out0 = static_cast<std::uint16_t*>(e.out) + static_cast<long long>(row) * e.ldc + n0 + quad_col;
  std::uint16_t* const out1 = out0 + 8 * e.ldc;
#pragma unroll
  for (int h = 0; h < kBN / 16; ++h) {
    if (n0 + 16 * h >= e.n) break;  // uniform across the warp: every lane shuffles
    std::uint32_t pairs[2][2];      // [row half][j - 2h]
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int j = 2 * h + jj;
      const float4 cp = *reinterpret_cast<const float4*>(columns + 8 * j + 2 * q);
      const float v00 = formats::apply_epilogue(acc[4 * j], sa0, cp.x, e.scale_c, cp.y, e.relu);
      const float v01 = formats::apply_epilogue(acc[4 * j + 1], sa0, cp.z, e.scale_c, cp.w, e.relu);
      const float v10 = formats::apply_epilogue(acc[4 * j + 2], sa1, cp.x, e.scale_c, cp.y, e.relu);
      const float v11 = formats::apply_epilogue(acc[4 * j + 3], sa1, cp.z, e.scale_c, cp.w, e.relu);
      pairs[0][jj] = narrow_pair<kKind>(v00, v01);
      pairs[1][jj] = narrow_pair<kKind>(v10, v11);
    }
    const int c = n0 + 16 * h + quad_col;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const std::uint32_t sent = odd ? pairs[r][0] : pairs[r][1];
      const std::uint32_t got = __shfl_xor_sync(0xffffffffu, sent, 1);
      const std::uint32_t lo = odd ? got : pairs[r][0];
      const std::uint32_t hi = odd ? pairs[r][1] : got;
      if (r == 0 ? row0 : row1) put4((r == 0 ? out0 : out1) + 16 * h, c, e.n, lo, hi, vector);
    }
  }
}

#endif  // LOWBIT_SM90A_DEVICE

__global__ void __launch_bounds__(kThreads, 1)
    wgmma_int8_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      const WgmmaParams p) {
#if defined(LOWBIT_SM90A_DEVICE)
  using namespace sm90;
  __shared__ SharedControl control;
  extern __shared__ std::uint8_t dynamic_smem[];
  // The 128-byte swizzle repeats every 1024 bytes; TMA and the descriptors assume
  // atoms that start 1024-aligned.
  const std::uint32_t ring = (smem_address(dynamic_smem) + 1023u) & ~1023u;
  const std::uint32_t full0 = smem_address(&control.full[0]), empty0 = smem_address(&control.empty[0]);
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const int tiles = p.tiles_m * p.tiles_n;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full0 + 8 * s, 1);                // the producer's arrive + the TMA bytes
      mbarrier_init(empty0 + 8 * s, kConsumers * 4);  // one arrive per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    release_registers<kProducerRegs>();
    if (threadIdx.x == 0) {
      prefetch_tensor_map(&map_a);
      prefetch_tensor_map(&map_b);
      int it = 0;  // pipeline step across all of this CTA's tiles
      for (int tile = static_cast<int>(blockIdx.x); tile < tiles; tile += static_cast<int>(gridDim.x)) {
        int m0, n0;
        tile_origin(p, tile, m0, n0);
        for (int kt = 0; kt < p.ktiles; ++kt, ++it) {
          const int s = it % kStages;
          mbarrier_wait(empty0 + 8 * s, ((it / kStages) & 1) ^ 1);
          const std::uint32_t full = full0 + 8 * s, stage = ring + s * kStageBytes;
          mbarrier_arrive_expect_tx(full, kStageBytes);
          tma_load_2d(stage, &map_a, full, kt * kBK, m0);
          tma_load_2d(stage + kABytes, &map_b, full, kt * kBK, n0);
        }
      }
    }
    return;
  }

  claim_registers<kConsumerRegs>();
  const int wg = warpgroup - 1;
  const int wg_thread = static_cast<int>(threadIdx.x) % 128;
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4, lane = static_cast<int>(threadIdx.x) % 32;
  const int local_col = 2 * (lane % 4);
  const Epilogue& e = p.e;
  const bool float_out = e.kind != OutKind::i32;

  int acc[128];
  int it = 0;
  for (int tile = static_cast<int>(blockIdx.x); tile < tiles; tile += static_cast<int>(gridDim.x)) {
    int m0, n0;
    tile_origin(p, tile, m0, n0);
    const int row = m0 + wg * 64 + warp * 16 + lane / 4;

    // Epilogue parameters, loaded now so that the main loop hides their latency:
    // this thread's two row scales, and two columns' {scale_b, bias} for the
    // warpgroup's table.
    float sa0 = 1.0f, sa1 = 1.0f;
    float4 columns{1.0f, 0.0f, 1.0f, 0.0f};
    if (float_out) {
      if (row < e.m) sa0 = row_scale(e, row);
      if (row + 8 < e.m) sa1 = row_scale(e, row + 8);
      const int c = n0 + 2 * wg_thread;
      if (c < e.n) columns.x = col_scale(e, c), columns.y = col_bias(e, c);
      if (c + 1 < e.n) columns.z = col_scale(e, c + 1), columns.w = col_bias(e, c + 1);
    }

    for (int kt = 0; kt < p.ktiles; ++kt, ++it) {
      const int s = it % kStages;
      mbarrier_wait(full0 + 8 * s, (it / kStages) & 1);
      const std::uint32_t a_tile = ring + s * kStageBytes + wg * 64 * kBK;
      const std::uint32_t b_tile = ring + s * kStageBytes + kABytes;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 32; ++ks) {
        wgmma_m64n256k32_s8(acc, sw128_descriptor(a_tile + 32 * ks), sw128_descriptor(b_tile + 32 * ks),
                            kt > 0 || ks > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous step's wgmmas are done: its stage can be refilled
      if (kt > 0 && lane == 0) mbarrier_arrive(empty0 + 8 * ((it - 1) % kStages));
    }
    wgmma_wait<0>();
    fence_registers(acc);
    if (lane == 0) mbarrier_arrive(empty0 + 8 * ((it - 1) % kStages));

    float2* const table = control.columns[wg];
    if (float_out) {
      named_barrier(1 + wg, 128);  // the warpgroup is done with the previous tile's table
      *reinterpret_cast<float4*>(table + 2 * wg_thread) = columns;
      named_barrier(1 + wg, 128);
    }
    const int col = n0 + local_col;
    switch (e.kind) {
      case OutKind::i32: store_fragment<OutKind::i32>(e, acc, row, col, sa0, sa1, table, local_col); break;
      case OutKind::f32: store_fragment<OutKind::f32>(e, acc, row, col, sa0, sa1, table, local_col); break;
      case OutKind::f16: store_fragment_16<OutKind::f16>(e, acc, row, n0, lane, sa0, sa1, table); break;
      case OutKind::bf16: store_fragment_16<OutKind::bf16>(e, acc, row, n0, lane, sa0, sa1, table); break;
    }
  }
#endif  // LOWBIT_SM90A_DEVICE
}

bool aligned_16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }

// Whether the current device can run the kernel, once per device: compute capability
// 9.0, an image of the kernel with its sm_90a body in this build, the driver's tensor
// map encoder, and the shared memory opt-in (set here, once). Null when it can.
const char* device_reason() {
  static constexpr const char* kReasons[] = {
      nullptr,
      "no CUDA device is current",
      "the wgmma kernel needs a compute capability 9.0 GPU (Hopper)",
      "this build has no sm_90a image of the wgmma kernel (CMAKE_CUDA_ARCHITECTURES needs 90a)",
      "the driver does not provide cuTensorMapEncodeTiled (TMA)",
      "the device does not give a block the wgmma kernel's shared memory",
  };
  static std::array<std::atomic<int>, 64> cached{};  // 0: not yet known, else 1 + index in kReasons
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return kReasons[1];
  }
  std::atomic<int>& slot = cached[static_cast<std::size_t>(device) % cached.size()];
  int state = slot.load(std::memory_order_acquire);
  if (state == 0) {
    int index = 0;
    int major = 0, minor = 0;
    cudaFuncAttributes attributes{};
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      index = 1;
    } else if (major != 9 || minor != 0) {
      index = 2;
    } else if (cudaFuncGetAttributes(&attributes, wgmma_int8_kernel) != cudaSuccess ||
               attributes.binaryVersion != 90 || attributes.sharedSizeBytes < sizeof(SharedControl)) {
      index = 3;  // no image for this device, or one built without the sm_90a body (e.g. from compute_90 PTX)
    } else if (!tensor_map_encoder_available()) {
      index = 4;
    } else if (cudaFuncSetAttribute(wgmma_int8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) !=
               cudaSuccess) {
      index = 5;
    }
    (void)cudaGetLastError();  // a failed query leaves nothing behind for the next launch check
    state = 1 + index;
    slot.store(state, std::memory_order_release);
  }
  return kReasons[state - 1];
}

}  // namespace

bool wgmma_supports(const IntGemmArgs& args, std::string* why_not) {
  const long long tiles = ((args.m + kBM - 1) / kBM) * ((args.n + kBN - 1) / kBN);
  const char* reason = nullptr;
  if (args.b_layout != BLayout::n_by_k) {
    reason = "B must be n_by_k ([N x K], K-major): 8-bit wgmma reads both operands K-major";
  } else if (!aligned_16(args.a)) {
    reason = "the A base pointer must be 16-byte aligned (TMA)";
  } else if (!aligned_16(args.b)) {
    reason = "the B base pointer must be 16-byte aligned (TMA)";
  } else if (args.lda % 16 != 0) {
    reason = "the A row stride (lda) must be a multiple of 16 bytes (TMA)";
  } else if (args.ldb % 16 != 0) {
    reason = "the B row stride (ldb) must be a multiple of 16 bytes (TMA)";
  } else if (tiles >= (1LL << 30)) {
    reason = "M x N needs more 128 x 256 tiles than the kernel counts (2^30)";
  } else {
    reason = device_reason();
  }
  if (reason && why_not) *why_not = reason;
  return reason == nullptr;
}

void launch_wgmma_int8(const IntGemmArgs& args, cudaStream_t stream) {
  // Two tensor maps per call (~1-2 us of host time each); not cached, as a cache keyed
  // by pointers would go stale when memory is freed and reused.
  CUtensorMap map_a, map_b;
  const char* error = encode_int8_k_major(&map_a, args.a, args.m, args.k, args.lda, kBM, kBK);
  LOWBIT_CHECK(error == nullptr, "int8 gemm (wgmma): A [", args.m, " x ", args.k, "], lda ", args.lda, ": ", error);
  error = encode_int8_k_major(&map_b, args.b, args.n, args.k, args.ldb, kBN, kBK);
  LOWBIT_CHECK(error == nullptr, "int8 gemm (wgmma): B [", args.n, " x ", args.k, "], ldb ", args.ldb, ": ", error);
  WgmmaParams p{};
  p.ktiles = static_cast<int>((args.k + kBK - 1) / kBK);
  p.tiles_m = static_cast<int>((args.m + kBM - 1) / kBM);
  p.tiles_n = static_cast<int>((args.n + kBN - 1) / kBN);
  p.e = make_epilogue(args);
  const int tiles = p.tiles_m * p.tiles_n;
  const int grid = tiles < core::multiprocessor_count() ? tiles : core::multiprocessor_count();
  wgmma_int8_kernel<<<grid, kThreads, kSmemBytes, stream>>>(map_a, map_b, p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::cuda::gemm
