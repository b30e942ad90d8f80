// GGUF Q4_1 / Q4_0 / Q8_0 weights repacked for the weight-only GEMM: every packed
// code, scale and min read back through the packed layout's accessors equals the
// ggml block's, and the weight-only CPU reference on the repacked weights equals an
// FP64 product with ggml's weights (rounded to f16, the weight-only definition). Q4_K
// as Q4_1 groups: its codes, and its factors rounded once to f16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/compare.h"
#include "common/expect_error.h"
#include "common/ggml_matrix.h"
#include "common/gguf_writer.h"
#include "common/random.h"
#include "cpu/weight_only.h"
#include "engine/gguf/ggml_codes.h"
#include "engine/gguf/k_scales.h"
#include "engine/gguf/repack.h"
#include "formats/float16.h"
#include "formats/weight_pack.h"

namespace lowbit::engine {
namespace {

using test::f16_ulp;

namespace gt = test::ggml_id;
using formats::Half;

struct Case {
  std::uint32_t type;
  int block_bytes;
};

// Random blocks: finite f16 d and m in a modest range, random codes.
std::vector<std::uint8_t> random_blocks(test::Rng& rng, const Case& c, std::int64_t blocks) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(blocks * c.block_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f), min(-0.3f, 0.3f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::uint8_t* block = bytes.data() + b * c.block_bytes;
    for (int i = 0; i < c.block_bytes; ++i) block[i] = static_cast<std::uint8_t>(byte(rng));
    const std::uint16_t d = formats::from_float<Half>(scale(rng)).bits;
    std::memcpy(block, &d, 2);
    if (c.type == gt::q4_1) {
      const std::uint16_t m = formats::from_float<Half>(min(rng)).bits;
      std::memcpy(block + 2, &m, 2);
    }
  }
  return bytes;
}

// ggml's definition of element j of a row: (code, d bits, m bits).
struct GgmlElement {
  int q;  // Q4: 0..15; Q8: -128..127
  std::uint16_t d, m;
};
GgmlElement ggml_element(const std::vector<std::uint8_t>& bytes, const Case& c, std::int64_t row_blocks,
                         std::int64_t r, std::int64_t j) {
  const std::uint8_t* block = bytes.data() + (r * row_blocks + j / 32) * c.block_bytes;
  GgmlElement e{};
  std::memcpy(&e.d, block, 2);
  const int i = static_cast<int>(j % 32);
  if (c.type == gt::q8_0) {
    e.q = static_cast<std::int8_t>(block[2 + i]);
    return e;
  }
  const std::uint8_t* qs = block + (c.type == gt::q4_1 ? 4 : 2);
  if (c.type == gt::q4_1) std::memcpy(&e.m, block + 2, 2);
  e.q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
  return e;
}

TEST(GgmlRepack, EveryCodeScaleAndMinLandsWhereTheLayoutSays) {
  LOWBIT_TEST_RNG(rng);
  for (const Case c : {Case{gt::q4_1, 20}, Case{gt::q4_0, 18}, Case{gt::q8_0, 34}}) {
    for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{1, 32}, {13, 96}, {8, 256}, {17, 160}}) {
      SCOPED_TRACE(testing::Message() << "type " << c.type << " N " << n << " K " << k);
      const std::vector<std::uint8_t> bytes = random_blocks(rng, c, n * k / 32);
      test::GgufWriter w;
      w.add_tensor("w", {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n)}, c.type, bytes);
      const GgufFile file = GgufFile::from_bytes(w.bytes());
      HostPackedWeights packed = repack_ggml_weight(*file.find_tensor("w"));
      ASSERT_EQ(packed.spec.bits, c.type == gt::q8_0 ? 8 : 4);
      ASSERT_EQ(packed.spec.zero_point, c.type == gt::q4_1);
      ASSERT_EQ(packed.spec.group_size, 32);
      const formats::WeightPackLayout layout =
          formats::make_weight_pack_layout(packed.spec.bits, packed.spec.zero_point, 32, n, k);
      for (std::int64_t r = 0; r < n; ++r) {
        for (std::int64_t j = 0; j < k; ++j) {
          const GgmlElement want = ggml_element(bytes, c, k / 32, r, j);
          const formats::WeightPackLayout::CodePlace place = layout.code_place(r, j);
          const std::uint8_t byte = packed.codes[static_cast<std::size_t>(place.byte)];
          const int stored = packed.spec.bits == 8 ? byte : (byte >> place.shift) & 15;
          const int q = formats::weight_code_value(layout, stored);
          ASSERT_EQ(q, c.type == gt::q4_0 ? want.q - 8 : want.q) << "row " << r << " k " << j;
          const auto s = static_cast<std::size_t>(layout.scale_index(r, layout.group_of(j)));
          ASSERT_EQ(packed.scales[s], want.d) << "row " << r << " k " << j;
          if (c.type == gt::q4_1) {
            ASSERT_EQ(packed.mins[s], want.m) << "row " << r << " k " << j;
          }
        }
      }
    }
  }
}

TEST(GgmlRepack, WeightOnlyReferenceOnRepackedQ4_1MatchesFp64) {
  LOWBIT_TEST_RNG(rng);
  const Case c{gt::q4_1, 20};
  const std::int64_t n = 24, k = 192, m = 3;
  const std::vector<std::uint8_t> bytes = random_blocks(rng, c, n * k / 32);
  test::GgufWriter w;
  w.add_tensor("w", {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n)}, c.type, bytes);
  const GgufFile file = GgufFile::from_bytes(w.bytes());
  HostPackedWeights packed = repack_ggml_weight(*file.find_tensor("w"));

  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k)), out(static_cast<std::size_t>(m * n));
  for (auto& v : x) v = formats::from_float<Half>(value(rng)).bits;
  cpu::weight_only_gemm(TensorView::matrix(x.data(), DType::f16, Device::cpu, m, k), packed.view(), TensorView{},
                        TensorView::matrix(out.data(), DType::f16, Device::cpu, m, n));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t r = 0; r < n; ++r) {
      double sum = 0, magnitude = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        const GgmlElement e = ggml_element(bytes, c, k / 32, r, j);
        // ggml's value q * d + m, rounded once to f16: the weight-only definition
        // (tested against an independent nearest-even oracle in weight_only_test).
        const double wv = formats::to_float(formats::dequant_weight<Half>(e.q, Half{e.d}, Half{e.m}));
        const double xv = formats::to_float(Half{x[static_cast<std::size_t>(i * k + j)]});
        sum += xv * wv;
        magnitude += std::fabs(xv * wv);
      }
      const double got = formats::to_float(Half{out[static_cast<std::size_t>(i * n + r)]});
      // FP32 accumulation of K terms, then one f16 rounding.
      const double tolerance = (k + 8) * std::ldexp(magnitude, -24) + std::ldexp(std::fabs(sum), -10);
      ASSERT_NEAR(got, sum, tolerance) << "row " << i << " col " << r;
    }
  }
}

// Gate and up in alternating tiles of 8 rows (RowOrder::swiglu_tiles): packed row 16q +
// 8p + i is row 8q + i of part p, so the product's column 16q + 8p + i is, bit for bit,
// the stacked product's column p f + 8q + i; a plain and a K-quant type.
TEST(GgmlRepack, SwigluTilesAlternateGateAndUpEightRowsAtATime) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t f = 24, k = 256, m = 3;
  for (const auto& [type, k_quants] : {std::pair{gt::q4_1, KQuantPacking::blocks}, {gt::q4_k, KQuantPacking::blocks},
                                        {gt::q4_k, KQuantPacking::groups}}) {
    SCOPED_TRACE(testing::Message() << "type " << type << (k_quants == KQuantPacking::groups ? " as groups" : ""));
    test::GgufWriter w;
    for (const char* name : {"gate", "up"}) {
      w.add_tensor(name, {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(f)}, type,
                   test::random_ggml_blocks(type, f, k, rng()));
    }
    const GgufFile file = GgufFile::from_bytes(w.bytes());
    const GgufTensor* parts[] = {file.find_tensor("gate"), file.find_tensor("up")};
    HostPackedWeights stacked = repack_ggml_weights(parts, RowOrder::stacked, k_quants);
    HostPackedWeights tiles = repack_ggml_weights(parts, RowOrder::swiglu_tiles, k_quants);
    ASSERT_EQ(tiles.n, 2 * f);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k));
    for (auto& v : x) v = formats::from_float<Half>(value(rng)).bits;
    std::vector<std::uint16_t> want(static_cast<std::size_t>(m * 2 * f)), got(want.size());
    const TensorView xv = TensorView::matrix(x.data(), DType::f16, Device::cpu, m, k);
    cpu::weight_only_gemm(xv, stacked.view(), TensorView{},
                          TensorView::matrix(want.data(), DType::f16, Device::cpu, m, 2 * f));
    cpu::weight_only_gemm(xv, tiles.view(), TensorView{}, TensorView::matrix(got.data(), DType::f16, Device::cpu, m, 2 * f));
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t col = 0; col < 2 * f; ++col) {
        const std::int64_t q = col / 16, part = col / 8 % 2, r = col % 8;
        ASSERT_EQ(got[static_cast<std::size_t>(i * 2 * f + col)],
                  want[static_cast<std::size_t>(i * 2 * f + part * f + 8 * q + r)])
            << "row " << i << " column " << col;
      }
    }
  }
  // Two parts of equal rows, a multiple of 8, only.
  test::GgufWriter w;
  w.add_tensor("gate", {256, 20}, gt::q4_1, test::random_ggml_blocks(gt::q4_1, 20, 256, 1));
  w.add_tensor("up", {256, 20}, gt::q4_1, test::random_ggml_blocks(gt::q4_1, 20, 256, 2));
  const GgufFile file = GgufFile::from_bytes(w.bytes());
  const GgufTensor* parts[] = {file.find_tensor("gate"), file.find_tensor("up")};
  EXPECT_LOWBIT_ERROR(repack_ggml_weights(parts, RowOrder::swiglu_tiles), "a multiple of 8");
}

// Q4_K as Q4_1 groups (KQuantPacking::groups): every code is ggml's, every group's scale
// and min are f16(d sc) and f16(-dmin mn) of its sub-block, so each weight q s + m (one
// rounding) is within its roundings of ggml's value. A tensor whose
// factors leave f16's normal range keeps the block form.
TEST(GgmlRepack, Q4KAsGroupsKeepsCodesAndRoundsEachFactorOnce) {
  LOWBIT_TEST_RNG(rng);
  for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{1, 256}, {13, 512}, {17, 768}}) {
    SCOPED_TRACE(testing::Message() << "N " << n << " K " << k);
    const std::vector<std::uint8_t> bytes = test::random_ggml_blocks(gt::q4_k, n, k, rng());
    const test::GgmlMatrix m = test::ggml_matrix(gt::q4_k, n, k, bytes);
    const std::vector<float> ggml = m.values();
    HostPackedWeights packed = repack_ggml_weight(m.tensor(), KQuantPacking::groups);
    ASSERT_EQ(packed.spec.blocks, WeightBlocks::none);
    ASSERT_EQ(packed.spec.bits, 4);
    ASSERT_EQ(packed.spec.group_size, 32);
    ASSERT_TRUE(packed.spec.zero_point);
    const formats::WeightPackLayout layout = formats::make_weight_pack_layout(4, true, 32, n, k);
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < k; ++j) {
        const std::uint8_t* block = bytes.data() + (r * k + j) / 256 * 144;
        std::uint8_t q[256];
        q4_k_codes(block, false, q);
        const KScaleMin sm = unpack_k_scale_min(block + kQ4kScales, static_cast<int>(j % 256 / 32));
        Half d{}, dmin{};
        std::memcpy(&d.bits, block + kQ4kD, 2);
        std::memcpy(&dmin.bits, block + kQ4kDmin, 2);
        const formats::WeightPackLayout::CodePlace place = layout.code_place(r, j);
        const int code = formats::weight_code_value(layout, (packed.codes[static_cast<std::size_t>(place.byte)] >> place.shift) & 15);
        ASSERT_EQ(code, q[j % 256]) << "row " << r << " k " << j;
        const auto g = static_cast<std::size_t>(layout.scale_index(r, layout.group_of(j)));
        const Half s{packed.scales[g]}, mn{packed.mins[g]};
        ASSERT_EQ(s.bits, formats::from_float<Half>(formats::to_float(d) * sm.scale).bits) << "row " << r << " k " << j;
        ASSERT_EQ(mn.bits, formats::from_float<Half>(-(formats::to_float(dmin) * sm.min)).bits) << "row " << r << " k " << j;
        // The weight the kernels multiply against ggml's: the two factors' roundings
        // (half an ulp each, the scale's times q) and the weight's own.
        const double w = formats::to_float(formats::dequant_weight<Half>(code, s, mn));
        const double want = ggml[static_cast<std::size_t>(r * k + j)];
        const double bound = code * 0.5 * f16_ulp(formats::to_float(s)) + 0.5 * f16_ulp(formats::to_float(mn)) +
                             0.5 * f16_ulp(w);
        ASSERT_LE(std::fabs(w - want), bound) << "row " << r << " k " << j;
      }
    }
  }
  // A super-block whose d sc would be an f16 subnormal, or overflow: the block form.
  for (const float d : {1e-6f, 60000.0f}) {
    SCOPED_TRACE(testing::Message() << "d " << d);
    std::vector<std::uint8_t> bytes = test::random_ggml_blocks(gt::q4_k, 8, 256, rng());
    const std::uint16_t bits = formats::from_float<Half>(d).bits;
    std::memcpy(bytes.data() + 144 * 3 + kQ4kD, &bits, 2);
    const test::GgmlMatrix m = test::ggml_matrix(gt::q4_k, 8, 256, bytes);
    EXPECT_EQ(repack_ggml_weight(m.tensor(), KQuantPacking::groups).spec.blocks, WeightBlocks::q4_k);
  }
}

TEST(GgmlRepack, RefusesTypesWithoutAWeightOnlyForm) {
  test::GgufWriter w;
  w.add_tensor("norm", {64}, gt::f32, std::vector<std::uint8_t>(256, 0));
  w.add_tensor("f16w", {32, 2}, gt::f16, std::vector<std::uint8_t>(128, 0));
  w.add_tensor("vec", {32}, gt::q4_1, std::vector<std::uint8_t>(20, 0));
  const GgufFile file = GgufFile::from_bytes(w.bytes());
  EXPECT_LOWBIT_ERROR(repack_ggml_weight(*file.find_tensor("norm")), "tensor 'norm': type F32 has no weight-only form");
  EXPECT_LOWBIT_ERROR(repack_ggml_weight(*file.find_tensor("f16w")), "type F16 has no weight-only form");
  EXPECT_LOWBIT_ERROR(repack_ggml_weight(*file.find_tensor("vec")), "tensor 'vec': expected a 2-D weight");
}

}  // namespace
}  // namespace lowbit::engine
