// libFuzzer target: opens the input as a GGUF file and reads everything a caller
// could read (every metadata value through every accessor, every tensor's bytes, and
// the decoded values of every small tensor of a decodable type: the decoders must stay
// inside the byte size the reader computed for the type), then builds what the engine
// builds from a file: the model's config and weights (decoded to f32, as the CPU
// reference loads them), each weight's GPU form (the weight-only repack, on the host),
// and the tokenizer, which then encodes and decodes a text.
// Each step must either return or throw lowbit::Error; anything else (a crash, a
// sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "engine/gguf/dequant.h"
#include "engine/gguf/reader.h"
#include "engine/gguf/repack.h"
#include "engine/model.h"
#include "engine/model_checks.h"
#include "engine/tokenizer/tokenizer.h"
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

// The model and the tokenizer of the file, as the CLI's load_model builds them.
void build_engine(const lowbit::engine::GgufFile& file) {
  using namespace lowbit::engine;
  attempt([&] {
    const Model model = Model::from_gguf(file);
    g_sink = g_sink + model.weight_bytes();
    attempt([&] { check_tokenizer_fits_model(Tokenizer::from_gguf(file), model.config()); });
  });
  for (const GgufTensor& tensor : file.tensors()) {
    if (!has_weight_only_form(tensor.type)) continue;
    attempt([&] { g_sink = g_sink + repack_ggml_weight(tensor).codes.size(); });
  }
  attempt([&] {
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);
    const std::string text = "<|im_start|>user\nHello, world! 12345 caf\xC3\xA9 \x04\xFF<|im_end|>";
    for (const bool special : {true, false}) {
      g_sink = g_sink + tokenizer.decode(tokenizer.encode(text, false, special)).size();
    }
    attempt([&] { g_sink = g_sink + tokenizer.apply_chat_template("hi").size(); });
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
    build_engine(file);
  } catch (const lowbit::Error&) {
  }
  return 0;
}
