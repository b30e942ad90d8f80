// A thread's unit of work in the quantization kernels: 16 consecutive elements of
// one row. 16 fp32 values are four 16-byte loads, 16 fp16 values two, and their 16
// INT8 codes one 16-byte store (8 bytes for INT4), so aligned chunks move with the
// widest accesses the memory system has. Unaligned or partial chunks fall back to
// element-wise accesses with bounds checks.
#pragma once

#include <cstdint>

#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"

namespace lowbit::cuda {

constexpr int kChunk = 16;

template <class T>
__device__ __forceinline__ void load_chunk(const T* __restrict__ p, int valid, bool vector_ok,
                                           float (&v)[kChunk]) {
  if (vector_ok && valid == kChunk) {
    constexpr int kVectors = static_cast<int>(sizeof(T));  // 16 elements * sizeof(T) / 16 bytes
    uint4 raw[kVectors];
#pragma unroll
    for (int i = 0; i < kVectors; ++i) raw[i] = __ldcs(reinterpret_cast<const uint4*>(p) + i);
    const T* values = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) v[k] = formats::to_float(values[k]);
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; ++k) v[k] = k < valid ? formats::to_float(p[k]) : 0.0f;
  }
}

template <class T>
__device__ __forceinline__ void store_chunk(T* __restrict__ p, int valid, bool vector_ok,
                                            const float (&v)[kChunk]) {
  if (vector_ok && valid == kChunk) {
    constexpr int kVectors = static_cast<int>(sizeof(T));
    uint4 raw[kVectors];
    T* values = reinterpret_cast<T*>(raw);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) values[k] = formats::from_float<T>(v[k]);
#pragma unroll
    for (int i = 0; i < kVectors; ++i) __stcs(reinterpret_cast<uint4*>(p) + i, raw[i]);
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (k < valid) p[k] = formats::from_float<T>(v[k]);
    }
  }
}

// Codes of one chunk: 16 int8 codes, or 16 int4 codes in 8 bytes.
__device__ __forceinline__ void store_int8_codes(std::int8_t* __restrict__ q, int valid, bool vector_ok,
                                                 const int (&code)[kChunk]) {
  if (vector_ok && valid == kChunk) {
    uint4 packed;
    unsigned* words = &packed.x;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      words[w] = (code[4 * w] & 0xff) | ((code[4 * w + 1] & 0xff) << 8) | ((code[4 * w + 2] & 0xff) << 16) |
                 (static_cast<unsigned>(code[4 * w + 3] & 0xff) << 24);
    }
    __stcs(reinterpret_cast<uint4*>(q), packed);
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (k < valid) q[k] = static_cast<std::int8_t>(code[k]);
    }
  }
}

__device__ __forceinline__ void store_int4_codes(std::uint8_t* __restrict__ q, int valid, bool vector_ok,
                                                 const int (&code)[kChunk]) {
  if (vector_ok && valid == kChunk) {
    uint2 packed;
    unsigned* words = &packed.x;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      unsigned word = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) word |= static_cast<unsigned>(code[8 * w + k] & 0xf) << (4 * k);
      words[w] = word;
    }
    *reinterpret_cast<uint2*>(q) = packed;
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; k += 2) {
      if (k < valid) {
        const int high = k + 1 < valid ? code[k + 1] : 0;
        q[k / 2] = formats::int4_pack(static_cast<std::uint8_t>(code[k]), static_cast<std::uint8_t>(high));
      }
    }
  }
}

__device__ __forceinline__ void load_int8_codes(const std::int8_t* __restrict__ q, int valid, bool vector_ok,
                                                int (&code)[kChunk]) {
  if (vector_ok && valid == kChunk) {
    const uint4 packed = __ldcs(reinterpret_cast<const uint4*>(q));
    const unsigned* words = &packed.x;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      code[k] = static_cast<std::int8_t>((words[k / 4] >> (8 * (k % 4))) & 0xff);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; ++k) code[k] = k < valid ? q[k] : 0;
  }
}

__device__ __forceinline__ void load_int4_codes(const std::uint8_t* __restrict__ q, int valid, bool vector_ok,
                                                int (&code)[kChunk]) {
  if (vector_ok && valid == kChunk) {
    const uint2 packed = *reinterpret_cast<const uint2*>(q);
    const unsigned* words = &packed.x;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) code[k] = (words[k / 8] >> (4 * (k % 8))) & 0xf;
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      code[k] = 0;
      if (k < valid) {
        const std::uint8_t byte = q[k / 2];
        code[k] = (k % 2) ? formats::int4_high(byte) : formats::int4_low(byte);
      }
    }
  }
}

// Float <-> unsigned mapping that preserves order, so that atomicMin/atomicMax on
// unsigned integers compute a float min/max.
__device__ __forceinline__ unsigned to_ordered(float value) {
  const unsigned bits = __float_as_uint(value);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ float from_ordered(unsigned ordered) {
  return __uint_as_float((ordered & 0x80000000u) ? (ordered & 0x7fffffffu) : ~ordered);
}

constexpr unsigned kOrderedLowest = 0u;            // below every float
constexpr unsigned kOrderedHighest = 0xffffffffu;  // above every float

}  // namespace lowbit::cuda
