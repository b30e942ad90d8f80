// The CPU twin of the decode KV cache (include/lowbit/kv_cache.h): the same buffers as
// the kernels (core/kv_layout.h), the same bytes after every append, and attention in
// double over the values the newest query reads.
//
// Its quantized form, kv_quantize: codes and f16 parameters (formats::HalfParams over
// INT8 symmetric / INT4 asymmetric), the one implementation that the engine's KvCache,
// this twin and the test models use; the GPU append does the same arithmetic per warp.
// Not lowbit::quantize(): its parameters are f32.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kv_layout.h"
#include "lowbit/tensor.h"

namespace lowbit::cpu {

// x is rows x cols f32 values (row stride cols); each row is cols / group groups of
// `group` consecutive channels with one scale (and, INT4, one min) each. codes are
// quant_layout's: INT8 one byte a code (i8), INT4 two a byte, low nibble first (u8),
// rows x (cols or cols / 2); scales and mins are f16 bits, rows x (cols / group).

// bits: 8 or 4; group divides cols (even for INT4). mins: asymmetric INT4 only (null for
// INT8 and for symmetric INT4, int4_symmetric: two's complement nibbles -8..7, s =
// absmax / 7, the int4_symmetric code scheme with an f16 scale).
// Throws lowbit::Error naming the row and column of a NaN or Inf.
void kv_quantize(int bits, const float* x, std::int64_t rows, std::int64_t cols, std::int64_t group,
                 std::uint8_t* codes, std::uint16_t* scales, std::uint16_t* mins, bool int4_symmetric = false);

// The values those codes and parameters stand for (HalfParams::decode), rows x cols f32.
void kv_dequantize(int bits, const std::uint8_t* codes, const std::uint16_t* scales, const std::uint16_t* mins,
                   std::int64_t rows, std::int64_t cols, std::int64_t group, float* out, bool int4_symmetric = false);
// As kv_dequantize, each value rounded once to f16: f16(q s + min), what the kernels'
// HFMA2 gives. Key blocks' keys are these values (every reader of them decodes so).
void kv_dequantize_to_f16(int bits, const std::uint8_t* codes, const std::uint16_t* scales,
                          const std::uint16_t* mins, std::int64_t rows, std::int64_t cols, std::int64_t group,
                          float* out, bool int4_symmetric = false);
// One such value: f16(code scale + min) by one rounding (the sum is exact in double: a
// code of 8 bits or fewer times an f16, plus an f16, is a multiple of 2^-24 under 2^25).
float f16_decoded(int code, float scale, float min);

// Appends the token at `pos` to host buffers: k and v are f16 bits [kv_heads x head_dim]
// with row strides k_ld, v_ld (elements). What kv_append does on the GPU, byte for byte.
void kv_append(const core::KvLayerShape& shape, const core::KvLayerBuffers& layer, std::int64_t pos,
               const std::uint16_t* k, std::int64_t k_ld, const std::uint16_t* v, std::int64_t v_ld);

// The values the query at position length - 1 reads from one part, in position order:
// f32 [visible][kv_heads][head_dim] (FP16 tokens exactly, quantized ones decoded).
std::vector<float> kv_visible_values(const core::KvLayerShape& shape, const core::KvPart& part, std::int64_t length);

// The attention of q (f16 bits [n_heads x head_dim]) over what the query at length - 1
// sees, in double: [n_heads x head_dim].
std::vector<double> kv_attention_f64(const core::KvLayerShape& shape, const core::KvLayerBuffers& layer,
                                     std::int64_t length, const std::uint16_t* q, std::int64_t n_heads);

// The same rounded once to out_dtype (f32, or f16 bits) into out [n_heads x head_dim].
void kv_attention(const core::KvLayerShape& shape, const core::KvLayerBuffers& layer, std::int64_t length,
                  const std::uint16_t* q, std::int64_t n_heads, void* out, DType out_dtype);

}  // namespace lowbit::cpu
