// A small GGUF writer for tests and fuzz seeds: builds files in memory, byte by
// byte, independently of the reader (its own type ids, its own layout code), so a
// round trip checks the reader against a second reading of the format. It writes
// whatever it is told, so tests can also build hostile files: wrong counts, bad
// offsets, unknown types.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit::test {

// GGUF metadata value type ids.
namespace gguf_type {
constexpr std::uint32_t u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8,
                        array = 9, u64 = 10, i64 = 11, f64 = 12;
}

// ggml tensor type ids used by the tests.
namespace ggml_id {
constexpr std::uint32_t f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q2_k = 10, q3_k = 11,
                        q4_k = 12, q5_k = 13, q6_k = 14, bf16 = 30;
}

// Little-endian encoder.
class ByteWriter {
 public:
  template <class T>
  ByteWriter& put(T value) {
    // Byte by byte: GCC 12 at -O3 warns falsely about resize + memcpy and about
    // inserting into a fresh vector.
    std::uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    for (const std::uint8_t b : raw) bytes_.push_back(b);
    return *this;
  }
  ByteWriter& u32(std::uint32_t v) { return put(v); }
  ByteWriter& u64(std::uint64_t v) { return put(v); }
  // A GGUF string: 8-byte length, then the bytes (no terminator).
  ByteWriter& str(std::string_view s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteWriter& raw(const std::vector<std::uint8_t>& more) {
    bytes_.insert(bytes_.end(), more.begin(), more.end());
    return *this;
  }
  ByteWriter& zeros(std::size_t n) {
    bytes_.insert(bytes_.end(), n, std::uint8_t{0});
    return *this;
  }
  std::size_t size() const { return bytes_.size(); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

class GgufWriter {
 public:
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;  // n_dims is dims.size(), whatever it is
    std::uint32_t type;
    std::vector<std::uint8_t> data;
    std::optional<std::uint64_t> offset;  // relative to the data section; default: laid out in order
  };

  struct Built {
    std::vector<std::uint8_t> bytes;
    std::uint64_t data_start = 0;                 // absolute offset of the data section
    std::vector<std::uint64_t> tensor_offsets;    // relative offsets as written
  };

  std::string magic = "GGUF";
  std::uint32_t version = 3;
  // Alignment used to lay the file out; the reader learns it only from a
  // "general.alignment" entry, which tests add themselves.
  std::uint64_t layout_alignment = 32;
  // Header counts; default: the number of entries added.
  std::optional<std::uint64_t> metadata_count;
  std::optional<std::uint64_t> tensor_count;
  // Pad after the last tensor too (as ggml's writer does); off, the file ends with
  // tensor data, so every proper prefix of it is truncated.
  bool pad_end = false;

  // A metadata entry with its value already encoded (after the type id).
  void add_raw(std::string key, std::uint32_t type, std::vector<std::uint8_t> value) {
    entries_.push_back({std::move(key), type, std::move(value)});
  }
  template <class T>
  void add(std::string key, std::uint32_t type, T value) {
    add_raw(std::move(key), type, ByteWriter().put(value).bytes());
  }
  void add_string(std::string key, std::string_view value) {
    add_raw(std::move(key), gguf_type::string, ByteWriter().str(value).bytes());
  }
  template <class T>
  void add_array(std::string key, std::uint32_t element_type, const std::vector<T>& values) {
    ByteWriter w;
    w.u32(element_type).u64(values.size());
    for (const T& v : values) w.put(v);
    add_raw(std::move(key), gguf_type::array, w.bytes());
  }
  void add_string_array(std::string key, const std::vector<std::string>& values) {
    ByteWriter w;
    w.u32(gguf_type::string).u64(values.size());
    for (const std::string& v : values) w.str(v);
    add_raw(std::move(key), gguf_type::array, w.bytes());
  }

  std::size_t add_tensor(std::string name, std::vector<std::uint64_t> dims, std::uint32_t type,
                         std::vector<std::uint8_t> data) {
    tensors_.push_back({std::move(name), std::move(dims), type, std::move(data), std::nullopt});
    return tensors_.size() - 1;
  }
  Tensor& tensor(std::size_t index) { return tensors_[index]; }

  Built build() const {
    ByteWriter w;
    for (std::size_t i = 0; i < 4; ++i) w.put(static_cast<std::uint8_t>(i < magic.size() ? magic[i] : 0));
    w.u32(version);
    w.u64(tensor_count.value_or(tensors_.size()));
    w.u64(metadata_count.value_or(entries_.size()));
    for (const Entry& e : entries_) w.str(e.key).u32(e.type).raw(e.value);

    Built built;
    std::uint64_t next = 0;
    for (const Tensor& t : tensors_) {
      const std::uint64_t offset = t.offset.value_or(next);
      w.str(t.name).u32(static_cast<std::uint32_t>(t.dims.size()));
      for (std::uint64_t d : t.dims) w.u64(d);
      w.u32(t.type).u64(offset);
      built.tensor_offsets.push_back(offset);
      next = round_up(next + t.data.size());
    }
    // A file without tensors may end right after its metadata.
    if (!tensors_.empty() || pad_end) w.zeros(round_up(w.size()) - w.size());
    built.data_start = w.size();
    // Data in order of writing, each tensor padded to the alignment (explicit offsets
    // do not move the bytes; they only say where the reader should look).
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      w.raw(tensors_[i].data);
      if (i + 1 < tensors_.size() || pad_end) w.zeros(round_up(w.size()) - w.size());
    }
    built.bytes = w.bytes();
    return built;
  }

  std::vector<std::uint8_t> bytes() const { return build().bytes; }

 private:
  struct Entry {
    std::string key;
    std::uint32_t type;
    std::vector<std::uint8_t> value;
  };

  std::uint64_t round_up(std::uint64_t n) const {
    return (n + layout_alignment - 1) / layout_alignment * layout_alignment;
  }

  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace lowbit::test
