#include "engine/gguf/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <numeric>
#include <sstream>
#include <utility>

#include "lowbit/error.h"

static_assert(std::endian::native == std::endian::little, "the GGUF reader decodes little-endian files in place");

namespace lowbit::engine {
namespace {

constexpr std::uint32_t k_version = 3;
constexpr std::uint64_t k_default_alignment = 32;
constexpr std::uint32_t k_max_dims = 4;
constexpr int k_max_array_depth = 16;  // arrays of arrays of ...: bounds the parser's recursion
constexpr std::size_t k_buffer_alignment = 4096;  // from_bytes copies: like a mapping's page alignment
constexpr std::uint64_t k_max_i64 = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// Smallest encodings, used to reject absurd counts before looping over them:
// key (length 8 + 0 chars) + type 4 + smallest value 1;
constexpr std::uint64_t k_min_metadata_bytes = 8 + 4 + 1;
// name (length 8) + n_dims 4 + one dim 8 + type 4 + offset 8.
constexpr std::uint64_t k_min_tensor_info_bytes = 8 + 4 + 8 + 4 + 8;

// Bytes of one value of a fixed-size type; 0 for STRING and ARRAY.
std::uint64_t fixed_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::u16:
    case GgufValueType::i16:
      return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64:
      return 8;
    case GgufValueType::string:
    case GgufValueType::array:
      return 0;
  }
  return 0;
}

// Bytes the smallest element of an array of this type takes (an empty string is its
// 8-byte length, an empty array its type and count).
std::uint64_t min_element_size(GgufValueType type) {
  if (type == GgufValueType::string) return 8;
  if (type == GgufValueType::array) return 4 + 8;
  return fixed_size(type);
}

bool is_integer(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::u16:
    case GgufValueType::i16:
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::u64:
    case GgufValueType::i64:
      return true;
    default:
      return false;
  }
}

template <class T>
T load(const std::uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// An integer element of the given type, widened: signed types to int64, unsigned to uint64.
struct WideInteger {
  bool is_signed;
  std::int64_t s;
  std::uint64_t u;
};

WideInteger load_integer(GgufValueType type, const std::uint8_t* p) {
  switch (type) {
    case GgufValueType::u8: return {false, 0, load<std::uint8_t>(p)};
    case GgufValueType::u16: return {false, 0, load<std::uint16_t>(p)};
    case GgufValueType::u32: return {false, 0, load<std::uint32_t>(p)};
    case GgufValueType::u64: return {false, 0, load<std::uint64_t>(p)};
    case GgufValueType::i8: return {true, load<std::int8_t>(p), 0};
    case GgufValueType::i16: return {true, load<std::int16_t>(p), 0};
    case GgufValueType::i32: return {true, load<std::int32_t>(p), 0};
    case GgufValueType::i64: return {true, load<std::int64_t>(p), 0};
    default: LOWBIT_FAIL("load_integer: ", gguf_value_type_name(type), " is not an integer type");
  }
}

template <class T>
bool fits(const WideInteger& v) {
  return v.is_signed ? std::in_range<T>(v.s) : std::in_range<T>(v.u);
}

std::string to_string(const WideInteger& v) { return v.is_signed ? std::to_string(v.s) : std::to_string(v.u); }

// Keys and names come from the file: quote them with non-printable bytes escaped and
// long ones cut, so an error message stays one readable line.
std::string printable(std::string_view text) {
  constexpr std::size_t k_max_chars = 96;
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < k_max_chars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      constexpr char k_hex[] = "0123456789abcdef";
      out += "\\x";
      out += k_hex[c >> 4];
      out += k_hex[c & 15];
    }
  }
  if (text.size() > k_max_chars) out += "...(" + std::to_string(text.size()) + " bytes)";
  return out + "'";
}

std::string type_list(const std::vector<GgufTensor>& tensors) {
  std::map<std::string_view, std::size_t> counts;
  for (const GgufTensor& t : tensors) ++counts[ggml_type_name(t.type)];
  std::string out;
  for (const auto& [name, count] : counts) {
    out += (out.empty() ? "" : ", ") + std::string(name) + " x" + std::to_string(count);
  }
  return out;
}

// Bounds-checked cursor over a byte range that starts at file offset `base`. Every
// read checks the length against what remains first; the error names the context
// (which key or tensor), what was being read and the byte offset in the file.
class Reader {
 public:
  Reader(std::span<const std::uint8_t> bytes, std::uint64_t base, std::string context)
      : bytes_(bytes), base_(base), context_(std::move(context)) {}

  std::uint64_t offset() const { return base_ + pos_; }  // in the file
  const std::uint8_t* here() const { return bytes_.data() + pos_; }
  std::uint64_t remaining() const { return bytes_.size() - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& context() const { return context_; }

  void require(std::uint64_t n, const char* what) const {
    if (n > remaining()) {
      LOWBIT_FAIL(context_, ": truncated: ", what, " at byte ", offset(), " needs ", n, " bytes but only ",
                  remaining(), " remain");
    }
  }

  std::span<const std::uint8_t> take(std::uint64_t n, const char* what) {
    require(n, what);
    std::span<const std::uint8_t> out = bytes_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += n;
    return out;
  }

  template <class T>
  T read(const char* what) {
    return load<T>(take(sizeof(T), what).data());
  }

  std::string_view read_string(const char* what) {
    const std::uint64_t length = read<std::uint64_t>(what);
    const std::span<const std::uint8_t> chars = take(length, what);
    return {reinterpret_cast<const char*>(chars.data()), chars.size()};
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::uint64_t base_;
  std::uint64_t pos_ = 0;
  std::string context_;
};

}  // namespace

std::string gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8: return "UINT8";
    case GgufValueType::i8: return "INT8";
    case GgufValueType::u16: return "UINT16";
    case GgufValueType::i16: return "INT16";
    case GgufValueType::u32: return "UINT32";
    case GgufValueType::i32: return "INT32";
    case GgufValueType::f32: return "FLOAT32";
    case GgufValueType::boolean: return "BOOL";
    case GgufValueType::string: return "STRING";
    case GgufValueType::array: return "ARRAY";
    case GgufValueType::u64: return "UINT64";
    case GgufValueType::i64: return "INT64";
    case GgufValueType::f64: return "FLOAT64";
  }
  return "type " + std::to_string(static_cast<std::uint32_t>(type));
}

// ---------------------------------------------------------------------------------
// The file's bytes: a read-only mapping, or an aligned copy.

class GgufFile::Bytes {
 public:
  static std::unique_ptr<Bytes> map(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    LOWBIT_CHECK(fd >= 0, "GGUF file '", path, "': cannot open: ", std::strerror(errno));
    // The mapping outlives the descriptor, so close it on every path out of here.
    struct CloseOnExit {
      int fd;
      ~CloseOnExit() { ::close(fd); }
    } closer{fd};

    struct stat info {};
    LOWBIT_CHECK(::fstat(fd, &info) == 0, "GGUF file '", path, "': cannot stat: ", std::strerror(errno));
    LOWBIT_CHECK(S_ISREG(info.st_mode), "GGUF file '", path, "': not a regular file");
    auto bytes = std::unique_ptr<Bytes>(new Bytes());
    bytes->size_ = static_cast<std::uint64_t>(info.st_size);
    if (bytes->size_ == 0) return bytes;  // mmap rejects length 0; the parser reports the empty file
    if constexpr (sizeof(std::size_t) < sizeof(std::uint64_t)) {
      LOWBIT_CHECK(bytes->size_ <= std::numeric_limits<std::size_t>::max(), "GGUF file '", path, "': ",
                   bytes->size_, " bytes do not fit the address space");
    }
    void* address = ::mmap(nullptr, static_cast<std::size_t>(bytes->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    LOWBIT_CHECK(address != MAP_FAILED, "GGUF file '", path, "': cannot map ", bytes->size_,
                 " bytes: ", std::strerror(errno));
    bytes->data_ = static_cast<std::uint8_t*>(address);
    bytes->mapped_ = true;
    return bytes;
  }

  static std::unique_ptr<Bytes> copy(std::span<const std::uint8_t> source) {
    auto bytes = std::unique_ptr<Bytes>(new Bytes());
    bytes->size_ = source.size();
    if (source.empty()) return bytes;
    bytes->data_ = static_cast<std::uint8_t*>(::operator new(source.size(), std::align_val_t{k_buffer_alignment}));
    std::memcpy(bytes->data_, source.data(), source.size());
    return bytes;
  }

  ~Bytes() {
    if (data_ == nullptr) return;
    if (mapped_) {
      ::munmap(data_, static_cast<std::size_t>(size_));
    } else {
      ::operator delete(data_, std::align_val_t{k_buffer_alignment});
    }
  }

  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;

  std::span<const std::uint8_t> span() const { return {data_, static_cast<std::size_t>(size_)}; }

 private:
  Bytes() = default;
  std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
  bool mapped_ = false;
};

// ---------------------------------------------------------------------------------
// The parser: the only code that builds GgufValues and fills a GgufFile.

class GgufParser {
 public:
  // Reads one value of `type` at the reader's position; for arrays, walks (and so
  // validates) every element, nested arrays included.
  static GgufValue parse_value(Reader& in, GgufValueType type, std::string_view key, int depth) {
    GgufValue value;
    value.key_ = key;
    value.type_ = type;
    value.file_offset_ = in.offset();
    if (type != GgufValueType::array) {
      value.payload_ = type == GgufValueType::string ? string_payload(in) : in.take(fixed_size(type), "value");
      return value;
    }
    LOWBIT_CHECK(depth < k_max_array_depth, in.context(), ": arrays nested deeper than ", k_max_array_depth,
                 " levels at byte ", in.offset());
    const std::uint64_t type_offset = in.offset();
    value.array_type_ = read_value_type(in, "array element type", type_offset);
    value.array_size_ = in.read<std::uint64_t>("array element count");
    const std::uint64_t min_size = min_element_size(value.array_type_);
    if (value.array_size_ > in.remaining() / min_size) {
      LOWBIT_FAIL(in.context(), ": array at byte ", type_offset, " claims ", value.array_size_, " ",
                  gguf_value_type_name(value.array_type_), " elements, but they need at least ", min_size,
                  " bytes each and only ", in.remaining(), " bytes remain");
    }
    const std::uint64_t elements_start = in.offset();
    if (fixed_size(value.array_type_) != 0) {
      value.payload_ = in.take(value.array_size_ * min_size, "array elements");  // no overflow: checked above
      return value;
    }
    const std::uint8_t* elements = in.here();
    for (std::uint64_t i = 0; i < value.array_size_; ++i) {
      if (value.array_type_ == GgufValueType::string) {
        in.read_string("array element string");
      } else {
        parse_value(in, GgufValueType::array, key, depth + 1);
      }
    }
    value.payload_ = {elements, static_cast<std::size_t>(in.offset() - elements_start)};
    return value;
  }

  static GgufFile parse(std::unique_ptr<GgufFile::Bytes> bytes, std::string source) {
    GgufFile file(std::move(bytes), std::move(source));
    const std::span<const std::uint8_t> all = file.bytes_->span();
    Reader in(all, 0, "GGUF " + printable(file.source_) + ": header");

    read_header(in, file);
    const std::uint64_t tensor_count = in.read<std::uint64_t>("tensor count");
    const std::uint64_t metadata_count = in.read<std::uint64_t>("metadata count");
    check_counts(in, metadata_count, tensor_count);

    for (std::uint64_t i = 0; i < metadata_count; ++i) read_metadata(in, file, i);
    in.set_context("GGUF " + printable(file.source_) + ": tensor infos");
    LOWBIT_CHECK(tensor_count <= in.remaining() / k_min_tensor_info_bytes, in.context(), ": the header's tensor count ",
                 tensor_count, " needs at least ", k_min_tensor_info_bytes,
                 " bytes per tensor info, but only ", in.remaining(), " bytes follow the metadata (byte ",
                 in.offset(), ")");
    std::vector<std::uint64_t> relative_offsets;
    for (std::uint64_t i = 0; i < tensor_count; ++i) relative_offsets.push_back(read_tensor_info(in, file, i));

    file.alignment_ = read_alignment(file);
    place_tensor_data(file, in.offset(), relative_offsets);
    return file;
  }

 private:
  static std::span<const std::uint8_t> string_payload(Reader& in) {
    const std::string_view text = in.read_string("string");
    return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
  }

  static GgufValueType read_value_type(Reader& in, const char* what, std::uint64_t at) {
    const auto id = in.read<std::uint32_t>(what);
    LOWBIT_CHECK(id <= static_cast<std::uint32_t>(GgufValueType::f64), in.context(), ": ", what, " ", id,
                 " at byte ", at, " is not a GGUF value type (0 to 12)");
    return static_cast<GgufValueType>(id);
  }

  static void read_header(Reader& in, GgufFile& file) {
    const std::span<const std::uint8_t> magic = in.take(4, "magic");
    if (std::memcmp(magic.data(), "GGUF", 4) != 0) {
      const std::string_view seen(reinterpret_cast<const char*>(magic.data()), 4);
      LOWBIT_FAIL(in.context(), ": not a GGUF file: magic bytes ", printable(seen),
                  " at byte 0, expected 'GGUF'");
    }
    file.version_ = in.read<std::uint32_t>("version");
    if (file.version_ != k_version) {
      const bool big_endian = file.version_ == (k_version << 24);
      LOWBIT_FAIL(in.context(), ": unsupported GGUF version ", file.version_, " at byte 4 (this reader takes version ",
                  k_version, big_endian ? "; the file looks big-endian, only little-endian files are read)" : ")");
    }
  }

  // Rejects counts that cannot fit in the rest of the file before anything loops
  // over them or sizes a container by them.
  static void check_counts(const Reader& in, std::uint64_t metadata_count, std::uint64_t tensor_count) {
    const std::uint64_t left = in.remaining();
    const bool fit = metadata_count <= left / k_min_metadata_bytes && tensor_count <= left / k_min_tensor_info_bytes &&
                     metadata_count * k_min_metadata_bytes <= left - tensor_count * k_min_tensor_info_bytes;
    LOWBIT_CHECK(fit, in.context(), ": ", metadata_count, " metadata entries and ", tensor_count,
                 " tensor infos cannot fit in the ", left, " bytes after the header (each entry takes at least ",
                 k_min_metadata_bytes, " bytes, each tensor info ", k_min_tensor_info_bytes, ")");
  }

  static void read_metadata(Reader& in, GgufFile& file, std::uint64_t index) {
    const std::uint64_t key_offset = in.offset();
    in.set_context("GGUF " + printable(file.source_) + ": metadata entry " + std::to_string(index));
    const std::string_view key = in.read_string("key");
    in.set_context("GGUF " + printable(file.source_) + ": metadata " + printable(key));
    const GgufValueType type = read_value_type(in, "value type", in.offset());
    const GgufValue value = parse_value(in, type, key, 0);
    const auto [it, inserted] = file.metadata_index_.emplace(key, file.metadata_.size());
    if (!inserted) {
      LOWBIT_FAIL(in.context(), ": duplicate key at byte ", key_offset, " (first defined at byte ",
                  file.metadata_[it->second].file_offset(), ")");
    }
    file.metadata_.push_back(value);
  }

  // Reads one tensor info and returns its data offset relative to the data section.
  static std::uint64_t read_tensor_info(Reader& in, GgufFile& file, std::uint64_t index) {
    const std::uint64_t info_offset = in.offset();
    in.set_context("GGUF " + printable(file.source_) + ": tensor info " + std::to_string(index));
    GgufTensor tensor;
    tensor.name = in.read_string("tensor name");
    in.set_context("GGUF " + printable(file.source_) + ": tensor " + printable(tensor.name));

    const std::uint64_t dims_offset = in.offset();
    tensor.n_dims = in.read<std::uint32_t>("n_dims");
    LOWBIT_CHECK(tensor.n_dims >= 1 && tensor.n_dims <= k_max_dims, in.context(), ": n_dims ", tensor.n_dims,
                 " at byte ", dims_offset, " (expected 1 to ", k_max_dims, ")");
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < tensor.n_dims; ++d) {
      const std::uint64_t dim = in.read<std::uint64_t>("dimension");
      LOWBIT_CHECK(dim >= 1 && dim <= k_max_i64, in.context(), ": dimension ", d, " is ", dim, " at byte ",
                   in.offset() - 8, " (expected 1 to 2^63-1)");
      LOWBIT_CHECK(elements <= k_max_i64 / dim, in.context(), ": dimensions up to ", d,
                   " hold more than 2^63-1 elements (dimension ", d, " is ", dim, ")");
      elements *= dim;
      tensor.dims[d] = dim;
    }
    tensor.element_count = elements;

    const std::uint64_t type_offset = in.offset();
    const auto type_id = in.read<std::uint32_t>("ggml type");
    const GgmlTypeInfo* type = find_ggml_type(type_id);
    LOWBIT_CHECK(type != nullptr, in.context(), ": unknown ggml type id ", type_id, " at byte ", type_offset);
    tensor.type = type->type;
    LOWBIT_CHECK(tensor.dims[0] % type->block_elements == 0, in.context(), ": dimension 0 is ", tensor.dims[0],
                 ", not a multiple of the ", type->block_elements, "-element blocks of ", type->name);
    const std::uint64_t blocks = elements / type->block_elements;
    LOWBIT_CHECK(blocks <= k_max_i64 / type->block_bytes, in.context(), ": ", elements, " ", type->name,
                 " elements take more than 2^63-1 bytes");
    tensor.byte_size = blocks * type->block_bytes;

    const std::uint64_t relative_offset = in.read<std::uint64_t>("data offset");
    const auto [it, inserted] = file.tensor_index_.emplace(tensor.name, file.tensors_.size());
    LOWBIT_CHECK(inserted, in.context(), ": duplicate tensor name in the tensor info at byte ", info_offset,
                 " (first defined in tensor info ", it->second, ")");
    file.tensors_.push_back(tensor);
    return relative_offset;
  }

  static std::uint64_t read_alignment(const GgufFile& file) {
    const GgufValue* value = file.find_metadata("general.alignment");
    if (value == nullptr) return k_default_alignment;
    const std::uint32_t alignment = value->as_u32();
    LOWBIT_CHECK(alignment != 0 && std::has_single_bit(alignment), "GGUF ", printable(file.source_),
                 ": general.alignment is ", alignment, " (expected a power of two)");
    return alignment;
  }

  // The data section starts at the first aligned byte after the tensor infos; every
  // tensor's bytes must lie inside the file, start aligned and overlap no other.
  static void place_tensor_data(GgufFile& file, std::uint64_t infos_end,
                                const std::vector<std::uint64_t>& relative_offsets) {
    const std::string where = "GGUF " + printable(file.source_);
    const std::uint64_t size = file.file_size();
    const std::uint64_t padding = (file.alignment_ - infos_end % file.alignment_) % file.alignment_;
    LOWBIT_CHECK(infos_end <= std::numeric_limits<std::uint64_t>::max() - padding, where,
                 ": data section offset overflows");
    file.data_offset_ = infos_end + padding;
    if (file.tensors_.empty()) return;  // a file without tensors may end right after its infos
    LOWBIT_CHECK(file.data_offset_ <= size, where, ": the data section would start at byte ", file.data_offset_,
                 ", past the end of the file (", size, " bytes)");
    const std::uint64_t data_bytes = size - file.data_offset_;

    for (std::size_t i = 0; i < file.tensors_.size(); ++i) {
      GgufTensor& tensor = file.tensors_[i];
      const std::uint64_t offset = relative_offsets[i];
      LOWBIT_CHECK(offset % file.alignment_ == 0, where, ": tensor ", printable(tensor.name), ": data offset ",
                   offset, " is not a multiple of the alignment ", file.alignment_);
      if (offset > data_bytes || tensor.byte_size > data_bytes - offset) {
        LOWBIT_FAIL(where, ": tensor ", printable(tensor.name), " (", ggml_type_name(tensor.type), ", ",
                    tensor.byte_size, " bytes at data offset ", offset, ") runs past the end of the file: the data ",
                    "section starts at byte ", file.data_offset_, " and the file has ", size, " bytes");
      }
      tensor.file_offset = file.data_offset_ + offset;
      tensor.data = file.bytes_->span().data() + tensor.file_offset;
    }

    std::vector<std::size_t> order(file.tensors_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return file.tensors_[a].file_offset < file.tensors_[b].file_offset;
    });
    for (std::size_t k = 1; k < order.size(); ++k) {
      const GgufTensor& before = file.tensors_[order[k - 1]];
      const GgufTensor& after = file.tensors_[order[k]];
      LOWBIT_CHECK(before.file_offset + before.byte_size <= after.file_offset, where, ": tensors ",
                   printable(before.name), " (bytes ", before.file_offset, " to ", before.file_offset + before.byte_size,
                   ") and ", printable(after.name), " (from byte ", after.file_offset, ") overlap");
    }
  }
};

// ---------------------------------------------------------------------------------
// GgufValue

std::string GgufValue::describe_location() const {
  return "metadata " + printable(key_) + " at byte " + std::to_string(file_offset_);
}

void GgufValue::expect_type(GgufValueType wanted) const {
  LOWBIT_CHECK(type_ == wanted, describe_location(), ": expected ", gguf_value_type_name(wanted), ", got ",
               gguf_value_type_name(type_));
}

void GgufValue::expect_array_of(GgufValueType wanted) const {
  LOWBIT_CHECK(type_ == GgufValueType::array && array_type_ == wanted, describe_location(), ": expected ARRAY of ",
               gguf_value_type_name(wanted), ", got ",
               type_ == GgufValueType::array ? "ARRAY of " + gguf_value_type_name(array_type_)
                                             : gguf_value_type_name(type_));
}

namespace {

template <class T>
T integer_value(GgufValueType type, const std::uint8_t* bytes, const std::string& where, const char* wanted) {
  LOWBIT_CHECK(is_integer(type), where, ": expected an integer, got ", gguf_value_type_name(type));
  const WideInteger wide = load_integer(type, bytes);
  LOWBIT_CHECK(fits<T>(wide), where, ": ", gguf_value_type_name(type), " value ", to_string(wide),
               " does not fit ", wanted);
  return wide.is_signed ? static_cast<T>(wide.s) : static_cast<T>(wide.u);
}

}  // namespace

std::uint32_t GgufValue::as_u32() const {
  return integer_value<std::uint32_t>(type_, payload_.data(), describe_location(), "UINT32");
}
std::uint64_t GgufValue::as_u64() const {
  return integer_value<std::uint64_t>(type_, payload_.data(), describe_location(), "UINT64");
}
std::int32_t GgufValue::as_i32() const {
  return integer_value<std::int32_t>(type_, payload_.data(), describe_location(), "INT32");
}
std::int64_t GgufValue::as_i64() const {
  return integer_value<std::int64_t>(type_, payload_.data(), describe_location(), "INT64");
}

double GgufValue::as_f64() const {
  if (type_ == GgufValueType::f32) return load<float>(payload_.data());
  expect_type(GgufValueType::f64);
  return load<double>(payload_.data());
}

float GgufValue::as_f32() const {
  if (type_ == GgufValueType::f32) return load<float>(payload_.data());
  expect_type(GgufValueType::f64);
  const double value = load<double>(payload_.data());
  // Converting a finite double beyond float's range is undefined behaviour.
  LOWBIT_CHECK(!std::isfinite(value) || std::fabs(value) <= std::numeric_limits<float>::max(), describe_location(),
               ": FLOAT64 value ", value, " does not fit FLOAT32");
  return static_cast<float>(value);
}

bool GgufValue::as_bool() const {
  expect_type(GgufValueType::boolean);
  return payload_[0] != 0;
}

std::string_view GgufValue::as_string() const {
  expect_type(GgufValueType::string);
  return {reinterpret_cast<const char*>(payload_.data()), payload_.size()};
}

std::vector<std::string_view> GgufValue::as_string_array() const {
  expect_array_of(GgufValueType::string);
  Reader in(payload_, file_offset_ + 12, describe_location());
  std::vector<std::string_view> out;
  out.reserve(static_cast<std::size_t>(array_size_));  // validated at open: <= payload bytes / 8
  for (std::uint64_t i = 0; i < array_size_; ++i) out.push_back(in.read_string("array element string"));
  return out;
}

std::vector<std::int32_t> GgufValue::as_i32_array() const {
  const bool integers = type_ == GgufValueType::array && is_integer(array_type_);
  LOWBIT_CHECK(integers, describe_location(), ": expected ARRAY of integers, got ",
               type_ == GgufValueType::array ? "ARRAY of " + gguf_value_type_name(array_type_)
                                             : gguf_value_type_name(type_));
  const std::uint64_t element_size = fixed_size(array_type_);
  LOWBIT_CHECK(payload_.size() == array_size_ * element_size, describe_location(), ": array payload of ",
               payload_.size(), " bytes does not hold ", array_size_, " elements");
  std::vector<std::int32_t> out;
  out.reserve(static_cast<std::size_t>(array_size_));
  const std::string where = describe_location() + " (array element)";
  for (std::uint64_t i = 0; i < array_size_; ++i) {
    out.push_back(integer_value<std::int32_t>(array_type_, payload_.data() + i * element_size, where, "INT32"));
  }
  return out;
}

std::vector<float> GgufValue::as_f32_array() const {
  expect_array_of(GgufValueType::f32);
  LOWBIT_CHECK(payload_.size() == array_size_ * 4, describe_location(), ": array payload of ", payload_.size(),
               " bytes does not hold ", array_size_, " FLOAT32 elements");
  std::vector<float> out(static_cast<std::size_t>(array_size_));
  if (!out.empty()) std::memcpy(out.data(), payload_.data(), payload_.size());
  return out;
}

std::vector<GgufValue> GgufValue::array_items() const {
  expect_type(GgufValueType::array);
  Reader in(payload_, file_offset_ + 12, describe_location());
  std::vector<GgufValue> out;
  out.reserve(static_cast<std::size_t>(array_size_));
  for (std::uint64_t i = 0; i < array_size_; ++i) out.push_back(GgufParser::parse_value(in, array_type_, key_, 0));
  return out;
}

// ---------------------------------------------------------------------------------
// GgufFile

GgufFile::GgufFile(std::unique_ptr<Bytes> bytes, std::string source)
    : bytes_(std::move(bytes)), source_(std::move(source)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) { return GgufParser::parse(Bytes::map(path), path); }

GgufFile GgufFile::from_bytes(std::span<const std::uint8_t> bytes) {
  return GgufParser::parse(Bytes::copy(bytes), "<memory>");
}

std::uint64_t GgufFile::file_size() const { return bytes_->span().size(); }

const GgufValue* GgufFile::find_metadata(std::string_view key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second];
}

const GgufValue& GgufFile::metadata(std::string_view key) const {
  const GgufValue* value = find_metadata(key);
  LOWBIT_CHECK(value != nullptr, "GGUF ", printable(source_), ": no metadata key ", printable(key));
  return *value;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* tensor = find_tensor(name);
  LOWBIT_CHECK(tensor != nullptr, "GGUF ", printable(source_), ": no tensor named ", printable(name));
  return *tensor;
}

std::string GgufFile::describe() const {
  const auto string_or = [&](std::string_view key, std::string_view fallback) -> std::string {
    const GgufValue* value = find_metadata(key);
    return value && value->type() == GgufValueType::string ? printable(value->as_string()) : std::string(fallback);
  };
  std::ostringstream out;
  out << "GGUF v" << version_ << " " << printable(source_) << ": architecture "
      << string_or("general.architecture", "(none)") << ", name " << string_or("general.name", "(none)") << ", "
      << tensors_.size() << " tensors";
  if (!tensors_.empty()) out << " (" << type_list(tensors_) << ")";
  out << ", " << metadata_.size() << " metadata keys, alignment " << alignment_ << ", " << file_size() << " bytes";
  return out.str();
}

}  // namespace lowbit::engine
