// The KV cache's quantized form on the host: codes and f16 parameters
// (formats::HalfParams over INT8 symmetric / INT4 asymmetric), the one implementation
// that KvCache, the CPU twins of the GPU append (tests, Python) and the naive model
// use; kv_append.cu does the same arithmetic per warp. Not lowbit::quantize(): its
// parameters are f32.
//
// x is rows x cols f32 values (row stride cols); each row is cols / group groups of
// `group` consecutive channels with one scale (and, INT4, one min) each. codes are
// quant_layout's: INT8 one byte a code (i8), INT4 two a byte, low nibble first (u8),
// rows x (cols or cols / 2); scales and mins are f16 bits, rows x (cols / group).
#pragma once

#include <cstdint>

namespace lowbit::cpu {

// bits: 8 or 4; group divides cols (even for INT4). mins: INT4 only (null for INT8).
// Throws lowbit::Error naming the row and column of a NaN or Inf.
void kv_quantize(int bits, const float* x, std::int64_t rows, std::int64_t cols, std::int64_t group,
                 std::uint8_t* codes, std::uint16_t* scales, std::uint16_t* mins);

// The values those codes and parameters stand for (HalfParams::decode), rows x cols f32.
void kv_dequantize(int bits, const std::uint8_t* codes, const std::uint16_t* scales, const std::uint16_t* mins,
                   std::int64_t rows, std::int64_t cols, std::int64_t group, float* out);

}  // namespace lowbit::cpu
