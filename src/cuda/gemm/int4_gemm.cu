// Signed packed INT4 x INT4 GEMM. Hopper has no INT4 tensor cores: the nibbles are
// sign-extended to int8 in shared memory (one transform pass per K step of the
// mma.sync pipeline in int8_mma_pipeline.cuh) and multiplied on the INT8 path. An
// odd K's padding nibble is zeroed on the A side, so B's may hold anything.
// Operands whose rows are not 16-byte aligned take the scalar tiled kernel.
#include <cstdint>

#include "cuda/gemm/gemm_common.cuh"
#include "cuda/gemm/gemm_cuda.h"
#include "cuda/gemm/int8_mma_pipeline.cuh"

namespace lowbit::cuda {

namespace gemm {

void launch_production_int4(const IntGemmArgs& args, cudaStream_t stream) {
  const int k_bytes = static_cast<int>((args.k + 1) / 2);
  if (args.b_layout == BLayout::n_by_k) {
    launch_mma_gemm_auto<Operand::int4_rows, Operand::int4_rows>(args, k_bytes, k_bytes, stream);
  } else {
    launch_mma_gemm_auto<Operand::int4_rows, Operand::int4_cols>(args, k_bytes, k_bytes, stream);
  }
}

}  // namespace gemm

void int4_gemm(const IntGemmArgs& args, cudaStream_t stream) {
  if (gemm::mma_pipeline_supports(args, nullptr)) {
    gemm::launch_production_int4(args, stream);
  } else {
    gemm::launch_tiled(args, /*int4=*/true, stream);
  }
}

}  // namespace lowbit::cuda
