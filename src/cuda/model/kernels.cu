// The small kernels of the GPU forward pass (model_cuda.h). Each is a few
// microseconds at decode sizes; what matters is that they are few (the residual add
// rides on the norm) and graph-capturable.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/model/model_cuda.h"
#include "core/pdl.cuh"
#include "cuda/swiglu.cuh"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::cuda::model {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float half_bits_to_float(std::uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
__device__ __forceinline__ std::uint16_t float_to_half_bits(float v) { return __half_as_ushort(__float2half_rn(v)); }

// Sum over the block (kThreads threads); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

__global__ void embed_kernel(const float* table, const std::int32_t* tokens, int d, float* x) {
  pdl_trigger();
  pdl_wait();
  const long long row = blockIdx.x;
  const float* src = table + static_cast<long long>(tokens[row]) * d;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += kThreads) x[row * d + i] = src[i];
}

__global__ void add_rms_norm_kernel(float* x, const std::uint16_t* delta, const float* weight, int d, float eps,
                                    std::uint16_t* h) {
  pdl_trigger();
  pdl_wait();
  const long long row = blockIdx.x;
  float* xr = x + row * d;
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < d; i += kThreads) {
    float v = xr[i];
    if (delta) {
      v += half_bits_to_float(delta[row * d + i]);
      xr[i] = v;
    }
    ss = fmaf(v, v, ss);
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < d; i += kThreads) {
    h[row * d + i] = float_to_half_bits(xr[i] * inv * weight[i]);
  }
}

// The same with every value in registers: a thread holds kGroups groups of 4 consecutive
// values (16-byte loads of x, 8-byte loads of delta, loaded at once), so the row costs one
// round of loads instead of one per loop iteration; the norm weights are loaded before the
// dependency wait. d a multiple of 4, at most 4 kGroups blockDim.x.
template <int kGroups>
__global__ void add_rms_norm_vec_kernel(float* __restrict__ x, const std::uint16_t* __restrict__ delta,
                                        const float* __restrict__ weight, int d, float eps,
                                        std::uint16_t* __restrict__ h) {
  pdl_trigger();
  const int groups = d / 4, tid = static_cast<int>(threadIdx.x), stride = static_cast<int>(blockDim.x);
  const long long row = blockIdx.x;
  float4 w[kGroups];
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int i = tid + k * stride;
    if (i < groups) w[k] = reinterpret_cast<const float4*>(weight)[i];
  }
  pdl_wait();
  float4* xr = reinterpret_cast<float4*>(x + row * d);
  float4 v[kGroups];
  uint2 dv[kGroups];
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int i = tid + k * stride;
    if (i >= groups) continue;
    v[k] = xr[i];
    if (delta) dv[k] = reinterpret_cast<const uint2*>(delta + row * d)[i];
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int i = tid + k * stride;
    if (i >= groups) continue;
    if (delta) {
      const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&dv[k].x));
      const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&dv[k].y));
      v[k].x += lo.x, v[k].y += lo.y, v[k].z += hi.x, v[k].w += hi.y;
      xr[i] = v[k];
    }
    ss = fmaf(v[k].x, v[k].x, ss);
    ss = fmaf(v[k].y, v[k].y, ss);
    ss = fmaf(v[k].z, v[k].z, ss);
    ss = fmaf(v[k].w, v[k].w, ss);
  }
  // Block sum (any whole number of warps).
  __shared__ float partial[32];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (tid % 32 == 0) partial[tid / 32] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int k = 0; k < stride / 32; ++k) total += partial[k];
  const float inv = rsqrtf(total / static_cast<float>(d) + eps);
  uint2* hr = reinterpret_cast<uint2*>(h + row * d);
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int i = tid + k * stride;
    if (i >= groups) continue;
    const __half2 lo = __floats2half2_rn(v[k].x * inv * w[k].x, v[k].y * inv * w[k].y);
    const __half2 hi = __floats2half2_rn(v[k].z * inv * w[k].z, v[k].w * inv * w[k].w);
    hr[i] = make_uint2(*reinterpret_cast<const std::uint32_t*>(&lo), *reinterpret_cast<const std::uint32_t*>(&hi));
  }
}

__global__ void silu_mul_kernel(const std::uint16_t* gu, long long f, long long total, bool tiles,
                                std::uint16_t* out) {
  pdl_trigger();
  pdl_wait();
  for (long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = t / f, j = t % f;
    const long long gate = row * 2 * f + (tiles ? j / 8 * 16 + j % 8 : j), up = gate + (tiles ? 8 : f);
    out[t] = float_to_half_bits(swiglu_value(half_bits_to_float(gu[gate]), half_bits_to_float(gu[up])));
  }
}

// (value, index) with the larger value winning, the lower index on ties.
__device__ __forceinline__ bool better(float v, int i, float best, int best_i) {
  return v > best || (v == best && i < best_i);
}

__global__ void __launch_bounds__(1024) argmax_kernel(const std::uint16_t* logits, int vocab, std::int32_t* token,
                                                      std::int32_t* advance, std::int32_t* non_finite,
                                                      std::int32_t* mirror) {
  pdl_trigger();
  pdl_wait();
  float best = -INFINITY;
  int best_i = INT_MAX;
  bool all_finite = true;
  // 8 logits per 16-byte load, 8 loads in flight per thread (49152 logits: 6 a thread);
  // a scalar tail past the last whole vector (or everything, when unaligned).
  const bool vec = reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  const int vectors = vec ? vocab / 8 : 0;
  constexpr int kBatch = 8;
  for (int base = static_cast<int>(threadIdx.x); base < vectors; base += kBatch * static_cast<int>(blockDim.x)) {
    uint4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * static_cast<int>(blockDim.x);
      v[b] = i < vectors ? reinterpret_cast<const uint4*>(logits)[i] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * static_cast<int>(blockDim.x);
      if (i >= vectors) break;
      const int i0 = i * 8;
      const std::uint32_t w[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float x = half_bits_to_float(static_cast<std::uint16_t>(w[e / 2] >> (16 * (e % 2))));
        all_finite &= isfinite(x);
        if (better(x, i0 + e, best, best_i)) best = x, best_i = i0 + e;
      }
    }
  }
  for (int i = vectors * 8 + static_cast<int>(threadIdx.x); i < vocab; i += blockDim.x) {
    const float v = half_bits_to_float(logits[i]);
    all_finite &= isfinite(v);
    if (better(v, i, best, best_i)) best = v, best_i = i;
  }
  for (int o = 16; o > 0; o /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, best, o);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (better(v, i, best, best_i)) best = v, best_i = i;
  }
  __shared__ float values[32];
  __shared__ int indices[32];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) values[warp] = best, indices[warp] = best_i;
  const bool any_non_finite = __syncthreads_or(!all_finite);  // also the barrier for values / indices
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x) / 32; ++w) {
      if (better(values[w], indices[w], best, best_i)) best = values[w], best_i = indices[w];
    }
    const std::int32_t t = best_i == INT_MAX ? 0 : best_i;  // all NaN: token 0
    *token = t;
    const std::int32_t position = advance ? *advance : 0;
    if (advance) *advance = position + 1;
    if (non_finite && any_non_finite) *non_finite = 1;  // sticky: only the caller clears it
    if (mirror) {
      mirror[2 * (position & 1)] = t;
      mirror[2 * (position & 1) + 1] = non_finite ? *non_finite : 0;
    }
  }
}

// One block a row, 4-byte words.
__global__ void gather_rows_kernel(const std::uint32_t* src, long long src_words, long long words,
                                   const std::int32_t* rows, std::uint32_t* dst) {
  pdl_trigger();
  pdl_wait();
  const long long i = blockIdx.x;
  const std::uint32_t* from = src + static_cast<long long>(rows[i]) * src_words;
  for (long long w = threadIdx.x; w < words; w += kThreads) dst[i * words + w] = from[w];
}

unsigned grid_of(std::int64_t n) {
  LOWBIT_CHECK(n >= 1 && n < (std::int64_t{1} << 31), "forward kernels: ", n, " rows");
  return static_cast<unsigned>(n);
}

}  // namespace

void embed_rows(const float* table, const std::int32_t* tokens, std::int64_t n, std::int64_t d, float* x,
                cuda_stream_t stream) {
  launch_pdl(embed_kernel, grid_of(n), kThreads, 0, stream, table, tokens, static_cast<int>(d), x);
}

void add_rms_norm(float* x, const std::uint16_t* delta, const float* weight, std::int64_t n, std::int64_t d,
                  float eps, std::uint16_t* h, cuda_stream_t stream) {
  constexpr int kGroups = 4;
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (d % 4 == 0 && d <= 4 * kGroups * 1024 && aligned(x) && aligned(weight) && aligned(h) &&
      (!delta || aligned(delta))) {
    // Enough threads that each holds at most kGroups groups of 4, in whole warps.
    const std::int64_t groups = d / 4;
    const auto threads = static_cast<unsigned>((((groups + kGroups - 1) / kGroups) + 31) / 32 * 32);
    launch_pdl(add_rms_norm_vec_kernel<kGroups>, grid_of(n), threads, 0, stream, x, delta, weight,
               static_cast<int>(d), eps, h);
    return;
  }
  launch_pdl(add_rms_norm_kernel, grid_of(n), kThreads, 0, stream, x, delta, weight, static_cast<int>(d), eps, h);
}

void silu_mul(const std::uint16_t* gu, std::int64_t n, std::int64_t f, std::uint16_t* out, cuda_stream_t stream,
              bool swiglu_tiles) {
  LOWBIT_CHECK(!swiglu_tiles || f % 8 == 0, "silu_mul: gate and up in tiles of 8 need f % 8 == 0, f = ", f);
  const std::int64_t total = n * f;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((total + kThreads - 1) / kThreads, 4096));
  launch_pdl(silu_mul_kernel, blocks, kThreads, 0, stream, gu, f, total, swiglu_tiles, out);
}

void argmax_token(const std::uint16_t* logits, std::int64_t vocab, std::int32_t* token, std::int32_t* advance,
                  std::int32_t* non_finite, cuda_stream_t stream, std::int32_t* mirror) {
  LOWBIT_CHECK(vocab >= 1 && vocab < INT_MAX, "argmax_token: vocab = ", vocab);
  LOWBIT_CHECK(!mirror || advance, "argmax_token: the mirror's slot follows the position (advance)");
  launch_pdl(argmax_kernel, 1, 1024, 0, stream, logits, static_cast<int>(vocab), token, advance, non_finite, mirror);
}

void gather_rows(const void* src, std::size_t src_stride, std::size_t row_bytes, const std::int32_t* rows,
                 std::int64_t n, void* dst, cuda_stream_t stream) {
  LOWBIT_CHECK(row_bytes % 4 == 0 && src_stride % 4 == 0 && src_stride >= row_bytes, "gather_rows: row_bytes ",
               row_bytes, ", src_stride ", src_stride, " (multiples of 4, stride >= row)");
  LOWBIT_CHECK(src && dst && rows && reinterpret_cast<std::uintptr_t>(src) % 4 == 0 &&
                   reinterpret_cast<std::uintptr_t>(dst) % 4 == 0,
               "gather_rows: null or unaligned src, dst or rows");
  launch_pdl(gather_rows_kernel, grid_of(n), kThreads, 0, stream, static_cast<const std::uint32_t*>(src),
             static_cast<long long>(src_stride / 4), static_cast<long long>(row_bytes / 4), rows,
             static_cast<std::uint32_t*>(dst));
}

}  // namespace lowbit::cuda::model
