#include "cuda/gemm/tma.h"

#include <cuda_runtime_api.h>

namespace lowbit::cuda::gemm {

namespace {

// cuTensorMapEncodeTiled's signature (CUDA 12.0 ABI).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t status = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t status = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return EncodeTiled{nullptr};
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A 2D map: rows of `inner` elements, row_bytes apart (the inner stride is the element),
// read in boxes of box_rows x box_inner; nullptr, or why the driver refused it.
const char* encode_2d(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                      std::int64_t rows, std::int64_t row_bytes, int box_inner, int box_rows,
                      CUtensorMapSwizzle swizzle) {
  const EncodeTiled encode = encoder();
  if (!encode) return "the driver does not provide cuTensorMapEncodeTiled";
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_inner), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = encode(map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled refused the operand (alignment or size)";
}

}  // namespace

bool tensor_map_encoder_available() { return encoder() != nullptr; }

const char* encode_int8_k_major(CUtensorMap* map, const void* base, std::int64_t rows, std::int64_t k,
                                std::int64_t ld, int box_rows, int box_k) {
  return encode_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, k, rows, ld, box_k, box_rows, CU_TENSOR_MAP_SWIZZLE_128B);
}

const char* encode_swizzled_128(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                                std::int64_t rows, std::int64_t row_bytes, int box_inner, int box_rows) {
  return encode_2d(map, type, base, inner, rows, row_bytes, box_inner, box_rows, CU_TENSOR_MAP_SWIZZLE_128B);
}

const char* encode_rows(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                        std::int64_t rows, std::int64_t row_bytes, int box_inner, int box_rows) {
  return encode_2d(map, type, base, inner, rows, row_bytes, box_inner, box_rows, CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace lowbit::cuda::gemm
