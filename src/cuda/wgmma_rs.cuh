// wgmma with the A operand from registers (sm_90a): D (64 x N, f32) += A (64 x 16,
// f16 or bf16, registers) * B (16 x N, shared memory, K-major, through a descriptor).
// The register-A ("RS") form of wgmma.mma_async, for kernels that make A in registers
// (the weight-only GEMM dequantizes its weights there). Fences, commit / wait and the
// 128-byte-swizzle descriptor are the ones in cuda/gemm/wgmma.cuh.
//
// Fragments, per warp w (0..3) of the warpgroup and lane = 4 g + c:
//   a[0]: A row 16 w + g, k 2c, 2c + 1;  a[1]: row 16 w + g + 8, the same k;
//   a[2]: row 16 w + g, k 2c + 8, 2c + 9; a[3]: row 16 w + g + 8, those k
//   (each warp's 16 rows as mma.sync m16n8k16's A fragment);
//   d[4j + 0/1]: row 16 w + g, columns 8j + 2c + 0/1; d[4j + 2/3]: row + 8.
// Asynchronous: the A registers and d must not be touched until a wgmma_wait covers the
// group (ptxas keeps the A registers alive until then). accumulate == 0: d = A * B.
// Only in the sm_90a device pass (LOWBIT_SM90A_DEVICE), like cuda/gemm/wgmma.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/gemm/wgmma.cuh"

#if defined(LOWBIT_SM90A_DEVICE)

namespace lowbit::cuda::gemm::sm90 {

// N = 32, 64, 128, 256 (the operand lists are spelled out: inline PTX takes no arrays).
template <class T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t b_desc,
                                         int accumulate);

// Makes this thread's generic-proxy writes to shared memory (st.shared, cp.async once
// waited for) visible to the async proxy that wgmma reads B through.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving accumulator reads or writes across a wgmma wait.
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for accumulators laid out as mma.sync's tiles (float d[N][4], the flash steps').
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

// One definition per N for both types (the instruction spells the type).
#define LOWBIT_WGMMA_RS_N32(T, PTX_TYPE) \
  template <> \
  __device__ __forceinline__ void wgmma_rs<T, 32>(float(&d)[16], const std::uint32_t(&a)[4], \
                                              std::uint64_t b_desc, int accumulate) { \
    asm volatile( \
        "{\n" \
        ".reg .pred p;\n" \
        "setp.ne.b32 p, %21, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." PTX_TYPE "." PTX_TYPE " {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
        "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n" \
        "}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate)); \
  }

LOWBIT_WGMMA_RS_N32(__half, "f16")
LOWBIT_WGMMA_RS_N32(__nv_bfloat16, "bf16")
#undef LOWBIT_WGMMA_RS_N32

#define LOWBIT_WGMMA_RS_N64(T, PTX_TYPE) \
  template <> \
  __device__ __forceinline__ void wgmma_rs<T, 64>(float(&d)[32], const std::uint32_t(&a)[4], \
                                              std::uint64_t b_desc, int accumulate) { \
    asm volatile( \
        "{\n" \
        ".reg .pred p;\n" \
        "setp.ne.b32 p, %37, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX_TYPE "." PTX_TYPE " {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n" \
        "}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate)); \
  }

LOWBIT_WGMMA_RS_N64(__half, "f16")
LOWBIT_WGMMA_RS_N64(__nv_bfloat16, "bf16")
#undef LOWBIT_WGMMA_RS_N64

#define LOWBIT_WGMMA_RS_N128(T, PTX_TYPE) \
  template <> \
  __device__ __forceinline__ void wgmma_rs<T, 128>(float(&d)[64], const std::uint32_t(&a)[4], \
                                              std::uint64_t b_desc, int accumulate) { \
    asm volatile( \
        "{\n" \
        ".reg .pred p;\n" \
        "setp.ne.b32 p, %69, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX_TYPE "." PTX_TYPE " {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n" \
        "}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate)); \
  }

LOWBIT_WGMMA_RS_N128(__half, "f16")
LOWBIT_WGMMA_RS_N128(__nv_bfloat16, "bf16")
#undef LOWBIT_WGMMA_RS_N128

#define LOWBIT_WGMMA_RS_N256(T, PTX_TYPE) \
  template <> \
  __device__ __forceinline__ void wgmma_rs<T, 256>(float(&d)[128], const std::uint32_t(&a)[4], \
                                              std::uint64_t b_desc, int accumulate) { \
    asm volatile( \
        "{\n" \
        ".reg .pred p;\n" \
        "setp.ne.b32 p, %133, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." PTX_TYPE "." PTX_TYPE " {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n" \
        "}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate)); \
  }

LOWBIT_WGMMA_RS_N256(__half, "f16")
LOWBIT_WGMMA_RS_N256(__nv_bfloat16, "bf16")
#undef LOWBIT_WGMMA_RS_N256


}  // namespace lowbit::cuda::gemm::sm90

#endif  // LOWBIT_SM90A_DEVICE
