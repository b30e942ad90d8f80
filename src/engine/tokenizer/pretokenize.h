// Pre-tokenizers of byte-level BPE vocabularies: split text into the pieces that BPE
// merges within (never across), by the regexes the vocabulary was trained with, as
// named by GGUF's tokenizer.ggml.pre. Regexes run in PCRE2 (UTF + UCP: \p{L}, \p{N},
// lookahead), JIT-compiled once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit::engine {

class PreTokenizer {
 public:
  // "smollm", "gpt2" / "default", "llama3" / "llama-bpe", "qwen2". Any other name throws
  // lowbit::Error naming it and the supported ones.
  static PreTokenizer for_name(std::string_view name);
  static const std::vector<std::string_view>& supported_names();

  // Appends the pieces of `text` (views into it, in order, covering it exactly).
  // Valid UTF-8 runs go through the regexes; each byte that is not part of a valid
  // UTF-8 sequence (PCRE2 needs valid UTF-8) becomes a piece of its own.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  const std::string& name() const { return name_; }

 private:
  class Regex;
  PreTokenizer(std::string name, std::vector<std::shared_ptr<const Regex>> stages);

  std::string name_;
  // Applied in order, each to every piece the previous stage left: a piece splits into
  // its matches and the gaps between them (llama.cpp's and HF's "isolated" splits).
  std::vector<std::shared_ptr<const Regex>> stages_;
};

// Length of the valid UTF-8 sequence starting at text[i] (1..4), or 0 if the bytes
// there are not one (overlong forms, surrogates and code points past U+10FFFF included).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i);

}  // namespace lowbit::engine
