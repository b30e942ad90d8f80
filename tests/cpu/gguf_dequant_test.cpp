// ggml block decoding, checked against blocks whose values are worked out by hand
// (python/tests/test_gguf_dequant.py checks every type bit for bit against gguf's
// NumPy decoders on random blocks).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/expect_error.h"
#include "common/gguf_writer.h"
#include "engine/gguf/dequant.h"
#include "engine/gguf/k_scales.h"
#include "engine/gguf/reader.h"

namespace lowbit::test {
namespace {

using engine::dequantize_row;
using engine::GgmlType;

void put16(std::vector<std::uint8_t>& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v & 0xff));
  b.push_back(static_cast<std::uint8_t>(v >> 8));
}

TEST(GgmlDequant, Q4_1) {
  // d = 0.5 (f16 0x3800), m = -1 (0xbc00); byte j holds q = j (low) and 15 - j (high).
  std::vector<std::uint8_t> b;
  put16(b, 0x3800);
  put16(b, 0xbc00);
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<std::uint8_t>(j | ((15 - j) << 4)));
  std::vector<float> out(32);
  dequantize_row(GgmlType::q4_1, b.data(), out.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], j * 0.5f - 1.0f) << j;               // element j: low nibble
    EXPECT_EQ(out[j + 16], (15 - j) * 0.5f - 1.0f) << j;   // element j + 16: high nibble
  }
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[15], 6.5f);
  EXPECT_EQ(out[16], 6.5f);
}

TEST(GgmlDequant, Q8_0TwoBlocks) {
  // Block 0: d = 0.25 (0x3400), q = j - 16; block 1: d = -2 (0xc000), q = -128, 127, 0...
  std::vector<std::uint8_t> b;
  put16(b, 0x3400);
  for (int j = 0; j < 32; ++j) b.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(j - 16)));
  put16(b, 0xc000);
  b.push_back(0x80);
  b.push_back(0x7f);
  for (int j = 2; j < 32; ++j) b.push_back(0);
  std::vector<float> out(64);
  dequantize_row(GgmlType::q8_0, b.data(), out.data(), 64);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j - 16) * 0.25f) << j;
  EXPECT_EQ(out[32], 256.0f);
  EXPECT_EQ(out[33], -254.0f);
  EXPECT_EQ(out[34], 0.0f);
}

TEST(GgmlDequant, Q4_0) {
  // d = 2 (0x4000); byte j holds q = j (low) and 8 (high): values (j - 8) * 2 and 0.
  std::vector<std::uint8_t> b;
  put16(b, 0x4000);
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<std::uint8_t>(j | (8 << 4)));
  std::vector<float> out(32);
  dequantize_row(GgmlType::q4_0, b.data(), out.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 2.0f) << j;
    EXPECT_EQ(out[j + 16], 0.0f) << j;
  }
}

TEST(GgmlDequant, Q5_0AndQ5_1TakeTheFifthBitFromTheWord) {
  // qh = 0xaaaaaaaa: odd elements have bit 4 set; byte j holds j (low) and 15 - j (high).
  std::vector<std::uint8_t> q5_0, q5_1;
  put16(q5_0, 0x4000);  // d = 2
  put16(q5_1, 0x3800);  // d = 0.5
  put16(q5_1, 0xbc00);  // m = -1
  for (std::vector<std::uint8_t>* b : {&q5_0, &q5_1}) {
    for (int k = 0; k < 4; ++k) b->push_back(0xaa);
    for (int j = 0; j < 16; ++j) b->push_back(static_cast<std::uint8_t>(j | ((15 - j) << 4)));
  }
  std::vector<float> a(32), b(32);
  dequantize_row(GgmlType::q5_0, q5_0.data(), a.data(), 32);
  dequantize_row(GgmlType::q5_1, q5_1.data(), b.data(), 32);
  for (int j = 0; j < 16; ++j) {
    const int lo = j + (j % 2) * 16, hi = (15 - j) + ((j + 16) % 2) * 16;
    EXPECT_EQ(a[j], (lo - 16) * 2.0f) << j;
    EXPECT_EQ(a[j + 16], (hi - 16) * 2.0f) << j;
    EXPECT_EQ(b[j], lo * 0.5f - 1.0f) << j;
    EXPECT_EQ(b[j + 16], hi * 0.5f - 1.0f) << j;
  }
}

// The packed 6-bit scales: literal bytes for sub-blocks 0 and 4, and a round trip of
// every value through the writer's packing.
TEST(GgmlDequant, KQuantScalesAndMins) {
  std::uint8_t packed[12] = {};
  packed[0] = 0x41;  // sub-block 0 scale 1; top bits 01: sub-block 4's scale high bits
  packed[4] = 0xc7;  // sub-block 0 min 7; top bits 11: sub-block 4's min high bits
  packed[8] = 0x52;  // sub-block 4: scale low 2, min low 5
  EXPECT_EQ(engine::unpack_k_scale_min(packed, 0).scale, 1);
  EXPECT_EQ(engine::unpack_k_scale_min(packed, 0).min, 7);
  EXPECT_EQ(engine::unpack_k_scale_min(packed, 4).scale, 2 + 16);
  EXPECT_EQ(engine::unpack_k_scale_min(packed, 4).min, 5 + 48);
  for (int v = 0; v < 64; ++v) {
    engine::KScaleMin values[8];
    for (int j = 0; j < 8; ++j) {
      values[j] = {static_cast<std::uint8_t>((v + 7 * j) % 64), static_cast<std::uint8_t>((63 - v + 5 * j) % 64)};
    }
    std::uint8_t bytes[12];
    engine::pack_k_scale_mins(values, bytes);
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(engine::unpack_k_scale_min(bytes, j).scale, values[j].scale);
      EXPECT_EQ(engine::unpack_k_scale_min(bytes, j).min, values[j].min);
    }
  }
}

TEST(GgmlDequant, Q4_KSubBlocksAndNibbles) {
  // d = 1, dmin = 0.5; sub-block s has scale s + 1 and min 2 s (s < 4); sub-blocks 4-7
  // scale 16 + (s - 4), min 0. Byte l of each 32-byte run: low nibble l % 16, high 15 - l % 16.
  std::vector<std::uint8_t> b;
  put16(b, 0x3c00);
  put16(b, 0x3800);
  engine::KScaleMin values[8];
  for (int s = 0; s < 8; ++s) {
    values[s] = s < 4 ? engine::KScaleMin{static_cast<std::uint8_t>(s + 1), static_cast<std::uint8_t>(2 * s)}
                      : engine::KScaleMin{static_cast<std::uint8_t>(16 + s - 4), 0};
  }
  b.resize(16);
  engine::pack_k_scale_mins(values, b.data() + 4);
  for (int l = 0; l < 128; ++l) b.push_back(static_cast<std::uint8_t>((l % 16) | ((15 - l % 16) << 4)));
  std::vector<float> out(256);
  dequantize_row(GgmlType::q4_k, b.data(), out.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, l = e % 32;
    const int q = s % 2 == 0 ? l % 16 : 15 - l % 16;
    EXPECT_EQ(out[e], static_cast<float>(values[s].scale) * q - 0.5f * values[s].min) << e;
  }
}

TEST(GgmlDequant, Q6_KSignedScalesAndSixBitCodes) {
  // d = 0.25; scale of sub-block s is s - 8 (negative for the first half's); ql = 0x5a
  // and qh = 0b11100100 everywhere: the k-th 32 elements of each half take nibble
  // (k < 2: 0xa, else 0x5) and 2 bits (k-th pair of qh: 0, 1, 2, 3), minus 32.
  std::vector<std::uint8_t> b(128, 0x5a);
  b.resize(192, 0xe4);
  for (int s = 0; s < 16; ++s) b.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(s - 8)));
  put16(b, 0x3400);
  std::vector<float> out(256);
  dequantize_row(GgmlType::q6_k, b.data(), out.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const int k = (e % 128) / 32, sub = e / 16;
    const int q = ((k < 2 ? 0xa : 0x5) | (k << 4)) - 32;
    EXPECT_EQ(out[e], 0.25f * static_cast<float>(sub - 8) * static_cast<float>(q)) << e;
  }
}

TEST(GgmlDequant, PlainFloats) {
  std::vector<std::uint8_t> h;
  for (std::uint16_t v : {0x3c00, 0xc100, 0x7bff, 0x0001}) put16(h, v);  // 1, -2.5, 65504, 2^-24
  std::vector<float> out(4);
  dequantize_row(GgmlType::f16, h.data(), out.data(), 4);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.5f, 65504.0f, 5.9604644775390625e-8f}));
  std::vector<std::uint8_t> bf;
  for (std::uint16_t v : {0x3f80, 0xc000, 0x4049}) put16(bf, v);  // 1, -2, 3.140625
  dequantize_row(GgmlType::bf16, bf.data(), out.data(), 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 3.140625f);
  const float f[3] = {0.1f, -7.0f, 1e30f};
  dequantize_row(GgmlType::f32, reinterpret_cast<const std::uint8_t*>(f), out.data(), 3);
  EXPECT_EQ(out[0], 0.1f);
  EXPECT_EQ(out[2], 1e30f);
}

TEST(GgmlDequant, UnsupportedTypesAndPartialBlocksAreNamed) {
  std::vector<std::uint8_t> b(256);
  std::vector<float> out(256);
  EXPECT_LOWBIT_ERROR(dequantize_row(GgmlType::iq2_xxs, b.data(), out.data(), 256, "tensor 'w'"),
                      "tensor 'w': type IQ2_XXS is not supported");
  EXPECT_LOWBIT_ERROR(dequantize_row(GgmlType::q4_1, b.data(), out.data(), 20, "tensor 'w'"),
                      "tensor 'w': 20 elements is not a whole number of Q4_1 blocks of 32");
  EXPECT_FALSE(engine::can_dequantize(GgmlType::q8_k));
  EXPECT_TRUE(engine::can_dequantize(GgmlType::q5_0));
  EXPECT_TRUE(engine::can_dequantize(GgmlType::bf16));
}

TEST(GgmlDequant, WholeTensorFromAFile) {
  // An IQ2_XXS tensor in a valid file: the error names the tensor and its type; a Q8_0
  // tensor of several rows decodes row after row (dims[0] contiguous).
  GgufWriter w;
  w.add_tensor("odd.weight", {256}, 16, std::vector<std::uint8_t>(66));
  std::vector<std::uint8_t> q8;
  for (int row = 0; row < 3; ++row) {
    put16(q8, 0x3c00);  // d = 1
    for (int j = 0; j < 32; ++j) q8.push_back(static_cast<std::uint8_t>(row * 32 + j));
  }
  w.add_tensor("rows.weight", {32, 3}, ggml_id::q8_0, q8);
  const engine::GgufFile file = engine::GgufFile::from_bytes(w.bytes());
  EXPECT_LOWBIT_ERROR(engine::dequantize_tensor(file.tensor("odd.weight")),
                      "tensor 'odd.weight': type IQ2_XXS is not supported");
  const std::vector<float> rows = engine::dequantize_tensor(file.tensor("rows.weight"));
  ASSERT_EQ(rows.size(), 96u);
  for (int i = 0; i < 96; ++i) EXPECT_EQ(rows[i], static_cast<float>(i)) << i;
}

}  // namespace
}  // namespace lowbit::test
