// Host buffers for the quantized form of a rows x cols input, poisoned, with `pad`
// spare bytes at the end of every codes row, and CPU views of them for the public API.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "common/poison.h"
#include "common/specs.h"
#include "formats/int4.h"
#include "lowbit/quant.h"

namespace lowbit::test {

inline float float_poison() { return std::bit_cast<float>(0x01010101u * kFloatPoison); }

struct HostQuantized {
  QuantSpec spec;
  std::int64_t rows, cols;
  QuantLayout layout;
  std::int64_t ldq;  // bytes per codes row
  std::vector<std::uint8_t> codes;
  std::vector<float> scales, mins;  // mins: asymmetric schemes only

  HostQuantized(const QuantSpec& spec_, std::int64_t rows_, std::int64_t cols_, std::int64_t pad = 0)
      : spec(spec_),
        rows(rows_),
        cols(cols_),
        layout(quant_layout(spec_, rows_, cols_)),
        ldq(layout.code_cols + pad),
        codes(static_cast<std::size_t>(rows_ * ldq), kCodePoison),
        scales(static_cast<std::size_t>(layout.scale_count()), float_poison()),
        mins(has_mins(spec_) ? scales.size() : 0, float_poison()) {}

  QuantizedView view() {
    return QuantizedView{
        TensorView::matrix(codes.data(), code_dtype(spec), Device::cpu, rows, layout.code_cols, ldq),
        TensorView::vector(scales.data(), DType::f32, Device::cpu, layout.scale_count()),
        has_mins(spec) ? TensorView::vector(mins.data(), DType::f32, Device::cpu, layout.scale_count()) : TensorView{}};
  }

  // The code at (r, c), read from its byte or nibble as the scheme stores it.
  int code(std::int64_t r, std::int64_t c) const {
    if (!is_4bit(spec)) {
      const std::uint8_t byte = codes[static_cast<std::size_t>(r * ldq + c)];
      return has_mins(spec) ? byte : static_cast<std::int8_t>(byte);
    }
    const std::uint8_t byte = codes[static_cast<std::size_t>(r * ldq + c / 2)];
    const int nibble = (c % 2) ? formats::int4_high(byte) : formats::int4_low(byte);
    return has_mins(spec) ? nibble : (nibble >= 8 ? nibble - 16 : nibble);
  }
};

}  // namespace lowbit::test
