// Reader of GGUF (version 3) model files: header, metadata, tensor infos and tensor
// data, memory-mapped read-only. Everything is validated when the file is opened:
// every length, count, offset and size is checked against the bytes that remain
// before it is used, so a truncated or hostile file gets a lowbit::Error naming the
// byte offset, key or tensor at fault, never an out-of-bounds read.
//
// Views (string_view, spans, tensor data pointers) point into the file's bytes and
// stay valid as long as the GgufFile (moving it keeps them valid).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace lowbit::engine {

// Metadata value types, as stored in the file.
enum class GgufValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

// "UINT32", "ARRAY", ... or "type 17" for an id outside the enum.
std::string gguf_value_type_name(GgufValueType type);

// One metadata value (or one element of an array value), validated at open. The
// typed accessors throw lowbit::Error naming the key and byte offset on a type
// mismatch or a value that does not fit.
class GgufValue {
 public:
  std::string_view key() const { return key_; }
  GgufValueType type() const { return type_; }
  std::uint64_t file_offset() const { return file_offset_; }  // where the value starts

  // Arrays only (type() == array): element type and count.
  GgufValueType array_type() const { return array_type_; }
  std::uint64_t array_size() const { return array_size_; }

  // Integers: any integer type whose value fits the result.
  std::uint32_t as_u32() const;
  std::uint64_t as_u64() const;
  std::int32_t as_i32() const;
  std::int64_t as_i64() const;
  float as_f32() const;  // FLOAT32, or FLOAT64 rounded to float
  double as_f64() const;  // FLOAT32 or FLOAT64
  bool as_bool() const;
  std::string_view as_string() const;

  // Arrays of strings (tokenizer tokens, merges), of integers that fit int32
  // (token types), of FLOAT32 (scores).
  std::vector<std::string_view> as_string_array() const;
  std::vector<std::int32_t> as_i32_array() const;
  std::vector<float> as_f32_array() const;

  // The elements of any array, nested arrays included, as values of their own.
  std::vector<GgufValue> array_items() const;

  // The value's bytes as stored: a scalar's bytes, a string's characters (after its
  // length), an array's elements (after its element type and count).
  std::span<const std::uint8_t> payload() const { return payload_; }

 private:
  friend class GgufParser;
  GgufValue() = default;  // only the parser makes values, so every payload is validated

  std::string describe_location() const;
  void expect_type(GgufValueType wanted) const;
  void expect_array_of(GgufValueType wanted) const;

  std::string_view key_;
  GgufValueType type_ = GgufValueType::u8;
  GgufValueType array_type_ = GgufValueType::u8;
  std::uint64_t array_size_ = 0;
  std::uint64_t file_offset_ = 0;
  std::span<const std::uint8_t> payload_;
};

struct GgufTensor {
  std::string_view name;
  GgmlType type = GgmlType::f32;
  std::uint32_t n_dims = 0;
  std::array<std::uint64_t, 4> dims{1, 1, 1, 1};  // dims[0] is contiguous; unused dims are 1
  std::uint64_t element_count = 0;
  std::uint64_t byte_size = 0;
  std::uint64_t file_offset = 0;   // absolute offset of the data in the file
  const std::uint8_t* data = nullptr;  // byte_size bytes, aligned to the file's alignment

  std::span<const std::uint8_t> bytes() const { return {data, byte_size}; }
};

class GgufFile {
 public:
  // Maps the file read-only. Throws lowbit::Error if it cannot be opened or is not
  // a valid GGUF v3 file.
  static GgufFile open(const std::string& path);
  // Copies the bytes (into a buffer aligned to 4096 bytes) and parses them.
  static GgufFile from_bytes(std::span<const std::uint8_t> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& source() const { return source_; }  // the path, or "<memory>"
  std::uint32_t version() const { return version_; }
  std::uint64_t file_size() const;
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // start of the data section

  // Metadata in file order.
  std::span<const GgufValue> metadata() const { return metadata_; }
  const GgufValue* find_metadata(std::string_view key) const;  // nullptr when absent
  const GgufValue& metadata(std::string_view key) const;       // throws when absent

  std::uint32_t get_u32(std::string_view key) const { return metadata(key).as_u32(); }
  std::uint64_t get_u64(std::string_view key) const { return metadata(key).as_u64(); }
  std::int64_t get_i64(std::string_view key) const { return metadata(key).as_i64(); }
  float get_f32(std::string_view key) const { return metadata(key).as_f32(); }
  bool get_bool(std::string_view key) const { return metadata(key).as_bool(); }
  std::string_view get_string(std::string_view key) const { return metadata(key).as_string(); }
  std::vector<std::string_view> get_string_array(std::string_view key) const {
    return metadata(key).as_string_array();
  }
  std::vector<std::int32_t> get_i32_array(std::string_view key) const { return metadata(key).as_i32_array(); }
  std::vector<float> get_f32_array(std::string_view key) const { return metadata(key).as_f32_array(); }

  // Tensors in file order.
  std::span<const GgufTensor> tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;  // nullptr when absent
  const GgufTensor& tensor(std::string_view name) const;       // throws when absent

  // One line: version, architecture and name, counts, tensor types, size.
  std::string describe() const;

 private:
  class Bytes;
  friend class GgufParser;
  GgufFile(std::unique_ptr<Bytes> bytes, std::string source);

  std::unique_ptr<Bytes> bytes_;
  std::string source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, std::size_t> metadata_index_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_;
};

}  // namespace lowbit::engine
