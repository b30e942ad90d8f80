// Bitwise comparison of whole buffers that names the first differing element by row
// and column (fast memcmp first; the element loop runs only on a mismatch).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <ios>
#include <string>

#include "common/storage.h"
#include "lowbit/tensor.h"

namespace lowbit::test {

// One f16 ulp at the magnitude of v (subnormals: the smallest step, 2^-24).
inline double f16_ulp(double v) {
  const int e = std::max(std::ilogb(std::max(std::fabs(v), 1e-30)), -14);
  return std::ldexp(1.0, e - 10);
}

// max |got - want| / max |want| (logits of two engines): both the same length.
inline double max_relative_error(std::span<const float> got, std::span<const float> want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return err / scale;
}

inline std::string describe_element(const std::uint8_t* data, std::size_t i, DType dtype) {
  const std::uint32_t bits = dtype_size(dtype) == 1 ? data[i] : read_bits(data, i, dtype);
  std::string text = "0x";
  static const char* hex = "0123456789abcdef";
  for (int shift = static_cast<int>(8 * dtype_size(dtype)) - 4; shift >= 0; shift -= 4) text += hex[(bits >> shift) & 0xf];
  if (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16) {
    text += " (" + std::to_string(bits_value(dtype, bits)) + ")";
  } else if (dtype == DType::i8) {
    text += " (" + std::to_string(static_cast<std::int8_t>(bits)) + ")";
  }
  return text;
}

// count elements of dtype, laid out in rows of row_len elements (for the message).
inline ::testing::AssertionResult bitwise_equal(const void* got, const void* want, std::size_t count, DType dtype,
                                                std::size_t row_len, const std::string& what) {
  const std::size_t esize = dtype_size(dtype);
  if (std::memcmp(got, want, count * esize) == 0) return ::testing::AssertionSuccess();
  const auto* g = static_cast<const std::uint8_t*>(got);
  const auto* w = static_cast<const std::uint8_t*>(want);
  std::size_t i = 0;
  while (std::memcmp(g + i * esize, w + i * esize, esize) == 0) ++i;
  std::size_t mismatches = 0;
  for (std::size_t j = i; j < count; ++j) mismatches += std::memcmp(g + j * esize, w + j * esize, esize) != 0;
  return ::testing::AssertionFailure() << what << ": " << mismatches << " of " << count << " elements differ; first at row "
                                       << i / row_len << ", column " << i % row_len << ": got "
                                       << describe_element(g, i, dtype) << ", expected " << describe_element(w, i, dtype);
}

// Every byte of data[0, bytes) still equals `byte`.
inline ::testing::AssertionResult all_bytes_are(const void* data, std::size_t bytes, std::uint8_t byte,
                                                const std::string& what) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (p[i] != byte) {
      return ::testing::AssertionFailure() << what << ": byte " << i << " is 0x" << std::hex << int{p[i]}
                                           << ", expected it untouched (0x" << int{byte} << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lowbit::test
