#include "cpu/gemm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/dtype_dispatch.h"
#include "cpu/parallel.h"
#include "formats/float16.h"
#include "formats/gemm_epilogue.h"
#include "formats/int4.h"

namespace lowbit::cpu {
namespace {

// One operand, widened to int8 values with a uniform (row, col) access: a plain i8
// matrix, or packed signed INT4 unpacked on the fly.
struct Operand {
  const std::uint8_t* data;
  std::int64_t ld;  // row stride in bytes
  bool int4;

  // Element `index` of row `row` (index counts values, not bytes).
  int at(std::int64_t row, std::int64_t index) const {
    const std::uint8_t* r = data + row * ld;
    if (!int4) return static_cast<std::int8_t>(r[index]);
    const std::uint8_t byte = r[index / 2];
    return formats::int4_to_signed(index % 2 ? formats::int4_high(byte) : formats::int4_low(byte));
  }
};

// Row `row` of an operand unpacked into `values` (length `count`).
void unpack_row(const Operand& op, std::int64_t row, std::int64_t count, std::int32_t* values) {
  for (std::int64_t i = 0; i < count; ++i) values[i] = op.at(row, i);
}

float scale_at(const TensorView& scale, std::int64_t index) {
  if (!scale.data) return 1.0f;
  return scale.ptr<const float>()[scale.numel() == 1 ? 0 : index];
}

template <class Out>
void store_row(const std::int32_t* acc, std::int64_t m, std::int64_t n_cols, const TensorView& out,
               const GemmEpilogue& epilogue) {
  Out* row = out.ptr<Out>() + m * out.row_stride();
  const float sa = scale_at(epilogue.scale_a, m);
  const float* bias = epilogue.bias.ptr<const float>();
  for (std::int64_t n = 0; n < n_cols; ++n) {
    const float v = formats::apply_epilogue(acc[n], sa, scale_at(epilogue.scale_b, n), epilogue.scale_c,
                                            bias ? bias[n] : 0.0f, epilogue.relu);
    row[n] = formats::from_float<Out>(v);
  }
}

// out = A @ B with B given as rows of K (n_by_k) or rows of N (k_by_n).
void gemm(const Operand& a, const Operand& b, BLayout b_layout, std::int64_t m_rows, std::int64_t n_cols,
          std::int64_t k, const TensorView& out, const GemmEpilogue& epilogue) {
  // B unpacked once to int32 in its own layout: k_by_n as [K x N], n_by_k as [N x K].
  const std::int64_t b_rows = b_layout == BLayout::k_by_n ? k : n_cols;
  const std::int64_t b_cols = b_layout == BLayout::k_by_n ? n_cols : k;
  std::vector<std::int32_t> b_values(static_cast<std::size_t>(b_rows * b_cols));
#pragma omp parallel for schedule(static) if (parallel_worth(b_rows, 1.0 * b_cols))  // ~1 ns a value
  for (std::int64_t r = 0; r < b_rows; ++r) unpack_row(b, r, b_cols, b_values.data() + r * b_cols);

  // A row: ~1 ns a value of A unpacked, ~0.1 ns a multiply-add, ~2 ns an output stored.
#pragma omp parallel if (parallel_worth(m_rows, 1.0 * k + 0.1 * k * n_cols + 2.0 * n_cols))
  {
    std::vector<std::int32_t> a_row(static_cast<std::size_t>(k));
    std::vector<std::int32_t> acc(static_cast<std::size_t>(n_cols));
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t m = 0; m < m_rows; ++m) {
      unpack_row(a, m, k, a_row.data());
      if (b_layout == BLayout::k_by_n) {
        std::fill(acc.begin(), acc.end(), 0);
        for (std::int64_t kk = 0; kk < k; ++kk) {
          const std::int32_t av = a_row[kk];
          const std::int32_t* b_row = b_values.data() + kk * n_cols;
          for (std::int64_t n = 0; n < n_cols; ++n) acc[n] += av * b_row[n];
        }
      } else {
        for (std::int64_t n = 0; n < n_cols; ++n) {
          const std::int32_t* b_row = b_values.data() + n * k;
          std::int32_t sum = 0;
          for (std::int64_t kk = 0; kk < k; ++kk) sum += a_row[kk] * b_row[kk];
          acc[n] = sum;
        }
      }
      if (out.dtype == DType::i32) {
        std::int32_t* row = out.ptr<std::int32_t>() + m * out.row_stride();
        std::copy(acc.begin(), acc.end(), row);
      } else {
        visit_float_dtype(out.dtype, "out", [&](auto tag) {
          store_row<decltype(tag)>(acc.data(), m, n_cols, out, epilogue);
        });
      }
    }
  }
}

}  // namespace

void int8_gemm(const TensorView& a, const TensorView& b, BLayout b_layout, const TensorView& out,
               const GemmEpilogue& epilogue) {
  const std::int64_t k = a.cols();
  gemm(Operand{a.ptr<const std::uint8_t>(), a.row_stride(), false},
       Operand{b.ptr<const std::uint8_t>(), b.row_stride(), false}, b_layout, out.rows(), out.cols(), k, out,
       epilogue);
}

void int4_gemm(const TensorView& a_packed, const TensorView& b_packed, BLayout b_layout, std::int64_t k,
               const TensorView& out, const GemmEpilogue& epilogue) {
  if (b_layout == BLayout::k_by_n) {
    // Packed along K: byte (j, n) holds B[2j, n] (low) and B[2j+1, n] (high). Unpack
    // to an int8 [K x N] matrix, then take the int8 path.
    const std::int64_t n_cols = out.cols();
    std::vector<std::int8_t> b_unpacked(static_cast<std::size_t>(k * n_cols));
    const auto* bp = b_packed.ptr<const std::uint8_t>();
    for (std::int64_t kk = 0; kk < k; ++kk) {
      for (std::int64_t n = 0; n < n_cols; ++n) {
        const std::uint8_t byte = bp[(kk / 2) * b_packed.row_stride() + n];
        b_unpacked[kk * n_cols + n] = static_cast<std::int8_t>(
            formats::int4_to_signed(kk % 2 ? formats::int4_high(byte) : formats::int4_low(byte)));
      }
    }
    gemm(Operand{a_packed.ptr<const std::uint8_t>(), a_packed.row_stride(), true},
         Operand{reinterpret_cast<const std::uint8_t*>(b_unpacked.data()), n_cols, false}, b_layout, out.rows(),
         n_cols, k, out, epilogue);
    return;
  }
  gemm(Operand{a_packed.ptr<const std::uint8_t>(), a_packed.row_stride(), true},
       Operand{b_packed.ptr<const std::uint8_t>(), b_packed.row_stride(), true}, b_layout, out.rows(), out.cols(),
       k, out, epilogue);
}

}  // namespace lowbit::cpu
