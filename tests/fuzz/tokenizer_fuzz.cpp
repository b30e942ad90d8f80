// libFuzzer target: the tokenizer on arbitrary bytes. The vocabulary is the default
// model's (LOWBIT_MODEL, else the model cache) when it is there, else the tiny model's
// (tests/common/tiny_llama.h: control and user-defined tokens, merges, and a byte
// without a token). For every input, with special tokens parsed and not:
//   decode(encode(x)) is x without the bytes the vocabulary has no token for;
// and as plain text (special tokens not parsed) no control token comes out.
// A violation traps; a lowbit::Error from encode or decode is a bug too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "common/tiny_llama.h"
#include "engine/gguf/reader.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using lowbit::engine::GgufFile;
using lowbit::engine::Tokenizer;
using lowbit::engine::TokenType;

std::string default_model_path() {
  if (const char* path = std::getenv("LOWBIT_MODEL")) return path;
  const char* cache = std::getenv("LOWBIT_CACHE");
  const char* home = std::getenv("HOME");
  if (!cache && !home) return {};
  const std::string dir = cache ? cache : std::string(home) + "/.cache/lowbit";
  return dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = [] {
    const std::string path = default_model_path();
    if (!path.empty() && std::filesystem::is_regular_file(path)) {
      return std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile::open(path)));
    }
    lowbit::test::TinyLlamaSpec spec;
    spec.layers = 1, spec.d_model = 32, spec.heads = 2, spec.kv_heads = 1, spec.head_dim = 16, spec.ffn = 32;
    spec.vocab = 300, spec.with_tokenizer = true;
    return std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile::from_bytes(lowbit::test::make_tiny_llama(spec).gguf)));
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Tokenizer& t = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string kept;
  for (const char c : text) {
    if (t.has_byte_token(static_cast<std::uint8_t>(c))) kept += c;
  }
  for (const bool parse_special : {false, true}) {
    const std::vector<std::int32_t> ids = t.encode(text, false, parse_special);
    if (!parse_special) {
      for (const std::int32_t id : ids) {
        if (t.token_type(id) == TokenType::control) __builtin_trap();  // plain text made a control token
      }
    }
    if (t.decode(ids) != kept) __builtin_trap();  // the round trip lost or changed bytes
  }
  return 0;
}
