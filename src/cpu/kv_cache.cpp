#include "cpu/kv_cache.h"

#include <cmath>
#include <cstdint>

#include "formats/code_scheme.h"
#include "lowbit/error.h"

namespace lowbit::cpu {
namespace {

void check_args(int bits, std::int64_t rows, std::int64_t cols, std::int64_t group) {
  LOWBIT_CHECK(bits == 8 || bits == 4, "kv quantize: bits = ", bits, ", expected 8 or 4");
  LOWBIT_CHECK(rows >= 0 && cols > 0 && group > 0 && cols % group == 0 && (bits == 8 || group % 2 == 0),
               "kv quantize: ", rows, " x ", cols, " values in groups of ", group,
               " (a divisor of the columns, even for INT4)");
}

template <class Scheme>
void quantize_typed(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t group, std::uint8_t* codes,
                    std::uint16_t* scales, std::uint16_t* mins) {
  const std::int64_t groups = cols / group;
  const std::int64_t code_cols = Scheme::kBits == 8 ? cols : cols / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* v = x + r * cols + g * group;
      // The statistics as the GPU append's warp reduction has them: max |x| as bits, min, max.
      std::uint32_t abs_bits = 0;
      float lo = v[0], hi = v[0];
      for (std::int64_t i = 0; i < group; ++i) {
        const std::uint32_t b = formats::abs_bits(v[i]);
        abs_bits = b > abs_bits ? b : abs_bits;
        lo = std::fmin(lo, v[i]);
        hi = std::fmax(hi, v[i]);
      }
      if (!formats::is_finite_bits(abs_bits)) {
        for (std::int64_t i = 0; i < group; ++i) {
          LOWBIT_CHECK(std::isfinite(v[i]), "kv quantize: x contains ", v[i], " at row ", r, ", column ",
                       g * group + i, "; quantization needs finite values");
        }
      }
      const auto p = formats::HalfParams<Scheme>::from_range(formats::bits_to_float(abs_bits), lo, hi);
      scales[r * groups + g] = p.scale.bits;
      if constexpr (Scheme::kAsymmetric) mins[r * groups + g] = p.min.bits;
      std::uint8_t* q = codes + r * code_cols;
      const std::int64_t c0 = g * group;
      if constexpr (Scheme::kBits == 8) {
        for (std::int64_t i = 0; i < group; ++i) {
          q[c0 + i] = static_cast<std::uint8_t>(Scheme::to_storage(p.encode(v[i])));
        }
      } else {
        for (std::int64_t i = 0; i < group; i += 2) {
          q[(c0 + i) / 2] = static_cast<std::uint8_t>(Scheme::to_storage(p.encode(v[i])) |
                                                      Scheme::to_storage(p.encode(v[i + 1])) << 4);
        }
      }
    }
  }
}

template <class Scheme>
void dequantize_typed(const std::uint8_t* codes, const std::uint16_t* scales, const std::uint16_t* mins,
                      std::int64_t rows, std::int64_t cols, std::int64_t group, float* out) {
  const std::int64_t groups = cols / group;
  const std::int64_t code_cols = Scheme::kBits == 8 ? cols : cols / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint16_t min_bits = Scheme::kAsymmetric ? mins[r * groups + g] : std::uint16_t{0};
      const auto p =
          formats::HalfParams<Scheme>::from_stored(formats::Half{scales[r * groups + g]}, formats::Half{min_bits});
      for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
        const std::uint8_t byte = codes[r * code_cols + (Scheme::kBits == 8 ? c : c / 2)];
        const unsigned stored = Scheme::kBits == 8 || c % 2 == 0 ? byte : byte >> 4u;
        out[r * cols + c] = p.decode(Scheme::from_storage(stored));
      }
    }
  }
}

}  // namespace

void kv_quantize(int bits, const float* x, std::int64_t rows, std::int64_t cols, std::int64_t group,
                 std::uint8_t* codes, std::uint16_t* scales, std::uint16_t* mins) {
  check_args(bits, rows, cols, group);
  if (bits == 8) {
    quantize_typed<formats::Int8Symmetric>(x, rows, cols, group, codes, scales, mins);
  } else {
    LOWBIT_CHECK(mins != nullptr, "kv quantize: INT4 needs mins");
    quantize_typed<formats::Int4Asymmetric>(x, rows, cols, group, codes, scales, mins);
  }
}

void kv_dequantize(int bits, const std::uint8_t* codes, const std::uint16_t* scales, const std::uint16_t* mins,
                   std::int64_t rows, std::int64_t cols, std::int64_t group, float* out) {
  check_args(bits, rows, cols, group);
  if (bits == 8) {
    dequantize_typed<formats::Int8Symmetric>(codes, scales, mins, rows, cols, group, out);
  } else {
    LOWBIT_CHECK(mins != nullptr, "kv dequantize: INT4 needs mins");
    dequantize_typed<formats::Int4Asymmetric>(codes, scales, mins, rows, cols, group, out);
  }
}

}  // namespace lowbit::cpu
