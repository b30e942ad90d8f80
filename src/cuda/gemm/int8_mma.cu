// The production INT8 GEMM: the mma.sync pipeline of int8_mma_pipeline.cuh with
// int8 A and B in either layout (B n_by_k goes straight from cp.async to ldmatrix;
// B k_by_n is byte-transposed in shared memory once per K step).
#include <cstdint>
#include <string>

#include "cuda/gemm/gemm_common.cuh"
#include "cuda/gemm/int8_mma_pipeline.cuh"

namespace lowbit::cuda::gemm {

namespace {
bool aligned_16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }
}  // namespace

// cp.async moves whole, aligned 16-byte chunks of operand rows (the zero-fill covers
// any M, N and K, so no shape multiple is needed).
bool mma_pipeline_supports(const IntGemmArgs& args, std::string* why_not) {
  const char* reason = nullptr;
  if (!aligned_16(args.a)) {
    reason = "the A base pointer must be 16-byte aligned";
  } else if (!aligned_16(args.b)) {
    reason = "the B base pointer must be 16-byte aligned";
  } else if (args.lda % 16 != 0) {
    reason = "the A row stride (lda) must be a multiple of 16 bytes";
  } else if (args.ldb % 16 != 0) {
    reason = "the B row stride (ldb) must be a multiple of 16 bytes";
  }
  if (reason && why_not) *why_not = reason;
  return reason == nullptr;
}

void launch_production_int8(const IntGemmArgs& args, cudaStream_t stream) {
  const int k = static_cast<int>(args.k);
  if (args.b_layout == BLayout::n_by_k) {
    launch_mma_gemm_auto<Operand::int8_rows, Operand::int8_rows>(args, k, k, stream);
  } else {
    launch_mma_gemm_auto<Operand::int8_rows, Operand::int8_cols>(args, k, k, stream);
  }
}

}  // namespace lowbit::cuda::gemm
