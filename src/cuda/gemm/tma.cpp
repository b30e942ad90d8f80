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

// A 2D map: rows of `inner` elements, row_bytes apart, read in boxes of box_rows x
// box_inner.
const char* encode_2d(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                      std::int64_t rows, std::int64_t row_bytes, int box_inner, int box_rows,
                      CUtensorMapSwizzle swizzle) {
  const std::int64_t dims[2] = {inner, rows}, strides[1] = {row_bytes};
  const int box[2] = {box_inner, box_rows};
  return encode_nd(map, type, 2, base, dims, strides, box, swizzle);
}

}  // namespace

const char* encode_nd(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base, const std::int64_t* dims,
                      const std::int64_t* strides, const int* box, CUtensorMapSwizzle swizzle) {
  const EncodeTiled encode = encoder();
  if (!encode) return "the driver does not provide cuTensorMapEncodeTiled";
  if (rank < 1 || rank > kMaxRank) return "a tensor map has 1 to 5 dimensions";
  cuuint64_t d[kMaxRank] = {}, st[kMaxRank] = {};
  cuuint32_t b[kMaxRank] = {}, element_strides[kMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    d[i] = static_cast<cuuint64_t>(dims[i]);
    b[i] = static_cast<cuuint32_t>(box[i]);
    element_strides[i] = 1;
    if (i + 1 < rank) st[i] = static_cast<cuuint64_t>(strides[i]);
  }
  const CUresult result = encode(map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, st, b,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled refused the operand (alignment or size)";
}

bool tensor_map_encoder_available() { return encoder() != nullptr; }

const char* encode_int8_k_major(CUtensorMap* map, const void* base, std::int64_t rows, std::int64_t k,
                                std::int64_t ld, int box_rows, int box_k) {
  return encode_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, k, rows, ld, box_k, box_rows, CU_TENSOR_MAP_SWIZZLE_128B);
}

const char* encode_swizzled_128(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                                std::int64_t rows, std::int64_t row_bytes, int box_inner, int box_rows) {
  return encode_2d(map, type, base, inner, rows, row_bytes, box_inner, box_rows, CU_TENSOR_MAP_SWIZZLE_128B);
}

const char* encode_swizzled_128_3d(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                                   std::int64_t rows, std::int64_t heads, std::int64_t row_bytes,
                                   std::int64_t head_bytes, int box_inner, int box_rows) {
  const std::int64_t dims[3] = {inner, rows, heads}, strides[2] = {row_bytes, head_bytes};
  const int box[3] = {box_inner, box_rows, 1};
  return encode_nd(map, type, 3, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

const char* encode_rows(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                        std::int64_t rows, std::int64_t row_bytes, int box_inner, int box_rows) {
  return encode_2d(map, type, base, inner, rows, row_bytes, box_inner, box_rows, CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace lowbit::cuda::gemm
