#include "bench/common/device_fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "core/device_buffer.h"
#include "lowbit/cuda_check.h"

namespace lowbit::bench {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::size_t items) {
  const std::size_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535u * 64u ? blocks : 65535u * 64u);
}

__host__ __device__ std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__device__ float unit_float(std::uint64_t seed, std::size_t i) {  // [0, 1)
  return static_cast<float>(splitmix64(seed ^ (i * 0x2545f4914f6cdd1dULL)) >> 40) * 0x1p-24f;
}

__global__ void fill_bytes_kernel(std::uint8_t* data, std::size_t bytes, std::uint64_t seed) {
  for (std::size_t w = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; w * 8 < bytes;
       w += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t v = splitmix64(seed ^ (w * 0x2545f4914f6cdd1dULL));
    for (int b = 0; b < 8 && w * 8 + b < bytes; ++b) data[w * 8 + b] = static_cast<std::uint8_t>(v >> (8 * b));
  }
}

template <class T>
__global__ void fill_float16_kernel(T* data, std::size_t count, float amplitude, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float v = (2.0f * unit_float(seed, i) - 1.0f) * amplitude;
    if constexpr (sizeof(T) == 2 && std::is_same_v<T, __half>) {
      data[i] = __float2half_rn(v);
    } else {
      data[i] = __float2bfloat16_rn(v);
    }
  }
}

__global__ void fill_f32_kernel(float* data, std::size_t count, float lo, float hi, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    data[i] = lo + (hi - lo) * unit_float(seed, i);
  }
}

__global__ void transpose_kernel(const std::uint8_t* src, std::uint8_t* dst, std::int64_t rows, std::int64_t cols) {
  __shared__ std::uint8_t tile[32][33];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * 32, c0 = static_cast<std::int64_t>(blockIdx.x) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const std::int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const std::int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
  }
}

__global__ void unpack_int4_kernel(const std::uint8_t* src, std::int8_t* dst, std::size_t bytes) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int byte = src[i];
    dst[2 * i] = static_cast<std::int8_t>(((byte & 15) ^ 8) - 8);
    dst[2 * i + 1] = static_cast<std::int8_t>(((byte >> 4) ^ 8) - 8);
  }
}

template <class Word>
__global__ void mismatch_kernel(const Word* a, const Word* b, std::size_t words, unsigned long long* count) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    local += a[i] != b[i];
  }
  if (local) atomicAdd(count, local);
}

template <class T>
__global__ void l2_kernel(const T* a, const T* b, std::size_t count, double* sums) {
  double diff = 0, ref = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const double x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    diff += (x - y) * (x - y);
    ref += y * y;
  }
  atomicAdd(&sums[0], diff);
  atomicAdd(&sums[1], ref);
}

}  // namespace

void fill_random_bytes(void* data, std::size_t bytes, std::uint64_t seed, cuda_stream_t stream) {
  fill_bytes_kernel<<<blocks_for((bytes + 7) / 8), kThreads, 0, stream>>>(static_cast<std::uint8_t*>(data), bytes,
                                                                        splitmix64(seed));
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void fill_random_float16(void* data, std::size_t count, DType dtype, float amplitude, std::uint64_t seed,
                         cuda_stream_t stream) {
  if (dtype == DType::bf16) {
    fill_float16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count,
                                                                    amplitude, splitmix64(seed));
  } else {
    fill_float16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__half*>(data), count, amplitude,
                                                                    splitmix64(seed));
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void fill_random_f32(float* data, std::size_t count, float lo, float hi, std::uint64_t seed, cuda_stream_t stream) {
  fill_f32_kernel<<<blocks_for(count), kThreads, 0, stream>>>(data, count, lo, hi, splitmix64(seed));
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void transpose_bytes(const void* src, void* dst, std::int64_t rows, std::int64_t cols, cuda_stream_t stream) {
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  transpose_kernel<<<grid, dim3(32, 8), 0, stream>>>(static_cast<const std::uint8_t*>(src),
                                                     static_cast<std::uint8_t*>(dst), rows, cols);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void unpack_int4_rows(const void* src, void* dst, std::int64_t rows, std::int64_t cols_packed, cuda_stream_t stream) {
  const std::size_t bytes = static_cast<std::size_t>(rows * cols_packed);
  unpack_int4_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(static_cast<const std::uint8_t*>(src),
                                                                static_cast<std::int8_t*>(dst), bytes);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

std::uint64_t count_mismatches(const void* a, const void* b, std::size_t words, bool word16, cuda_stream_t stream) {
  core::DeviceBuffer counter(sizeof(unsigned long long));
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(counter.data(), 0, counter.bytes(), stream));
  if (word16) {
    mismatch_kernel<<<blocks_for(words), kThreads, 0, stream>>>(static_cast<const std::uint16_t*>(a),
                                                               static_cast<const std::uint16_t*>(b), words,
                                                               counter.as<unsigned long long>());
  } else {
    mismatch_kernel<<<blocks_for(words), kThreads, 0, stream>>>(static_cast<const std::uint32_t*>(a),
                                                               static_cast<const std::uint32_t*>(b), words,
                                                               counter.as<unsigned long long>());
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
  unsigned long long count = 0;
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(&count, counter.data(), sizeof count, cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return count;
}

double relative_l2(const void* a, const void* b, std::size_t count, DType dtype, cuda_stream_t stream) {
  core::DeviceBuffer sums(2 * sizeof(double));
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(sums.data(), 0, sums.bytes(), stream));
  const unsigned blocks = std::min(blocks_for(count), 1024u);
  if (dtype == DType::bf16) {
    l2_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(a),
                                               static_cast<const __nv_bfloat16*>(b), count, sums.as<double>());
  } else {
    l2_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(a), static_cast<const __half*>(b), count,
                                               sums.as<double>());
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
  double host[2] = {0, 0};
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(host, sums.data(), sizeof host, cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::sqrt(host[0]) / std::max(std::sqrt(host[1]), 1e-300);
}

}  // namespace lowbit::bench
