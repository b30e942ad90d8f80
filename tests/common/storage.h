// Float tensors as stored bytes in f32, f16 or bf16, converted with the formats layer
// (round to nearest even), and read back as values or as raw bits.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/float16.h"
#include "lowbit/tensor.h"

namespace lowbit::test {

constexpr DType kFloatDTypes[] = {DType::f32, DType::f16, DType::bf16};

// The stored bits of v in dtype (f16/bf16 in the low 16 bits).
inline std::uint32_t storage_bits(DType dtype, float v) {
  switch (dtype) {
    case DType::f16: return formats::from_float<formats::Half>(v).bits;
    case DType::bf16: return formats::from_float<formats::BFloat16>(v).bits;
    default: return std::bit_cast<std::uint32_t>(v);
  }
}

inline float bits_value(DType dtype, std::uint32_t bits) {
  switch (dtype) {
    case DType::f16: return formats::to_float(formats::Half{static_cast<std::uint16_t>(bits)});
    case DType::bf16: return formats::to_float(formats::BFloat16{static_cast<std::uint16_t>(bits)});
    default: return std::bit_cast<float>(bits);
  }
}

// v rounded to dtype, as a float.
inline float round_to(DType dtype, float v) { return bits_value(dtype, storage_bits(dtype, v)); }

inline std::uint32_t read_bits(const std::uint8_t* storage, std::size_t i, DType dtype) {
  if (dtype_size(dtype) == 4) {
    std::uint32_t bits;
    std::memcpy(&bits, storage + 4 * i, 4);
    return bits;
  }
  std::uint16_t bits;
  std::memcpy(&bits, storage + 2 * i, 2);
  return bits;
}

inline float read_value(const std::uint8_t* storage, std::size_t i, DType dtype) {
  return bits_value(dtype, read_bits(storage, i, dtype));
}

inline void write_bits(std::uint8_t* storage, std::size_t i, DType dtype, std::uint32_t bits) {
  if (dtype_size(dtype) == 4) {
    std::memcpy(storage + 4 * i, &bits, 4);
  } else {
    const auto half = static_cast<std::uint16_t>(bits);
    std::memcpy(storage + 2 * i, &half, 2);
  }
}

// values, element by element, stored in dtype.
inline std::vector<std::uint8_t> to_storage(const std::vector<float>& values, DType dtype) {
  std::vector<std::uint8_t> out(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) write_bits(out.data(), i, dtype, storage_bits(dtype, values[i]));
  return out;
}

}  // namespace lowbit::test
