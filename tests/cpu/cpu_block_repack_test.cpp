// The CPU engine's repacking of ggml blocks (engine/cpu_block_repack.h): on random
// blocks of every type with a block form (any finite f16 scale bits, any code and
// sub-block scale bytes), the repacked blocks decode (cpu/weight_blocks.h) to the
// values ggml's reference decoder (gguf/dequant.h) gives, bit for bit; a weight matrix
// loaded in blocks decodes as the f32 form; non-finite scales and types without a
// block form are refused by name. (Against gguf's NumPy decoder:
// python/tests/test_gguf_dequant.py, through `lowbit model dequant --form blocks`.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/expect_error.h"
#include "common/random.h"
#include "cpu/weight_blocks.h"
#include "engine/cpu_block_repack.h"
#include "engine/gguf/dequant.h"
#include "engine/weight_matrix.h"

namespace lowbit::test {
namespace {

using engine::GgmlType;

// Where a type's f16 scales (d, and dmin or m) lie in its block.
std::vector<int> f16_params_at(GgmlType type) {
  switch (type) {
    case GgmlType::q4_1:
    case GgmlType::q5_1:
    case GgmlType::q4_k:
    case GgmlType::q5_k: return {0, 2};
    case GgmlType::q2_k: return {80, 82};
    case GgmlType::q3_k: return {108};
    case GgmlType::q6_k: return {208};
    default: return {0};
  }
}

// A random f16 that is finite: any sign, exponent 0..30 (subnormals included), mantissa.
std::uint16_t finite_half(Rng& rng) {
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (;;) {
    const auto h = static_cast<std::uint16_t>(bits(rng));
    if ((h & 0x7C00) != 0x7C00) return h;
  }
}

std::vector<std::uint8_t> random_ggml_blocks(GgmlType type, std::int64_t blocks, Rng& rng) {
  const engine::GgmlTypeInfo& info = engine::ggml_type_info(type);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(blocks * info.block_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::uint8_t& b : out) b = static_cast<std::uint8_t>(byte(rng));
  for (std::int64_t b = 0; b < blocks; ++b) {
    for (int at : f16_params_at(type)) {
      const std::uint16_t h = finite_half(rng);
      std::memcpy(out.data() + b * info.block_bytes + at, &h, 2);
    }
  }
  return out;
}

const GgmlType k_block_types[] = {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q8_0, GgmlType::q5_0,
                                  GgmlType::q5_1, GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k,
                                  GgmlType::q5_k, GgmlType::q6_k};

TEST(CpuBlockRepack, DecodesToTheReferenceDecodersValuesBitForBit) {
  LOWBIT_TEST_RNG(rng);
  for (GgmlType type : k_block_types) {
    const engine::GgmlTypeInfo& info = engine::ggml_type_info(type);
    for (std::int64_t ggml_blocks : {1, 3, 7, 64}) {
      SCOPED_TRACE(std::string(info.name) + ", " + std::to_string(ggml_blocks) + " blocks");
      const std::int64_t count = ggml_blocks * info.block_elements;
      const std::vector<std::uint8_t> src = random_ggml_blocks(type, ggml_blocks, rng);
      const auto block_type = engine::cpu_block_type(type);
      ASSERT_TRUE(block_type.has_value());
      std::vector<std::uint8_t> repacked(
          static_cast<std::size_t>(count / cpu::kValuesPerBlock * cpu::weight_block_bytes(*block_type)), 0xEE);
      engine::repack_cpu_blocks(type, src.data(), count, repacked.data());
      std::vector<float> want(static_cast<std::size_t>(count)), got(want.size(), -1.0f);
      engine::dequantize_row(type, src.data(), want.data(), count);
      cpu::decode_weight_blocks(*block_type, repacked.data(), count, got.data());
      for (std::int64_t i = 0; i < count; ++i) {
        std::uint32_t w, g;
        std::memcpy(&w, &want[i], 4);
        std::memcpy(&g, &got[i], 4);
        ASSERT_EQ(g, w) << "value " << i << ": " << got[i] << " for " << want[i];
      }
      EXPECT_EQ(cpu::first_non_finite_block(*block_type, repacked.data(), count), count / 32);
    }
  }
}

// The parameters repacked blocks hold: codes within the ranges the kernels assume
// (cpu/block_dot.h: u8 x s8 pair sums that cannot saturate); q3_f16x2's scale bytes
// (scale - 32) within -32..31, q4_f16's scale and min bytes within 0..63 (weight_blocks.h:
// finite d, finite values).
TEST(CpuBlockRepack, CodesStayInTheirTypesRanges) {
  LOWBIT_TEST_RNG(rng);
  for (GgmlType type :
       {GgmlType::q5_0, GgmlType::q5_1, GgmlType::q5_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q6_k}) {
    const engine::GgmlTypeInfo& info = engine::ggml_type_info(type);
    const std::int64_t count = 16 * info.block_elements;
    const std::vector<std::uint8_t> src = random_ggml_blocks(type, 16, rng);
    const cpu::WeightBlockType bt = *engine::cpu_block_type(type);
    const std::int64_t bytes = cpu::weight_block_bytes(bt), codes_at = bt == cpu::WeightBlockType::q8_0 ? 2 : 8;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(count / 32 * bytes));
    engine::repack_cpu_blocks(type, src.data(), count, out.data());
    int lo = 1000, hi = -1000, scale_lo = 1000, scale_hi = -1000;
    for (std::int64_t b = 0; b < count / 32; ++b) {
      const std::uint8_t* blk = out.data() + b * bytes;
      // (The f16 blocks' codes are no byte codes: read only through their accessors.)
      const auto code = [&](int j) -> int {
        if (bt == cpu::WeightBlockType::q3_f16x2) return cpu::three_bit_code(blk + 4, j) - 4;
        if (bt == cpu::WeightBlockType::q4_f16) return cpu::nibble_code(blk + 6, j);
        if (bt == cpu::WeightBlockType::q6_f16x2) return cpu::six_bit_code(blk + 4, j) - 32;
        const std::uint8_t c = blk[codes_at + j];
        return bt == cpu::WeightBlockType::q5_f32 ? c : static_cast<std::int8_t>(c);
      };
      for (int j = 0; j < 32; ++j) lo = std::min(lo, code(j)), hi = std::max(hi, code(j));
      for (int h = 0; h < 2 && bt == cpu::WeightBlockType::q3_f16x2; ++h) {
        const int sc = static_cast<std::int8_t>(blk[2 + h]);
        scale_lo = std::min(scale_lo, sc), scale_hi = std::max(scale_hi, sc);
      }
      for (int i = 4; i < 6 && bt == cpu::WeightBlockType::q4_f16; ++i) {
        scale_lo = std::min(scale_lo, int{blk[i]}), scale_hi = std::max(scale_hi, int{blk[i]});
      }
    }
    SCOPED_TRACE(info.name);
    const std::pair<int, int> want = type == GgmlType::q5_0                               ? std::pair{-16, 15}
                                     : type == GgmlType::q5_1 || type == GgmlType::q5_k ? std::pair{0, 31}
                                     : type == GgmlType::q3_k                          ? std::pair{-4, 3}
                                     : type == GgmlType::q4_k                          ? std::pair{0, 15}
                                                                                       : std::pair{-32, 31};
    EXPECT_EQ(std::pair(lo, hi), want);
    if (type == GgmlType::q3_k) {  // within the range (a given extreme is missed ~2% of draws)
      EXPECT_GE(scale_lo, -32);
      EXPECT_LE(scale_hi, 31);
    }
    if (type == GgmlType::q4_k) {
      EXPECT_GE(scale_lo, 0);
      EXPECT_LE(scale_hi, 63);
    }
  }
}

engine::GgufTensor tensor_of(const char* name, GgmlType type, std::uint64_t cols, std::uint64_t rows,
                             const std::vector<std::uint8_t>& bytes) {
  engine::GgufTensor t;
  t.name = name;
  t.type = type;
  t.n_dims = 2;
  t.dims = {cols, rows, 1, 1};
  t.element_count = cols * rows;
  t.byte_size = bytes.size();
  t.data = bytes.data();
  return t;
}

// A matrix of awkward row counts loaded in both forms: blocks, never f32, and every
// row decodes to the f32 form's row exactly.
TEST(CpuBlockRepack, WeightMatrixInBlocksDecodesAsTheF32Form) {
  LOWBIT_TEST_RNG(rng);
  for (GgmlType type : k_block_types) {
    const engine::GgmlTypeInfo& info = engine::ggml_type_info(type);
    for (std::int64_t rows : {1, 5, 7}) {
      SCOPED_TRACE(std::string(info.name) + ", rows " + std::to_string(rows));
      const std::int64_t cols = 2 * 256;
      // Scales of a sane size so that the f32 form's finiteness check passes too.
      std::vector<std::uint8_t> bytes = random_ggml_blocks(type, rows * cols / info.block_elements, rng);
      for (std::int64_t b = 0; b < rows * cols / info.block_elements; ++b) {
        for (int at : f16_params_at(type)) bytes[static_cast<std::size_t>(b * info.block_bytes + at + 1)] &= 0x3B;
      }
      const engine::GgufTensor t = tensor_of("blk.0.ffn_up.weight", type, cols, rows, bytes);
      const auto blocks = engine::WeightMatrix::load(t, engine::WeightForm::blocks);
      const auto f32 = engine::WeightMatrix::load(t, engine::WeightForm::f32);
      ASSERT_TRUE(blocks.holds_blocks());
      EXPECT_EQ(blocks.block_type(), *engine::cpu_block_type(type));
      EXPECT_EQ(blocks.bytes(),
                static_cast<std::size_t>(rows * cols / 32 * cpu::weight_block_bytes(blocks.block_type())));
      std::vector<float> row(static_cast<std::size_t>(cols));
      for (std::int64_t r = 0; r < rows; ++r) {
        blocks.decode_row(r, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), f32.f32().data() + r * cols, row.size() * sizeof(float))) << "row " << r;
      }
    }
  }
}

TEST(CpuBlockRepack, RefusesNonFiniteScalesAndTypesWithoutABlockForm) {
  LOWBIT_TEST_RNG(rng);
  std::vector<std::uint8_t> bytes = random_ggml_blocks(GgmlType::q4_k, 6, rng);
  const std::uint16_t inf = 0x7C00, nan = 0x7E00;
  std::memcpy(bytes.data() + 4 * 144 + 2, &inf, 2);  // dmin of row 2's first super-block
  EXPECT_LOWBIT_ERROR(engine::WeightMatrix::load(tensor_of("blk.3.attn_q.weight", GgmlType::q4_k, 512, 3, bytes),
                                                 engine::WeightForm::blocks),
                      "tensor 'blk.3.attn_q.weight': row 2, columns 0..31: a scale or offset is NaN or Inf");
  // Q2_K, Q4_K: a NaN d, a NaN dmin; Q3_K, Q6_K: a NaN d; each named by its row and the
  // columns of its block of 32 (the blocks that keep the file's f16 fields check them as
  // they are).
  for (const auto& [type, at] :
       {std::pair{GgmlType::q2_k, 80}, std::pair{GgmlType::q2_k, 82}, std::pair{GgmlType::q3_k, 108},
        std::pair{GgmlType::q4_k, 0}, std::pair{GgmlType::q4_k, 2}, std::pair{GgmlType::q6_k, 208}}) {
    const std::int64_t block_bytes = engine::ggml_type_info(type).block_bytes;
    std::vector<std::uint8_t> k = random_ggml_blocks(type, 4, rng);
    std::memcpy(k.data() + 3 * block_bytes + at, &nan, 2);  // row 1's second super-block
    EXPECT_LOWBIT_ERROR(engine::WeightMatrix::load(tensor_of("blk.0.ffn_down.weight", type, 512, 2, k),
                                                   engine::WeightForm::blocks),
                        "tensor 'blk.0.ffn_down.weight': row 1, columns 256..287: a scale or offset is NaN or Inf");
  }
  EXPECT_FALSE(engine::cpu_block_type(GgmlType::f16).has_value());
  EXPECT_FALSE(engine::cpu_block_type(GgmlType::bf16).has_value());
  const std::vector<std::uint8_t> halves(512, 0);
  std::vector<std::uint8_t> out(1024);
  EXPECT_LOWBIT_ERROR(engine::repack_cpu_blocks(GgmlType::f16, halves.data(), 256, out.data()),
                      "type F16 has no CPU block form");
  EXPECT_LOWBIT_ERROR(engine::repack_cpu_blocks(GgmlType::q4_k, bytes.data(), 300, out.data()),
                      "300 values is not a whole number of Q4_K blocks of 256");
  // F16 in the blocks form: decoded to f32.
  const auto m = engine::WeightMatrix::load(tensor_of("h", GgmlType::f16, 256, 1, halves), engine::WeightForm::blocks);
  EXPECT_FALSE(m.holds_blocks());
  std::vector<float> v(40);
  EXPECT_LOWBIT_ERROR(cpu::decode_weight_blocks(cpu::WeightBlockType::q4_f32, out.data(), 40, v.data()),
                      "40 values is not a whole number of blocks of 32");
}

}  // namespace
}  // namespace lowbit::test
