#include "engine/gguf/writer.h"

#include <bit>
#include <cstring>
#include <future>
#include <limits>

#include "core/file_io.h"
#include "lowbit/error.h"

static_assert(std::endian::native == std::endian::little, "the GGUF writer stores values in native byte order");

namespace lowbit::engine {
namespace {

constexpr std::uint32_t k_version = 3;
constexpr std::uint32_t k_default_alignment = 32;
constexpr std::size_t k_max_tensor_name = 63;  // ggml's GGML_MAX_NAME (64) holds the terminator too
constexpr std::uint32_t k_max_dims = 4;
constexpr std::uint64_t k_max_i64 = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// Byte by byte: GCC 12 at -O3 warns falsely about inserting a range into a small vector.
template <class T>
void put(std::vector<std::uint8_t>& out, T value) {
  std::uint8_t raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  for (const std::uint8_t b : raw) out.push_back(b);
}

void put_string(std::vector<std::uint8_t>& out, std::string_view text) {
  put<std::uint64_t>(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

std::uint64_t padding(std::uint64_t size, std::uint64_t alignment) { return (alignment - size % alignment) % alignment; }

}  // namespace

// ---------------------------------------------------------------------------------
// GgufMetadataValue

template <class T>
GgufMetadataValue GgufMetadataValue::scalar(GgufValueType type, T value) {
  std::vector<std::uint8_t> bytes;
  put(bytes, value);
  return {type, std::move(bytes)};
}

GgufMetadataValue GgufMetadataValue::u8(std::uint8_t v) { return scalar(GgufValueType::u8, v); }
GgufMetadataValue GgufMetadataValue::i8(std::int8_t v) { return scalar(GgufValueType::i8, v); }
GgufMetadataValue GgufMetadataValue::u16(std::uint16_t v) { return scalar(GgufValueType::u16, v); }
GgufMetadataValue GgufMetadataValue::i16(std::int16_t v) { return scalar(GgufValueType::i16, v); }
GgufMetadataValue GgufMetadataValue::u32(std::uint32_t v) { return scalar(GgufValueType::u32, v); }
GgufMetadataValue GgufMetadataValue::i32(std::int32_t v) { return scalar(GgufValueType::i32, v); }
GgufMetadataValue GgufMetadataValue::f32(float v) { return scalar(GgufValueType::f32, v); }
GgufMetadataValue GgufMetadataValue::boolean(bool v) {
  return scalar(GgufValueType::boolean, static_cast<std::uint8_t>(v ? 1 : 0));
}
GgufMetadataValue GgufMetadataValue::u64(std::uint64_t v) { return scalar(GgufValueType::u64, v); }
GgufMetadataValue GgufMetadataValue::i64(std::int64_t v) { return scalar(GgufValueType::i64, v); }
GgufMetadataValue GgufMetadataValue::f64(double v) { return scalar(GgufValueType::f64, v); }

GgufMetadataValue GgufMetadataValue::string(std::string_view v) {
  std::vector<std::uint8_t> bytes;
  put_string(bytes, v);
  return {GgufValueType::string, std::move(bytes)};
}

GgufMetadataValue GgufMetadataValue::array(GgufValueType element_type, std::span<const GgufMetadataValue> items) {
  std::size_t size = 4 + 8;
  for (std::size_t i = 0; i < items.size(); ++i) {
    LOWBIT_CHECK(items[i].type() == element_type, "GGUF array of ", gguf_value_type_name(element_type), ": item ", i,
                 " is ", gguf_value_type_name(items[i].type()));
    size += items[i].bytes_.size();
  }
  std::vector<std::uint8_t> bytes;
  bytes.reserve(size);
  put(bytes, static_cast<std::uint32_t>(element_type));
  put<std::uint64_t>(bytes, items.size());
  for (const GgufMetadataValue& item : items) bytes.insert(bytes.end(), item.bytes_.begin(), item.bytes_.end());
  return {GgufValueType::array, std::move(bytes)};
}

GgufMetadataValue GgufMetadataValue::string_array(std::span<const std::string> items) {
  std::vector<std::uint8_t> bytes;
  put(bytes, static_cast<std::uint32_t>(GgufValueType::string));
  put<std::uint64_t>(bytes, items.size());
  for (const std::string& item : items) put_string(bytes, item);
  return {GgufValueType::array, std::move(bytes)};
}

template <class T>
GgufMetadataValue GgufMetadataValue::fixed_array(GgufValueType element_type, std::span<const T> items) {
  std::vector<std::uint8_t> bytes;
  bytes.reserve(4 + 8 + items.size_bytes());
  put(bytes, static_cast<std::uint32_t>(element_type));
  put<std::uint64_t>(bytes, items.size());
  for (const T& item : items) put(bytes, item);
  return {GgufValueType::array, std::move(bytes)};
}

GgufMetadataValue GgufMetadataValue::i32_array(std::span<const std::int32_t> items) {
  return fixed_array(GgufValueType::i32, items);
}

GgufMetadataValue GgufMetadataValue::f32_array(std::span<const float> items) {
  return fixed_array(GgufValueType::f32, items);
}

GgufMetadataValue GgufMetadataValue::copy_of(const GgufValue& value) {
  const std::span<const std::uint8_t> payload = value.payload();
  std::vector<std::uint8_t> bytes;
  bytes.reserve(payload.size() + 12);
  if (value.type() == GgufValueType::string) {
    put<std::uint64_t>(bytes, payload.size());
  } else if (value.type() == GgufValueType::array) {
    put(bytes, static_cast<std::uint32_t>(value.array_type()));
    put<std::uint64_t>(bytes, value.array_size());
  }
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return {value.type(), std::move(bytes)};
}

// ---------------------------------------------------------------------------------
// GgufWriter

namespace {

class MemorySink {
 public:
  explicit MemorySink(std::vector<std::uint8_t>& out) : out_(out) {}
  void write(std::span<const std::uint8_t> bytes) { out_.insert(out_.end(), bytes.begin(), bytes.end()); }
  void write_zeros(std::uint64_t count) { out_.insert(out_.end(), static_cast<std::size_t>(count), 0); }

 private:
  std::vector<std::uint8_t>& out_;
};

}  // namespace

GgufWriter::GgufWriter(std::uint32_t alignment) : alignment_(alignment) {
  LOWBIT_CHECK(alignment != 0 && std::has_single_bit(alignment), "GGUF writer: alignment ", alignment,
               " is not a power of two");
  if (alignment != k_default_alignment) {
    entries_.push_back({"general.alignment", GgufMetadataValue::u32(alignment)});
  }
}

void GgufWriter::add(std::string key, GgufMetadataValue value) {
  LOWBIT_CHECK(!key.empty(), "GGUF writer: empty metadata key");
  LOWBIT_CHECK(key != "general.alignment", "GGUF writer: general.alignment is set by the writer's alignment (",
               alignment_, "), not as a key");
  for (const Entry& e : entries_) LOWBIT_CHECK(e.key != key, "GGUF writer: duplicate metadata key '", key, "'");
  entries_.push_back({std::move(key), std::move(value)});
}

void GgufWriter::copy(const GgufValue& value) { add(std::string(value.key()), GgufMetadataValue::copy_of(value)); }

std::size_t GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<std::uint64_t> dims) {
  LOWBIT_CHECK(!name.empty() && name.size() <= k_max_tensor_name, "GGUF writer: tensor name '", name, "' has ",
               name.size(), " bytes (expected 1 to ", k_max_tensor_name, ")");
  for (const Tensor& t : tensors_) LOWBIT_CHECK(t.name != name, "GGUF writer: duplicate tensor name '", name, "'");
  LOWBIT_CHECK(!dims.empty() && dims.size() <= k_max_dims, "GGUF writer: tensor '", name, "' has ", dims.size(),
               " dims (expected 1 to ", k_max_dims, ")");
  const GgmlTypeInfo& info = ggml_type_info(type);
  std::uint64_t elements = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    LOWBIT_CHECK(dims[d] >= 1 && dims[d] <= k_max_i64 / elements, "GGUF writer: tensor '", name, "': dimension ", d,
                 " is ", dims[d], " (expected at least 1, and at most 2^63-1 elements in all)");
    elements *= dims[d];
  }
  LOWBIT_CHECK(dims[0] % info.block_elements == 0, "GGUF writer: tensor '", name, "': dimension 0 is ", dims[0],
               ", not a multiple of the ", info.block_elements, "-element blocks of ", info.name);
  const std::uint64_t blocks = elements / info.block_elements;
  LOWBIT_CHECK(blocks <= (k_max_i64 - data_bytes_ - alignment_) / info.block_bytes, "GGUF writer: tensor '", name,
               "': the data section would pass 2^63 bytes");
  Tensor tensor{std::move(name), type, std::move(dims), blocks * info.block_bytes, data_bytes_};
  data_bytes_ += tensor.byte_size + padding(tensor.byte_size, alignment_);
  tensors_.push_back(std::move(tensor));
  return tensors_.size() - 1;
}

std::vector<std::uint8_t> GgufWriter::header() const {
  std::vector<std::uint8_t> out;
  for (const char c : {'G', 'G', 'U', 'F'}) out.push_back(static_cast<std::uint8_t>(c));
  put(out, k_version);
  put<std::uint64_t>(out, tensors_.size());
  put<std::uint64_t>(out, entries_.size());
  for (const Entry& e : entries_) {
    put_string(out, e.key);
    put(out, static_cast<std::uint32_t>(e.value.type()));
    const std::span<const std::uint8_t> bytes = e.value.encoded();
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put(out, static_cast<std::uint32_t>(t.dims.size()));
    for (const std::uint64_t d : t.dims) put(out, d);
    put(out, static_cast<std::uint32_t>(t.type));
    put(out, t.offset);
  }
  out.resize(out.size() + padding(out.size(), alignment_), 0);
  return out;
}

std::uint64_t GgufWriter::data_offset() const { return header().size(); }

std::uint64_t GgufWriter::file_size() const { return data_offset() + data_bytes_; }

template <class Sink>
void GgufWriter::write_to(Sink& sink, const FillTensor& fill) const {
  sink.write(header());
  // Two buffers: tensor i goes out (on another thread) while tensor i + 1 is filled.
  std::vector<std::uint8_t> buffers[2];
  std::future<void> pending;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    std::vector<std::uint8_t>& buffer = buffers[i % 2];
    buffer.resize(static_cast<std::size_t>(tensors_[i].byte_size));
    fill(i, buffer);
    if (pending.valid()) pending.get();  // rethrows the previous write's error
    const std::uint64_t pad = padding(buffer.size(), alignment_);
    pending = std::async(std::launch::async, [&sink, &buffer, pad] {
      sink.write(buffer);
      sink.write_zeros(pad);
    });
  }
  if (pending.valid()) pending.get();
}

std::vector<std::uint8_t> GgufWriter::to_bytes(const FillTensor& fill) const {
  std::vector<std::uint8_t> out;
  MemorySink sink(out);
  write_to(sink, fill);
  return out;
}

void GgufWriter::write(const std::string& path, const FillTensor& fill, bool overwrite) const {
  OutputFile file(path, overwrite);
  write_to(file, fill);
  const std::uint64_t expected = file_size();
  LOWBIT_CHECK(file.bytes_written() == expected, "output file '", path, "': wrote ", file.bytes_written(),
               " bytes, expected ", expected);
  file.commit();
}

}  // namespace lowbit::engine
