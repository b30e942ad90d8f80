// A thread's unit of work in the block-format kernels: 8 consecutive values of one
// row (one 16-byte load of fp16/bf16, two of fp32) and their 8 codes (4 bytes, one
// u32 store). Blocks of 16/32/64 values are 2/4/8 consecutive lanes of a warp.
// Aligned tensors use the vector accesses; others take element-wise ones.
#pragma once

#include <cstdint>

#include "formats/float16.h"
#include "formats/mxfp4.h"
#include "formats/nf4.h"
#include "formats/nvfp4.h"
#include "lowbit/error.h"

namespace lowbit::cuda::blocks {

constexpr int kValues = 8;           // values per thread
constexpr int kThreads = 256;        // threads per CTA

template <class T>
__device__ __forceinline__ void load8(const T* __restrict__ p, bool aligned, float (&v)[kValues]) {
  if constexpr (sizeof(T) == 4) {
    if (aligned) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(p));
      const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
      for (int k = 0; k < kValues; ++k) v[k] = p[k];
    }
  } else {
    if (aligned) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(p));
      const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int k = 0; k < kValues; ++k) {
        v[k] = formats::to_float(T{static_cast<std::uint16_t>(words[k / 2] >> (16 * (k % 2)))});
      }
    } else {
#pragma unroll
      for (int k = 0; k < kValues; ++k) v[k] = formats::to_float(p[k]);
    }
  }
}

template <class T>
__device__ __forceinline__ unsigned bits16(float value) {
  return formats::from_float<T>(value).bits;
}

template <class T>
__device__ __forceinline__ void store8(T* __restrict__ p, bool aligned, const float (&v)[kValues]) {
  if constexpr (sizeof(T) == 4) {
    if (aligned) {
      reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
#pragma unroll
      for (int k = 0; k < kValues; ++k) p[k] = v[k];
    }
  } else {
    if (aligned) {
      uint4 w;
      w.x = bits16<T>(v[0]) | (bits16<T>(v[1]) << 16);
      w.y = bits16<T>(v[2]) | (bits16<T>(v[3]) << 16);
      w.z = bits16<T>(v[4]) | (bits16<T>(v[5]) << 16);
      w.w = bits16<T>(v[6]) | (bits16<T>(v[7]) << 16);
      *reinterpret_cast<uint4*>(p) = w;
    } else {
#pragma unroll
      for (int k = 0; k < kValues; ++k) p[k] = formats::from_float<T>(v[k]);
    }
  }
}

__device__ __forceinline__ std::uint32_t load_codes(const std::uint8_t* p, bool aligned) {
  if (aligned) return *reinterpret_cast<const std::uint32_t*>(p);
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

__device__ __forceinline__ void store_codes(std::uint8_t* p, bool aligned, std::uint32_t packed) {
  if (aligned) {
    *reinterpret_cast<std::uint32_t*>(p) = packed;
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) p[k] = static_cast<std::uint8_t>(packed >> (8 * k));
  }
}

// Calls fn with the formats codec of a BlockFormat.
template <class Fn>
decltype(auto) visit_codec(BlockFormat format, Fn&& fn) {
  switch (format) {
    case BlockFormat::nf4: return fn(formats::Nf4Codec{});
    case BlockFormat::mxfp4: return fn(formats::Mxfp4Codec{});
    case BlockFormat::nvfp4: return fn(formats::Nvfp4Codec{});
  }
  LOWBIT_FAIL("format: unknown value ", static_cast<int>(format));
}

inline bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace lowbit::cuda::blocks
