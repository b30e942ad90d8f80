// Writer of GGUF (version 3) files, the reader's twin (reader.h): metadata of every
// value type (nested arrays included), tensor infos, and tensor data that a callback
// produces one tensor at a time, so that a file larger than memory is streamed out
// without holding its tensors. A file on disk is written whole or not at all: into a
// temporary file beside the target, every write checked, synced, then renamed onto
// the target; on any failure the temporary file is removed and the target untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/reader.h"

namespace lowbit::engine {

// One metadata value, encoded as the file stores it after its type id.
class GgufMetadataValue {
 public:
  static GgufMetadataValue u8(std::uint8_t v);
  static GgufMetadataValue i8(std::int8_t v);
  static GgufMetadataValue u16(std::uint16_t v);
  static GgufMetadataValue i16(std::int16_t v);
  static GgufMetadataValue u32(std::uint32_t v);
  static GgufMetadataValue i32(std::int32_t v);
  static GgufMetadataValue f32(float v);
  static GgufMetadataValue boolean(bool v);
  static GgufMetadataValue u64(std::uint64_t v);
  static GgufMetadataValue i64(std::int64_t v);
  static GgufMetadataValue f64(double v);
  static GgufMetadataValue string(std::string_view v);

  // An array whose items are all of `element_type` (arrays of arrays nest; the items
  // of an inner array may differ in length and element type, as the format allows).
  // Throws lowbit::Error naming the first item of another type.
  static GgufMetadataValue array(GgufValueType element_type, std::span<const GgufMetadataValue> items);
  static GgufMetadataValue string_array(std::span<const std::string> items);
  static GgufMetadataValue i32_array(std::span<const std::int32_t> items);
  static GgufMetadataValue f32_array(std::span<const float> items);

  // The value exactly as a reader found it: same type, element type and bytes.
  static GgufMetadataValue copy_of(const GgufValue& value);

  GgufValueType type() const { return type_; }
  std::span<const std::uint8_t> encoded() const { return bytes_; }

 private:
  GgufMetadataValue(GgufValueType type, std::vector<std::uint8_t> bytes) : type_(type), bytes_(std::move(bytes)) {}
  template <class T>
  static GgufMetadataValue scalar(GgufValueType type, T value);
  template <class T>
  static GgufMetadataValue fixed_array(GgufValueType element_type, std::span<const T> items);

  GgufValueType type_;
  std::vector<std::uint8_t> bytes_;
};

class GgufWriter {
 public:
  struct Tensor {
    std::string name;
    GgmlType type = GgmlType::f32;
    std::vector<std::uint64_t> dims;  // dims[0] contiguous, as the reader's
    std::uint64_t byte_size = 0;
    std::uint64_t offset = 0;  // relative to the data section, a multiple of the alignment
  };

  // Receives tensor `index`'s data into `bytes` (exactly its byte_size). Called once per
  // tensor, in order; whatever it throws abandons the file.
  using FillTensor = std::function<void(std::size_t index, std::span<std::uint8_t> bytes)>;

  // alignment: of the data section and of every tensor's data (a power of two); other
  // than GGUF's default 32 it is recorded as general.alignment, the first key.
  explicit GgufWriter(std::uint32_t alignment = 32);

  // Throws lowbit::Error for an empty or duplicate key, or general.alignment (which the
  // constructor owns).
  void add(std::string key, GgufMetadataValue value);
  // The reader's value under its own key.
  void copy(const GgufValue& value);

  // Declares a tensor (its data comes from the FillTensor at write time) and returns
  // its index. Throws lowbit::Error naming it for an empty, overlong (ggml holds 63
  // bytes) or duplicate name, 0 or more than 4 dims, a dimension of 0, a dims[0] that
  // is not a whole number of the type's blocks, or a size past 2^63 bytes.
  std::size_t add_tensor(std::string name, GgmlType type, std::vector<std::uint64_t> dims);

  std::uint32_t alignment() const { return alignment_; }
  std::size_t metadata_count() const { return entries_.size(); }
  std::span<const Tensor> tensors() const { return tensors_; }
  std::uint64_t data_offset() const;  // where the data section starts
  std::uint64_t file_size() const;

  // The whole file in memory.
  std::vector<std::uint8_t> to_bytes(const FillTensor& fill) const;

  // The whole file at `path`, or nothing: the directory must exist; an existing file
  // is replaced only when `overwrite` (else lowbit::Error naming it). Each tensor's
  // bytes are written while the next one is filled. Errors name the path.
  void write(const std::string& path, const FillTensor& fill, bool overwrite) const;

 private:
  struct Entry {
    std::string key;
    GgufMetadataValue value;
  };
  std::vector<std::uint8_t> header() const;  // everything before the data section, padded
  // Sink: write(span) and write_zeros(count), into memory or an OutputFile.
  template <class Sink>
  void write_to(Sink& sink, const FillTensor& fill) const;

  std::uint32_t alignment_;
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
  std::uint64_t data_bytes_ = 0;  // the data section, every tensor padded to the alignment
};

}  // namespace lowbit::engine
