// The engine's tokenizer: GPT-2 style byte-level BPE read from GGUF metadata, as
// llama.cpp reads `tokenizer.ggml.model = gpt2`:
//   tokenizer.ggml.tokens      token strings in GPT-2's byte-level alphabet (bpe.h)
//   tokenizer.ggml.merges      "left right"; the rank is the index
//   tokenizer.ggml.token_type  1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
//   tokenizer.ggml.pre         the pre-tokenizer (pretokenize.h)
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id, tokenizer.ggml.add_bos_token,
//   tokenizer.chat_template
//
// encode: control and user-defined tokens are found in the text first (leftmost,
// then longest, as HF tokenizers' added-token matcher does), the text between them is
// pre-tokenized, and each piece is merged by BPE. Bytes that are not valid UTF-8
// become pieces of their own (one byte each), so decode(encode(x)) == x for every byte
// string x whose bytes all have a token.
//
// The exception: a byte that the vocabulary has no token for (neither its byte-level
// character nor a "<0xNN>" byte token) is dropped, and the rest of its piece merges as
// if it were absent. This is what Hugging Face tokenizers (a byte-level BPE has no
// unknown token) and llama.cpp do. SmolLM2's vocabulary lacks 21 bytes: 04 06 13 14 16
// 1D C0 C1 F1 F2 F5..FF (C0, C1, F5..FF never occur in UTF-8). has_byte_token() says
// which bytes survive. The unknown token never stands in for a byte: in GPT-2 style
// vocabularies it is a control token (<|endoftext|>).
//
// With parse_special = false, encode never yields a control token: from_gguf rejects a
// vocabulary whose byte tokens or merge results are control tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/bpe.h"
#include "engine/gguf/reader.h"
#include "engine/tokenizer/pretokenize.h"

namespace lowbit::engine {

// One turn of a conversation: role ("system", "user", "assistant", ...) and text.
struct ChatMessage {
  std::string role, content;
};

enum class TokenType : std::int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

class Tokenizer {
 public:
  // Throws lowbit::Error naming the key at fault (absent, wrong type, bad value).
  static Tokenizer from_gguf(const GgufFile& file);

  // parse_special = false treats control tokens in the text as plain text (they are
  // then split and merged like any text). User-defined tokens are always matched: they
  // are ordinary words of the vocabulary, as in llama.cpp.
  std::vector<std::int32_t> encode(std::string_view text, bool add_bos = false, bool parse_special = true) const;
  // The exact bytes of the tokens (control tokens as their text). Throws on an id
  // outside [0, vocab_size).
  std::string decode(std::span<const std::int32_t> ids) const;
  // One token's bytes; may be part of a UTF-8 sequence (stream decoders buffer them).
  std::string token_bytes(std::int32_t id) const;
  // Whether encode keeps `byte` (false: the vocabulary has no token for it).
  bool has_byte_token(std::uint8_t byte) const;

  std::int32_t bos_id() const { return bos_id_; }          // -1 when the file has none
  std::int32_t eos_id() const { return eos_id_; }          // -1 when the file has none
  std::int32_t unknown_id() const { return unknown_id_; }  // -1 when the file has none
  std::int32_t padding_id() const { return padding_id_; }  // -1 when the file has none
  std::int32_t vocab_size() const { return static_cast<std::int32_t>(token_text_.size()); }
  bool add_bos() const { return add_bos_; }
  TokenType token_type(std::int32_t id) const;
  const std::string& pre_tokenizer_name() const { return pre_.name(); }

  // eos, eot / eom ids when the file names them, and control tokens that end a turn
  // (<|endoftext|>, <|im_end|>, <|eot_id|>, <|end|>, <end_of_turn>, ...).
  bool is_end_of_generation(std::int32_t id) const;

  // A one-turn instruct prompt. Only ChatML-like templates (<|im_start|>role\n
  // content<|im_end|>\n) are known: the result is the template's default system
  // message, if it writes one when the conversation has none (SmolLM's does), the user
  // turn, and the assistant generation prompt. Other templates, or none: lowbit::Error.
  std::string apply_chat_template(std::string_view user_message) const;
  // A conversation: each message as <|im_start|>role\ncontent<|im_end|>\n, after the
  // template's default system message when the first message is not a system one, then
  // the assistant generation prompt. Throws as above, or for an empty conversation.
  std::string apply_chat_template(std::span<const ChatMessage> messages) const;

 private:
  Tokenizer(PreTokenizer pre, BpeModel bpe) : pre_(std::move(pre)), bpe_(std::move(bpe)) {}
  void check_id(std::int32_t id, const char* what) const;
  // Start of the special token that matches at text[pos] (longest first), or -1.
  std::int32_t special_at(std::string_view text, std::size_t pos, bool parse_control) const;
  void encode_plain(std::string_view text, std::vector<std::int32_t>& ids) const;

  PreTokenizer pre_;
  BpeModel bpe_;
  std::vector<std::string> token_text_;   // as stored in the file
  std::vector<std::string> token_bytes_;  // what each token decodes to
  std::vector<TokenType> token_type_;
  // Control and user-defined tokens by their first byte, longest first.
  std::vector<std::vector<std::int32_t>> specials_by_first_byte_;
  std::vector<std::int32_t> end_of_generation_;  // sorted
  std::int32_t bos_id_ = -1, eos_id_ = -1, unknown_id_ = -1, padding_id_ = -1;
  bool add_bos_ = false;
  std::string chat_template_;
  bool has_chat_template_ = false;
};

}  // namespace lowbit::engine
