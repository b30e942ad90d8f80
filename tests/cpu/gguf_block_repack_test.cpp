// GGUF Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q3_K and Q2_K weights repacked into the weight-only
// block forms (formats/weight_pack.h): every weight read back through the packed layout
// equals ggml's value (engine/gguf/dequant, checked against gguf's NumPy decoder
// elsewhere) rounded to f16, the padding is exactly 0, the CPU reference on the repacked
// weights equals an FP64 product with those weights, and a bad block-form spec gets an
// error naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/compare.h"
#include "common/expect_error.h"
#include "common/ggml_matrix.h"
#include "common/random.h"
#include "cpu/weight_only.h"
#include "engine/gguf/repack.h"
#include "formats/float16.h"
#include "formats/weight_pack.h"
#include "lowbit/weight_only.h"

namespace lowbit::engine {
namespace {

using test::f16_ulp;

namespace gt = test::ggml_id;
using formats::Half;

struct Case {
  std::uint32_t type;
  WeightBlocks blocks;
  std::int64_t block;  // K granularity
};
const Case kCases[] = {{gt::q5_0, WeightBlocks::q5_0, 32},
                       {gt::q5_1, WeightBlocks::q5_1, 32},
                       {gt::q4_k, WeightBlocks::q4_k, 256},
                       {gt::q5_k, WeightBlocks::q5_k, 256},
                       {gt::q6_k, WeightBlocks::q6_k, 256},
                       {gt::q3_k, WeightBlocks::q3_k, 256},
                       {gt::q2_k, WeightBlocks::q2_k, 256}};

TEST(GgmlBlockRepack, EveryWeightIsGgmlsValueRoundedToF16) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : kCases) {
    for (const std::int64_t n : {1, 13, 8, 17}) {
      for (const std::int64_t blocks : {1, 3, 5}) {
        const std::int64_t k = blocks * c.block;
        SCOPED_TRACE(testing::Message() << weight_blocks_name(c.blocks) << " N " << n << " K " << k);
        const test::GgmlMatrix m = test::random_ggml_matrix(c.type, n, k, rng());
        const std::vector<float> want = m.values();
        const HostPackedWeights packed = repack_ggml_weight(m.tensor());
        ASSERT_EQ(packed.spec.blocks, c.blocks);
        ASSERT_TRUE(packed.scales.empty() && packed.mins.empty());
        const WeightOnlySpec spec = weight_blocks_spec(c.blocks);
        ASSERT_EQ(packed.spec.bits, spec.bits);
        ASSERT_EQ(packed.spec.group_size, spec.group_size);
        const formats::WeightPackLayout layout =
            formats::make_block_pack_layout(static_cast<formats::WeightBlocks>(c.blocks), n, k);
        ASSERT_EQ(static_cast<std::int64_t>(packed.codes.size()), layout.code_bytes());
        for (std::int64_t r = 0; r < layout.n_tiles * 8; ++r) {
          for (std::int64_t j = 0; j < layout.k_steps * 128; ++j) {
            const double got = formats::to_float(formats::block_weight_at(layout, packed.codes.data(), r, j));
            if (r >= n || j >= k) {
              ASSERT_EQ(got, 0.0) << "padding at row " << r << " k " << j;
              continue;
            }
            const float ggml = want[static_cast<std::size_t>(r * k + j)];
            const double rounded = formats::to_float(formats::from_float<Half>(ggml));
            if (c.blocks == WeightBlocks::q5_1) {
              // One rounding of the exact q * d + m (lowbit's Q4_1 / Q5_1 definition);
              // ggml's f32 value took a rounding before: at most one f16 ulp apart.
              ASSERT_LE(std::fabs(got - rounded), f16_ulp(ggml)) << "row " << r << " k " << j;
            } else {
              ASSERT_EQ(got, rounded) << "row " << r << " k " << j << " ggml " << ggml;
            }
          }
        }
      }
    }
  }
}

// The kernels' reading of a lane's low plane (formats::block_pair_*: the words and shifts
// common.cuh's code_pair_1024 takes) gives the low bits of the codes block_code_at reads,
// for every k pair of every lane: the 2-bit fields as much as the nibbles; and Q6_K's six
// words (formats::six_bit_piece, six_bit_word_offset) give its whole codes.
TEST(GgmlBlockRepack, KernelsPairViewReadsTheLowPlane) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : kCases) {
    SCOPED_TRACE(weight_blocks_name(c.blocks));
    const auto form = static_cast<formats::WeightBlocks>(c.blocks);
    const std::int64_t n = 16, k = 2 * 256;
    const test::GgmlMatrix m = test::random_ggml_matrix(c.type, n, k, rng());
    const HostPackedWeights packed = repack_ggml_weight(m.tensor());
    const formats::WeightPackLayout layout = formats::make_block_pack_layout(form, n, k);
    const bool six_bit = formats::block_low_bits(form) == 6;
    const unsigned low_mask = (1u << formats::block_low_bits(form)) - 1;
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < k; j += 32) {  // one lane (row r, lane column (j % 128) / 32) of a unit
        const std::uint8_t* unit = packed.codes.data() + layout.unit_base(r, j);
        const int lane = formats::WeightPackLayout::lane_of(r, j);
        std::uint32_t words[6] = {0, 0, 0, 0, 0, 0};
        if (six_bit) {
          for (int u = 0; u < 6; ++u) std::memcpy(&words[u], unit + formats::six_bit_word_offset(lane, u), 4);
        } else {
          const int lane_bytes = formats::block_lane_low_bytes(form);
          std::memcpy(words, unit + lane * lane_bytes, static_cast<std::size_t>(lane_bytes));
        }
        for (int w = 0; w < 4; ++w) {
          for (int i = 0; i < 4; ++i) {
            std::uint32_t pair = 0;
            if (six_bit) {
              for (int part = 0; part < 2; ++part) {
                const formats::CodePiece piece = formats::six_bit_piece(4 * (w % 2) + i, part);
                pair |= (words[3 * (w / 2) + piece.word] >> piece.shift) & piece.mask;
              }
            } else {
              pair = (words[formats::block_pair_word(form, w)] >> formats::block_pair_shift(form, w, i)) &
                     formats::block_pair_mask(form);
            }
            const std::int64_t kk = j + 8 * w + 2 * i;
            ASSERT_EQ(pair & 0xffffu, formats::block_code_at(layout, packed.codes.data(), r, kk) & low_mask)
                << "row " << r << " k " << kk;
            ASSERT_EQ(pair >> 16, formats::block_code_at(layout, packed.codes.data(), r, kk + 1) & low_mask)
                << "row " << r << " k " << kk + 1;
          }
        }
      }
    }
  }
}

TEST(GgmlBlockRepack, CpuReferenceOnRepackedBlocksMatchesFp64) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : kCases) {
    SCOPED_TRACE(weight_blocks_name(c.blocks));
    const std::int64_t n = 19, k = 2 * c.block + (c.block == 32 ? 64 : 0), rows = 3;
    const test::GgmlMatrix m = test::random_ggml_matrix(c.type, n, k, rng());
    HostPackedWeights packed = repack_ggml_weight(m.tensor());
    const formats::WeightPackLayout layout =
        formats::make_block_pack_layout(static_cast<formats::WeightBlocks>(c.blocks), n, k);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * k)), out(static_cast<std::size_t>(rows * n));
    for (auto& v : x) v = formats::from_float<Half>(value(rng)).bits;
    weight_only_gemm(TensorView::matrix(x.data(), DType::f16, Device::cpu, rows, k), packed.view(), TensorView{},
                     TensorView::matrix(out.data(), DType::f16, Device::cpu, rows, n), nullptr);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t r = 0; r < n; ++r) {
        double sum = 0, magnitude = 0;
        for (std::int64_t j = 0; j < k; ++j) {
          const double wv = formats::to_float(formats::block_weight_at(layout, packed.codes.data(), r, j));
          const double xv = formats::to_float(Half{x[static_cast<std::size_t>(i * k + j)]});
          sum += xv * wv;
          magnitude += std::fabs(xv * wv);
        }
        const double got = formats::to_float(Half{out[static_cast<std::size_t>(i * n + r)]});
        ASSERT_NEAR(got, sum, std::ldexp(magnitude, -40) + f16_ulp(sum)) << "row " << i << " col " << r;
      }
    }
  }
}

// A NaN or Inf d / dmin is refused naming the tensor, the block and the row (the CPU's
// blocks form checks the same: cpu_block_repack_test).
TEST(GgmlBlockRepack, NonFiniteScalesAreRefusedByBlockAndRow) {
  LOWBIT_TEST_RNG(rng);
  struct Bad {
    std::uint32_t type;
    std::size_t block_bytes, at;  // the f16 field's offset in its block
    std::uint16_t bits;
    const char* want;
  };
  for (const Bad& bad : {Bad{gt::q2_k, 84, 82, 0x7E00, "tensor 'w': a scale of block 1 of row 2 is nan"},
                         Bad{gt::q2_k, 84, 80, 0x7C00, "tensor 'w': a scale of block 1 of row 2 is inf"},
                         Bad{gt::q3_k, 110, 108, 0xFC00, "tensor 'w': a scale of block 1 of row 2 is -inf"}}) {
    const test::GgmlMatrix m = test::random_ggml_matrix(bad.type, 3, 512, rng());
    std::vector<std::uint8_t> bytes(m.tensor().data, m.tensor().data + m.tensor().byte_size);
    std::memcpy(bytes.data() + (2 * 2 + 1) * bad.block_bytes + bad.at, &bad.bits, 2);  // row 2, block 1
    GgufTensor t = m.tensor();
    t.data = bytes.data();
    EXPECT_LOWBIT_ERROR(repack_ggml_weight(t), bad.want);
  }
}

TEST(GgmlBlockRepack, BadBlockSpecsNameTheField) {
  WeightOnlySpec spec = weight_blocks_spec(WeightBlocks::q6_k);
  spec.bits = 4;
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(spec, 8, 256), "spec.bits: Q6_K weights are 6-bit, got 4");
  spec = weight_blocks_spec(WeightBlocks::q2_k);
  spec.zero_point = false;
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(spec, 8, 256), "spec.zero_point: Q2_K has min, got false");
  spec = weight_blocks_spec(WeightBlocks::q3_k);
  spec.bits = 2;
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(spec, 8, 512), "spec.bits: Q3_K weights are 3-bit, got 2");
  spec.blocks = static_cast<WeightBlocks>(8);
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(spec, 8, 512), "spec.blocks: expected a GGML block form (Q5_0, Q5_1, Q4_K, "
                                                        "Q5_K, Q6_K, Q3_K, Q2_K), got 8");
  spec = weight_blocks_spec(WeightBlocks::q4_k);
  spec.act_dtype = DType::bf16;
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(spec, 8, 256), "spec.act_dtype: Q4_K weights take f16 activations");
  spec = weight_blocks_spec(WeightBlocks::q5_k);
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(spec, 8, 300), "K = 300 is not a whole number of Q5_K blocks (256)");
  spec.group_size = 32;
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(spec, 8, 256), "spec.group_size: Q5_K blocks are 256 wide, got 32");
  spec = weight_blocks_spec(WeightBlocks::q5_0);
  spec.zero_point = true;
  EXPECT_LOWBIT_ERROR(packed_weight_sizes(spec, 8, 64), "spec.zero_point: Q5_0 has no min");
  std::vector<std::uint8_t> codes(1024);
  std::vector<float> scales(8);
  PackedWeights out{weight_blocks_spec(WeightBlocks::q5_0), 8, 32,
                    TensorView::vector(codes.data(), DType::u8, Device::cpu, 704), TensorView{}, TensorView{}};
  EXPECT_LOWBIT_ERROR(pack_weights(TensorView::matrix(codes.data(), DType::u8, Device::cpu, 8, 16),
                                   TensorView::vector(scales.data(), DType::f32, Device::cpu, 8), TensorView{}, out),
                      "out.spec.blocks: Q5_0 weights are packed from their GGUF blocks");
  // A block-form weight with a scale view: the codes hold the scales.
  std::vector<std::uint16_t> x(32), y(8), s16(8);
  PackedWeights w = out;
  w.scales = TensorView::vector(s16.data(), DType::f16, Device::cpu, 8);
  EXPECT_LOWBIT_ERROR(weight_only_gemm(TensorView::matrix(x.data(), DType::f16, Device::cpu, 1, 32), w, TensorView{},
                                       TensorView::matrix(y.data(), DType::f16, Device::cpu, 1, 8), nullptr),
                      "w.scales, w.mins: Q5_0 weights keep their scales in the codes");
}

// A NaN or Inf scale is an error naming the tensor, the first bad row and its block, also
// when the rows are packed by several threads and a later row's is found first (found by
// the GGUF fuzzer: the check threw inside the OpenMP region, which ended the process).
TEST(GgmlBlockRepack, NonFiniteScalesAreNamedErrors) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : kCases) {
    SCOPED_TRACE(weight_blocks_name(c.blocks));
    const std::int64_t n = 64, k = 2 * c.block;
    std::vector<std::uint8_t> bytes = test::random_ggml_blocks(c.type, n, k, rng());
    const std::size_t block_bytes = ggml_type_info(static_cast<GgmlType>(c.type)).block_bytes;
    // d: a block's first f16, but the last in Q6_K / Q3_K and the one before dmin in Q2_K.
    const std::size_t d_at = c.type == gt::q6_k || c.type == gt::q3_k ? block_bytes - 2
                             : c.type == gt::q2_k                     ? block_bytes - 4
                                                                      : 0;
    auto poison = [&](std::int64_t row, std::int64_t block, std::uint16_t bits) {
      const std::size_t at = static_cast<std::size_t>(row * 2 + block) * block_bytes + d_at;
      bytes[at] = static_cast<std::uint8_t>(bits & 0xff);
      bytes[at + 1] = static_cast<std::uint8_t>(bits >> 8);
    };
    poison(50, 1, 0x7c00);  // +Inf, in the second thread's rows
    poison(17, 1, 0x7e00);  // NaN, earlier: the one named
    const test::GgmlMatrix m = test::ggml_matrix(c.type, n, k, bytes);
    EXPECT_LOWBIT_ERROR(repack_ggml_weight(m.tensor()), "tensor 'w': a scale of block 1 of row 17 is nan");
  }
}

}  // namespace
}  // namespace lowbit::engine
