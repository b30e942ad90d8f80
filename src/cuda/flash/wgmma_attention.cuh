// The two wgmma forms of attention on Hopper (sm_90a), with f32 accumulators laid out
// as mma.sync's (float d[N / 8][4]: d[j][0/1] row 16 w + g, columns 8j + 2c + 0/1; d[j][2/3]
// the same columns 8 rows below; warp w of the warpgroup, lane 4g + c), so the flash
// steps of cuda/flash_tile.cuh (softmax, the P fragments) read them as they are:
//   S = Q K^T: both operands K-major in shared memory (Q's and K's rows as they are), the
//     "SS" form m64 n128 k16;
//   O += P V: P from registers (the S accumulators rounded to T, the "RS" form), V's rows
//     as they are, which makes B N-major: transposed (imm-trans-b 1) with an MN-major
//     descriptor (sw128_mn_descriptor), m64 n(head_dim) k16.
// Fences, commit and wait are cuda/gemm/wgmma.cuh's. Only in the sm_90a device pass.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/gemm/wgmma.cuh"
#include "cuda/wgmma_rs.cuh"

#if defined(LOWBIT_SM90A_DEVICE)

namespace lowbit::cuda::flash::sm90 {

// Descriptor of an N-major B tile written by TMA with the 128-byte swizzle: K rows of
// 64 N-values (128 bytes), 8-row atoms 1024 bytes apart along K (stride byte offset),
// the next 64 N-values `block_bytes` further (leading byte offset); 1024-aligned start.
__device__ __forceinline__ std::uint64_t sw128_mn_descriptor(std::uint32_t smem_addr, std::uint32_t block_bytes) {
  return static_cast<std::uint64_t>((smem_addr & 0x3ffff) >> 4) | (static_cast<std::uint64_t>(block_bytes >> 4) << 16) |
         (std::uint64_t{1024 >> 4} << 32) | (std::uint64_t{1} << 62);
}

// d (64 x N) = (accumulate ? d : 0) + A (64 x 16, K-major, a_desc) * B (N x 16, K-major, b_desc).
template <class T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], std::uint64_t a_desc, std::uint64_t b_desc,
                                         int accumulate);

// d (64 x N) = (accumulate ? d : 0) + A (64 x 16, registers a as cuda/wgmma_rs.cuh lays
// them out) * B (16 x N, N-major, b_desc).
template <class T, int N>
__device__ __forceinline__ void wgmma_rs_n_major(float (&d)[N / 8][4], const std::uint32_t (&a)[4],
                                                 std::uint64_t b_desc, int accumulate);

#define LOWBIT_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])

#define LOWBIT_WGMMA_SS_N64(T, PTX_TYPE) \
  template <> \
  __device__ __forceinline__ void wgmma_ss<T, 64>(float(&d)[8][4], std::uint64_t a_desc, std::uint64_t b_desc, \
                                               int accumulate) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX_TYPE "." PTX_TYPE " {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
        : LOWBIT_D4(0), LOWBIT_D4(1), LOWBIT_D4(2), LOWBIT_D4(3), LOWBIT_D4(4), LOWBIT_D4(5), LOWBIT_D4(6), LOWBIT_D4(7) \
        : "l"(a_desc), "l"(b_desc), "r"(accumulate)); \
  }
LOWBIT_WGMMA_SS_N64(__half, "f16")
LOWBIT_WGMMA_SS_N64(__nv_bfloat16, "bf16")
#undef LOWBIT_WGMMA_SS_N64

#define LOWBIT_WGMMA_RS_T_N64(T, PTX_TYPE) \
  template <> \
  __device__ __forceinline__ void wgmma_rs_n_major<T, 64>(float(&d)[8][4], const std::uint32_t(&a)[4], \
                                                       std::uint64_t b_desc, int accumulate) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX_TYPE "." PTX_TYPE " {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" \
        : LOWBIT_D4(0), LOWBIT_D4(1), LOWBIT_D4(2), LOWBIT_D4(3), LOWBIT_D4(4), LOWBIT_D4(5), LOWBIT_D4(6), LOWBIT_D4(7) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate)); \
  }
LOWBIT_WGMMA_RS_T_N64(__half, "f16")
LOWBIT_WGMMA_RS_T_N64(__nv_bfloat16, "bf16")
#undef LOWBIT_WGMMA_RS_T_N64

#define LOWBIT_WGMMA_SS_N128(T, PTX_TYPE) \
  template <> \
  __device__ __forceinline__ void wgmma_ss<T, 128>(float(&d)[16][4], std::uint64_t a_desc, std::uint64_t b_desc, \
                                               int accumulate) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX_TYPE "." PTX_TYPE " {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
        : LOWBIT_D4(0), LOWBIT_D4(1), LOWBIT_D4(2), LOWBIT_D4(3), LOWBIT_D4(4), LOWBIT_D4(5), LOWBIT_D4(6), LOWBIT_D4(7), LOWBIT_D4(8), LOWBIT_D4(9), LOWBIT_D4(10), LOWBIT_D4(11), LOWBIT_D4(12), LOWBIT_D4(13), LOWBIT_D4(14), LOWBIT_D4(15) \
        : "l"(a_desc), "l"(b_desc), "r"(accumulate)); \
  }
LOWBIT_WGMMA_SS_N128(__half, "f16")
LOWBIT_WGMMA_SS_N128(__nv_bfloat16, "bf16")
#undef LOWBIT_WGMMA_SS_N128

#define LOWBIT_WGMMA_RS_T_N128(T, PTX_TYPE) \
  template <> \
  __device__ __forceinline__ void wgmma_rs_n_major<T, 128>(float(&d)[16][4], const std::uint32_t(&a)[4], \
                                                       std::uint64_t b_desc, int accumulate) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX_TYPE "." PTX_TYPE " {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
        : LOWBIT_D4(0), LOWBIT_D4(1), LOWBIT_D4(2), LOWBIT_D4(3), LOWBIT_D4(4), LOWBIT_D4(5), LOWBIT_D4(6), LOWBIT_D4(7), LOWBIT_D4(8), LOWBIT_D4(9), LOWBIT_D4(10), LOWBIT_D4(11), LOWBIT_D4(12), LOWBIT_D4(13), LOWBIT_D4(14), LOWBIT_D4(15) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate)); \
  }
LOWBIT_WGMMA_RS_T_N128(__half, "f16")
LOWBIT_WGMMA_RS_T_N128(__nv_bfloat16, "bf16")
#undef LOWBIT_WGMMA_RS_T_N128

#undef LOWBIT_D4

// The end of a flash step: waits for P_t-1 V_t-1 (the last wgmma group in flight), then O
// takes the softmax's factor corr. kMaxSlack > 0 (softmax_tile's lazy max): the warp
// skips the multiplies unless one of its rows' max moved, and the wait sits in both arms
// of that warp-uniform branch: after the softmax in one basic block, ptxas hoists the wait
// above it, and the softmax no longer runs under the product (bench/notes/flash.md step
// 11; tests/gpu/softmax_overlap_check.py holds the SASS to it). kMaxSlack 0: one block,
// the wait hoisted (at head_dim 64 that measured faster than the overlap).
template <int kMaxSlack, int HD>
__device__ __forceinline__ void wait_pv_rescale(float (&o)[HD / 8][4], const float (&corr)[2]) {
  auto rescale = [&] {
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
      o[d][0] *= corr[0], o[d][1] *= corr[0];
      o[d][2] *= corr[1], o[d][3] *= corr[1];
    }
  };
  if (kMaxSlack == 0 || __any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
    gemm::sm90::wgmma_wait<0>();
    gemm::sm90::fence_accumulators(o);
    rescale();
  } else {
    gemm::sm90::wgmma_wait<0>();
    gemm::sm90::fence_accumulators(o);
  }
}

}  // namespace lowbit::cuda::flash::sm90

#endif  // LOWBIT_SM90A_DEVICE
