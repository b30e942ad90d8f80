// The CPU's quantized matrix products (cpu/block_dot.h): activation quantization
// against its definition, the compiled kernels (AVX-512 VNNI / AVX2 / scalar) against
// the plain C++ ones on random blocks of every type and awkward shapes, and both
// against the exact sum over the decoded weights and activations (in double).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/expect_error.h"
#include "common/random.h"
#include "cpu/block_dot.h"
#include "formats/float16.h"

namespace lowbit::test {
namespace {

using cpu::QuantizedActivations;
using cpu::WeightBlockType;

std::uint16_t half_bits(float v) { return formats::float_to_half(v).bits; }
float half_value(std::uint16_t bits) { return formats::half_to_float(formats::Half{bits}); }

bool f32_params(WeightBlockType type) {
  return type == WeightBlockType::q4_f32 || type == WeightBlockType::q5_f32 || type == WeightBlockType::q6_f32x2;
}
int codes_at(WeightBlockType type) {
  if (f32_params(type)) return 8;
  switch (type) {
    case WeightBlockType::q2_f16x2:
    case WeightBlockType::q4_f16: return 6;
    case WeightBlockType::q4_1:
    case WeightBlockType::q3_f16x2:
    case WeightBlockType::q6_f16x2: return 4;
    default: return 2;
  }
}
float f32_at(const std::uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// Random rows of blocks; each block's scale(s) and offset of a few magnitudes, codes
// over their type's whole range (q5_f32: 0..31, q6_f32x2: -32..31; q2_f16x2: any scale
// and min nibbles, any 2-bit codes; q3_f16x2: scale bytes -32..31, any code bits; q4_f16:
// scale and min bytes 0..63, any nibbles; q6_f16x2: any scale bytes and code bits).
std::vector<std::uint8_t> random_blocks(WeightBlockType type, std::int64_t rows, std::int64_t k, Rng& rng) {
  const std::int64_t bytes = cpu::weight_block_bytes(type), blocks = rows * (k / 32);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(blocks * bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::uint8_t* blk = out.data() + b * bytes;
    for (std::int64_t i = 0; i < bytes; ++i) blk[i] = static_cast<std::uint8_t>(byte(rng));
    if (f32_params(type)) {
      const float p[2] = {scale(rng), type == WeightBlockType::q6_f32x2 ? scale(rng) : scale(rng) * 8};
      std::memcpy(blk, p, 8);
    } else {
      const std::uint16_t d = half_bits(scale(rng)), m = half_bits(scale(rng) * 8);
      std::memcpy(blk, &d, 2);
      if (type == WeightBlockType::q4_1 || type == WeightBlockType::q2_f16x2 || type == WeightBlockType::q4_f16) {
        std::memcpy(blk + 2, &m, 2);
      }
      if (type == WeightBlockType::q3_f16x2) {
        for (int h = 2; h < 4; ++h) blk[h] = static_cast<std::uint8_t>(blk[h] % 64 - 32);
      }
      if (type == WeightBlockType::q4_f16) blk[4] &= 63, blk[5] &= 63;
    }
    for (int j = 0; j < 32 && f32_params(type); ++j) {
      std::uint8_t& c = blk[8 + j];
      if (type == WeightBlockType::q5_f32) c &= 31;
      if (type == WeightBlockType::q6_f32x2) c = static_cast<std::uint8_t>(static_cast<int>(c % 64) - 32);
    }
  }
  return out;
}

// Weight value j of a block, from the definition of the type, in double (exact).
double weight_value(WeightBlockType type, const std::uint8_t* blk, int j) {
  const std::uint8_t* codes = blk + codes_at(type);
  // (q2_f16x2's 8 code bytes hold no nibbles: only the nibble types read them.)
  const auto nibble = [&] { return j < 16 ? (codes[j] & 15) : (codes[j - 16] >> 4); };
  switch (type) {
    case WeightBlockType::q4_f32: return static_cast<double>(f32_at(blk)) * nibble() + f32_at(blk + 4);
    case WeightBlockType::q5_f32: return static_cast<double>(f32_at(blk)) * codes[j] + f32_at(blk + 4);
    case WeightBlockType::q6_f32x2:
      return static_cast<double>(f32_at(blk + 4 * (j / 16))) * static_cast<std::int8_t>(codes[j]);
    default: break;
  }
  std::uint16_t d_bits;
  std::memcpy(&d_bits, blk, 2);
  const double d = half_value(d_bits);
  if (type == WeightBlockType::q2_f16x2) {  // (d * sc) q - dmin * mn of half j / 16
    std::uint16_t dmin_bits;
    std::memcpy(&dmin_bits, blk + 2, 2);
    const int sm = blk[4 + j / 16];
    return d * (sm & 15) * ((codes[j % 8] >> (2 * (j / 8))) & 3) - half_value(dmin_bits) * (sm >> 4);
  }
  if (type == WeightBlockType::q3_f16x2) {  // (d * sc) (q - 4) of half j / 16, q's bit 2 apart
    const int q = ((codes[j % 8] >> (2 * (j / 8))) & 3) | (((codes[8 + j / 8] >> (j % 8)) & 1) << 2);
    return d * static_cast<std::int8_t>(blk[2 + j / 16]) * (q - 4);
  }
  if (type == WeightBlockType::q6_f16x2) {  // (d * sc) (q - 32) of half j / 16, q's bits 4-5 apart
    const int q = nibble() | (((codes[16 + j % 8] >> (2 * (j / 8))) & 3) << 4);
    return d * static_cast<std::int8_t>(blk[2 + j / 16]) * (q - 32);
  }
  if (type == WeightBlockType::q4_f16) {  // (d * sc) q - dmin * mn
    std::uint16_t dmin_bits;
    std::memcpy(&dmin_bits, blk + 2, 2);
    return d * blk[4] * nibble() - half_value(dmin_bits) * blk[5];
  }
  if (type == WeightBlockType::q8_0) return d * static_cast<std::int8_t>(codes[j]);
  if (type == WeightBlockType::q4_0) return d * (nibble() - 8);
  std::uint16_t m_bits;
  std::memcpy(&m_bits, blk + 2, 2);
  return d * nibble() + half_value(m_bits);
}

constexpr WeightBlockType k_types[] = {WeightBlockType::q4_0,     WeightBlockType::q4_1,     WeightBlockType::q8_0,
                                       WeightBlockType::q4_f32,   WeightBlockType::q5_f32,   WeightBlockType::q6_f32x2,
                                       WeightBlockType::q2_f16x2, WeightBlockType::q3_f16x2, WeightBlockType::q4_f16,
                                       WeightBlockType::q6_f16x2};

// Decoding gives the definition's values, each one f32 rounding (two for the f32
// types' d * q + m, as ggml's K-quant decoders: checked bit for bit against them in
// cpu_block_repack_test.cpp).
TEST(BlockDot, BlocksDecodeToTheirDefinition) {
  LOWBIT_TEST_RNG(rng);
  for (WeightBlockType type : k_types) {
    SCOPED_TRACE(cpu::weight_block_name(type));
    const std::vector<std::uint8_t> w = random_blocks(type, 3, 96, rng);
    std::vector<float> got(3 * 96);
    cpu::decode_weight_blocks(type, w.data(), 3 * 96, got.data());
    for (int i = 0; i < 3 * 96; ++i) {
      const double exact = weight_value(type, w.data() + (i / 32) * cpu::weight_block_bytes(type), i % 32);
      EXPECT_NEAR(got[i], exact, 2.5e-7 * (std::fabs(exact) + 0.5)) << "value " << i;
    }
  }
}

TEST(BlockDot, ActivationsQuantizePerBlockOf32) {
  LOWBIT_TEST_RNG(rng);
  std::normal_distribution<float> value(0.0f, 3.0f);
  const std::int64_t rows = 3, k = 96;
  std::vector<float> x(rows * k);
  for (float& v : x) v = value(rng);
  for (int j = 0; j < 32; ++j) x[32 + j] = 0.0f;  // a block of zeros: scale 0, codes 0
  x[70] = -1000.0f;                                 // one large value sets its block's scale
  QuantizedActivations q;
  cpu::quantize_activations(x.data(), rows, k, q);
  ASSERT_EQ(q.rows, rows);
  ASSERT_EQ(q.d.size(), 9u);
  for (std::int64_t b = 0; b < 9; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f, inv = d != 0 ? 1.0f / d : 0.0f;
    EXPECT_EQ(q.d[b], d) << "block " << b;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int want = static_cast<int>(std::nearbyint(x[b * 32 + j] * inv));
      ASSERT_EQ(q.q[b * 32 + j], want) << "block " << b << " value " << j;
      ASSERT_LE(std::abs(want), 127);
      sum += want;
    }
    EXPECT_EQ(q.dsum[b], d * static_cast<float>(sum)) << "block " << b;
  }
  EXPECT_EQ(q.d[1], 0.0f);
  EXPECT_EQ(q.q[70], -127);
}

TEST(BlockDot, KernelsMatchScalarAndTheExactSum) {
  LOWBIT_TEST_RNG(rng);
  std::normal_distribution<float> value(0.0f, 1.0f);
  SCOPED_TRACE(std::string("kernels: ") + cpu::block_matmul_isa());
  for (WeightBlockType type : k_types) {
    // Rows and tokens around the tile sizes (4 x 4): 1, 3, 5, 7 tokens and more, rows
    // not a multiple of 4; k from one block up.
    for (const auto& [rows, n, k] : std::vector<std::array<std::int64_t, 3>>{{1, 1, 32},
                                                                              {4, 4, 64},
                                                                              {7, 5, 96},
                                                                              {13, 9, 576},
                                                                              {5, 1, 1536},
                                                                              {9, 3, 160},
                                                                              {6, 7, 256},
                                                                              {3, 3, 512}}) {
      SCOPED_TRACE(std::string(cpu::weight_block_name(type)) + ", rows " + std::to_string(rows) + ", n " +
                   std::to_string(n) + ", k " + std::to_string(k));
      const std::vector<std::uint8_t> w = random_blocks(type, rows, k, rng);
      const std::int64_t row_bytes = k / 32 * cpu::weight_block_bytes(type);
      std::vector<float> x(static_cast<std::size_t>(n * k));
      for (float& v : x) v = value(rng);
      QuantizedActivations q;
      cpu::quantize_activations(x.data(), n, k, q);
      const std::int64_t ldy = rows + 3;  // padded output rows
      std::vector<float> fast(static_cast<std::size_t>(n * ldy), -7.0f), slow(fast);
      cpu::block_matmul(type, w.data(), row_bytes, rows, q, fast.data(), ldy);
      cpu::block_matmul_scalar(type, w.data(), row_bytes, rows, q, slow.data(), ldy);
      for (std::int64_t t = 0; t < n; ++t) {
        for (std::int64_t r = 0; r < rows; ++r) {
          // Exact: the decoded weights times the decoded activations, in double.
          double exact = 0, magnitude = 0;
          for (std::int64_t i = 0; i < k; ++i) {
            const std::int64_t b = i / 32;
            const double wv = weight_value(type, w.data() + r * row_bytes + b * cpu::weight_block_bytes(type),
                                           static_cast<int>(i % 32));
            const double xv = static_cast<double>(q.d[t * (k / 32) + b]) * q.q[t * k + i];
            exact += wv * xv;
            magnitude += std::fabs(wv * xv);
          }
          const float f = fast[t * ldy + r], s = slow[t * ldy + r];
          // f32 sums over k / 32 blocks of exact integer dots: a few ulps of the magnitude.
          EXPECT_NEAR(s, exact, 1e-5 * magnitude + 1e-30) << "scalar, token " << t << " row " << r;
          EXPECT_NEAR(f, exact, 1e-5 * magnitude + 1e-30) << "kernel, token " << t << " row " << r;
        }
        for (std::int64_t r = rows; r < ldy; ++r) EXPECT_EQ(fast[t * ldy + r], -7.0f) << "wrote past the rows";
      }
    }
  }
}

// The products of one matrix in two block types (rows x 576), in the kernels and in plain
// C++: the same bits.
void expect_the_same_products(WeightBlockType a, const std::vector<std::uint8_t>& wa, WeightBlockType b,
                              const std::vector<std::uint8_t>& wb, std::int64_t rows, std::int64_t k, Rng& rng) {
  std::normal_distribution<float> value(0.0f, 1.0f);
  const std::int64_t n = 7;
  std::vector<float> x(static_cast<std::size_t>(n * k));
  for (float& v : x) v = value(rng);
  QuantizedActivations q;
  cpu::quantize_activations(x.data(), n, k, q);
  for (const bool kernels : {true, false}) {
    SCOPED_TRACE(kernels ? "block_matmul" : "block_matmul_scalar");
    const auto matmul = kernels ? cpu::block_matmul : cpu::block_matmul_scalar;
    std::vector<float> ya(static_cast<std::size_t>(n * rows)), yb(ya.size());
    matmul(a, wa.data(), k / 32 * cpu::weight_block_bytes(a), rows, q, ya.data(), rows);
    matmul(b, wb.data(), k / 32 * cpu::weight_block_bytes(b), rows, q, yb.data(), rows);
    for (std::size_t i = 0; i < ya.size(); ++i) {
      std::uint32_t bits_a, bits_b;
      std::memcpy(&bits_a, &ya[i], 4);
      std::memcpy(&bits_b, &yb[i], 4);
      ASSERT_EQ(bits_a, bits_b) << "token " << i / rows << " row " << i % rows << ": " << ya[i] << " vs " << yb[i];
    }
  }
}

// Random blocks of `from` (rows x 576) and the same matrix as blocks of `to`, each block
// converted by convert(source block, destination block).
template <typename Convert>
void expect_the_bits_of_the_former_form(WeightBlockType from, WeightBlockType to, Convert convert) {
  LOWBIT_TEST_RNG(rng);
  SCOPED_TRACE(std::string(cpu::weight_block_name(from)) + " vs " + cpu::weight_block_name(to) + ", kernels: " +
               cpu::block_matmul_isa());
  const std::int64_t rows = 9, k = 576, blocks = rows * k / 32;
  const std::vector<std::uint8_t> w = random_blocks(from, rows, k, rng);
  std::vector<std::uint8_t> former(static_cast<std::size_t>(blocks * cpu::weight_block_bytes(to)));
  for (std::int64_t b = 0; b < blocks; ++b) {
    convert(w.data() + b * cpu::weight_block_bytes(from), former.data() + b * cpu::weight_block_bytes(to));
  }
  expect_the_same_products(from, w, to, former, rows, k, rng);
}

float f16_field(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return half_value(bits);
}

// q6_f32x2 from a block of d (f16), two signed scale bytes and codes (code_bias added):
// f32 d * sc a half, the codes a signed byte each.
template <typename Code>
void to_q6_f32x2(const std::uint8_t* src, Code code, int code_bias, std::uint8_t* dst) {
  const float d = f16_field(src);
  const float factors[2] = {d * static_cast<float>(static_cast<std::int8_t>(src[2])),
                            d * static_cast<float>(static_cast<std::int8_t>(src[3]))};
  std::memcpy(dst, factors, 8);
  for (int j = 0; j < 32; ++j) dst[8 + j] = static_cast<std::uint8_t>(code(j) + code_bias);
}

// The f16 blocks give the bits the same matrix gave in the form that held their type
// before (Q3_K, Q6_K: q6_f32x2, f32 d * sc a half, the biased codes a byte; Q4_K: q4_f32,
// f32 d * sc and -(dmin * mn), the same nibbles), in the kernels and in plain C++: the same
// integer dot product of each half (there sum((q - b) q_x), here sum(q q_x) - b sum(q_x)),
// the same f32 factors, applied in the same order.
TEST(BlockDot, Q3BlocksGiveTheBitsOfTheirFormerQ6Blocks) {
  expect_the_bits_of_the_former_form(WeightBlockType::q3_f16x2, WeightBlockType::q6_f32x2,
                                     [](const std::uint8_t* src, std::uint8_t* dst) {
                                       const auto code = [&](int j) { return cpu::three_bit_code(src + 4, j); };
                                       to_q6_f32x2(src, code, -4, dst);
                                     });
}

TEST(BlockDot, Q6BlocksGiveTheBitsOfTheirFormerQ6F32Blocks) {
  expect_the_bits_of_the_former_form(WeightBlockType::q6_f16x2, WeightBlockType::q6_f32x2,
                                     [](const std::uint8_t* src, std::uint8_t* dst) {
                                       const auto code = [&](int j) { return cpu::six_bit_code(src + 4, j); };
                                       to_q6_f32x2(src, code, -32, dst);
                                     });
}

TEST(BlockDot, Q4BlocksGiveTheBitsOfTheirFormerQ4F32Blocks) {
  expect_the_bits_of_the_former_form(WeightBlockType::q4_f16, WeightBlockType::q4_f32,
                                     [](const std::uint8_t* src, std::uint8_t* dst) {
                                       const float params[2] = {f16_field(src) * static_cast<float>(src[4]),
                                                                -(f16_field(src + 2) * static_cast<float>(src[5]))};
                                       std::memcpy(dst, params, 8);
                                       std::memcpy(dst + 8, src + 6, 16);
                                     });
}

TEST(BlockDot, BadShapesAreRejected) {
  QuantizedActivations q;
  std::vector<float> x(40);
  EXPECT_LOWBIT_ERROR(cpu::quantize_activations(x.data(), 1, 40, q), "k = 40, expected a positive multiple of 32");
  EXPECT_LOWBIT_ERROR(q.resize(1, 0), "k = 0, expected a positive multiple of 32");
  cpu::quantize_activations(x.data(), 1, 32, q);
  EXPECT_LOWBIT_ERROR(cpu::quantize_activation_rows(x.data(), 1, 1, q), "rows 1 + 1 outside 0..1");
}

}  // namespace
}  // namespace lowbit::test
