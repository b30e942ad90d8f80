// A tokenizer-only GGUF file (the test writer's) of `vocab` plain tokens "0", "1", ...,
// standing in for the default model as the tokenizer source of synthetic models
// (engine/synth).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/gguf_writer.h"
#include "engine/gguf/reader.h"

namespace lowbit::test {

inline engine::GgufFile tokenizer_source(std::int64_t vocab) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add<std::uint32_t>("llama.block_count", gguf_type::u32, 30);  // not copied: not tokenizer.*
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "smollm");
  std::vector<std::string> tokens;
  std::vector<std::int32_t> types;
  for (std::int64_t i = 0; i < vocab; ++i) {
    tokens.push_back(std::to_string(i));
    types.push_back(1);
  }
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_array<std::int32_t>("tokenizer.ggml.token_type", gguf_type::i32, types);
  w.add_string_array("tokenizer.ggml.merges", {"1 2"});
  w.add<std::uint32_t>("tokenizer.ggml.bos_token_id", gguf_type::u32, 1);
  return engine::GgufFile::from_bytes(w.bytes());
}

}  // namespace lowbit::test
