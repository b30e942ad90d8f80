// ggml block decoding, checked against blocks whose values are worked out by hand.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/expect_error.h"
#include "common/gguf_writer.h"
#include "engine/gguf/dequant.h"
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
  EXPECT_LOWBIT_ERROR(dequantize_row(GgmlType::q6_k, b.data(), out.data(), 256, "tensor 'w'"),
                      "tensor 'w': type Q6_K is not supported");
  EXPECT_LOWBIT_ERROR(dequantize_row(GgmlType::q4_1, b.data(), out.data(), 20, "tensor 'w'"),
                      "tensor 'w': 20 elements is not a whole number of Q4_1 blocks of 32");
  EXPECT_FALSE(engine::can_dequantize(GgmlType::q5_0));
  EXPECT_TRUE(engine::can_dequantize(GgmlType::bf16));
}

TEST(GgmlDequant, WholeTensorFromAFile) {
  // A Q6_K tensor in a valid file: the error names the tensor and its type; a Q8_0
  // tensor of several rows decodes row after row (dims[0] contiguous).
  GgufWriter w;
  w.add_tensor("odd.weight", {256}, ggml_id::q6_k, std::vector<std::uint8_t>(210));
  std::vector<std::uint8_t> q8;
  for (int row = 0; row < 3; ++row) {
    put16(q8, 0x3c00);  // d = 1
    for (int j = 0; j < 32; ++j) q8.push_back(static_cast<std::uint8_t>(row * 32 + j));
  }
  w.add_tensor("rows.weight", {32, 3}, ggml_id::q8_0, q8);
  const engine::GgufFile file = engine::GgufFile::from_bytes(w.bytes());
  EXPECT_LOWBIT_ERROR(engine::dequantize_tensor(file.tensor("odd.weight")),
                      "tensor 'odd.weight': type Q6_K is not supported");
  const std::vector<float> rows = engine::dequantize_tensor(file.tensor("rows.weight"));
  ASSERT_EQ(rows.size(), 96u);
  for (int i = 0; i < 96; ++i) EXPECT_EQ(rows[i], static_cast<float>(i)) << i;
}

}  // namespace
}  // namespace lowbit::test
