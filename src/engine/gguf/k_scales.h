// The 6-bit sub-block scales and mins of ggml's Q4_K and Q5_K super-blocks: eight
// scales and eight mins in 12 bytes. Sub-blocks 0-3 keep both in the low 6 bits of
// bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep their low 4 bits in the
// nibbles of bytes 8-11 (scale low, min high) and their top 2 bits in the top 2 bits
// of bytes 0-3 (scales) and 4-7 (mins). The decoder and the writer of random blocks
// share this one definition.
#pragma once

#include <cstdint>

namespace lowbit::engine {

struct KScaleMin {
  std::uint8_t scale, min;  // 0..63 each
};

inline KScaleMin unpack_k_scale_min(const std::uint8_t* packed, int sub_block) {
  const int j = sub_block;
  if (j < 4) return {static_cast<std::uint8_t>(packed[j] & 63), static_cast<std::uint8_t>(packed[j + 4] & 63)};
  return {static_cast<std::uint8_t>((packed[j + 4] & 15) | ((packed[j - 4] >> 6) << 4)),
          static_cast<std::uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4))};
}

inline void pack_k_scale_mins(const KScaleMin (&values)[8], std::uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    const KScaleMin lo = values[j], hi = values[j + 4];
    packed[j] = static_cast<std::uint8_t>((lo.scale & 63) | ((hi.scale >> 4) << 6));
    packed[j + 4] = static_cast<std::uint8_t>((lo.min & 63) | ((hi.min >> 4) << 6));
    packed[j + 8] = static_cast<std::uint8_t>((hi.scale & 15) | ((hi.min & 15) << 4));
  }
}

}  // namespace lowbit::engine
