// Byte-level BPE (GPT-2): the byte <-> code point alphabet that token strings are
// written in, and the merge loop that turns one pre-tokenized piece into token ids.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lowbit::engine {

// GPT-2's bytes_to_unicode: printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand
// for themselves; the other 68 bytes map, in order, to U+0100 onwards.
std::uint32_t byte_to_codepoint(std::uint8_t byte);
// The byte a code point stands for, or -1 when it is not in the alphabet.
int codepoint_to_byte(std::uint32_t codepoint);
// `bytes` spelled in the alphabet (UTF-8 of the mapped code points).
std::string byte_level_encode(std::string_view bytes);
// A token string back to bytes. A code point outside the alphabet (or bytes that are
// not UTF-8) stays as it is: such tokens do not occur in byte-level vocabularies, and
// keeping them is better than losing text.
std::string byte_level_decode(std::string_view text);

class BpeModel {
 public:
  struct Merge {
    std::int32_t rank;    // lower merges first
    std::int32_t result;  // the token the pair becomes
  };
  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }

  // byte_tokens[b]: the token of the single byte b, or -1 where the vocabulary has
  // none: encode drops such a byte, and the rest of its piece merges without it.
  BpeModel(const std::array<std::int32_t, 256>& byte_tokens, std::unordered_map<std::uint64_t, Merge> merges);
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one piece: its bytes as byte tokens (bytes without one left
  // out, as HF tokenizers' BPE without an unknown token does), then, repeatedly, the
  // adjacent pair of lowest rank merged (leftmost first among equal ranks), as HF
  // tokenizers and llama.cpp do. Results are cached per piece (thread-safe).
  void encode(std::string_view piece, std::vector<std::int32_t>& out) const;
  std::int32_t byte_token(std::uint8_t byte) const { return byte_tokens_[byte]; }  // -1: none

 private:
  void merge_uncached(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::array<std::int32_t, 256> byte_tokens_{};
  std::unordered_map<std::uint64_t, Merge> merges_;
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace lowbit::engine
