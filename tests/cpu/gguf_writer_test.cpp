// GGUF writer: every metadata type and every tensor field round-trips through the
// reader; the layout equals the independent test writer's byte for byte; files on
// disk are written whole or not at all; bad declarations are refused by name.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/gguf_writer.h"
#include "common/random.h"
#include "engine/gguf/reader.h"
#include "engine/gguf/writer.h"

namespace lowbit::engine {
namespace {

using V = GgufMetadataValue;

std::vector<std::uint8_t> random_bytes(test::Rng& rng, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  for (std::uint8_t& b : out) b = static_cast<std::uint8_t>(rng() & 0xff);
  return out;
}

// A fresh directory under the system's temporary one, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "lowbit-writer-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(path_), {}));
  }

 private:
  std::filesystem::path path_;
};

std::vector<std::uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Expected {
  std::string key;
  GgufValueType type;
  std::vector<std::uint8_t> encoded;  // after the type id
};

// Every value type, the extremes of each integer type, strings with NUL and UTF-8,
// empty arrays, arrays of every element type and arrays of arrays of mixed types.
std::vector<std::pair<std::string, V>> every_kind_of_value() {
  std::vector<std::pair<std::string, V>> out;
  out.emplace_back("general.architecture", V::string("llama"));
  out.emplace_back("u8", V::u8(255));
  out.emplace_back("i8", V::i8(-128));
  out.emplace_back("u16", V::u16(65535));
  out.emplace_back("i16", V::i16(-32768));
  out.emplace_back("u32", V::u32(0xffffffffu));
  out.emplace_back("i32", V::i32(std::numeric_limits<std::int32_t>::min()));
  out.emplace_back("f32", V::f32(-0.0f));
  out.emplace_back("f32.nan", V::f32(std::numeric_limits<float>::quiet_NaN()));
  out.emplace_back("bool.true", V::boolean(true));
  out.emplace_back("bool.false", V::boolean(false));
  out.emplace_back("u64", V::u64(std::numeric_limits<std::uint64_t>::max()));
  out.emplace_back("i64", V::i64(std::numeric_limits<std::int64_t>::min()));
  out.emplace_back("f64", V::f64(1e-300));
  out.emplace_back("string.empty", V::string(""));
  out.emplace_back("string.bytes", V::string(std::string("a\0b\xc4\xa0\xff", 6)));
  const std::vector<std::string> strings = {"<s>", "", "\xe2\x96\x81the", std::string(300, 'x')};
  out.emplace_back("array.strings", V::string_array(strings));
  const std::vector<std::int32_t> ints = {1, -2, 3, std::numeric_limits<std::int32_t>::max()};
  out.emplace_back("array.i32", V::i32_array(ints));
  const std::vector<float> floats = {0.5f, -1.0f, 3.25e-8f};
  out.emplace_back("array.f32", V::f32_array(floats));
  out.emplace_back("array.empty", V::array(GgufValueType::u16, {}));
  const V bools[] = {V::boolean(true), V::boolean(false), V::boolean(true)};
  out.emplace_back("array.bool", V::array(GgufValueType::boolean, bools));
  const V u64s[] = {V::u64(1), V::u64(1ull << 63)};
  out.emplace_back("array.u64", V::array(GgufValueType::u64, u64s));
  const V f64s[] = {V::f64(-2.5)};
  out.emplace_back("array.f64", V::array(GgufValueType::f64, f64s));
  const V i8s[] = {V::i8(-1), V::i8(7)};
  const V u8s[] = {V::u8(9)};
  const V inner[] = {V::array(GgufValueType::i8, i8s), V::array(GgufValueType::u8, u8s), V::string_array(strings),
                     V::array(GgufValueType::f32, {})};
  out.emplace_back("array.nested", V::array(GgufValueType::array, inner));
  const V deeper[] = {V::array(GgufValueType::array, inner)};
  out.emplace_back("array.nested2", V::array(GgufValueType::array, deeper));
  return out;
}

void expect_same_value(const GgufValue& got, const V& want) {
  SCOPED_TRACE(std::string(got.key()));
  ASSERT_EQ(got.type(), want.type());
  // The reader's payload is the encoded value less a string's length or an array's
  // element type and count; re-encoding it must give the written bytes.
  const V again = V::copy_of(got);
  ASSERT_EQ(again.type(), want.type());
  EXPECT_TRUE(std::equal(again.encoded().begin(), again.encoded().end(), want.encoded().begin(),
                         want.encoded().end()));
}

struct TensorCase {
  std::string name;
  GgmlType type;
  std::vector<std::uint64_t> dims;
};

const std::vector<TensorCase>& tensor_cases() {
  static const std::vector<TensorCase> cases = {
      {"token_embd.weight", GgmlType::q8_0, {64, 3}},
      {"blk.0.attn_norm.weight", GgmlType::f32, {5}},
      {"blk.0.attn_q.weight", GgmlType::q4_1, {32, 2, 3}},
      {"blk.0.ffn_up.weight", GgmlType::q6_k, {256, 1, 2, 2}},
      {"odd.f16", GgmlType::f16, {7, 3}},
      {"one.byte.i8", GgmlType::i8, {1}},
      {"q4_k", GgmlType::q4_k, {512}},
  };
  return cases;
}

struct Built {
  GgufWriter writer;
  std::vector<std::pair<std::string, V>> values;
  std::vector<std::vector<std::uint8_t>> data;
};

Built build(test::Rng& rng, std::uint32_t alignment) {
  Built b{GgufWriter(alignment), every_kind_of_value(), {}};
  for (const auto& [key, value] : b.values) b.writer.add(key, value);
  for (const TensorCase& c : tensor_cases()) {
    const std::size_t index = b.writer.add_tensor(c.name, c.type, c.dims);
    b.data.push_back(random_bytes(rng, static_cast<std::size_t>(b.writer.tensors()[index].byte_size)));
  }
  return b;
}

GgufWriter::FillTensor fill_from(const std::vector<std::vector<std::uint8_t>>& data) {
  return [&data](std::size_t i, std::span<std::uint8_t> out) {
    ASSERT_EQ(out.size(), data[i].size());
    std::memcpy(out.data(), data[i].data(), out.size());
  };
}

void expect_round_trip(const Built& b, const GgufFile& file) {
  const std::size_t extra = b.writer.alignment() == 32 ? 0 : 1;  // general.alignment first
  ASSERT_EQ(file.metadata().size(), b.values.size() + extra);
  if (extra) {
    EXPECT_EQ(file.metadata()[0].key(), "general.alignment");
    EXPECT_EQ(file.metadata()[0].as_u32(), b.writer.alignment());
  }
  EXPECT_EQ(file.alignment(), b.writer.alignment());
  for (std::size_t i = 0; i < b.values.size(); ++i) {
    const GgufValue& got = file.metadata()[i + extra];
    EXPECT_EQ(got.key(), b.values[i].first);
    expect_same_value(got, b.values[i].second);
  }
  // Typed reads of a few, so the comparison is not only of bytes against bytes.
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
  EXPECT_EQ(file.metadata("i8").as_i64(), -128);
  EXPECT_EQ(file.get_u64("u64"), std::numeric_limits<std::uint64_t>::max());
  EXPECT_TRUE(std::signbit(file.get_f32("f32")));
  EXPECT_TRUE(std::isnan(file.get_f32("f32.nan")));
  EXPECT_TRUE(file.get_bool("bool.true"));
  EXPECT_EQ(file.get_string("string.bytes"), std::string_view("a\0b\xc4\xa0\xff", 6));
  EXPECT_EQ(file.get_string_array("array.strings")[3], std::string(300, 'x'));
  EXPECT_EQ(file.get_i32_array("array.i32")[1], -2);
  EXPECT_EQ(file.get_f32_array("array.f32")[2], 3.25e-8f);
  const std::vector<GgufValue> nested = file.metadata("array.nested").array_items();
  ASSERT_EQ(nested.size(), 4u);
  EXPECT_EQ(nested[0].array_items()[0].as_i32(), -1);
  EXPECT_EQ(nested[2].as_string_array()[2], "\xe2\x96\x81the");

  ASSERT_EQ(file.tensors().size(), tensor_cases().size());
  for (std::size_t i = 0; i < tensor_cases().size(); ++i) {
    const TensorCase& c = tensor_cases()[i];
    const GgufTensor& t = file.tensors()[i];
    SCOPED_TRACE(c.name);
    EXPECT_EQ(t.name, c.name);
    EXPECT_EQ(t.type, c.type);
    ASSERT_EQ(t.n_dims, c.dims.size());
    for (std::size_t d = 0; d < 4; ++d) EXPECT_EQ(t.dims[d], d < c.dims.size() ? c.dims[d] : 1u);
    EXPECT_EQ(t.byte_size, b.data[i].size());
    EXPECT_EQ(t.file_offset % b.writer.alignment(), 0u);
    EXPECT_TRUE(std::equal(t.bytes().begin(), t.bytes().end(), b.data[i].begin(), b.data[i].end()));
  }
}

TEST(GgufWriter, EveryFieldRoundTripsThroughTheReader) {
  LOWBIT_TEST_RNG(rng);
  for (const std::uint32_t alignment : {32u, 64u, 1u, 4096u}) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    const Built b = build(rng, alignment);
    const std::vector<std::uint8_t> bytes = b.writer.to_bytes(fill_from(b.data));
    EXPECT_EQ(bytes.size(), b.writer.file_size());
    expect_round_trip(b, GgufFile::from_bytes(bytes));
  }
}

TEST(GgufWriter, CopiesEveryValueOfAFileExactly) {
  LOWBIT_TEST_RNG(rng);
  const Built b = build(rng, 32);
  const GgufFile first = GgufFile::from_bytes(b.writer.to_bytes(fill_from(b.data)));
  GgufWriter copy;
  for (const GgufValue& v : first.metadata()) copy.copy(v);
  const GgufFile second = GgufFile::from_bytes(copy.to_bytes([](std::size_t, std::span<std::uint8_t>) {}));
  ASSERT_EQ(second.metadata().size(), first.metadata().size());
  for (std::size_t i = 0; i < first.metadata().size(); ++i) {
    const GgufValue &a = first.metadata()[i], &c = second.metadata()[i];
    EXPECT_EQ(a.key(), c.key());
    EXPECT_EQ(a.type(), c.type());
    EXPECT_EQ(a.array_type(), c.array_type());
    EXPECT_EQ(a.array_size(), c.array_size());
    EXPECT_TRUE(std::equal(a.payload().begin(), a.payload().end(), c.payload().begin(), c.payload().end()))
        << a.key();
  }
}

// The test writer (tests/common/gguf_writer.h) lays files out by its own code: the same
// entries and tensors must give the same bytes.
TEST(GgufWriter, LayoutEqualsTheIndependentTestWriter) {
  LOWBIT_TEST_RNG(rng);
  for (const std::uint32_t alignment : {32u, 128u}) {
    GgufWriter w(alignment);
    test::GgufWriter t;
    t.layout_alignment = alignment;
    t.pad_end = true;
    if (alignment != 32) t.add<std::uint32_t>("general.alignment", test::gguf_type::u32, alignment);
    w.add("general.architecture", V::string("llama"));
    t.add_string("general.architecture", "llama");
    w.add("llama.block_count", V::u32(7));
    t.add<std::uint32_t>("llama.block_count", test::gguf_type::u32, 7);
    const std::vector<std::string> tokens = {"a", "", "bc"};
    w.add("tokenizer.ggml.tokens", V::string_array(tokens));
    t.add_string_array("tokenizer.ggml.tokens", tokens);
    std::vector<std::vector<std::uint8_t>> data;
    for (const TensorCase& c : tensor_cases()) {
      const std::size_t i = w.add_tensor(c.name, c.type, c.dims);
      data.push_back(random_bytes(rng, static_cast<std::size_t>(w.tensors()[i].byte_size)));
      t.add_tensor(c.name, c.dims, static_cast<std::uint32_t>(c.type), data.back());
    }
    EXPECT_EQ(w.to_bytes(fill_from(data)), t.bytes()) << "alignment " << alignment;
  }
}

TEST(GgufWriter, WritesTheSameBytesToDiskAndReplacesOnlyWhenAllowed) {
  LOWBIT_TEST_RNG(rng);
  const ScratchDir dir;
  const Built b = build(rng, 64);
  const std::string path = dir.file("model.gguf");
  b.writer.write(path, fill_from(b.data), /*overwrite=*/false);
  const std::vector<std::uint8_t> in_memory = b.writer.to_bytes(fill_from(b.data));
  EXPECT_EQ(read_all(path), in_memory);
  expect_round_trip(b, GgufFile::open(path));

  const Built other = build(rng, 32);
  EXPECT_LOWBIT_ERROR(other.writer.write(path, fill_from(other.data), false), "exists");
  EXPECT_EQ(read_all(path), in_memory);
  other.writer.write(path, fill_from(other.data), /*overwrite=*/true);
  EXPECT_EQ(read_all(path), other.writer.to_bytes(fill_from(other.data)));
  EXPECT_EQ(dir.entries(), 1u);  // no temporary file left beside it
}

TEST(GgufWriter, AFailedWriteLeavesNothingBehind) {
  LOWBIT_TEST_RNG(rng);
  const ScratchDir dir;
  const Built b = build(rng, 32);
  const std::string path = dir.file("model.gguf");
  auto failing = [&](std::size_t i, std::span<std::uint8_t> out) {
    if (i == 3) throw Error("tensor 3 failed");
    std::memcpy(out.data(), b.data[i].data(), out.size());
  };
  EXPECT_LOWBIT_ERROR(b.writer.write(path, failing, false), "tensor 3 failed");
  EXPECT_EQ(dir.entries(), 0u);

  // An existing file survives a failed overwrite unchanged.
  b.writer.write(path, fill_from(b.data), false);
  const std::vector<std::uint8_t> before = read_all(path);
  EXPECT_LOWBIT_ERROR(b.writer.write(path, failing, true), "tensor 3 failed");
  EXPECT_EQ(read_all(path), before);
  EXPECT_EQ(dir.entries(), 1u);
}

TEST(GgufWriter, OutputPathErrorsNameThePath) {
  const ScratchDir dir;
  const GgufWriter w;
  const auto nothing = [](std::size_t, std::span<std::uint8_t>) {};
  EXPECT_LOWBIT_ERROR(w.write(dir.file("missing/model.gguf"), nothing, false), "missing' of '");
  EXPECT_LOWBIT_ERROR(w.write(dir.file(""), nothing, true), "is a directory");
}

TEST(GgufWriter, RefusesBadDeclarationsByName) {
  EXPECT_LOWBIT_ERROR(GgufWriter(48), "alignment 48 is not a power of two");
  GgufWriter w;
  w.add("a", V::u8(1));
  EXPECT_LOWBIT_ERROR(w.add("a", V::u8(2)), "duplicate metadata key 'a'");
  EXPECT_LOWBIT_ERROR(w.add("", V::u8(2)), "empty metadata key");
  EXPECT_LOWBIT_ERROR(w.add("general.alignment", V::u32(64)), "general.alignment is set by the writer");
  const V mixed[] = {V::u8(1), V::i8(2)};
  EXPECT_LOWBIT_ERROR(V::array(GgufValueType::u8, mixed), "item 1 is INT8");
  w.add_tensor("t", GgmlType::q4_0, {64});
  EXPECT_LOWBIT_ERROR(w.add_tensor("t", GgmlType::f32, {1}), "duplicate tensor name 't'");
  EXPECT_LOWBIT_ERROR(w.add_tensor("q", GgmlType::q4_k, {128, 2}), "not a multiple of the 256-element blocks of Q4_K");
  EXPECT_LOWBIT_ERROR(w.add_tensor("z", GgmlType::f32, {4, 0}), "dimension 1 is 0");
  EXPECT_LOWBIT_ERROR(w.add_tensor("five", GgmlType::f32, {1, 1, 1, 1, 1}), "has 5 dims");
  EXPECT_LOWBIT_ERROR(w.add_tensor(std::string(64, 'n'), GgmlType::f32, {1}), "has 64 bytes");
  EXPECT_LOWBIT_ERROR(w.add_tensor("huge", GgmlType::f32, {1ull << 62, 4}), "dimension 1 is 4");
  EXPECT_EQ(w.tensors().size(), 1u);
}

}  // namespace
}  // namespace lowbit::engine
