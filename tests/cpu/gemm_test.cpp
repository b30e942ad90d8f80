// The CPU reference of the integer GEMMs (the oracle of the GPU tests) against an
// independent int64 triple loop, on fresh random operands of awkward shapes with
// padded rows; the float epilogue against FP64; and the argument checks of
// include/lowbit/gemm.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/expect_error.h"
#include "common/int_gemm_oracle.h"
#include "common/poison.h"
#include "common/random.h"
#include "common/storage.h"
#include "formats/gemm_epilogue.h"
#include "lowbit/gemm.h"

namespace lowbit::test {
namespace {

struct Shape {
  std::int64_t m, n, k;
};
constexpr Shape kShapes[] = {{1, 1, 1},    {1, 7, 33},  {7, 1, 127}, {33, 127, 7},
                             {127, 33, 1000}, {3, 1000, 64}, {64, 48, 4100}};
constexpr BLayout kLayouts[] = {BLayout::k_by_n, BLayout::n_by_k};

// B's storage shape for a layout: k_by_n [K_storage x N], n_by_k [N x K_storage].
ByteMatrix random_b(Rng& rng, BLayout layout, std::int64_t n, std::int64_t k_storage, std::int64_t pad) {
  return layout == BLayout::k_by_n ? random_bytes(rng, k_storage, n, pad) : random_bytes(rng, n, k_storage, pad);
}

std::vector<std::int32_t> run_i32(bool int4, ByteMatrix& a, ByteMatrix& b, BLayout layout, const Shape& s,
                                  std::int64_t out_pad) {
  const std::int64_t ldc = s.n + out_pad;
  std::vector<std::int32_t> out(static_cast<std::size_t>(s.m * ldc), 0x5a5a5a5a);
  const TensorView ov = TensorView::matrix(out.data(), DType::i32, Device::cpu, s.m, s.n, ldc);
  if (int4) {
    int4_gemm(a.view(DType::u8), b.view(DType::u8), layout, s.k, ov, GemmEpilogue{}, nullptr);
  } else {
    int8_gemm(a.view(DType::i8), b.view(DType::i8), layout, ov, GemmEpilogue{}, nullptr);
  }
  // Padding between rows is untouched.
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = s.n; j < ldc; ++j) EXPECT_EQ(out[static_cast<std::size_t>(i * ldc + j)], 0x5a5a5a5a);
  }
  std::vector<std::int32_t> dense(static_cast<std::size_t>(s.m * s.n));
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) dense[static_cast<std::size_t>(i * s.n + j)] = out[i * ldc + j];
  }
  return dense;
}

void check_exact(bool int4) {
  LOWBIT_TEST_RNG(rng);
  for (const Shape& s : kShapes) {
    for (const BLayout layout : kLayouts) {
      SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k << " " << b_layout_name(layout));
      const std::int64_t k_storage = int4 ? (s.k + 1) / 2 : s.k;
      ByteMatrix a = random_bytes(rng, s.m, k_storage, 3);
      ByteMatrix b = random_b(rng, layout, s.n, k_storage, 5);
      const std::vector<std::int64_t> want = exact_product(a, b, layout, s.m, s.n, s.k, int4);
      const std::vector<std::int32_t> got = run_i32(int4, a, b, layout, s, 2);
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
    }
  }
}

TEST(IntGemmCpu, Int8EqualsExactProduct) { check_exact(false); }
TEST(IntGemmCpu, Int4EqualsExactProductAndIgnoresOddKPadding) { check_exact(true); }

// The largest sums: all -128 operands at K = 131071 reach 2^14 * 131071 < 2^31.
TEST(IntGemmCpu, Int8ExtremeSumsDoNotOverflow) {
  const std::int64_t k = (1 << 17) - 1;
  std::vector<std::int8_t> a(static_cast<std::size_t>(k), -128), b(static_cast<std::size_t>(2 * k), -128);
  b[1] = 127;  // one mixed product in row 0 of B (n_by_k: row 1 starts at index k)
  std::vector<std::int32_t> out(2, 0);
  int8_gemm(TensorView::matrix(a.data(), DType::i8, Device::cpu, 1, k),
            TensorView::matrix(b.data(), DType::i8, Device::cpu, 2, k), BLayout::n_by_k,
            TensorView::matrix(out.data(), DType::i32, Device::cpu, 1, 2), GemmEpilogue{}, nullptr);
  EXPECT_EQ(out[0], 16384 * k - 16384 - 128 * 127);
  EXPECT_EQ(out[1], 16384 * k);
}

// Float outputs: the epilogue applied to the exact sum, bit for bit, and within
// rounding of an FP64 evaluation of (acc * sa * sb) * sc + bias.
TEST(IntGemmCpu, EpilogueToFloatOutputs) {
  LOWBIT_TEST_RNG(rng);
  const Shape s{33, 70, 129};
  ByteMatrix a = random_bytes(rng, s.m, s.k, 0);
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f), signed_unit(-1.0f, 1.0f);
  for (const BLayout layout : kLayouts) {
    ByteMatrix b = random_b(rng, layout, s.n, s.k, 1);
    const std::vector<std::int64_t> acc = exact_product(a, b, layout, s.m, s.n, s.k, false);
    for (const DType dtype : kFloatDTypes) {
      for (int form = 0; form < 4; ++form) {  // scalar/vector scales, bias, relu
        SCOPED_TRACE(::testing::Message() << b_layout_name(layout) << " " << dtype_name(dtype) << " form " << form);
        std::vector<float> sa(form % 2 ? s.m : 1), sb(form % 2 ? 1 : s.n), bias(s.n);
        for (float& v : sa) v = scale(rng);
        for (float& v : sb) v = scale(rng);
        for (float& v : bias) v = 50.0f * signed_unit(rng);
        GemmEpilogue e;
        e.scale_a = TensorView::vector(sa.data(), DType::f32, Device::cpu, static_cast<std::int64_t>(sa.size()));
        e.scale_b = TensorView::vector(sb.data(), DType::f32, Device::cpu, static_cast<std::int64_t>(sb.size()));
        e.scale_c = form >= 2 ? 0.75f : 1.0f;
        if (form >= 1) e.bias = TensorView::vector(bias.data(), DType::f32, Device::cpu, s.n);
        e.relu = form == 3;
        std::vector<std::uint8_t> out(static_cast<std::size_t>(s.m * s.n) * dtype_size(dtype), kFloatPoison);
        int8_gemm(a.view(DType::i8), b.view(DType::i8), layout,
                  TensorView::matrix(out.data(), dtype, Device::cpu, s.m, s.n), e, nullptr);
        for (std::int64_t i = 0; i < s.m; ++i) {
          for (std::int64_t j = 0; j < s.n; ++j) {
            const std::size_t idx = static_cast<std::size_t>(i * s.n + j);
            const float a_scale = sa[sa.size() == 1 ? 0 : i], b_scale = sb[sb.size() == 1 ? 0 : j];
            const float bias_j = form >= 1 ? bias[j] : 0.0f;
            const float want = formats::apply_epilogue(static_cast<std::int32_t>(acc[idx]), a_scale, b_scale,
                                                       e.scale_c, bias_j, e.relu);
            const float got = read_value(out.data(), idx, dtype);
            ASSERT_EQ(storage_bits(dtype, want), read_bits(out.data(), idx, dtype)) << i << "," << j;
            double exact = static_cast<double>(acc[idx]) * a_scale * b_scale * e.scale_c + bias_j;
            if (e.relu && exact < 0) exact = 0;
            // Four f32 roundings, then one to the output type (f16 subnormals: 2^-25 absolute).
            const double type_eps = dtype == DType::f32 ? 0x1p-24 : dtype == DType::f16 ? 0x1p-11 : 0x1p-8;
            const double tol = (4 * 0x1p-24 + type_eps) * (std::fabs(exact) + std::fabs(bias_j)) +
                               (dtype == DType::f16 ? 0x1p-25 : 0x1p-149);
            ASSERT_LE(std::fabs(got - exact), tol) << i << "," << j;
          }
        }
      }
    }
  }
}

// ---- bad input ----

struct Operands {
  std::vector<std::int8_t> a, b;
  std::vector<std::int32_t> out;
  std::vector<float> out_f, scales;
  Operands() : a(6 * 8), b(8 * 5), out(6 * 5), out_f(6 * 5), scales(16) {}
  TensorView av() { return TensorView::matrix(a.data(), DType::i8, Device::cpu, 6, 8); }
  TensorView bv() { return TensorView::matrix(b.data(), DType::i8, Device::cpu, 8, 5); }
  TensorView ov() { return TensorView::matrix(out.data(), DType::i32, Device::cpu, 6, 5); }
  TensorView of() { return TensorView::matrix(out_f.data(), DType::f32, Device::cpu, 6, 5); }
};

TEST(IntGemmCpu, BadInputIsNamed) {
  Operands o;
  const GemmEpilogue none;
  auto run = [&](const TensorView& a, const TensorView& b, BLayout layout, const TensorView& out,
                 const GemmEpilogue& e) { return [=] { int8_gemm(a, b, layout, out, e, nullptr); }; };
  EXPECT_TRUE(throws_lowbit_error(run(o.av(), o.bv(), BLayout::n_by_k, o.ov(), none), "b: n_by_k layout needs 8 columns"));
  EXPECT_TRUE(throws_lowbit_error(
      run(o.av(), TensorView::matrix(o.b.data(), DType::i8, Device::cpu, 7, 5), BLayout::k_by_n, o.ov(), none),
      "b: k_by_n layout needs 8 rows (K = 8)"));
  EXPECT_TRUE(throws_lowbit_error(
      run(TensorView::matrix(o.a.data(), DType::u8, Device::cpu, 6, 8), o.bv(), BLayout::k_by_n, o.ov(), none),
      "a: expected dtype i8, got u8"));
  EXPECT_TRUE(throws_lowbit_error(
      run(TensorView::matrix(nullptr, DType::i8, Device::cpu, 6, 8), o.bv(), BLayout::k_by_n, o.ov(), none),
      "a: data pointer is null"));
  EXPECT_TRUE(throws_lowbit_error(
      run(o.av(), o.bv(), BLayout::k_by_n, TensorView::matrix(o.out.data(), DType::i32, Device::cpu, 5, 5), none),
      "out: expected shape [6, 5]"));
  EXPECT_TRUE(throws_lowbit_error(
      run(o.av(), o.bv(), BLayout::k_by_n, TensorView::matrix(o.out.data(), DType::u8, Device::cpu, 6, 5), none),
      "out: expected dtype i32, f32, f16 or bf16"));
  EXPECT_TRUE(throws_lowbit_error(
      run(TensorView::matrix(o.a.data(), DType::i8, Device::cpu, 0, 8), o.bv(), BLayout::k_by_n, o.ov(), none),
      "M: expected 1 <= M"));
  EXPECT_TRUE(throws_lowbit_error(run(o.av(), o.bv(), static_cast<BLayout>(7), o.ov(), none), "b_layout: unknown"));

  GemmEpilogue relu;
  relu.relu = true;
  EXPECT_TRUE(throws_lowbit_error(run(o.av(), o.bv(), BLayout::k_by_n, o.ov(), relu), "epilogue: an i32 output"));
  GemmEpilogue bad_a;
  bad_a.scale_a = TensorView::vector(o.scales.data(), DType::f32, Device::cpu, 4);
  EXPECT_TRUE(throws_lowbit_error(run(o.av(), o.bv(), BLayout::k_by_n, o.of(), bad_a),
                                  "epilogue.scale_a: expected 1 or 6 elements, got 4"));
  GemmEpilogue bad_bias;
  bad_bias.bias = TensorView::vector(o.scales.data(), DType::f32, Device::cpu, 1);
  EXPECT_TRUE(throws_lowbit_error(run(o.av(), o.bv(), BLayout::k_by_n, o.of(), bad_bias),
                                  "epilogue.bias: expected 5 elements, got 1"));
  GemmEpilogue nan_c;
  nan_c.scale_c = std::nanf("");
  EXPECT_TRUE(throws_lowbit_error(run(o.av(), o.bv(), BLayout::k_by_n, o.of(), nan_c), "epilogue.scale_c: expected a finite"));
  GemmEpilogue aliased;
  aliased.bias = TensorView::vector(o.out_f.data(), DType::f32, Device::cpu, 5);
  EXPECT_TRUE(throws_lowbit_error(run(o.av(), o.bv(), BLayout::k_by_n, o.of(), aliased), "overlaps epilogue.bias"));
  // out aliasing an operand
  EXPECT_TRUE(throws_lowbit_error(
      run(o.av(), o.bv(), BLayout::k_by_n, TensorView::matrix(o.a.data(), DType::i32, Device::cpu, 6, 5), none),
      "out: overlaps a"));
  // K too large for exact INT32 accumulation
  EXPECT_TRUE(throws_lowbit_error(
      run(TensorView::matrix(o.a.data(), DType::i8, Device::cpu, 1, 1 << 17), o.bv(), BLayout::k_by_n, o.ov(), none),
      "K: 131072 is too large"));
}

TEST(IntGemmCpu, Int4BadInputIsNamed) {
  std::vector<std::uint8_t> a(4 * 3), b(3 * 5);
  std::vector<std::int32_t> out(4 * 5);
  const TensorView av = TensorView::matrix(a.data(), DType::u8, Device::cpu, 4, 3);
  const TensorView bv = TensorView::matrix(b.data(), DType::u8, Device::cpu, 3, 5);
  const TensorView ov = TensorView::matrix(out.data(), DType::i32, Device::cpu, 4, 5);
  EXPECT_TRUE(throws_lowbit_error([&] { int4_gemm(av, bv, BLayout::k_by_n, 8, ov, GemmEpilogue{}, nullptr); },
                                  "a: expected shape [4, 4]"));
  EXPECT_TRUE(throws_lowbit_error([&] { int4_gemm(av, bv, BLayout::k_by_n, 0, ov, GemmEpilogue{}, nullptr); },
                                  "K: expected 1 <= K"));
  EXPECT_NO_THROW(int4_gemm(av, bv, BLayout::k_by_n, 5, ov, GemmEpilogue{}, nullptr));
}

}  // namespace
}  // namespace lowbit::test
