#include "cpu/quant_baseline.h"

#include "formats/int8.h"

namespace lowbit::cpu::baseline {

void compute_scales(const float* k, std::int64_t rows, std::int64_t cols, float* scales) {
#pragma omp parallel for schedule(static)
  for (std::int64_t d = 0; d < cols; ++d) {
    std::uint32_t absmax_bits = 0;
    for (std::int64_t t = 0; t < rows; ++t) {
      const std::uint32_t bits = formats::abs_bits(k[t * cols + d]);
      absmax_bits = bits > absmax_bits ? bits : absmax_bits;
    }
    scales[d] = formats::int8_scale(formats::bits_to_float(absmax_bits));
  }
}

void quantize(const float* k, const float* scales, std::int8_t* codes, std::int64_t rows,
              std::int64_t cols) {
  for (std::int64_t t = 0; t < rows; ++t) {
    for (std::int64_t d = 0; d < cols; ++d) {
      codes[t * cols + d] = formats::int8_encode(k[t * cols + d], formats::inverse_scale(scales[d]));
    }
  }
}

void dequantize(const std::int8_t* codes, const float* scales, float* out, std::int64_t rows,
                std::int64_t cols) {
  for (std::int64_t t = 0; t < rows; ++t) {
    for (std::int64_t d = 0; d < cols; ++d) {
      out[t * cols + d] = formats::int8_decode(codes[t * cols + d], scales[d]);
    }
  }
}

}  // namespace lowbit::cpu::baseline
