// The GPU side of include/lowbit/gemm.h. Arguments arrive validated (shapes, dtypes,
// devices, non-overlap); nothing here allocates or synchronizes. Every launch is
// checked with LOWBIT_CUDA_CHECK_LAUNCH.
#pragma once

#include <cstdint>
#include <string>

#include "lowbit/gemm.h"

namespace lowbit::cuda {

// Raw form of an integer GEMM call, shared by int8 and (packed) int4.
struct IntGemmArgs {
  const void* a = nullptr;  // i8 [M x K], or u8 [M x ceil(K/2)] for int4
  std::int64_t lda = 0;     // row stride in elements (bytes)
  const void* b = nullptr;  // i8 / packed u8, laid out as b_layout says
  std::int64_t ldb = 0;
  BLayout b_layout = BLayout::k_by_n;
  void* out = nullptr;      // [M x N] of out_dtype
  std::int64_t ldc = 0;
  DType out_dtype = DType::i32;
  std::int64_t m = 0, n = 0, k = 0;  // logical K (not bytes)
  // Epilogue (float outputs only; identity for i32).
  const float* scale_a = nullptr;  // null: 1
  bool scale_a_per_row = false;    // [M] rather than [1]
  const float* scale_b = nullptr;
  bool scale_b_per_col = false;    // [N] rather than [1]
  float scale_c = 1.0f;
  const float* bias = nullptr;     // [N] or null
  bool relu = false;
};

// The INT8 GEMM kernels, from a naive loop to production. Each
// is kept as a benchmark baseline and tested against the CPU reference.
enum class Int8GemmVariant : std::uint8_t {
  naive,       // one thread per output element
  tiled,       // 16x16 shared-memory tiles
  vectorized,  // tiled, 16-byte global loads
  wmma,        // WMMA 16x16x16 int8 tensor cores
  production,  // mma.sync/ldmatrix/cp.async multistage pipeline, fused epilogue: any GPU, both
               // B layouts; the public entry's choice where wgmma does not take the arguments
  wgmma,       // Hopper (sm_90a) wgmma + TMA, warp-specialized and persistent; B n_by_k only
};
constexpr Int8GemmVariant kInt8GemmVariants[] = {Int8GemmVariant::naive,      Int8GemmVariant::tiled,
                                                 Int8GemmVariant::vectorized, Int8GemmVariant::wmma,
                                                 Int8GemmVariant::production, Int8GemmVariant::wgmma};
const char* int8_gemm_variant_name(Int8GemmVariant variant);

// Whether `variant` takes these arguments as they are (layout, out dtype, epilogue,
// shape multiples, alignment). When it does not, *why_not says what it needs.
bool int8_gemm_supports(Int8GemmVariant variant, const IntGemmArgs& args, std::string* why_not);

// Runs one variant (it must support args).
void int8_gemm(Int8GemmVariant variant, const IntGemmArgs& args, cuda_stream_t stream);

// The variant the public entry runs for these arguments.
Int8GemmVariant int8_gemm_pick(const IntGemmArgs& args);

// The public entry: the fastest variant that takes the arguments: wgmma (Hopper,
// B n_by_k, 16-byte aligned rows), else production (aligned rows), else WMMA.
void int8_gemm(const IntGemmArgs& args, cuda_stream_t stream);

// Signed packed INT4 x INT4 (args.k is the logical K).
void int4_gemm(const IntGemmArgs& args, cuda_stream_t stream);

}  // namespace lowbit::cuda
