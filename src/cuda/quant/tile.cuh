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

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "lowbit/quant.h"

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

// ---- the thread layout of the quantization kernels (host side)

constexpr int kThreads = 256;

// A block is a cx x cy grid of chunks (cx = 2^cx_log2 along a row); grid_x blocks cover a row.
struct TileShape {
  int cx_log2;
  int cy;
  long long grid_x;
};

inline TileShape tile_shape(std::int64_t cols, int chunk = kChunk) {
  const std::int64_t chunks = (cols + chunk - 1) / chunk;
  int cx_log2 = 0;
  while ((1LL << cx_log2) < chunks && (1 << cx_log2) < kThreads) ++cx_log2;
  const int cx = 1 << cx_log2;
  return TileShape{cx_log2, kThreads / cx, (chunks + cx - 1) / cx};
}

inline unsigned grid_rows(long long tiles) { return static_cast<unsigned>(std::clamp<long long>(tiles, 1, 65535)); }

// Statistics of the valid values of one chunk.
struct ChunkStats {
  unsigned abs_bits;
  float lo, hi;
};

__device__ __forceinline__ ChunkStats chunk_stats(const float (&v)[kChunk], int valid) {
  ChunkStats s{0u, INFINITY, -INFINITY};
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    if (k < valid) {
      s.abs_bits = max(s.abs_bits, formats::abs_bits(v[k]));
      s.lo = fminf(s.lo, v[k]);
      s.hi = fmaxf(s.hi, v[k]);
    }
  }
  return s;
}

__device__ __forceinline__ int first_non_finite(const float (&v)[kChunk], int valid) {
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    if (k < valid && !formats::is_finite_bits(formats::abs_bits(v[k]))) return k;
  }
  return 0;
}

// Per-segment quantization parameters: what the encoder multiplies by and subtracts.
struct Params {
  float scale, inv, min;
};

template <class Code>
__device__ __forceinline__ Params params_from_stats(const ChunkStats& s) {
  const float scale = Code::scale(__uint_as_float(s.abs_bits), s.lo, s.hi);
  return Params{scale, formats::inverse_scale(scale), Code::min_value(s.lo)};
}

template <class Code>
__device__ __forceinline__ void encode_chunk(void* codes_row, long long c0, int valid, bool vector_ok,
                                             const float (&v)[kChunk], const float (&inv)[kChunk],
                                             const float (&lo)[kChunk]) {
  int code[kChunk];
#pragma unroll
  for (int k = 0; k < kChunk; ++k) code[k] = Code::encode(v[k], inv[k], lo[k]);
  // The stores keep the low 4 or 8 bits of each code: two's complement for signed codes.
  if constexpr (Code::kBits == 4) {
    store_int4_codes(static_cast<std::uint8_t*>(codes_row) + c0 / 2, valid, vector_ok, code);
  } else {
    store_int8_codes(static_cast<std::int8_t*>(codes_row) + c0, valid, vector_ok, code);
  }
}

inline bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

inline long long segment_width(const QuantSpec& spec, std::int64_t cols) {
  return spec.granularity == Granularity::per_group ? spec.group_size : cols;
}

// per_tensor and per_channel scales span all rows (two passes); the others are row-local.
inline bool spans_rows(Granularity g) { return g == Granularity::per_tensor || g == Granularity::per_channel; }

}  // namespace lowbit::cuda
