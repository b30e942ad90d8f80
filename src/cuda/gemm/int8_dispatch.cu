// The INT8 GEMM variants behind one interface: names, what each takes, checked
// dispatch, and the public entry (the fastest variant that takes the arguments). Also the host-side epilogue descriptor shared by all kernels.
#include <cstdint>
#include <string>

#include "cuda/gemm/gemm_common.cuh"
#include "cuda/gemm/gemm_cuda.h"
#include "lowbit/error.h"

namespace lowbit::cuda {

namespace gemm {

Epilogue make_epilogue(const IntGemmArgs& args) {
  Epilogue e{};
  e.out = args.out;
  e.ldc = args.ldc;
  e.m = static_cast<int>(args.m);
  e.n = static_cast<int>(args.n);
  std::size_t element = 4;
  switch (args.out_dtype) {
    case DType::i32: e.kind = OutKind::i32; break;
    case DType::f32: e.kind = OutKind::f32; break;
    case DType::f16: e.kind = OutKind::f16, element = 2; break;
    case DType::bf16: e.kind = OutKind::bf16, element = 2; break;
    default: LOWBIT_FAIL("int gemm: out dtype ", dtype_name(args.out_dtype), " is not i32, f32, f16 or bf16");
  }
  e.pair_ok = args.ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(args.out) % (2 * element) == 0;
  e.scale_a = args.scale_a;
  e.a_per_row = args.scale_a_per_row;
  e.scale_b = args.scale_b;
  e.b_per_col = args.scale_b_per_col;
  e.scale_c = args.scale_c;
  e.bias = args.bias;
  e.relu = args.relu;
  return e;
}

SeedGemmParams seed_gemm_params(const IntGemmArgs& args) {
  return SeedGemmParams{static_cast<const std::uint8_t*>(args.a),
                        static_cast<const std::uint8_t*>(args.b),
                        args.lda,
                        args.ldb,
                        static_cast<int>(args.k),
                        args.b_layout == BLayout::n_by_k,
                        make_epilogue(args)};
}

}  // namespace gemm

namespace {

constexpr std::int64_t kMaxDim = 0x7fffffff;

// What every variant needs: an output type the epilogue knows, the identity epilogue
// for i32, and dimensions that fit the kernels' int indices.
const char* common_reason(const IntGemmArgs& args) {
  if (args.m < 1 || args.n < 1 || args.k < 1 || args.m > kMaxDim || args.n > kMaxDim || args.k > kMaxDim) {
    return "M, N and K must be in 1 .. 2^31 - 1";
  }
  if (args.k >= (std::int64_t{1} << 17)) return "K must be below 2^17 for exact INT32 accumulation of int8 products";
  if (args.out_dtype != DType::i32 && args.out_dtype != DType::f32 && args.out_dtype != DType::f16 &&
      args.out_dtype != DType::bf16) {
    return "the output must be i32, f32, f16 or bf16";
  }
  const bool identity = !args.scale_a && !args.scale_b && args.scale_c == 1.0f && !args.bias && !args.relu;
  if (args.out_dtype == DType::i32 && !identity) return "an i32 output takes no epilogue (scales, bias, relu)";
  return nullptr;
}

}  // namespace

const char* int8_gemm_variant_name(Int8GemmVariant variant) {
  switch (variant) {
    case Int8GemmVariant::naive: return "naive";
    case Int8GemmVariant::tiled: return "tiled";
    case Int8GemmVariant::vectorized: return "vectorized";
    case Int8GemmVariant::wmma: return "wmma";
    case Int8GemmVariant::production: return "production";
    case Int8GemmVariant::wgmma: return "wgmma";
  }
  return "unknown";
}

bool int8_gemm_supports(Int8GemmVariant variant, const IntGemmArgs& args, std::string* why_not) {
  if (const char* reason = common_reason(args)) {
    if (why_not) *why_not = reason;
    return false;
  }
  switch (variant) {
    case Int8GemmVariant::naive:
    case Int8GemmVariant::tiled:
    case Int8GemmVariant::vectorized:  // bytewise loads where a 16-byte vector does not fit
    case Int8GemmVariant::wmma:        // staged through shared memory: any shape and alignment
      return true;
    case Int8GemmVariant::production:
      return gemm::mma_pipeline_supports(args, why_not);
    case Int8GemmVariant::wgmma:
      return gemm::wgmma_supports(args, why_not);
  }
  if (why_not) *why_not = "unknown variant";
  return false;
}

void int8_gemm(Int8GemmVariant variant, const IntGemmArgs& args, cuda_stream_t stream) {
  std::string why_not;
  LOWBIT_CHECK(int8_gemm_supports(variant, args, &why_not), "int8_gemm: variant ", int8_gemm_variant_name(variant),
               " does not take these arguments: ", why_not);
  switch (variant) {
    case Int8GemmVariant::naive: return gemm::launch_naive(args, stream);
    case Int8GemmVariant::tiled: return gemm::launch_tiled(args, /*int4=*/false, stream);
    case Int8GemmVariant::vectorized: return gemm::launch_vectorized(args, stream);
    case Int8GemmVariant::wmma: return gemm::launch_wmma(args, stream);
    case Int8GemmVariant::production: return gemm::launch_production_int8(args, stream);
    case Int8GemmVariant::wgmma: return gemm::launch_wgmma_int8(args, stream);
  }
}

Int8GemmVariant int8_gemm_pick(const IntGemmArgs& args) {
  // wgmma on Hopper; production elsewhere and for B k_by_n; WMMA takes everything
  // production does not (unaligned rows), at tensor-core speed.
  if (int8_gemm_supports(Int8GemmVariant::wgmma, args, nullptr)) return Int8GemmVariant::wgmma;
  if (gemm::mma_pipeline_supports(args, nullptr)) return Int8GemmVariant::production;
  return Int8GemmVariant::wmma;
}

void int8_gemm(const IntGemmArgs& args, cuda_stream_t stream) { int8_gemm(int8_gemm_pick(args), args, stream); }

}  // namespace lowbit::cuda
