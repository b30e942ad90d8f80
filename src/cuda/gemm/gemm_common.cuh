// Pieces shared by every integer GEMM kernel: the output side (guarded stores of
// out[row, col] through formats::apply_epilogue, so that float outputs round exactly
// as the CPU reference does), operand element readers for the scalar kernels, and
// the internal launchers that the dispatch files (int8_dispatch.cu, int4_gemm.cu) call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm_cuda.h"
#include "formats/float16.h"
#include "formats/gemm_epilogue.h"

namespace lowbit::cuda::gemm {

// The output type as a runtime value: kernels branch on it (uniformly) in the
// epilogue only, so one kernel instantiation serves all four output types.
enum class OutKind : int { i32, f32, f16, bf16 };

// Everything a kernel needs to write out[M x N]. Built on the host by make_epilogue.
struct Epilogue {
  void* out;
  long long ldc;
  int m, n;
  OutKind kind;
  bool pair_ok;  // out[r, c..c+1] (c even) is one aligned vector: base and ldc allow it
  bool a_per_row, b_per_col, relu;
  const float* scale_a;  // null: 1
  const float* scale_b;
  const float* bias;  // null: 0
  float scale_c;
};

Epilogue make_epilogue(const IntGemmArgs& args);

// The raw operands of the seed-progression kernels (naive, tiled, vectorized, WMMA):
// byte pointers, strides, K, B's layout and the epilogue. Built on the host.
struct SeedGemmParams {
  const std::uint8_t* a;
  const std::uint8_t* b;
  long long lda, ldb;
  int k;
  bool n_by_k;
  Epilogue e;
};
SeedGemmParams seed_gemm_params(const IntGemmArgs& args);

__device__ __forceinline__ float row_scale(const Epilogue& e, int row) {
  return e.scale_a ? __ldg(e.scale_a + (e.a_per_row ? row : 0)) : 1.0f;
}
__device__ __forceinline__ float col_scale(const Epilogue& e, int col) {
  return e.scale_b ? __ldg(e.scale_b + (e.b_per_col ? col : 0)) : 1.0f;
}
__device__ __forceinline__ float col_bias(const Epilogue& e, int col) { return e.bias ? __ldg(e.bias + col) : 0.0f; }

// The bits of v in a 16-bit output type (RNE, as formats::from_float).
__device__ __forceinline__ std::uint16_t narrow_bits(OutKind kind, float v) {
  return kind == OutKind::f16 ? formats::from_float<formats::Half>(v).bits
                              : formats::from_float<formats::BFloat16>(v).bits;
}

// Column-side epilogue parameters of two adjacent columns (loaded once, used for
// every row a thread stores in them). Out-of-range columns are never read.
struct ColParams {
  float scale[2], bias[2];
};
__device__ __forceinline__ ColParams col_params(const Epilogue& e, int col) {
  ColParams p{{1.0f, 1.0f}, {0.0f, 0.0f}};
  if (e.kind == OutKind::i32) return p;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (col + i < e.n) {
      p.scale[i] = col_scale(e, col + i);
      p.bias[i] = col_bias(e, col + i);
    }
  }
  return p;
}

// out[row, col] and out[row, col + 1] (col even), guarded against M and N; one
// vector store when both are inside and the output allows it. sa: row_scale(row).
__device__ __forceinline__ void store_pair(const Epilogue& e, int row, int col, std::int32_t acc0, std::int32_t acc1,
                                           float sa, const ColParams& cp) {
  if (row >= e.m || col >= e.n) return;
  const long long index = static_cast<long long>(row) * e.ldc + col;
  const bool both = col + 1 < e.n;
  if (e.kind == OutKind::i32) {
    std::int32_t* p = static_cast<std::int32_t*>(e.out) + index;
    if (both && e.pair_ok) {
      *reinterpret_cast<int2*>(p) = make_int2(acc0, acc1);
    } else {
      p[0] = acc0;
      if (both) p[1] = acc1;
    }
    return;
  }
  const float v0 = formats::apply_epilogue(acc0, sa, cp.scale[0], e.scale_c, cp.bias[0], e.relu);
  const float v1 = formats::apply_epilogue(acc1, sa, cp.scale[1], e.scale_c, cp.bias[1], e.relu);
  if (e.kind == OutKind::f32) {
    float* p = static_cast<float*>(e.out) + index;
    if (both && e.pair_ok) {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else {
      p[0] = v0;
      if (both) p[1] = v1;
    }
    return;
  }
  std::uint16_t* p = static_cast<std::uint16_t*>(e.out) + index;
  const std::uint16_t b0 = narrow_bits(e.kind, v0), b1 = narrow_bits(e.kind, v1);
  if (both && e.pair_ok) {
    *reinterpret_cast<std::uint32_t*>(p) = static_cast<std::uint32_t>(b0) | (static_cast<std::uint32_t>(b1) << 16);
  } else {
    p[0] = b0;
    if (both) p[1] = b1;
  }
}

// One element, guarded (the scalar kernels' store).
__device__ __forceinline__ void store_one(const Epilogue& e, int row, int col, std::int32_t acc) {
  if (row >= e.m || col >= e.n) return;
  const long long index = static_cast<long long>(row) * e.ldc + col;
  if (e.kind == OutKind::i32) {
    static_cast<std::int32_t*>(e.out)[index] = acc;
    return;
  }
  const float v = formats::apply_epilogue(acc, row_scale(e, row), col_scale(e, col), e.scale_c, col_bias(e, col), e.relu);
  if (e.kind == OutKind::f32) {
    static_cast<float*>(e.out)[index] = v;
  } else {
    static_cast<std::uint16_t*>(e.out)[index] = narrow_bits(e.kind, v);
  }
}

// ---- operand elements for the scalar kernels (int8, or signed int4 packed along K)

// Element `k` of row `row` of a matrix whose rows run along K (A; B n_by_k).
template <bool kInt4>
__device__ __forceinline__ int along_row(const std::uint8_t* base, long long ld, long long row, long long k) {
  if constexpr (kInt4) {
    const int byte = base[row * ld + (k >> 1)];
    const int nibble = (k & 1) ? (byte >> 4) : (byte & 15);
    return (nibble ^ 8) - 8;  // sign-extend the two's complement nibble
  } else {
    return static_cast<std::int8_t>(base[row * ld + k]);
  }
}

// B[k, n] of a k_by_n matrix (int4: byte (k/2, n), low nibble for even k).
template <bool kInt4>
__device__ __forceinline__ int along_col(const std::uint8_t* base, long long ld, long long k, long long n) {
  if constexpr (kInt4) {
    const int byte = base[(k >> 1) * ld + n];
    const int nibble = (k & 1) ? (byte >> 4) : (byte & 15);
    return (nibble ^ 8) - 8;
  } else {
    return static_cast<std::int8_t>(base[k * ld + n]);
  }
}

template <bool kInt4>
__device__ __forceinline__ int b_value(const std::uint8_t* b, long long ldb, bool n_by_k, long long k, long long n) {
  return n_by_k ? along_row<kInt4>(b, ldb, n, k) : along_col<kInt4>(b, ldb, k, n);
}

// ---- internal launchers (arguments already checked by the caller)

void launch_naive(const IntGemmArgs& args, cudaStream_t stream);
void launch_tiled(const IntGemmArgs& args, bool int4, cudaStream_t stream);  // any shape; int4 too
void launch_vectorized(const IntGemmArgs& args, cudaStream_t stream);
void launch_wmma(const IntGemmArgs& args, cudaStream_t stream);

// The mma.sync pipeline: int8 operands (int8_mma.cu) and packed int4
// operands (int4_gemm.cu). Both need 16-byte aligned operand rows.
bool mma_pipeline_supports(const IntGemmArgs& args, std::string* why_not);
void launch_production_int8(const IntGemmArgs& args, cudaStream_t stream);
void launch_production_int4(const IntGemmArgs& args, cudaStream_t stream);

// The Hopper wgmma + TMA kernel (int8_wgmma.cu): B n_by_k, 16-byte aligned bases and
// row strides, a compute capability 9.0 device and an sm_90a build.
bool wgmma_supports(const IntGemmArgs& args, std::string* why_not);
void launch_wgmma_int8(const IntGemmArgs& args, cudaStream_t stream);

}  // namespace lowbit::cuda::gemm
