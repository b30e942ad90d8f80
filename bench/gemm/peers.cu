#include "bench/gemm/peers.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "core/device_buffer.h"
#include "formats/gemm_epilogue.h"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

#define LOWBIT_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                   \
    const cublasStatus_t lowbit_cublas_status_ = (expr);                                 \
    if (lowbit_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      LOWBIT_FAIL("cuBLAS call `" #expr "` failed: ", cublasGetStatusString(lowbit_cublas_status_)); \
    }                                                                                    \
  } while (0)

namespace lowbit::bench {

struct CublasPeers::Impl {
  cudaStream_t stream{};
  cublasHandle_t blas{};
  cublasLtHandle_t lt{};
  core::DeviceBuffer workspace{std::size_t{64} << 20};
};

CublasPeers::CublasPeers(cuda_stream_t stream) : impl_(new Impl) {
  impl_->stream = stream;
  LOWBIT_CUBLAS_CHECK(cublasCreate(&impl_->blas));
  LOWBIT_CUBLAS_CHECK(cublasSetStream(impl_->blas, impl_->stream));
  LOWBIT_CUBLAS_CHECK(cublasSetWorkspace(impl_->blas, impl_->workspace.data(), impl_->workspace.bytes()));
  LOWBIT_CUBLAS_CHECK(cublasLtCreate(&impl_->lt));
}

CublasPeers::~CublasPeers() {
  cublasLtDestroy(impl_->lt);
  cublasDestroy(impl_->blas);
  delete impl_;
}

// Row-major C [M x N] = A [M x K] B^T (B [N x K]) is, in cuBLAS's column-major terms,
// C^T [N x M] = op_T(B as K x N) * (A as K x M): "TN", the layout INT8 tensor cores need.
void CublasPeers::int8_gemm(const void* a, const void* b, void* c, std::int64_t m, std::int64_t n,
                            std::int64_t k) {
  cublasLtMatmulDesc_t desc{};
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I));
  const cublasOperation_t trans_t = CUBLAS_OP_T, trans_n = CUBLAS_OP_N;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_t, sizeof trans_t));
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_n, sizeof trans_n));
  cublasLtMatrixLayout_t la{}, lb{}, lc{};
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, static_cast<std::uint64_t>(k),
                                                 static_cast<std::uint64_t>(n), k));
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, static_cast<std::uint64_t>(k),
                                                 static_cast<std::uint64_t>(m), k));
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, static_cast<std::uint64_t>(n),
                                                 static_cast<std::uint64_t>(m), n));
  cublasLtMatmulPreference_t pref{};
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::size_t ws = impl_->workspace.bytes();
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof ws));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(impl_->lt, desc, la, lb, lc, lc, pref, 1, &heuristic, &found));
  LOWBIT_CHECK(found > 0, "cuBLASLt found no INT8 algorithm for ", m, "x", n, "x", k);
  const std::int32_t alpha = 1, beta = 0;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmul(impl_->lt, desc, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &heuristic.algo,
                                     impl_->workspace.data(), ws, impl_->stream));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
}

void CublasPeers::float_gemm(DType dtype, const void* x, const void* w, void* c, std::int64_t m, std::int64_t n,
                             std::int64_t k) {
  const cudaDataType_t type = dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  LOWBIT_CUBLAS_CHECK(cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                   static_cast<int>(k), &alpha, w, type, static_cast<int>(k), x, type,
                                   static_cast<int>(k), &beta, c, type, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

namespace {

__global__ void separate_epilogue_kernel(const std::int32_t* __restrict__ acc, __half* __restrict__ out,
                                         std::int64_t m, std::int64_t n, const float* __restrict__ scale_a,
                                         const float* __restrict__ scale_b, float scale_c,
                                         const float* __restrict__ bias, bool relu) {
  // 8 consecutive elements of one row per thread (n % 8 == 0 asserted by the caller).
  const std::int64_t chunk = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t first = chunk * 8;
  if (first >= m * n) return;
  const std::int64_t row = first / n, col = first % n;
  const int4 a0 = *reinterpret_cast<const int4*>(acc + first);
  const int4 a1 = *reinterpret_cast<const int4*>(acc + first + 4);
  const int values[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
  __align__(16) __half result[8];
  const float sa = scale_a[row];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    result[i] = __float2half_rn(
        formats::apply_epilogue(values[i], sa, scale_b[col + i], scale_c, bias[col + i], relu));
  }
  *reinterpret_cast<int4*>(out + first) = *reinterpret_cast<const int4*>(result);
}

}  // namespace

void launch_separate_epilogue(const std::int32_t* acc, void* out_f16, std::int64_t m, std::int64_t n,
                              const float* scale_a, const float* scale_b, float scale_c, const float* bias,
                              bool relu, cuda_stream_t stream) {
  LOWBIT_CHECK(n % 8 == 0, "separate epilogue: N = ", n, " must be a multiple of 8");
  const std::int64_t chunks = m * n / 8;
  const int threads = 256;
  separate_epilogue_kernel<<<static_cast<unsigned>((chunks + threads - 1) / threads), threads, 0, stream>>>(
      acc, static_cast<__half*>(out_f16), m, n, scale_a, scale_b, scale_c, bias, relu);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::bench
