// TMA tensor maps for the Hopper GEMM. cuTensorMapEncodeTiled is a driver API
// function; it is fetched through the runtime (cudaGetDriverEntryPointByVersion), so
// the library does not link libcuda.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)

#include <cstdint>

namespace lowbit::cuda::gemm {

// Whether the driver provides cuTensorMapEncodeTiled (looked up once).
bool tensor_map_encoder_available();

// The most dimensions a tiled map has.
constexpr int kMaxRank = 5;

// A tiled map over a tensor of `rank` (1..kMaxRank) dimensions of `type`, innermost
// first: dims[i] elements along dimension i, strides[i - 1] bytes between consecutive
// indices of dimension i >= 1 (rank - 1 of them; the innermost is contiguous; any order
// of sizes, each a multiple of 16 below 2^40), read in boxes of box[i] elements (at most
// 256 each) into shared memory with `swizzle`. Elements outside the dims load as zeros.
// Needs base 16-byte aligned; returns null, or what the driver refused. The helpers
// below are its 2D and 3D forms.
const char* encode_nd(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base, const std::int64_t* dims,
                      const std::int64_t* strides, const int* box, CUtensorMapSwizzle swizzle);

// A tiled map over an int8 matrix of `rows` rows of `k` bytes, `ld` bytes apart
// (K contiguous), read in boxes of box_rows x box_k bytes into shared memory with the
// 128-byte swizzle (box_k must be 128). Elements outside the matrix load as zeros.
// Needs base 16-byte aligned and ld a multiple of 16 (TMA's rules); returns null, or
// what the driver refused. Host cost ~1-2 us per map.
const char* encode_int8_k_major(CUtensorMap* map, const void* base, std::int64_t rows, std::int64_t k,
                                std::int64_t ld, int box_rows, int box_k);

// A tiled map over `rows` rows of `inner` elements of `type`, `row_bytes` apart, read in
// boxes of box_rows x box_inner elements with the 128-byte swizzle (box_inner times the
// element size must be 128), as wgmma's swizzled descriptors read them. Same rules and
// cost as above.
const char* encode_swizzled_128(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                                std::int64_t rows, std::int64_t row_bytes, int box_inner, int box_rows);

// encode_swizzled_128 over `heads` such matrices, `head_bytes` apart (a third dimension;
// boxes of one head): rows may be the outer stride ([heads][rows][inner], a KV cache's
// layout) or the inner one ([rows][heads * inner]: head_bytes = inner times the element
// size). Same rules and cost as above.
const char* encode_swizzled_128_3d(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                                   std::int64_t rows, std::int64_t heads, std::int64_t row_bytes,
                                   std::int64_t head_bytes, int box_inner, int box_rows);

// A tiled map over `rows` rows of `inner` elements of `type`, `row_bytes` apart, read in
// boxes of box_rows x box_inner elements into dense shared memory (no swizzle): box_inner
// times the element size a multiple of 16 bytes, at most 256 elements each way. Elements
// outside the matrix load as zeros. Same rules and cost as above.
const char* encode_rows(CUtensorMap* map, CUtensorMapDataType type, const void* base, std::int64_t inner,
                        std::int64_t rows, std::int64_t row_bytes, int box_inner, int box_rows);

}  // namespace lowbit::cuda::gemm
