// The peers of the GEMM benchmark, called from the same binary: cuBLASLt INT8
// (INT32 out, the "TN" layout it takes: A row-major [M x K], B [N x K]), cuBLAS
// FP16 / BF16 GEMM (FP32 accumulation) on the same shapes, and the separate
// epilogue kernel that a cuBLASLt INT8 user would run after it.
#pragma once

#include <cstdint>

#include "lowbit/gemm.h"

namespace lowbit::bench {

class CublasPeers {
 public:
  explicit CublasPeers(cuda_stream_t stream);
  ~CublasPeers();
  CublasPeers(const CublasPeers&) = delete;
  CublasPeers& operator=(const CublasPeers&) = delete;

  // c [M x N] i32 = a [M x K] i8 @ b^T, b [N x K] i8; all contiguous row-major.
  void int8_gemm(const void* a, const void* b, void* c, std::int64_t m, std::int64_t n, std::int64_t k);
  // c [M x N] = x [M x K] @ w^T, w [N x K]; dtype f16 or bf16 for all three.
  void float_gemm(DType dtype, const void* x, const void* w, void* c, std::int64_t m, std::int64_t n,
                  std::int64_t k);

 private:
  struct Impl;
  Impl* impl_;
};

// out [M x N] (f16) = epilogue(acc [M x N] i32), one thread per 8 elements, with
// per-row scale_a, per-column scale_b, scale_c, bias and relu (formats/gemm_epilogue.h).
void launch_separate_epilogue(const std::int32_t* acc, void* out_f16, std::int64_t m, std::int64_t n,
                              const float* scale_a, const float* scale_b, float scale_c, const float* bias,
                              bool relu, cuda_stream_t stream);

}  // namespace lowbit::bench
