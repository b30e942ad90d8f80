// GGUF reader: round trips of every metadata type and of tensors of several ggml
// types (files built by tests/common/gguf_writer.h), then hostile files, each of
// which must throw lowbit::Error naming what is wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/gguf_writer.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/reader.h"

namespace lowbit::engine {
namespace {

using test::ByteWriter;
using test::GgufWriter;
namespace vt = test::gguf_type;
namespace gt = test::ggml_id;

GgufFile parse(const std::vector<std::uint8_t>& bytes) { return GgufFile::from_bytes(bytes); }

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>(seed + i * 7);
  return out;
}

// A small valid file whose last bytes are tensor data, so every proper prefix is
// truncated somewhere that matters.
GgufWriter small_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add<std::uint32_t>("llama.block_count", vt::u32, 2);
  w.add_string_array("tokenizer.ggml.tokens", {"a", "", "bc"});
  w.add_array<float>("tokenizer.ggml.scores", vt::f32, {0.5f, -1.0f, 2.0f});
  w.add_tensor("token_embd.weight", {4, 2}, gt::f32, pattern(32, 1));
  w.add_tensor("output.weight", {32}, gt::q8_0, pattern(34, 2));
  return w;
}

// ---------------------------------------------------------------------------------
// ggml type table

TEST(GgmlTypes, BlockSizesOfTheTypesTheEngineReads) {
  struct Expected {
    GgmlType type;
    const char* name;
    std::uint32_t elements, bytes;
  };
  const Expected expected[] = {
      {GgmlType::f32, "F32", 1, 4},     {GgmlType::f16, "F16", 1, 2},       {GgmlType::bf16, "BF16", 1, 2},
      {GgmlType::q4_0, "Q4_0", 32, 18}, {GgmlType::q4_1, "Q4_1", 32, 20},   {GgmlType::q5_0, "Q5_0", 32, 22},
      {GgmlType::q5_1, "Q5_1", 32, 24}, {GgmlType::q8_0, "Q8_0", 32, 34},   {GgmlType::q8_1, "Q8_1", 32, 36},
      {GgmlType::q2_k, "Q2_K", 256, 84}, {GgmlType::q3_k, "Q3_K", 256, 110}, {GgmlType::q4_k, "Q4_K", 256, 144},
      {GgmlType::q5_k, "Q5_K", 256, 176}, {GgmlType::q6_k, "Q6_K", 256, 210}, {GgmlType::q8_k, "Q8_K", 256, 292},
      {GgmlType::iq4_nl, "IQ4_NL", 32, 18}, {GgmlType::iq4_xs, "IQ4_XS", 256, 136},
      {GgmlType::tq1_0, "TQ1_0", 256, 54}, {GgmlType::mxfp4, "MXFP4", 32, 17},
  };
  for (const Expected& e : expected) {
    const GgmlTypeInfo* info = find_ggml_type(static_cast<std::uint32_t>(e.type));
    ASSERT_NE(info, nullptr) << e.name;
    EXPECT_EQ(info->name, e.name);
    EXPECT_EQ(info->block_elements, e.elements) << e.name;
    EXPECT_EQ(info->block_bytes, e.bytes) << e.name;
    EXPECT_EQ(ggml_type_name(e.type), e.name);
  }
}

TEST(GgmlTypes, RetiredAndUnknownIdsAreNotInTheTable) {
  for (std::uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u, 0xffffffffu}) {
    EXPECT_EQ(find_ggml_type(id), nullptr) << id;
  }
  EXPECT_EQ(ggml_type_id_name(4), "unknown ggml type 4");
  EXPECT_EQ(ggml_type_id_name(3), "Q4_1");
  for (std::uint32_t id = 0; id < 64; ++id) {
    if (const GgmlTypeInfo* info = find_ggml_type(id)) {
      EXPECT_EQ(static_cast<std::uint32_t>(info->type), id);
    }
  }
}

// ---------------------------------------------------------------------------------
// Round trips

TEST(GgufRoundTrip, EveryScalarType) {
  GgufWriter w;
  w.add<std::uint8_t>("u8", vt::u8, 255);
  w.add<std::int8_t>("i8", vt::i8, -128);
  w.add<std::uint16_t>("u16", vt::u16, 65535);
  w.add<std::int16_t>("i16", vt::i16, -32768);
  w.add<std::uint32_t>("u32", vt::u32, 0xffffffffu);
  w.add<std::int32_t>("i32", vt::i32, std::numeric_limits<std::int32_t>::min());
  w.add<float>("f32", vt::f32, -1.5f);
  w.add<std::uint8_t>("bool_true", vt::boolean, 1);
  w.add<std::uint8_t>("bool_false", vt::boolean, 0);
  w.add_string("string", "hello");
  w.add_string("empty", "");
  w.add_string("binary", std::string("a\0b\xc3\xa9", 5));
  w.add<std::uint64_t>("u64", vt::u64, std::numeric_limits<std::uint64_t>::max());
  w.add<std::int64_t>("i64", vt::i64, std::numeric_limits<std::int64_t>::min());
  w.add<double>("f64", vt::f64, 3.141592653589793);
  const GgufFile f = parse(w.bytes());

  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 15u);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.metadata()[0].key(), "u8");
  EXPECT_EQ(f.metadata()[14].key(), "f64");
  EXPECT_EQ(f.get_u32("u8"), 255u);
  EXPECT_EQ(f.get_i64("i8"), -128);
  EXPECT_EQ(f.get_u32("u16"), 65535u);
  EXPECT_EQ(f.get_i64("i16"), -32768);
  EXPECT_EQ(f.get_u32("u32"), 0xffffffffu);
  EXPECT_EQ(f.metadata("i32").as_i32(), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(f.get_f32("f32"), -1.5f);
  EXPECT_TRUE(f.get_bool("bool_true"));
  EXPECT_FALSE(f.get_bool("bool_false"));
  EXPECT_EQ(f.get_string("string"), "hello");
  EXPECT_EQ(f.get_string("empty"), "");
  EXPECT_EQ(f.get_string("binary"), std::string_view("a\0b\xc3\xa9", 5));
  EXPECT_EQ(f.get_u64("u64"), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(f.get_i64("i64"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(f.metadata("f64").as_f64(), 3.141592653589793);
  EXPECT_EQ(f.get_f32("f64"), static_cast<float>(3.141592653589793));
  EXPECT_EQ(f.metadata("f32").as_f64(), -1.5);

  const GgufValueType types[] = {GgufValueType::u8,      GgufValueType::i8,      GgufValueType::u16,
                                 GgufValueType::i16,     GgufValueType::u32,     GgufValueType::i32,
                                 GgufValueType::f32,     GgufValueType::boolean, GgufValueType::boolean,
                                 GgufValueType::string,  GgufValueType::string,  GgufValueType::string,
                                 GgufValueType::u64,     GgufValueType::i64,     GgufValueType::f64};
  for (std::size_t i = 0; i < 15; ++i) EXPECT_EQ(f.metadata()[i].type(), types[i]) << i;
}

TEST(GgufRoundTrip, IntegerGettersTakeAnyIntegerThatFits) {
  GgufWriter w;
  w.add<std::int32_t>("minus_one", vt::i32, -1);
  w.add<std::uint64_t>("big", vt::u64, std::uint64_t{1} << 40);
  w.add<std::uint64_t>("huge", vt::u64, std::numeric_limits<std::uint64_t>::max());
  w.add<std::int8_t>("seven", vt::i8, 7);
  const GgufFile f = parse(w.bytes());
  EXPECT_EQ(f.get_u32("seven"), 7u);
  EXPECT_EQ(f.get_u64("seven"), 7u);
  EXPECT_EQ(f.get_i64("minus_one"), -1);
  EXPECT_EQ(f.get_i64("big"), std::int64_t{1} << 40);
  EXPECT_LOWBIT_ERROR(f.get_u32("minus_one"), "metadata 'minus_one' at byte");
  EXPECT_LOWBIT_ERROR(f.get_u32("minus_one"), "INT32 value -1 does not fit UINT32");
  EXPECT_LOWBIT_ERROR(f.get_u64("minus_one"), "INT32 value -1 does not fit UINT64");
  EXPECT_LOWBIT_ERROR(f.get_u32("big"), "UINT64 value 1099511627776 does not fit UINT32");
  EXPECT_LOWBIT_ERROR(f.get_i64("huge"), "UINT64 value 18446744073709551615 does not fit INT64");
}

TEST(GgufRoundTrip, TypeMismatchesAndMissingKeysNameTheKey) {
  GgufWriter w;
  w.add<std::uint32_t>("count", vt::u32, 3);
  w.add<float>("ratio", vt::f32, 0.5f);
  w.add<double>("too_big", vt::f64, 1e300);
  w.add_string("name", "x");
  w.add_array<std::int32_t>("ids", vt::i32, {1, 2});
  w.add_array<std::uint32_t>("wide_ids", vt::u32, {1, 0xffffffffu});
  const GgufFile f = parse(w.bytes());

  EXPECT_EQ(f.find_metadata("absent"), nullptr);
  EXPECT_NE(f.find_metadata("count"), nullptr);
  EXPECT_LOWBIT_ERROR(f.get_u32("absent"), "no metadata key 'absent'");
  EXPECT_LOWBIT_ERROR(f.get_string("count"), "metadata 'count' at byte");
  EXPECT_LOWBIT_ERROR(f.get_string("count"), "expected STRING, got UINT32");
  EXPECT_LOWBIT_ERROR(f.get_bool("name"), "expected BOOL, got STRING");
  EXPECT_LOWBIT_ERROR(f.get_f32("count"), "expected FLOAT64, got UINT32");
  EXPECT_LOWBIT_ERROR(f.get_u32("ratio"), "expected an integer, got FLOAT32");
  EXPECT_LOWBIT_ERROR(f.get_f32("too_big"), "FLOAT64 value 1e+300 does not fit FLOAT32");
  EXPECT_EQ(f.metadata("too_big").as_f64(), 1e300);
  EXPECT_LOWBIT_ERROR(f.get_string_array("ids"), "expected ARRAY of STRING, got ARRAY of INT32");
  EXPECT_LOWBIT_ERROR(f.get_f32_array("name"), "expected ARRAY of FLOAT32, got STRING");
  EXPECT_LOWBIT_ERROR(f.get_i32_array("count"), "expected ARRAY of integers, got UINT32");
  EXPECT_LOWBIT_ERROR(f.get_i32_array("wide_ids"), "UINT32 value 4294967295 does not fit INT32");
  EXPECT_LOWBIT_ERROR(f.metadata("count").array_items(), "expected ARRAY, got UINT32");
}

TEST(GgufRoundTrip, ArraysOfEveryType) {
  GgufWriter w;
  w.add_array<std::uint8_t>("u8", vt::u8, {0, 200, 255});
  w.add_array<std::int8_t>("i8", vt::i8, {-128, 0, 127});
  w.add_array<std::uint16_t>("u16", vt::u16, {1, 65535});
  w.add_array<std::int16_t>("i16", vt::i16, {-32768, 5});
  w.add_array<std::uint32_t>("u32", vt::u32, {7, 0x7fffffff});
  w.add_array<std::int32_t>("token_type", vt::i32, {1, 3, -6, 2147483647});
  w.add_array<float>("scores", vt::f32, {0.0f, -2.5f, 1e30f});
  w.add_array<std::uint8_t>("bools", vt::boolean, {1, 0, 1});
  w.add_array<std::uint64_t>("u64", vt::u64, {std::numeric_limits<std::uint64_t>::max()});
  w.add_array<std::int64_t>("i64", vt::i64, {std::numeric_limits<std::int64_t>::min(), 9});
  w.add_array<double>("f64", vt::f64, {0.125, -1e300});
  w.add_string_array("tokens", {"<s>", "", "\xc4\xa0the", std::string(300, 'x')});
  w.add_string_array("merges", {"a b", "\xc4\xa0 t"});
  w.add_array<float>("empty_f32", vt::f32, {});
  w.add_string_array("empty_strings", {});
  const GgufFile f = parse(w.bytes());

  EXPECT_EQ(f.get_i32_array("u8"), (std::vector<std::int32_t>{0, 200, 255}));
  EXPECT_EQ(f.get_i32_array("i8"), (std::vector<std::int32_t>{-128, 0, 127}));
  EXPECT_EQ(f.get_i32_array("u16"), (std::vector<std::int32_t>{1, 65535}));
  EXPECT_EQ(f.get_i32_array("i16"), (std::vector<std::int32_t>{-32768, 5}));
  EXPECT_EQ(f.get_i32_array("u32"), (std::vector<std::int32_t>{7, 0x7fffffff}));
  EXPECT_EQ(f.get_i32_array("token_type"), (std::vector<std::int32_t>{1, 3, -6, 2147483647}));
  EXPECT_EQ(f.get_f32_array("scores"), (std::vector<float>{0.0f, -2.5f, 1e30f}));
  EXPECT_EQ(f.get_string_array("tokens"),
            (std::vector<std::string_view>{"<s>", "", "\xc4\xa0the", std::string_view(std::string(300, 'x'))}));
  EXPECT_EQ(f.get_string_array("merges"), (std::vector<std::string_view>{"a b", "\xc4\xa0 t"}));
  EXPECT_TRUE(f.get_f32_array("empty_f32").empty());
  EXPECT_TRUE(f.get_string_array("empty_strings").empty());

  const GgufValue& bools = f.metadata("bools");
  EXPECT_EQ(bools.type(), GgufValueType::array);
  EXPECT_EQ(bools.array_type(), GgufValueType::boolean);
  EXPECT_EQ(bools.array_size(), 3u);
  const std::vector<GgufValue> items = bools.array_items();
  ASSERT_EQ(items.size(), 3u);
  EXPECT_TRUE(items[0].as_bool());
  EXPECT_FALSE(items[1].as_bool());
  EXPECT_TRUE(items[2].as_bool());
  EXPECT_EQ(items[1].key(), "bools");
  EXPECT_EQ(f.metadata("u64").array_items()[0].as_u64(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(f.metadata("i64").array_items()[0].as_i64(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(f.metadata("i64").array_items()[1].as_i64(), 9);
  EXPECT_EQ(f.metadata("f64").array_items()[0].as_f64(), 0.125);
  EXPECT_EQ(f.metadata("f64").array_items()[1].as_f64(), -1e300);
  EXPECT_EQ(f.metadata("tokens").array_items()[2].as_string(), "\xc4\xa0the");
  EXPECT_LOWBIT_ERROR(f.get_i32_array("u64"), "UINT64 value 18446744073709551615 does not fit INT32");
}

TEST(GgufRoundTrip, NestedArraysOfStringsAndIntegers) {
  ByteWriter nested;  // [["a", "bc"], [], ["d"]]
  nested.u32(vt::array).u64(3);
  nested.u32(vt::string).u64(2).str("a").str("bc");
  nested.u32(vt::string).u64(0);
  nested.u32(vt::string).u64(1).str("d");
  ByteWriter deeper;  // [[[1, 2]], [[-3]]] of INT32
  deeper.u32(vt::array).u64(2);
  deeper.u32(vt::array).u64(1).u32(vt::i32).u64(2).put<std::int32_t>(1).put<std::int32_t>(2);
  deeper.u32(vt::array).u64(1).u32(vt::i32).u64(1).put<std::int32_t>(-3);
  GgufWriter w;
  w.add_raw("nested", vt::array, nested.bytes());
  w.add_raw("deeper", vt::array, deeper.bytes());
  w.add<std::uint32_t>("after", vt::u32, 42);  // parsing resumes at the right byte
  const GgufFile f = parse(w.bytes());

  const GgufValue& outer = f.metadata("nested");
  EXPECT_EQ(outer.array_type(), GgufValueType::array);
  EXPECT_EQ(outer.array_size(), 3u);
  const std::vector<GgufValue> rows = outer.array_items();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].as_string_array(), (std::vector<std::string_view>{"a", "bc"}));
  EXPECT_TRUE(rows[1].as_string_array().empty());
  EXPECT_EQ(rows[2].as_string_array(), (std::vector<std::string_view>{"d"}));

  const std::vector<GgufValue> level1 = f.metadata("deeper").array_items();
  ASSERT_EQ(level1.size(), 2u);
  EXPECT_EQ(level1[0].array_items()[0].as_i32_array(), (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(level1[1].array_items()[0].as_i32_array(), (std::vector<std::int32_t>{-3}));
  EXPECT_EQ(f.get_u32("after"), 42u);
}

TEST(GgufRoundTrip, TensorsOfSeveralTypesWithAlignmentPadding) {
  GgufWriter w;
  w.layout_alignment = 64;
  w.add<std::uint32_t>("general.alignment", vt::u32, 64);
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "tiny");
  struct Spec {
    const char* name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::size_t bytes;
  };
  const std::vector<Spec> specs = {
      {"a.f32", {4, 3}, gt::f32, 48},         {"b.f16", {8}, gt::f16, 16},
      {"c.q4_1", {64, 2, 1}, gt::q4_1, 2 * 2 * 20}, {"d.q8_0", {32}, gt::q8_0, 34},
      {"e.q6_k", {256, 1, 1, 2}, gt::q6_k, 2 * 210}, {"f.bf16", {3}, gt::bf16, 6},
  };
  for (std::size_t i = 0; i < specs.size(); ++i) {
    w.add_tensor(specs[i].name, specs[i].dims, specs[i].type, pattern(specs[i].bytes, static_cast<std::uint8_t>(i)));
  }
  const GgufWriter::Built built = w.build();
  const GgufFile f = parse(built.bytes);

  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset(), built.data_start);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    SCOPED_TRACE(specs[i].name);
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(static_cast<std::uint32_t>(t.type), specs[i].type);
    EXPECT_EQ(t.n_dims, specs[i].dims.size());
    std::uint64_t elements = 1;
    for (std::size_t d = 0; d < 4; ++d) {
      const std::uint64_t expected = d < specs[i].dims.size() ? specs[i].dims[d] : 1;
      EXPECT_EQ(t.dims[d], expected);
      elements *= expected;
    }
    EXPECT_EQ(t.element_count, elements);
    EXPECT_EQ(t.byte_size, specs[i].bytes);
    EXPECT_EQ(t.file_offset, built.data_start + built.tensor_offsets[i]);
    EXPECT_EQ(t.file_offset % 64, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data) % 64, 0u);
    const std::vector<std::uint8_t> expected = pattern(specs[i].bytes, static_cast<std::uint8_t>(i));
    EXPECT_EQ(std::vector<std::uint8_t>(t.bytes().begin(), t.bytes().end()), expected);
    EXPECT_EQ(f.find_tensor(specs[i].name), &t);
    EXPECT_EQ(&f.tensor(specs[i].name), &t);
  }
  EXPECT_EQ(f.find_tensor("absent"), nullptr);
  EXPECT_LOWBIT_ERROR(f.tensor("absent"), "no tensor named 'absent'");

  const std::string summary = f.describe();
  EXPECT_NE(summary.find("GGUF v3"), std::string::npos) << summary;
  EXPECT_NE(summary.find("architecture 'llama'"), std::string::npos) << summary;
  EXPECT_NE(summary.find("name 'tiny'"), std::string::npos) << summary;
  EXPECT_NE(summary.find("6 tensors"), std::string::npos) << summary;
  EXPECT_NE(summary.find("Q4_1 x1"), std::string::npos) << summary;
  EXPECT_NE(summary.find("3 metadata keys"), std::string::npos) << summary;
}

TEST(GgufRoundTrip, DefaultAlignmentIs32AndTrailingPaddingIsAccepted) {
  GgufWriter w = small_writer();
  w.pad_end = true;
  const GgufFile f = parse(w.bytes());
  EXPECT_EQ(f.alignment(), 32u);
  for (const GgufTensor& t : f.tensors()) EXPECT_EQ(t.file_offset % 32, 0u);
  EXPECT_EQ(f.file_size() % 32, 0u);
}

TEST(GgufRoundTrip, FileWithoutTensorsMayEndBeforeTheDataSection) {
  GgufWriter w;
  w.add<std::uint8_t>("x", vt::u8, 1);
  const std::vector<std::uint8_t> bytes = w.bytes();
  ASSERT_NE(bytes.size() % 32, 0u);  // the header is not padded: nothing follows
  const GgufFile f = parse(bytes);
  EXPECT_EQ(f.get_u32("x"), 1u);
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufRoundTrip, ViewsSurviveAMove) {
  GgufFile f = parse(small_writer().bytes());
  const std::string_view arch = f.get_string("general.architecture");
  const std::uint8_t* data = f.tensor("output.weight").data;
  GgufFile moved = std::move(f);
  EXPECT_EQ(moved.get_string("general.architecture"), "llama");
  EXPECT_EQ(moved.get_string("general.architecture").data(), arch.data());
  EXPECT_EQ(moved.tensor("output.weight").data, data);
  EXPECT_EQ(moved.get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string_view>{"a", "", "bc"}));
}

// ---------------------------------------------------------------------------------
// Opening files

class GgufOnDisk : public ::testing::Test {
 protected:
  std::filesystem::path path(const std::string& name) const {
    return std::filesystem::path(::testing::TempDir()) / ("lowbit_gguf_test_" + name);
  }
  std::string write(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    const std::filesystem::path p = path(name);
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }
};

TEST_F(GgufOnDisk, MapsAFileAndReadsWhatFromBytesReads) {
  const std::vector<std::uint8_t> bytes = small_writer().bytes();
  const std::string p = write("valid.gguf", bytes);
  const GgufFile mapped = GgufFile::open(p);
  const GgufFile copied = parse(bytes);
  EXPECT_EQ(mapped.source(), p);
  EXPECT_EQ(mapped.file_size(), bytes.size());
  EXPECT_EQ(mapped.get_string("general.architecture"), "llama");
  EXPECT_EQ(mapped.get_u32("llama.block_count"), 2u);
  EXPECT_EQ(mapped.get_f32_array("tokenizer.ggml.scores"), copied.get_f32_array("tokenizer.ggml.scores"));
  ASSERT_EQ(mapped.tensors().size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const GgufTensor& a = mapped.tensors()[i];
    const GgufTensor& b = copied.tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.file_offset, b.file_offset);
    ASSERT_EQ(a.byte_size, b.byte_size);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.byte_size), 0);
  }
  std::filesystem::remove(p);
}

TEST_F(GgufOnDisk, MissingDirectoryEmptyAndCorruptFilesAreErrors) {
  EXPECT_LOWBIT_ERROR(GgufFile::open(path("does_not_exist.gguf").string()), "cannot open");
  EXPECT_LOWBIT_ERROR(GgufFile::open(::testing::TempDir()), "not a regular file");
  const std::string empty = write("empty.gguf", {});
  EXPECT_LOWBIT_ERROR(GgufFile::open(empty), "truncated: magic at byte 0 needs 4 bytes but only 0 remain");
  std::vector<std::uint8_t> bytes = small_writer().bytes();
  bytes.resize(bytes.size() - 1);
  const std::string cut = write("cut.gguf", bytes);
  EXPECT_LOWBIT_ERROR(GgufFile::open(cut), "runs past the end of the file");
  EXPECT_LOWBIT_ERROR(GgufFile::open(cut), cut);  // names the file
  std::filesystem::remove(empty);
  std::filesystem::remove(cut);
}

// ---------------------------------------------------------------------------------
// Hostile files

TEST(GgufHostile, BadMagic) {
  GgufWriter w = small_writer();
  w.magic = "GGUX";
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "not a GGUF file: magic bytes 'GGUX' at byte 0, expected 'GGUF'");
  w.magic = std::string("\0\xff\x01G", 4);
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "magic bytes '\\x00\\xff\\x01G'");
}

TEST(GgufHostile, VersionsOtherThan3) {
  for (std::uint32_t version : {0u, 1u, 2u, 4u, 0xffffffffu}) {
    GgufWriter w = small_writer();
    w.version = version;
    EXPECT_LOWBIT_ERROR(parse(w.bytes()), "unsupported GGUF version " + std::to_string(version) + " at byte 4");
  }
  GgufWriter w = small_writer();
  w.version = 3u << 24;
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "looks big-endian");
}

TEST(GgufHostile, EveryProperPrefixOfAValidFileIsAnError) {
  const std::vector<std::uint8_t> bytes = small_writer().bytes();
  ASSERT_NO_THROW(parse(bytes));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    // An exact-size copy, so a read past the prefix is a heap overflow under ASan.
    const std::vector<std::uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_LOWBIT_ERROR(parse(prefix), "GGUF '<memory>'") << "prefix of " << n << " bytes";
  }
}

TEST(GgufHostile, StringLengthsPastTheEnd) {
  GgufWriter w;
  w.add_raw("name", vt::string, ByteWriter().u64(1000).str("").bytes());
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "metadata 'name': truncated: string at byte");
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "needs 1000 bytes but only 8 remain");

  GgufWriter key;
  key.add<std::uint8_t>("k", vt::u8, 1);
  std::vector<std::uint8_t> bytes = key.bytes();
  bytes[24] = 0xff;  // the key's length (after magic, version and the two counts)
  EXPECT_LOWBIT_ERROR(parse(bytes), "metadata entry 0: truncated: key at byte 32 needs 255 bytes");

  GgufWriter huge;
  huge.add_raw("name", vt::string, ByteWriter().u64(std::numeric_limits<std::uint64_t>::max()).bytes());
  EXPECT_LOWBIT_ERROR(parse(huge.bytes()), "needs 18446744073709551615 bytes but only 0 remain");
}

TEST(GgufHostile, AbsurdArrayCounts) {
  const std::uint64_t count = std::uint64_t{1} << 62;
  for (std::uint32_t type : {vt::string, vt::u64, vt::u8, vt::array}) {
    GgufWriter w;
    w.add_raw("tokens", vt::array, ByteWriter().u32(type).u64(count).str("abc").bytes());
    EXPECT_LOWBIT_ERROR(parse(w.bytes()), "metadata 'tokens': array at byte");
    EXPECT_LOWBIT_ERROR(parse(w.bytes()), "claims 4611686018427387904");
  }
  GgufWriter nested;  // an absurd count inside an array of arrays
  nested.add_raw("a", vt::array,
                 ByteWriter().u32(vt::array).u64(1).u32(vt::string).u64(count).bytes());
  EXPECT_LOWBIT_ERROR(parse(nested.bytes()), "claims 4611686018427387904 STRING elements");
  GgufWriter strings;  // a plausible count whose strings run past the end
  strings.add_raw("a", vt::array, ByteWriter().u32(vt::string).u64(2).str("x").u64(50).bytes());
  EXPECT_LOWBIT_ERROR(parse(strings.bytes()), "truncated: array element string");
}

TEST(GgufHostile, AbsurdHeaderCounts) {
  GgufWriter w = small_writer();
  w.metadata_count = std::uint64_t{1} << 60;
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "1152921504606846976 metadata entries and 2 tensor infos cannot fit");
  w = small_writer();
  w.tensor_count = std::numeric_limits<std::uint64_t>::max();
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "cannot fit");
  w = small_writer();
  w.tensor_count = 10;  // fits the header check, not the bytes after the metadata
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "tensor count 10 needs at least 32 bytes per tensor info");
}

TEST(GgufHostile, UnknownValueTypesAndDeepNesting) {
  GgufWriter w;
  w.add_raw("k", 13, {0, 0, 0, 0});
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "metadata 'k': value type 13 at byte");
  GgufWriter a;
  a.add_raw("k", vt::array, ByteWriter().u32(77).u64(0).bytes());
  EXPECT_LOWBIT_ERROR(parse(a.bytes()), "array element type 77 at byte");

  ByteWriter deep;
  for (int i = 0; i < 40; ++i) deep.u32(vt::array).u64(1);
  deep.u32(vt::u8).u64(0);
  GgufWriter d;
  d.add_raw("deep", vt::array, deep.bytes());
  EXPECT_LOWBIT_ERROR(parse(d.bytes()), "arrays nested deeper than 16 levels");
}

TEST(GgufHostile, DuplicateKeysAndTensorNames) {
  GgufWriter w = small_writer();
  w.add<std::uint32_t>("llama.block_count", vt::u32, 3);
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "metadata 'llama.block_count': duplicate key at byte");
  GgufWriter t = small_writer();
  t.add_tensor("output.weight", {8}, gt::f32, pattern(32, 0));
  EXPECT_LOWBIT_ERROR(parse(t.bytes()), "tensor 'output.weight': duplicate tensor name");
}

TEST(GgufHostile, BadDimensions) {
  const auto with_tensor = [](std::vector<std::uint64_t> dims, std::uint32_t type = gt::f32) {
    GgufWriter w;
    w.add_tensor("w", std::move(dims), type, pattern(64, 0));
    return w.bytes();
  };
  EXPECT_LOWBIT_ERROR(parse(with_tensor({1, 1, 1, 1, 1})), "tensor 'w': n_dims 5 at byte");
  EXPECT_LOWBIT_ERROR(parse(with_tensor({})), "tensor 'w': n_dims 0");
  EXPECT_LOWBIT_ERROR(parse(with_tensor({4, 0})), "dimension 1 is 0");
  EXPECT_LOWBIT_ERROR(parse(with_tensor({std::uint64_t{1} << 63})), "dimension 0 is 9223372036854775808");
  EXPECT_LOWBIT_ERROR(parse(with_tensor({std::uint64_t{1} << 32, std::uint64_t{1} << 32})),
                      "hold more than 2^63-1 elements");
  EXPECT_LOWBIT_ERROR(parse(with_tensor({std::uint64_t{1} << 62})), "F32 elements take more than 2^63-1 bytes");
  EXPECT_LOWBIT_ERROR(parse(with_tensor({33}, gt::q4_1)), "dimension 0 is 33, not a multiple of the 32-element blocks of Q4_1");
  // Large but representable: rejected because the data is not in the file.
  EXPECT_LOWBIT_ERROR(parse(with_tensor({1u << 20, 1u << 20})), "runs past the end of the file");
}

TEST(GgufHostile, UnknownGgmlTypeIsAnErrorAtOpen) {
  for (std::uint32_t type : {4u, 31u, 1000u}) {
    GgufWriter w;
    w.add_tensor("blk.0.w", {32}, type, pattern(64, 0));
    EXPECT_LOWBIT_ERROR(parse(w.bytes()), "tensor 'blk.0.w': unknown ggml type id " + std::to_string(type));
  }
}

TEST(GgufHostile, TensorOffsets) {
  GgufWriter past = small_writer();
  past.tensor(1).offset = 32 * 1000;
  EXPECT_LOWBIT_ERROR(parse(past.bytes()), "tensor 'output.weight' (Q8_0, 34 bytes at data offset 32000) runs past");

  GgufWriter misaligned = small_writer();
  misaligned.tensor(1).offset = 16;
  EXPECT_LOWBIT_ERROR(parse(misaligned.bytes()),
                      "tensor 'output.weight': data offset 16 is not a multiple of the alignment 32");

  // An offset that wraps around 2^64 to point back into the header.
  GgufWriter wrap = small_writer();
  const std::uint64_t data_start = wrap.build().data_start;
  wrap.tensor(1).offset = 0 - data_start;
  EXPECT_LOWBIT_ERROR(parse(wrap.bytes()), "tensor 'output.weight'");
  EXPECT_LOWBIT_ERROR(parse(wrap.bytes()), "runs past the end of the file");

  GgufWriter overlap = small_writer();
  overlap.tensor(1).offset = 0;
  EXPECT_LOWBIT_ERROR(parse(overlap.bytes()), "overlap");
}

TEST(GgufHostile, BadAlignment) {
  for (std::uint32_t alignment : {0u, 3u, 48u}) {
    GgufWriter w = small_writer();
    w.add<std::uint32_t>("general.alignment", vt::u32, alignment);
    EXPECT_LOWBIT_ERROR(parse(w.bytes()),
                        "general.alignment is " + std::to_string(alignment) + " (expected a power of two)");
  }
  GgufWriter wide = small_writer();
  wide.add<std::uint64_t>("general.alignment", vt::u64, std::uint64_t{1} << 40);
  EXPECT_LOWBIT_ERROR(parse(wide.bytes()), "metadata 'general.alignment' at byte");
  GgufWriter text = small_writer();
  text.add_string("general.alignment", "32");
  EXPECT_LOWBIT_ERROR(parse(text.bytes()), "expected an integer, got STRING");
}

TEST(GgufHostile, AlignmentLargerThanTheFile) {
  GgufWriter w = small_writer();
  w.add<std::uint32_t>("general.alignment", vt::u32, 1u << 31);
  EXPECT_LOWBIT_ERROR(parse(w.bytes()), "the data section would start at byte 2147483648, past the end");
}

}  // namespace
}  // namespace lowbit::engine
