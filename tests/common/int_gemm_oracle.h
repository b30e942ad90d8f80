// An independent oracle for the integer GEMMs: random operands with row padding,
// and exact sums in int64 from the plain triple loop (no shared code with the
// library's CPU reference, which this checks).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/random.h"
#include "lowbit/gemm.h"

namespace lowbit::test {

// A row-major matrix of `rows` x `cols` storage elements (bytes) with row stride `ld`.
struct ByteMatrix {
  std::int64_t rows = 0, cols = 0, ld = 0;
  std::vector<std::uint8_t> bytes;
  TensorView view(DType dtype, Device device = Device::cpu) {
    return TensorView::matrix(bytes.data(), dtype, device, rows, cols, ld);
  }
};

inline ByteMatrix random_bytes(Rng& rng, std::int64_t rows, std::int64_t cols, std::int64_t pad) {
  ByteMatrix m{rows, cols, cols + pad, std::vector<std::uint8_t>(static_cast<std::size_t>(rows * (cols + pad)))};
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : m.bytes) b = static_cast<std::uint8_t>(byte(rng));
  return m;
}

// Value of logical element (r, i) of an int8 matrix or of a matrix packed two signed
// nibbles per byte along its rows (low nibble first).
inline int int8_at(const ByteMatrix& m, std::int64_t r, std::int64_t i) {
  return static_cast<std::int8_t>(m.bytes[static_cast<std::size_t>(r * m.ld + i)]);
}
inline int int4_along_row(const ByteMatrix& m, std::int64_t r, std::int64_t i) {
  const int byte = m.bytes[static_cast<std::size_t>(r * m.ld + i / 2)];
  const int nibble = i % 2 ? byte >> 4 : byte & 15;
  return nibble >= 8 ? nibble - 16 : nibble;
}
// k_by_n packed int4: byte (k/2, n), low nibble for even k.
inline int int4_along_col(const ByteMatrix& m, std::int64_t k, std::int64_t n) {
  const int byte = m.bytes[static_cast<std::size_t>((k / 2) * m.ld + n)];
  const int nibble = k % 2 ? byte >> 4 : byte & 15;
  return nibble >= 8 ? nibble - 16 : nibble;
}

// Exact C = A @ B in int64 for int8 (int4 == false) or packed int4 operands.
inline std::vector<std::int64_t> exact_product(const ByteMatrix& a, const ByteMatrix& b, BLayout layout,
                                               std::int64_t m, std::int64_t n, std::int64_t k, bool int4) {
  std::vector<std::int64_t> c(static_cast<std::size_t>(m * n), 0);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      std::int64_t sum = 0;
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const int av = int4 ? int4_along_row(a, i, kk) : int8_at(a, i, kk);
        int bv;
        if (layout == BLayout::n_by_k) {
          bv = int4 ? int4_along_row(b, j, kk) : int8_at(b, j, kk);
        } else {
          bv = int4 ? int4_along_col(b, kk, j) : int8_at(b, kk, j);
        }
        sum += static_cast<std::int64_t>(av) * bv;
      }
      c[static_cast<std::size_t>(i * n + j)] = sum;
    }
  }
  return c;
}

}  // namespace lowbit::test
