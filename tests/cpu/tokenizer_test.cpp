// Tokenizer: a tiny synthetic byte-level BPE vocabulary in a GGUF built in memory
// (hand-checked merges, special tokens, every byte, errors), the pre-tokenizer regexes
// on their own, and, where the files are present, the real SmolLM2 vocabulary against
// ids from Hugging Face tokenizers and the WikiText-2 test set.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/gguf_writer.h"
#include "common/random.h"
#include "engine/tokenizer/bpe.h"
#include "engine/gguf/reader.h"
#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/tokenizer.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

using test::GgufWriter;
namespace vt = test::gguf_type;
using Ids = std::vector<std::int32_t>;
using Pieces = std::vector<std::string_view>;

// ---------------------------------------------------------------------------------
// The synthetic vocabulary

// Ids 0..4 are special, 5..260 the bytes 0..255, then the merge results in order.
constexpr std::int32_t k_eot = 0, k_im_start = 1, k_im_end = 2, k_tool = 3, k_tool_call = 4;
constexpr std::int32_t byte_id(int b) { return 5 + b; }

// Each merge's tokens, with the byte-level spelling of ' ' (U+0120, "Ġ").
const std::vector<std::pair<std::string, std::string>> k_merges = {
    {"b", "c"},        // rank 0: beats "a b" (rank 1) in "abc"
    {"a", "b"},        //
    {"a", "a"},        // "aaa" -> "aa" + "a": equal ranks merge leftmost first
    {"h", "e"},        //
    {"l", "l"},        //
    {"he", "ll"},      //
    {"hell", "o"},     //
    {"\xC4\xA0", "w"},  // "Ġ" "w"
    {"o", "r"},        //
    {"\xC4\xA0w", "or"},
    {"l", "d"},        //
    {"\xC4\xA0wor", "ld"},
    {"1", "2"},        // only reachable when digits are not split one by one
    {"!", "!"},        //
};

std::vector<std::string> synthetic_tokens() {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>", "<tool_call>"};
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_level_encode(std::string(1, static_cast<char>(b))));
  for (const auto& [left, right] : k_merges) tokens.push_back(left + right);
  return tokens;
}

std::int32_t merged_id(std::size_t rank) { return byte_id(256) + static_cast<std::int32_t>(rank); }

struct Synthetic {
  std::string pre = "gpt2";
  std::vector<std::string> tokens = synthetic_tokens();
  std::vector<std::string> merges;
  std::vector<std::int32_t> types;
  std::optional<std::string> model = "gpt2";
  std::optional<std::string> chat_template;
  bool with_merges = true, with_tokens = true, with_bos = true, add_bos = false;
  std::int32_t bos = k_im_start;
  std::optional<std::int32_t> unknown;

  Synthetic() {
    for (const auto& [left, right] : k_merges) merges.push_back(left + " " + right);
    types.assign(tokens.size(), 1);
    types[k_eot] = types[k_im_start] = types[k_im_end] = 3;
    types[k_tool] = types[k_tool_call] = 4;
  }

  GgufFile file() const {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    if (model) w.add_string("tokenizer.ggml.model", *model);
    w.add_string("tokenizer.ggml.pre", pre);
    if (with_tokens) w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_array<std::int32_t>("tokenizer.ggml.token_type", vt::i32, types);
    if (with_merges) w.add_string_array("tokenizer.ggml.merges", merges);
    if (with_bos) w.add<std::uint32_t>("tokenizer.ggml.bos_token_id", vt::u32, static_cast<std::uint32_t>(bos));
    w.add<std::uint32_t>("tokenizer.ggml.eos_token_id", vt::u32, k_im_end);
    if (unknown) w.add<std::uint32_t>("tokenizer.ggml.unknown_token_id", vt::u32, static_cast<std::uint32_t>(*unknown));
    w.add<bool>("tokenizer.ggml.add_bos_token", vt::boolean, add_bos);
    if (chat_template) w.add_string("tokenizer.chat_template", *chat_template);
    return GgufFile::from_bytes(w.bytes());
  }
  Tokenizer tokenizer() const { return Tokenizer::from_gguf(file()); }
};

Ids bytes_of(std::string_view s) {
  Ids out;
  for (char c : s) out.push_back(byte_id(static_cast<std::uint8_t>(c)));
  return out;
}

// ---------------------------------------------------------------------------------
// Alphabet and pre-tokenizers

TEST(ByteLevelAlphabet, MatchesGpt2BytesToUnicode) {
  EXPECT_EQ(byte_to_codepoint('A'), 0x41u);
  EXPECT_EQ(byte_to_codepoint('!'), 0x21u);
  EXPECT_EQ(byte_to_codepoint(0xA1), 0xA1u);
  EXPECT_EQ(byte_to_codepoint(0xFF), 0xFFu);
  // The 68 others, in byte order, from U+0100: 0x00..0x20, 0x7F, 0x80..0xA0, 0xAD.
  EXPECT_EQ(byte_to_codepoint(0x00), 0x100u);
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);  // "Ġ"
  EXPECT_EQ(byte_to_codepoint(0x7F), 0x121u);
  EXPECT_EQ(byte_to_codepoint(0x80), 0x122u);
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<std::uint8_t>(b))), b);
  EXPECT_EQ(codepoint_to_byte(0x144), -1);
  EXPECT_EQ(codepoint_to_byte(0x20), -1);
  EXPECT_EQ(byte_level_encode(" hi\n"), "\xC4\xA0hi\xC4\x8A");
  EXPECT_EQ(byte_level_decode("\xC4\xA0hi\xC4\x8A"), " hi\n");
}

Pieces split(std::string_view pre, std::string_view text) {
  Pieces pieces;
  PreTokenizer::for_name(pre).split(text, pieces);
  return pieces;
}

TEST(PreTokenizer, Gpt2Regex) {
  EXPECT_EQ(split("gpt2", "Hello  world's 123abc!!\n\n"),
            (Pieces{"Hello", " ", " world", "'s", " 123", "abc", "!!", "\n\n"}));
  EXPECT_EQ(split("default", "a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(split("gpt2", "x \n y"), (Pieces{"x", " \n", " y"}));
  // \s includes U+0085 (NEL) and U+00A0, as in Oniguruma and llama.cpp.
  EXPECT_EQ(split("gpt2", "a\xC2\x85\xC2\x85" "b"), (Pieces{"a", "\xC2\x85", "\xC2\x85", "b"}));
  EXPECT_EQ(split("gpt2", "na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87"),
            (Pieces{"na\xC3\xAFve", " \xE4\xB8\xAD\xE6\x96\x87"}));
}

TEST(PreTokenizer, SmollmSplitsEveryDigit) {
  EXPECT_EQ(split("smollm", "ab 123"), (Pieces{"ab", " ", "1", "2", "3"}));
  EXPECT_EQ(split("smollm", "x1.5y"), (Pieces{"x", "1", ".", "5", "y"}));
  // The lookahead sees the end of the stretch between digits, not the digit after it.
  EXPECT_EQ(split("smollm", "a  7"), (Pieces{"a", "  ", "7"}));
}

TEST(PreTokenizer, Llama3Regex) {
  EXPECT_EQ(split("llama3", "Hello 1234567 I'M\n\n  x"),
            (Pieces{"Hello", " ", "123", "456", "7", " I", "'M", "\n\n", " ", " x"}));
  EXPECT_EQ(split("llama-bpe", "(a)+b;\r\nc"), (Pieces{"(a", ")+", "b", ";\r\n", "c"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "Hello 1234567 I'M\n\n  x"),
            (Pieces{"Hello", " ", "1", "2", "3", "4", "5", "6", "7", " I", "'M", "\n\n", " ", " x"}));
  EXPECT_EQ(split("qwen2", "(a)+b;\r\nc 3.5"), (Pieces{"(a", ")+", "b", ";\r\n", "c", " ", "3", ".", "5"}));
}

TEST(PreTokenizer, InvalidUtf8BytesArePiecesOfTheirOwn) {
  EXPECT_EQ(split("gpt2", "ab\xFF" "cd\xC3"), (Pieces{"ab", "\xFF", "cd", "\xC3"}));
  // An overlong form, a surrogate and a truncated sequence: one piece per byte.
  EXPECT_EQ(split("gpt2", "\xC0\x80\xED\xA0\x80"), (Pieces{"\xC0", "\x80", "\xED", "\xA0", "\x80"}));
  EXPECT_EQ(split("smollm", "1\xE4\xB8"), (Pieces{"1", "\xE4", "\xB8"}));
}

TEST(PreTokenizer, UnknownNameNamesTheSupportedOnes) {
  EXPECT_LOWBIT_ERROR(PreTokenizer::for_name("falcon"),
                      "tokenizer.ggml.pre: unknown pre-tokenizer 'falcon' (supported: smollm, gpt2, default, llama3, "
                      "llama-bpe, qwen2)");
}

// ---------------------------------------------------------------------------------
// BPE on the synthetic vocabulary

TEST(TokenizerSynthetic, Metadata) {
  const Tokenizer t = Synthetic().tokenizer();
  EXPECT_EQ(t.vocab_size(), static_cast<std::int32_t>(synthetic_tokens().size()));
  EXPECT_EQ(t.bos_id(), k_im_start);
  EXPECT_EQ(t.eos_id(), k_im_end);
  EXPECT_EQ(t.unknown_id(), -1);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.pre_tokenizer_name(), "gpt2");
  EXPECT_EQ(t.token_type(k_tool), TokenType::user_defined);
  EXPECT_TRUE(t.is_end_of_generation(k_im_end));
  EXPECT_TRUE(t.is_end_of_generation(k_eot));  // <|endoftext|>
  EXPECT_FALSE(t.is_end_of_generation(k_im_start));
  EXPECT_FALSE(t.is_end_of_generation(byte_id('a')));
}

TEST(TokenizerSynthetic, HandCheckedMerges) {
  const Tokenizer t = Synthetic().tokenizer();
  // hello: h e -> he, l l -> ll, he ll -> hell, hell o -> hello; " world" likewise.
  EXPECT_EQ(t.encode("hello world"), (Ids{merged_id(6), merged_id(11)}));
  EXPECT_EQ(t.encode("abc"), (Ids{byte_id('a'), merged_id(0)}));          // "b c" ranks first
  EXPECT_EQ(t.encode("ab"), (Ids{merged_id(1)}));
  EXPECT_EQ(t.encode("aaa"), (Ids{merged_id(2), byte_id('a')}));         // leftmost of equal ranks
  EXPECT_EQ(t.encode("aaaa"), (Ids{merged_id(2), merged_id(2)}));
  EXPECT_EQ(t.encode("hex"), (Ids{merged_id(3), byte_id('x')}));
  EXPECT_EQ(t.encode(" w"), (Ids{merged_id(7)}));
  EXPECT_EQ(t.encode("12"), (Ids{merged_id(12)}));                      // gpt2 keeps " ?\p{N}+" whole
  EXPECT_EQ(t.encode(""), Ids{});
  // Merges never cross pieces: "he" + "llo" would merge, "he llo" splits at the space.
  EXPECT_EQ(t.encode("he llo"), (Ids{merged_id(3), byte_id(' '), merged_id(4), byte_id('o')}));
}

TEST(TokenizerSynthetic, SmollmPreTokenizerSplitsDigitsBeforeMerging) {
  Synthetic s;
  s.pre = "smollm";
  EXPECT_EQ(s.tokenizer().encode("12"), (Ids{byte_id('1'), byte_id('2')}));
}

TEST(TokenizerSynthetic, EveryByteHasItsToken) {
  const Tokenizer t = Synthetic().tokenizer();
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    EXPECT_EQ(t.encode(one), (Ids{byte_id(b)})) << "byte " << b;
    EXPECT_EQ(t.token_bytes(byte_id(b)), one);
  }
  EXPECT_EQ(t.encode("x\xFFy\x80"), bytes_of("x\xFFy\x80"));
}

TEST(TokenizerSynthetic, SpecialTokensLongestFirst) {
  const Tokenizer t = Synthetic().tokenizer();
  EXPECT_EQ(t.encode("<|im_start|>hello<|im_end|>"), (Ids{k_im_start, merged_id(6), k_im_end}));
  // <tool_call> is longer than <tool>, which is its prefix.
  EXPECT_EQ(t.encode("<tool_call><tool>"), (Ids{k_tool_call, k_tool}));
  EXPECT_EQ(t.encode("a<|endoftext|>"), (Ids{byte_id('a'), k_eot}));
  EXPECT_EQ(t.encode("<|im_end"), bytes_of("<|im_end"));  // a prefix alone is text
  EXPECT_EQ(t.encode("hello", /*add_bos=*/true), (Ids{k_im_start, merged_id(6)}));
  EXPECT_EQ(t.decode(t.encode("<|im_start|>hello<tool>")), "<|im_start|>hello<tool>");
  EXPECT_EQ(t.token_bytes(k_im_end), "<|im_end|>");
}

TEST(TokenizerSynthetic, ParseSpecialFalseTreatsControlTokensAsText) {
  const Tokenizer t = Synthetic().tokenizer();
  const Ids ids = t.encode("<|im_end|><tool>", false, /*parse_special=*/false);
  // "<|", "im", "_", "end", "|>": no merges apply; the user-defined <tool> is still one token.
  Ids expected = bytes_of("<|im_end|>");
  expected.push_back(k_tool);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(std::find(ids.begin(), ids.end(), k_im_end), ids.end());
  EXPECT_EQ(t.decode(ids), "<|im_end|><tool>");
}

TEST(TokenizerSynthetic, RandomBytesRoundTrip) {
  LOWBIT_TEST_RNG(rng);
  const Tokenizer t = Synthetic().tokenizer();
  const std::vector<std::string> fragments = {"<|im_start|>", "<tool", "<tool_call>", "hello", " world", "12",
                                              " ", "\n", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "'s"};
  std::uniform_int_distribution<int> byte(0, 255), length(0, 40), choice(0, 3);
  std::uniform_int_distribution<std::size_t> fragment(0, fragments.size() - 1);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = length(rng);
    for (int i = 0; i < n; ++i) {
      if (choice(rng) == 0) {
        text += fragments[fragment(rng)];
      } else {
        text += static_cast<char>(byte(rng));
      }
    }
    for (const bool parse_special : {true, false}) {
      const Ids ids = t.encode(text, false, parse_special);
      ASSERT_EQ(t.decode(ids), text) << "trial " << trial << ", parse_special " << parse_special;
    }
  }
}

TEST(TokenizerSynthetic, DecodeRejectsIdsOutOfRange) {
  const Tokenizer t = Synthetic().tokenizer();
  const Ids bad = {byte_id('a'), t.vocab_size()};
  EXPECT_LOWBIT_ERROR(t.decode(bad), "decode: ids[1] = " + std::to_string(t.vocab_size()) + " is outside [0, ");
  const Ids negative = {-1};
  EXPECT_LOWBIT_ERROR(t.decode(negative), "decode: ids[0] = -1 is outside");
  EXPECT_LOWBIT_ERROR(t.token_bytes(-3), "token_bytes: token id -3 is outside");
}

TEST(TokenizerSynthetic, ChatTemplate) {
  Synthetic s;
  s.chat_template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a test model<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\n' }}{% endif %}";
  EXPECT_EQ(s.tokenizer().apply_chat_template("Hi?"),
            "<|im_start|>system\nYou are a test model<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // Escaped newlines, and a system turn built from the conversation: no default message.
  s.chat_template =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  EXPECT_EQ(s.tokenizer().apply_chat_template("x"), "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
  s.chat_template = "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}";
  EXPECT_LOWBIT_ERROR(s.tokenizer().apply_chat_template("x"), "tokenizer.chat_template: not a ChatML template");
  s.chat_template.reset();
  EXPECT_LOWBIT_ERROR(s.tokenizer().apply_chat_template("x"), "tokenizer.chat_template: absent");
}

// ---------------------------------------------------------------------------------
// Bad files

TEST(TokenizerSynthetic, MissingKeysAreNamed) {
  Synthetic s;
  s.with_tokens = false;
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.tokens: absent from <memory>");
  s = Synthetic();
  s.with_merges = false;
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.merges: absent from <memory>");
  s = Synthetic();
  s.model.reset();
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.model: absent from <memory>");
}

TEST(TokenizerSynthetic, WrongModelOrPre) {
  Synthetic s;
  s.model = "llama";
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.model: expected \"gpt2\" (byte-level BPE), got \"llama\"");
  s = Synthetic();
  s.pre = "frobnicate";
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.pre: unknown pre-tokenizer 'frobnicate' (supported: smollm");
}

TEST(TokenizerSynthetic, BadMerges) {
  Synthetic s;
  s.merges[3] = "he";
  EXPECT_LOWBIT_ERROR(s.tokenizer(),
                      "tokenizer.ggml.merges[3]: expected \"left right\" (two tokens, one space), got \"he\"");
  s.merges[3] = "h e x";
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.merges[3]: expected \"left right\"");
  s.merges[3] = "h ";
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.merges[3]: expected \"left right\"");
  s.merges[3] = "hx e";
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.merges[3] \"hx e\": \"hx\" is not a token");
  s.merges[3] = "e h";
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.merges[3] \"e h\": the merged \"eh\" is not a token");
}

TEST(TokenizerSynthetic, BadIdsAndTypes) {
  Synthetic s;
  s.bos = 100000;
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.bos_token_id: expected a token id in [0, 275), got 100000");
  s = Synthetic();
  s.types[byte_id('z')] = 7;
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.token_type[" + std::to_string(byte_id('z')) +
                                         "] (token \"z\") = 7: expected 0..6 (undefined, normal");
  s.types[byte_id('z')] = -1;
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "] (token \"z\") = -1: expected 0..6");
  s = Synthetic();
  s.types.pop_back();
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.token_type: expected 275 entries (one per token), got 274");
  s = Synthetic();
  s.with_bos = false;
  s.add_bos = true;
  EXPECT_LOWBIT_ERROR(s.tokenizer(),
                      "tokenizer.ggml.add_bos_token: true, but the file has no tokenizer.ggml.bos_token_id");
  s.add_bos = false;
  EXPECT_LOWBIT_ERROR(s.tokenizer().encode("x", true), "encode: add_bos is true, but the file has no");
}

// The bytes of `text` that `t` has a token for: what decode(encode(text)) gives back.
std::string kept_bytes(const Tokenizer& t, std::string_view text) {
  std::string kept;
  for (const char c : text) {
    if (t.has_byte_token(static_cast<std::uint8_t>(c))) kept += c;
  }
  return kept;
}

bool has_control_token(const Tokenizer& t, const Ids& ids) {
  return std::any_of(ids.begin(), ids.end(), [&](std::int32_t id) { return t.token_type(id) == TokenType::control; });
}

TEST(TokenizerSynthetic, ByteWithoutTokenIsDropped) {
  Synthetic s;
  s.tokens[byte_id(0x07)] = "unused";
  const Tokenizer t = s.tokenizer();
  EXPECT_FALSE(t.has_byte_token(0x07));
  EXPECT_TRUE(t.has_byte_token(0x08));
  EXPECT_EQ(t.encode("\x07"), Ids{});
  EXPECT_EQ(t.encode("x\x07y", false, false), bytes_of("xy"));
  // The rest of its piece merges as if the byte were absent ("!" "!" is a merge).
  EXPECT_EQ(t.encode("!\x07!"), (Ids{merged_id(13)}));
  EXPECT_EQ(t.encode("h\x07" "e"), bytes_of("he"));  // three pieces: letters, punctuation, letters
  EXPECT_EQ(t.decode(t.encode("a\x07\x07" "b\x07")), "ab");
}

TEST(TokenizerSynthetic, ByteWithoutTokenNeverBecomesTheUnknownToken) {
  Synthetic s;
  s.tokens[byte_id(0x04)] = "unused";
  s.unknown = k_eot;  // <|endoftext|>, a control token, as in SmolLM2
  const Tokenizer t = s.tokenizer();
  EXPECT_EQ(t.unknown_id(), k_eot);
  const Ids ids = t.encode("abc\x04" "def", false, /*parse_special=*/false);
  Ids expected = t.encode("abc");
  for (const std::int32_t id : t.encode("def")) expected.push_back(id);
  EXPECT_EQ(ids, expected);
  EXPECT_FALSE(has_control_token(t, ids));
}

TEST(TokenizerSynthetic, ByteFallbackTokenKeepsTheByte) {
  Synthetic s;
  s.tokens[byte_id(0x07)] = "<0x07>";
  s.types[byte_id(0x07)] = 6;  // byte
  const Tokenizer t = s.tokenizer();
  EXPECT_TRUE(t.has_byte_token(0x07));
  EXPECT_EQ(t.encode("a\x07"), (Ids{byte_id('a'), byte_id(0x07)}));
  EXPECT_EQ(t.decode(t.encode("a\x07" "b")), "a\x07" "b");
  // A "<0x07>" that is not typed byte is an ordinary word, not the byte.
  s.types[byte_id(0x07)] = 1;
  EXPECT_FALSE(s.tokenizer().has_byte_token(0x07));
}

TEST(TokenizerSynthetic, VocabularyThatWouldEncodeTextToControlTokensIsRejected) {
  Synthetic s;
  s.types[byte_id('q')] = 3;
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.tokens[" + std::to_string(byte_id('q')) +
                                         "] \"q\": the token of byte 113 is a control token");
  s = Synthetic();
  s.types[merged_id(6)] = 3;  // "hello", the result of merge 6
  EXPECT_LOWBIT_ERROR(s.tokenizer(), "tokenizer.ggml.merges[6] \"hell o\": the merged \"hello\" is a control token");
}

// ---------------------------------------------------------------------------------
// The real model

// A model file in scripts/fetch-model.sh's cache, or nothing.
std::optional<std::string> cached_model(const std::string& file) {
  std::filesystem::path cache;
  if (const char* env = std::getenv("LOWBIT_CACHE")) {
    cache = env;
  } else if (const char* home = std::getenv("HOME")) {
    cache = std::filesystem::path(home) / ".cache/lowbit";
  } else {
    return std::nullopt;
  }
  const auto path = cache / "models" / file;
  if (!std::filesystem::exists(path)) return std::nullopt;
  return path.string();
}

std::optional<std::string> model_path() {
  if (const char* env = std::getenv("LOWBIT_MODEL")) return std::string(env);
  return cached_model("SmolLM2-135M-Instruct.Q4_1.gguf");
}

// A fetched model's tokenizer, loaded once per suite; the suite skips without the file.
// Model: path() (nothing when absent) and `missing`, the message then.
template <class Model>
class FetchedTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = Model::path();
    if (!path_) return;
    try {
      file_ = new GgufFile(GgufFile::open(*path_));
      tokenizer_ = new Tokenizer(Tokenizer::from_gguf(*file_));
    } catch (const Error& e) {
      load_error_ = e.what();
    }
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete file_;
    tokenizer_ = nullptr;
    file_ = nullptr;
  }
  void SetUp() override {
    if (!path_) GTEST_SKIP() << Model::missing;
    ASSERT_NE(tokenizer_, nullptr) << *path_ << ": " << load_error_;
  }
  static inline std::optional<std::string> path_;
  static inline std::string load_error_;
  static inline GgufFile* file_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
};

struct SmolLM2 {
  static std::optional<std::string> path() { return model_path(); }
  static constexpr const char* missing =
      "SmolLM2-135M-Instruct.Q4_1.gguf not found: run scripts/fetch-model.sh or set LOWBIT_MODEL";
};
using SmolLM2Tokenizer = FetchedTokenizer<SmolLM2>;

struct IdCase {
  std::string text;
  Ids ids;
};

// Each text encodes to its ids, which decode back to it.
void expect_ids(const Tokenizer& tokenizer, const std::vector<IdCase>& cases) {
  for (const IdCase& c : cases) {
    EXPECT_EQ(tokenizer.encode(c.text), c.ids) << "text: " << c.text;
    EXPECT_EQ(tokenizer.decode(c.ids), c.text);
  }
}

TEST_F(SmolLM2Tokenizer, Metadata) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.vocab_size(), 49152);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.unknown_id(), 0);
  EXPECT_EQ(t.padding_id(), 2);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.pre_tokenizer_name(), "smollm");
  EXPECT_EQ(t.token_bytes(1), "<|im_start|>");
  EXPECT_TRUE(t.is_end_of_generation(2));  // <|im_end|>
  EXPECT_TRUE(t.is_end_of_generation(0));  // <|endoftext|>
  EXPECT_FALSE(t.is_end_of_generation(1));
  EXPECT_FALSE(t.is_end_of_generation(198));
}

// Texts and Hugging Face's ids for them (tests/data/smollm2_tokenizer_cases.tsv:
// UTF-8 hex, ids): from the tokenizer that transformers builds from this GGUF, with the
// pre-tokenizer of SmolLM2's tokenizer.json, Sequence[Digits(individual_digits),
// ByteLevel(add_prefix_space=False, use_regex=True)]: tok.encode(text,
// add_special_tokens=False).ids. scripts/check_tokenizer_hf.py compares lowbit with HF
// live on the same texts.
struct HfCase {
  std::string text;
  Ids ids;
};

std::vector<HfCase> read_hf_cases() {
  std::ifstream in(LOWBIT_TOKENIZER_CASES);
  EXPECT_TRUE(in) << "cannot read " << LOWBIT_TOKENIZER_CASES;
  std::vector<HfCase> cases;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string hex, ids;
    std::getline(fields, hex, '\t');
    std::getline(fields, ids, '\t');
    HfCase c;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
      c.text += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    std::istringstream id_list(ids);
    for (std::int32_t id; id_list >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST_F(SmolLM2Tokenizer, IdsMatchHuggingFace) {
  const std::vector<HfCase> cases = read_hf_cases();
  ASSERT_GE(cases.size(), 19u);
  for (const HfCase& c : cases) {
    EXPECT_EQ(tokenizer_->encode(c.text), c.ids) << "text: " << c.text;
    EXPECT_EQ(tokenizer_->decode(c.ids), kept_bytes(*tokenizer_, c.text));
  }
}

// The bytes the vocabulary has no token for (what Hugging Face drops too, above).
TEST_F(SmolLM2Tokenizer, ExactlyTheBytesWithoutTokenAreDropped) {
  const std::vector<int> missing = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5,
                                    0xF6, 0xF7, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF};
  for (int b = 0; b < 256; ++b) {
    const bool dropped = std::find(missing.begin(), missing.end(), b) != missing.end();
    EXPECT_EQ(tokenizer_->has_byte_token(static_cast<std::uint8_t>(b)), !dropped) << "byte " << b;
    const std::string text = "ab" + std::string(1, static_cast<char>(b)) + "cd";
    const Ids ids = tokenizer_->encode(text, false, /*parse_special=*/false);
    EXPECT_FALSE(has_control_token(*tokenizer_, ids)) << "byte " << b;
    EXPECT_EQ(tokenizer_->decode(ids), dropped ? "abcd" : text) << "byte " << b;
  }
}

// Plain text (special tokens not parsed) never reaches the model as a control token,
// and comes back whole but for the bytes without a token.
TEST_F(SmolLM2Tokenizer, PlainTextNeverEncodesToAControlToken) {
  LOWBIT_TEST_RNG(rng);
  const std::vector<std::string> fragments = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "hello", " world",
                                              "\x04", "\xF1\x90\x80\x80", "\xFF", "\n", "12"};
  std::uniform_int_distribution<int> byte(0, 255), length(0, 24), choice(0, 2);
  std::uniform_int_distribution<std::size_t> fragment(0, fragments.size() - 1);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    for (int i = length(rng); i > 0; --i) {
      text += choice(rng) == 0 ? fragments[fragment(rng)] : std::string(1, static_cast<char>(byte(rng)));
    }
    const Ids ids = tokenizer_->encode(text, false, /*parse_special=*/false);
    ASSERT_FALSE(has_control_token(*tokenizer_, ids)) << "trial " << trial;
    ASSERT_EQ(tokenizer_->decode(ids), kept_bytes(*tokenizer_, text)) << "trial " << trial;
  }
}

// The reference string came from rendering the GGUF's tokenizer.chat_template with
// jinja2 (messages = one user turn, add_generation_prompt = True), its ids as above.
TEST_F(SmolLM2Tokenizer, ChatTemplateMatchesHuggingFace) {
  const std::string prompt = tokenizer_->apply_chat_template("What is the capital of France?");
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
  const Ids expected = {1,    9690, 198,  2683, 359,  253,  5356, 5646, 11173, 3365, 3511, 308, 34519,
                        28,   7018, 411,  407,  19712, 8182, 2,    198,  1,     4093, 198,  1780, 314,
                        260,  3575, 282,  4649, 47,   2,    198,  1,    520,   9531, 198};
  EXPECT_EQ(tokenizer_->encode(prompt), expected);
}

std::optional<std::string> wikitext_path() {
  if (const char* env = std::getenv("LOWBIT_WIKITEXT")) return std::string(env);
#ifdef LOWBIT_WIKITEXT_DEFAULT
  if (std::filesystem::exists(LOWBIT_WIKITEXT_DEFAULT)) return std::string(LOWBIT_WIKITEXT_DEFAULT);
#endif
  return std::nullopt;
}

// Reference for the whole file, encoded in one call: 304830 tokens whose FNV-1a 64
// over the ids (each id xor-ed in as one value, then times the prime) is
// 0xb0e3c01adbc297f3; line by line (split at '\n', the '\r' kept), 301948 tokens.
// Both from Hugging Face tokenizers as in IdsMatchHuggingFace.
TEST_F(SmolLM2Tokenizer, WikiText2TestSetRoundTrips) {
  const auto path = wikitext_path();
  if (!path) GTEST_SKIP() << "WikiText-2 not found: set LOWBIT_WIKITEXT to wiki.test.raw";
  std::ifstream in(*path, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << *path << " (LOWBIT_WIKITEXT or the shared data folder)";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  const auto start = std::chrono::steady_clock::now();
  const Ids ids = tokenizer_->encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const std::int32_t id : ids) hash = (hash ^ static_cast<std::uint64_t>(id)) * 0x100000001b3ull;
  std::printf("[ wikitext ] %zu bytes -> %zu tokens in %.3f s (whole file, one call)\n", text.size(), ids.size(),
              seconds);
  EXPECT_EQ(ids.size(), 304830u);
  EXPECT_EQ(hash, 0xb0e3c01adbc297f3ull);
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(tokenizer_->decode(ids), text);

  std::size_t line_tokens = 0, lines = 0;
  for (std::size_t begin = 0; begin <= text.size(); ++lines) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    const Ids line_ids = tokenizer_->encode(line);
    line_tokens += line_ids.size();
    ASSERT_EQ(tokenizer_->decode(line_ids), line) << "line " << lines;
    begin = end + 1;
  }
  std::printf("[ wikitext ] %zu lines -> %zu tokens line by line\n", lines, line_tokens);
  EXPECT_EQ(line_tokens, 301948u);
}

// ---------------------------------------------------------------------------------
// Qwen2.5-Coder-0.5B-Instruct (scripts/fetch-model.sh qwen2.5-0.5b): the qwen2 split

struct Qwen2 {
  static std::optional<std::string> path() { return cached_model("Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"); }
  static constexpr const char* missing =
      "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf not fetched: scripts/fetch-model.sh qwen2.5-0.5b";
};
using Qwen2Tokenizer = FetchedTokenizer<Qwen2>;

TEST_F(Qwen2Tokenizer, Metadata) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.vocab_size(), 151936);
  EXPECT_EQ(t.pre_tokenizer_name(), "qwen2");
  EXPECT_EQ(t.bos_id(), 151643);
  EXPECT_EQ(t.eos_id(), 151645);
  EXPECT_FALSE(t.add_bos());
  EXPECT_TRUE(t.is_end_of_generation(151645));  // <|im_end|>
  EXPECT_TRUE(t.is_end_of_generation(151643));  // <|endoftext|>
  EXPECT_FALSE(t.is_end_of_generation(151644));  // <|im_start|>
}

// Expected ids from Hugging Face `tokenizers` 0.23.3, the tokenizer built from this
// GGUF as transformers' Qwen2Converter builds it (BPE over tokenizer.ggml.tokens and
// merges, NFC, Qwen2's split regex isolated, ByteLevel without its regex; control
// tokens added as special), then encode(text, add_special_tokens=False).ids.
// scripts/check_tokenizer_hf.py compares against transformers itself where it is installed.
TEST_F(Qwen2Tokenizer, IdsMatchHuggingFace) {
  expect_ids(*tokenizer_, {
      {"Hello world", {9707, 1879}},
      {"The year 2024 had 365 days; pi is 3.14159.",
       {785, 1042, 220, 17, 15, 17, 19, 1030, 220, 18, 21, 20, 2849, 26, 8938, 374, 220, 18, 13, 16, 19, 16, 20, 24,
        13}},
      {"multiple   spaces    here  ", {35673, 256, 12621, 262, 1588, 256}},
      {"line one\nline two\n\n\nend\r\n", {1056, 825, 198, 1056, 1378, 1406, 408, 319}},
      {"I'm sure they'll say it's fine, don't you think? We've seen it. I'D WE'LL",
       {40, 2776, 2704, 807, 3278, 1977, 432, 594, 6915, 11, 1513, 944, 498, 1744, 30, 1205, 3003, 3884, 432, 13, 358,
        27705, 19677, 6, 4086}},
      {"Caf\u00e9 na\u00efve r\u00e9sum\u00e9", {34, 2577, 963, 94880, 586, 9333, 1242, 963}},
      {"\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5", {104811, 17177, 99689, 81705}},
      {"Emoji: \U0001F600\U0001F44D\U0001F3FD and \u2764\uFE0F",
       {92731, 25, 90316, 144349, 145375, 323, 70470, 30543}},
      {"  leading\ttabs\t\tand\u00a0nbsp\u0085nel", {220, 6388, 3244, 3435, 197, 52477, 4102, 5674, 126, 227, 8138}},
      {"code: def f(x):\n    return x**2  # square",
       {1851, 25, 707, 282, 2075, 982, 262, 470, 856, 334, 17, 220, 671, 9334}},
      {"a<|endoftext|>b <|im_start|>user\nHi<|im_end|>", {64, 151643, 65, 220, 151644, 872, 198, 13048, 151645}},
  });
}

// The whole WikiText-2 test split, as bytes (its CRLF line ends kept; it is already NFC,
// so HF's normalizer changes nothing): the count and FNV-1a hash of Hugging Face's ids,
// built as above.
TEST_F(Qwen2Tokenizer, WikiText2MatchesHuggingFace) {
  const char* path = std::getenv("LOWBIT_WIKITEXT");
  const std::string file = path ? path : LOWBIT_WIKITEXT_DEFAULT;
  std::ifstream in(file, std::ios::binary);
  if (!in) GTEST_SKIP() << "WikiText-2 not found at " << file;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Ids ids = tokenizer_->encode(text);
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const std::int32_t id : ids) hash = (hash ^ static_cast<std::uint64_t>(id)) * 0x100000001b3ull;
  EXPECT_EQ(ids.size(), 298938u);
  EXPECT_EQ(hash, 0x2e2f8eac2898f015ull);
  EXPECT_EQ(tokenizer_->decode(ids), text);
}

}  // namespace
}  // namespace lowbit::engine
