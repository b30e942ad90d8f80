// libFuzzer target: opens the input as a GGUF file and reads everything a caller
// could read (every metadata value through every accessor, every tensor's bytes, and
// the decoded values of every small tensor of a decodable type: the decoders must stay
// inside the byte size the reader computed for the type).
// Each accessor must either return or throw lowbit::Error; anything else (a crash,
// a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/gguf/dequant.h"
#include "engine/gguf/reader.h"
#include "lowbit/error.h"

namespace {

using lowbit::engine::GgufFile;
using lowbit::engine::GgufValue;
using lowbit::engine::GgufValueType;

volatile std::uint64_t g_sink;  // keeps the reads from being optimized away

template <class Read>
void attempt(Read read) {
  try {
    read();
  } catch (const lowbit::Error&) {
  }
}

void walk(const GgufValue& value, int depth) {
  attempt([&] { g_sink = g_sink + value.as_u32(); });
  attempt([&] { g_sink = g_sink + value.as_u64(); });
  attempt([&] { g_sink = g_sink + static_cast<std::uint64_t>(value.as_i32()); });
  attempt([&] { g_sink = g_sink + static_cast<std::uint64_t>(value.as_i64()); });
  attempt([&] { g_sink = g_sink + static_cast<std::uint64_t>(value.as_f32() != 0.0f); });
  attempt([&] { g_sink = g_sink + static_cast<std::uint64_t>(value.as_f64() != 0.0); });
  attempt([&] { g_sink = g_sink + value.as_bool(); });
  attempt([&] { g_sink = g_sink + value.as_string().size(); });
  if (value.type() != GgufValueType::array) return;
  attempt([&] {
    for (std::string_view s : value.as_string_array()) g_sink = g_sink + s.size() + (s.empty() ? 0u : s.back());
  });
  attempt([&] { g_sink = g_sink + value.as_i32_array().size(); });
  attempt([&] { g_sink = g_sink + value.as_f32_array().size(); });
  attempt([&] {
    for (const GgufValue& item : value.array_items()) walk(item, depth + 1);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const GgufFile file = GgufFile::from_bytes(std::span<const std::uint8_t>(data, size));
    for (const GgufValue& value : file.metadata()) {
      walk(value, 0);
      if (file.find_metadata(value.key()) != &value) __builtin_trap();
    }
    for (const auto& tensor : file.tensors()) {
      if (file.find_tensor(tensor.name) != &tensor) __builtin_trap();
      // First and last byte: ASan flags either if the range were outside the buffer.
      g_sink = g_sink + tensor.data[0] + tensor.data[tensor.byte_size - 1];
      if (lowbit::engine::can_dequantize(tensor.type) && tensor.element_count <= (1u << 16)) {
        attempt([&] { g_sink = g_sink + lowbit::engine::dequantize_tensor(tensor).size(); });
      }
    }
    g_sink = g_sink + file.describe().size();
  } catch (const lowbit::Error&) {
  }
  return 0;
}
