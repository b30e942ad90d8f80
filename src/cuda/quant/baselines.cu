// The seed's four kernels. Each handles any T x D (no divisibility requirement) and
// any row alignment: the vectorized one takes float4/char4 where a row allows it and
// finishes the row element by element.
#include <algorithm>
#include <cstdint>

#include "cuda/quant/baselines.h"
#include "formats/int8.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::seed {
namespace {

using formats::int8_decode;
using formats::int8_encode;
using formats::inverse_scale;

constexpr int kBlockX = 32;
constexpr int kBlockY = 8;
constexpr int kTile = 32;      // tiled: 32 x 32 elements per block
constexpr int kCoarsen = 4;    // coarsened: columns per thread
constexpr int kVector = 4;     // vectorized: elements per float4 / char4

unsigned blocks_for(long long extent, long long per_block) {
  return static_cast<unsigned>(std::clamp<long long>((extent + per_block - 1) / per_block, 1, 65535));
}

// ---- naive: one thread per element, column on the fast axis.
__global__ void naive_quantize(const float* __restrict__ k, const float* __restrict__ scales,
                               std::int8_t* __restrict__ q, long long rows, long long cols) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<long long>(gridDim.y) * blockDim.y) {
    q[r * cols + c] = int8_encode(k[r * cols + c], inverse_scale(scales[c]));
  }
}

__global__ void naive_dequantize(const std::int8_t* __restrict__ q, const float* __restrict__ scales,
                                 float* __restrict__ out, long long rows, long long cols) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<long long>(gridDim.y) * blockDim.y) {
    out[r * cols + c] = int8_decode(q[r * cols + c], scales[c]);
  }
}

// ---- tiled: stage a 32 x 32 tile (and its 32 scales) in shared memory first.
__global__ void tiled_quantize(const float* __restrict__ k, const float* __restrict__ scales,
                               std::int8_t* __restrict__ q, long long rows, long long cols) {
  __shared__ float tile[kTile][kTile + 1];
  __shared__ float inv[kTile];
  const long long c = static_cast<long long>(blockIdx.x) * kTile + threadIdx.x;
  if (threadIdx.y == 0) inv[threadIdx.x] = c < cols ? inverse_scale(scales[c]) : 0.0f;
  for (long long r0 = static_cast<long long>(blockIdx.y) * kTile; r0 < rows; r0 += static_cast<long long>(gridDim.y) * kTile) {
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const long long r = r0 + y;
      tile[y][threadIdx.x] = (r < rows && c < cols) ? k[r * cols + c] : 0.0f;
    }
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const long long r = r0 + y;
      if (r < rows && c < cols) q[r * cols + c] = int8_encode(tile[y][threadIdx.x], inv[threadIdx.x]);
    }
  }
}

__global__ void tiled_dequantize(const std::int8_t* __restrict__ q, const float* __restrict__ scales,
                                 float* __restrict__ out, long long rows, long long cols) {
  __shared__ std::int8_t tile[kTile][kTile + 4];
  __shared__ float scale[kTile];
  const long long c = static_cast<long long>(blockIdx.x) * kTile + threadIdx.x;
  if (threadIdx.y == 0) scale[threadIdx.x] = c < cols ? scales[c] : 0.0f;
  for (long long r0 = static_cast<long long>(blockIdx.y) * kTile; r0 < rows; r0 += static_cast<long long>(gridDim.y) * kTile) {
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const long long r = r0 + y;
      tile[y][threadIdx.x] = (r < rows && c < cols) ? q[r * cols + c] : std::int8_t{0};
    }
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const long long r = r0 + y;
      if (r < rows && c < cols) out[r * cols + c] = int8_decode(tile[y][threadIdx.x], scale[threadIdx.x]);
    }
  }
}

// ---- coarsened: each thread takes kCoarsen columns of one row, a warp apart so
// that every load instruction stays coalesced.
__global__ void coarsened_quantize(const float* __restrict__ k, const float* __restrict__ scales,
                                   std::int8_t* __restrict__ q, long long rows, long long cols) {
  const long long c_base = static_cast<long long>(blockIdx.x) * blockDim.x * kCoarsen + threadIdx.x;
  float inv[kCoarsen];
#pragma unroll
  for (int j = 0; j < kCoarsen; ++j) {
    const long long c = c_base + j * blockDim.x;
    inv[j] = c < cols ? inverse_scale(scales[c]) : 0.0f;
  }
  for (long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<long long>(gridDim.y) * blockDim.y) {
#pragma unroll
    for (int j = 0; j < kCoarsen; ++j) {
      const long long c = c_base + j * blockDim.x;
      if (c < cols) q[r * cols + c] = int8_encode(k[r * cols + c], inv[j]);
    }
  }
}

__global__ void coarsened_dequantize(const std::int8_t* __restrict__ q, const float* __restrict__ scales,
                                     float* __restrict__ out, long long rows, long long cols) {
  const long long c_base = static_cast<long long>(blockIdx.x) * blockDim.x * kCoarsen + threadIdx.x;
  float scale[kCoarsen];
#pragma unroll
  for (int j = 0; j < kCoarsen; ++j) {
    const long long c = c_base + j * blockDim.x;
    scale[j] = c < cols ? scales[c] : 0.0f;
  }
  for (long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<long long>(gridDim.y) * blockDim.y) {
#pragma unroll
    for (int j = 0; j < kCoarsen; ++j) {
      const long long c = c_base + j * blockDim.x;
      if (c < cols) out[r * cols + c] = int8_decode(q[r * cols + c], scale[j]);
    }
  }
}

// ---- vectorized: float4 in, char4 out, four columns per thread. A row takes the
// vector path when its float and int8 starts are 16- and 4-byte aligned; the last
// D % 4 columns, and rows that are not aligned, go element by element.
__device__ __forceinline__ bool row_is_aligned(const void* values, const void* codes) {
  return reinterpret_cast<std::uintptr_t>(values) % 16 == 0 && reinterpret_cast<std::uintptr_t>(codes) % 4 == 0;
}

__global__ void vectorized_quantize(const float* __restrict__ k, const float* __restrict__ scales,
                                    std::int8_t* __restrict__ q, long long rows, long long cols) {
  const long long c = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * kVector;
  if (c >= cols) return;
  const int n = static_cast<int>(min(static_cast<long long>(kVector), cols - c));
  float inv[kVector];
#pragma unroll
  for (int j = 0; j < kVector; ++j) inv[j] = j < n ? inverse_scale(scales[c + j]) : 0.0f;
  for (long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<long long>(gridDim.y) * blockDim.y) {
    const float* k_row = k + r * cols;
    std::int8_t* q_row = q + r * cols;
    if (n == kVector && row_is_aligned(k_row, q_row)) {
      const float4 v = *reinterpret_cast<const float4*>(k_row + c);
      char4 out;
      out.x = int8_encode(v.x, inv[0]);
      out.y = int8_encode(v.y, inv[1]);
      out.z = int8_encode(v.z, inv[2]);
      out.w = int8_encode(v.w, inv[3]);
      *reinterpret_cast<char4*>(q_row + c) = out;
    } else {
      for (int j = 0; j < n; ++j) q_row[c + j] = int8_encode(k_row[c + j], inv[j]);
    }
  }
}

__global__ void vectorized_dequantize(const std::int8_t* __restrict__ q, const float* __restrict__ scales,
                                      float* __restrict__ out, long long rows, long long cols) {
  const long long c = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * kVector;
  if (c >= cols) return;
  const int n = static_cast<int>(min(static_cast<long long>(kVector), cols - c));
  float scale[kVector];
#pragma unroll
  for (int j = 0; j < kVector; ++j) scale[j] = j < n ? scales[c + j] : 0.0f;
  for (long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<long long>(gridDim.y) * blockDim.y) {
    const std::int8_t* q_row = q + r * cols;
    float* out_row = out + r * cols;
    if (n == kVector && row_is_aligned(out_row, q_row)) {
      const char4 codes = *reinterpret_cast<const char4*>(q_row + c);
      *reinterpret_cast<float4*>(out_row + c) =
          make_float4(int8_decode(codes.x, scale[0]), int8_decode(codes.y, scale[1]),
                      int8_decode(codes.z, scale[2]), int8_decode(codes.w, scale[3]));
    } else {
      for (int j = 0; j < n; ++j) out_row[c + j] = int8_decode(q_row[c + j], scale[j]);
    }
  }
}

// ---- launchers

template <auto Kernel, class Src, class Dst>
void launch_elementwise(const Src* src, const float* scales, Dst* dst, std::int64_t rows, std::int64_t cols,
                        long long cols_per_block, long long rows_per_block, cuda_stream_t stream) {
  const dim3 block(kBlockX, kBlockY);
  const dim3 grid(static_cast<unsigned>((cols + cols_per_block - 1) / cols_per_block), blocks_for(rows, rows_per_block));
  Kernel<<<grid, block, 0, stream>>>(src, scales, dst, rows, cols);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void naive_q(const float* k, const float* s, std::int8_t* q, std::int64_t t, std::int64_t d, cuda_stream_t st) {
  launch_elementwise<naive_quantize>(k, s, q, t, d, kBlockX, kBlockY, st);
}
void naive_dq(const std::int8_t* q, const float* s, float* o, std::int64_t t, std::int64_t d, cuda_stream_t st) {
  launch_elementwise<naive_dequantize>(q, s, o, t, d, kBlockX, kBlockY, st);
}
void tiled_q(const float* k, const float* s, std::int8_t* q, std::int64_t t, std::int64_t d, cuda_stream_t st) {
  launch_elementwise<tiled_quantize>(k, s, q, t, d, kTile, kTile, st);
}
void tiled_dq(const std::int8_t* q, const float* s, float* o, std::int64_t t, std::int64_t d, cuda_stream_t st) {
  launch_elementwise<tiled_dequantize>(q, s, o, t, d, kTile, kTile, st);
}
void coarsened_q(const float* k, const float* s, std::int8_t* q, std::int64_t t, std::int64_t d, cuda_stream_t st) {
  launch_elementwise<coarsened_quantize>(k, s, q, t, d, kBlockX * kCoarsen, kBlockY, st);
}
void coarsened_dq(const std::int8_t* q, const float* s, float* o, std::int64_t t, std::int64_t d, cuda_stream_t st) {
  launch_elementwise<coarsened_dequantize>(q, s, o, t, d, kBlockX * kCoarsen, kBlockY, st);
}
void vectorized_q(const float* k, const float* s, std::int8_t* q, std::int64_t t, std::int64_t d, cuda_stream_t st) {
  launch_elementwise<vectorized_quantize>(k, s, q, t, d, kBlockX * kVector, kBlockY, st);
}
void vectorized_dq(const std::int8_t* q, const float* s, float* o, std::int64_t t, std::int64_t d, cuda_stream_t st) {
  launch_elementwise<vectorized_dequantize>(q, s, o, t, d, kBlockX * kVector, kBlockY, st);
}

constexpr Variant kVariants[] = {
    {"naive", "one thread per element, column on the fast axis", naive_q, naive_dq},
    {"tiled", "32x32 tile staged in shared memory", tiled_q, tiled_dq},
    {"coarsened", "4 columns per thread, a warp apart", coarsened_q, coarsened_dq},
    {"vectorized", "float4 / char4 per thread, scalar tail", vectorized_q, vectorized_dq},
};

}  // namespace

std::span<const Variant> variants() { return kVariants; }

}  // namespace lowbit::cuda::seed
