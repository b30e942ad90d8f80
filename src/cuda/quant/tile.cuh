// A thread's unit of work in the quantization kernels: 16 consecutive elements of
// one row. 16 fp32 values are four 16-byte loads, 16 fp16 values two, and their 16
// INT8 codes one 16-byte store (8 bytes for INT4), so aligned chunks move with the
// widest accesses the memory system has. Unaligned or partial chunks fall back to
// element-wise accesses with bounds checks.
//
// Decoding uses a narrower chunk, one 16-byte vector of output (4 fp32 or 8 fp16
// values): a warp's store instruction then covers 512 contiguous bytes. With a
// 16-element chunk each store instruction would write 16 bytes out of every 64, and
// the partial-sector writes halve the write bandwidth (measured: 56% of copy).
#pragma once

#include <cstdint>

#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"

namespace lowbit::cuda {

constexpr int kChunk = 16;

// The raw bits of one chunk: sizeof(T) 16-byte vectors hold 16 elements of T. Kernels
// load the raw chunks of several rows before converting any, which keeps the bytes in
// flight per thread the same (256) for 4-byte and 2-byte inputs.
template <class T>
struct RawChunk {
  static constexpr int kWords = kChunk * static_cast<int>(sizeof(T)) / 4;
  unsigned words[kWords];  // element k in word k * sizeof(T) / 4, little-endian
};

template <class T>
__device__ __forceinline__ unsigned storage_bits(T value) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(value);
  } else {
    return value.bits;
  }
}

// Everything is indexed with compile-time constants after unrolling, so the chunk
// stays in registers (aliasing it through a T* would push it to local memory).
template <class T>
__device__ __forceinline__ void load_raw(const T* __restrict__ p, int valid, bool vector_ok, RawChunk<T>& raw) {
  if (vector_ok && valid == kChunk) {
#pragma unroll
    for (int i = 0; i < RawChunk<T>::kWords / 4; ++i) {
      const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p) + i);
      raw.words[4 * i] = v.x, raw.words[4 * i + 1] = v.y, raw.words[4 * i + 2] = v.z, raw.words[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < RawChunk<T>::kWords; ++i) raw.words[i] = 0u;
    constexpr int kPerWord = 4 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (k < valid) raw.words[k / kPerWord] |= storage_bits(p[k]) << (32 / kPerWord * (k % kPerWord));
    }
  }
}

template <class T>
__device__ __forceinline__ void raw_to_floats(const RawChunk<T>& raw, float (&v)[kChunk]) {
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    if constexpr (sizeof(T) == 4) {
      v[k] = __uint_as_float(raw.words[k]);
    } else {
      v[k] = formats::to_float(T{static_cast<std::uint16_t>(raw.words[k / 2] >> (16 * (k % 2)))});
    }
  }
}

// Rows per thread that put 256 bytes of input in flight: 4 for fp32, 8 for fp16/bf16.
template <class T>
constexpr int kRowsInFlight = static_cast<int>(16 / sizeof(T));  // 16 elements x sizeof(T) x rows = 256 B

template <class T>
__device__ __forceinline__ void load_chunk(const T* __restrict__ p, int valid, bool vector_ok,
                                           float (&v)[kChunk]) {
  RawChunk<T> raw;
  load_raw(p, valid, vector_ok, raw);
  raw_to_floats(raw, v);
}

// One 16-byte vector of output values: 4 fp32 or 8 fp16/bf16 (the decode chunk).
template <class T>
constexpr int kValuesPerVector = static_cast<int>(16 / sizeof(T));

template <class T>
__device__ __forceinline__ void store_values(T* __restrict__ p, int valid, bool vector_ok,
                                             const float (&v)[kValuesPerVector<T>]) {
  constexpr int kN = kValuesPerVector<T>;
  if (vector_ok && valid == kN) {
    uint4 raw;
    T* values = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int k = 0; k < kN; ++k) values[k] = formats::from_float<T>(v[k]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
#pragma unroll
    for (int k = 0; k < kN; ++k) {
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
        q[k / 2] = formats::int4_pack(static_cast<std::uint8_t>(code[k] & 0xf), static_cast<std::uint8_t>(high & 0xf));
      }
    }
  }
}

// N codes (N = 4 or 8) for the decode chunk: int8 as one 4- or 8-byte load, int4 as
// one 2- or 4-byte load.
template <int N>
__device__ __forceinline__ void load_int8_codes(const std::int8_t* __restrict__ q, int valid, bool vector_ok,
                                                int (&code)[N]) {
  static_assert(N == 4 || N == 8);
  if (vector_ok && valid == N) {
    unsigned words[N / 4];
    if constexpr (N == 4) {
      words[0] = __ldcs(reinterpret_cast<const unsigned*>(q));
    } else {
      const uint2 pair = __ldcs(reinterpret_cast<const uint2*>(q));
      words[0] = pair.x, words[1] = pair.y;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) code[k] = static_cast<std::int8_t>((words[k / 4] >> (8 * (k % 4))) & 0xff);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) code[k] = k < valid ? q[k] : 0;
  }
}

template <int N>
__device__ __forceinline__ void load_int4_codes(const std::uint8_t* __restrict__ q, int valid, bool vector_ok,
                                                int (&code)[N]) {
  static_assert(N == 4 || N == 8);
  if (vector_ok && valid == N) {
    unsigned word;
    if constexpr (N == 4) {
      word = *reinterpret_cast<const unsigned short*>(q);
    } else {
      word = __ldcs(reinterpret_cast<const unsigned*>(q));
    }
#pragma unroll
    for (int k = 0; k < N; ++k) code[k] = (word >> (4 * k)) & 0xf;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
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
