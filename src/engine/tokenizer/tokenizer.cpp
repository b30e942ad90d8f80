#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <unordered_map>
#include <utility>

#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

constexpr std::string_view k_tokens = "tokenizer.ggml.tokens";
constexpr std::string_view k_merges = "tokenizer.ggml.merges";
constexpr std::string_view k_token_type = "tokenizer.ggml.token_type";

const GgufValue& required(const GgufFile& file, std::string_view key, std::string_view expected) {
  const GgufValue* value = file.find_metadata(key);
  LOWBIT_CHECK(value != nullptr, key, ": absent from ", file.source(), " (expected ", expected, ")");
  return *value;
}

// A token id key: -1 when absent (or stored as -1, llama.cpp's "none").
std::int32_t optional_id(const GgufFile& file, std::string_view key, std::size_t vocab_size) {
  const GgufValue* value = file.find_metadata(key);
  if (value == nullptr) return -1;
  const std::int64_t id = value->as_i64();
  if (id == -1) return -1;
  LOWBIT_CHECK(id >= 0 && static_cast<std::uint64_t>(id) < vocab_size, key, ": expected a token id in [0, ",
               vocab_size, "), got ", id);
  return static_cast<std::int32_t>(id);
}

std::string quoted(std::string_view s) {
  std::string out;  // appended, not operator+: GCC 12 warns (falsely, -Wrestrict) about the latter
  out.reserve(s.size() + 2);
  out.append(1, '"').append(s).append(1, '"');
  return out;
}

// "<0x41>" -> 0x41; -1 for anything else.
int byte_token_value(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// Control tokens that end a turn in the chat formats llama.cpp knows.
constexpr std::array<std::string_view, 8> k_end_of_turn_texts = {
    "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|end_of_text|>", "<EOT>"};

// A Jinja string literal's body back to text: \n, \t, \', \", \\.
std::string unescape_literal(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
  }
  return out;
}

// The system message a ChatML template writes by itself: the text of a literal
// "<|im_start|>system\n...<|im_end|>" in it, when that text is plain (no quotes or
// Jinja tags, which would mean it is built from the conversation).
std::string default_system_message(std::string_view tmpl) {
  constexpr std::string_view start = "<|im_start|>system";
  for (std::size_t at = tmpl.find(start); at != std::string_view::npos; at = tmpl.find(start, at + 1)) {
    std::size_t body = at + start.size();
    if (tmpl.substr(body, 1) == "\n") {
      body += 1;
    } else if (tmpl.substr(body, 2) == "\\n") {
      body += 2;
    } else {
      continue;
    }
    const std::size_t end = tmpl.find("<|im_end|>", body);
    if (end == std::string_view::npos) break;
    const std::string_view text = tmpl.substr(body, end - body);
    if (text.empty() || text.find_first_of("'\"{}") != std::string_view::npos) continue;
    return unescape_literal(text);
  }
  return {};
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  const std::string_view model = required(file, "tokenizer.ggml.model", "\"gpt2\"").as_string();
  LOWBIT_CHECK(model == "gpt2", "tokenizer.ggml.model: expected \"gpt2\" (byte-level BPE), got ", quoted(model));

  const std::vector<std::string_view> tokens = required(file, k_tokens, "an array of strings").as_string_array();
  LOWBIT_CHECK(!tokens.empty(), k_tokens, ": expected at least one token, got none");
  LOWBIT_CHECK(tokens.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), k_tokens,
               ": expected at most 2^31-1 tokens, got ", tokens.size());
  std::vector<std::int32_t> types(tokens.size(), static_cast<std::int32_t>(TokenType::normal));
  if (const GgufValue* value = file.find_metadata(k_token_type)) {
    types = value->as_i32_array();
    LOWBIT_CHECK(types.size() == tokens.size(), k_token_type, ": expected ", tokens.size(),
                 " entries (one per token), got ", types.size());
    for (std::size_t i = 0; i < types.size(); ++i) {
      LOWBIT_CHECK(types[i] >= static_cast<std::int32_t>(TokenType::undefined) &&
                       types[i] <= static_cast<std::int32_t>(TokenType::byte),
                   k_token_type, "[", i, "] (token ", quoted(tokens[i]), ") = ", types[i],
                   ": expected 0..6 (undefined, normal, unknown, control, user-defined, unused, byte)");
    }
  }
  const GgufValue* pre_value = file.find_metadata("tokenizer.ggml.pre");
  // Files without the key predate it; llama.cpp reads them with its default split.
  PreTokenizer pre = PreTokenizer::for_name(pre_value != nullptr ? pre_value->as_string() : "default");

  // Token ids by text; the first of equal strings wins.
  std::unordered_map<std::string_view, std::int32_t> id_of;
  id_of.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) id_of.try_emplace(tokens[i], static_cast<std::int32_t>(i));
  const auto find_id = [&](std::string_view text) {
    auto found = id_of.find(text);
    return found == id_of.end() ? -1 : found->second;
  };

  const std::int32_t unknown = optional_id(file, "tokenizer.ggml.unknown_token_id", tokens.size());
  // The token of each byte: its byte-level spelling, else a "<0xNN>" byte token (byte
  // fallback), else none: encode then drops the byte, as HF tokenizers' byte-level BPE
  // (no unknown token) and llama.cpp do. The unknown token never stands in: in GPT-2
  // style vocabularies it is a control token (<|endoftext|>).
  std::array<std::int32_t, 256> byte_tokens{};
  for (int b = 0; b < 256; ++b) {
    byte_tokens[b] = find_id(byte_level_encode(std::string(1, static_cast<char>(b))));
    if (byte_tokens[b] < 0) {
      char spelled[8];
      std::snprintf(spelled, sizeof spelled, "<0x%02X>", b);
      const std::int32_t fallback = find_id(spelled);
      if (fallback >= 0 && types[fallback] == static_cast<std::int32_t>(TokenType::byte)) byte_tokens[b] = fallback;
    }
    if (byte_tokens[b] >= 0) {
      const std::int32_t id = byte_tokens[b];
      LOWBIT_CHECK(types[id] != static_cast<std::int32_t>(TokenType::control), k_tokens, "[", id, "] ",
                   quoted(tokens[id]), ": the token of byte ", b, " is a control token (", k_token_type,
                   " 3); plain text must never encode to one");
    }
  }
  const std::vector<std::string_view> merges =
      required(file, k_merges, "an array of \"left right\" strings").as_string_array();
  LOWBIT_CHECK(merges.size() < static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), k_merges,
               ": too many merges: ", merges.size());
  std::unordered_map<std::uint64_t, BpeModel::Merge> merge_table;
  merge_table.reserve(merges.size());
  std::string joined;
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string_view merge = merges[i];
    const std::size_t space = merge.find(' ', 1);  // from 1: a left part may itself be " "
    LOWBIT_CHECK(space != std::string_view::npos && space + 1 < merge.size() &&
                     merge.find(' ', space + 1) == std::string_view::npos,
                 k_merges, "[", i, "]: expected \"left right\" (two tokens, one space), got ", quoted(merge));
    const std::string_view left = merge.substr(0, space), right = merge.substr(space + 1);
    joined.assign(left).append(right);
    const std::int32_t left_id = find_id(left), right_id = find_id(right), result = find_id(joined);
    LOWBIT_CHECK(left_id >= 0, k_merges, "[", i, "] ", quoted(merge), ": ", quoted(left), " is not a token");
    LOWBIT_CHECK(right_id >= 0, k_merges, "[", i, "] ", quoted(merge), ": ", quoted(right), " is not a token");
    LOWBIT_CHECK(result >= 0, k_merges, "[", i, "] ", quoted(merge), ": the merged ", quoted(joined),
                 " is not a token");
    LOWBIT_CHECK(types[result] != static_cast<std::int32_t>(TokenType::control), k_merges, "[", i, "] ",
                 quoted(merge), ": the merged ", quoted(joined), " is a control token (", k_token_type,
                 " 3); plain text must never encode to one");
    merge_table.try_emplace(BpeModel::pair_key(left_id, right_id),
                            BpeModel::Merge{static_cast<std::int32_t>(i), result});  // a repeat keeps its first rank
  }

  Tokenizer t(std::move(pre), BpeModel(byte_tokens, std::move(merge_table)));
  t.unknown_id_ = unknown;
  t.bos_id_ = optional_id(file, "tokenizer.ggml.bos_token_id", tokens.size());
  t.eos_id_ = optional_id(file, "tokenizer.ggml.eos_token_id", tokens.size());
  t.padding_id_ = optional_id(file, "tokenizer.ggml.padding_token_id", tokens.size());
  if (const GgufValue* value = file.find_metadata("tokenizer.ggml.add_bos_token")) t.add_bos_ = value->as_bool();
  LOWBIT_CHECK(!t.add_bos_ || t.bos_id_ >= 0,
               "tokenizer.ggml.add_bos_token: true, but the file has no tokenizer.ggml.bos_token_id");
  if (const GgufValue* value = file.find_metadata("tokenizer.chat_template")) {
    t.chat_template_ = std::string(value->as_string());
    t.has_chat_template_ = true;
  }

  t.token_text_.reserve(tokens.size());
  t.token_bytes_.reserve(tokens.size());
  t.token_type_.reserve(tokens.size());
  t.specials_by_first_byte_.resize(256);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view text = tokens[i];
    const auto type = static_cast<TokenType>(types[i]);
    t.token_text_.emplace_back(text);
    t.token_type_.push_back(type);
    if (type == TokenType::normal || type == TokenType::undefined) {
      t.token_bytes_.push_back(byte_level_decode(text));
    } else if (type == TokenType::byte) {
      const int value = byte_token_value(text);
      t.token_bytes_.push_back(value >= 0 ? std::string(1, static_cast<char>(value)) : byte_level_decode(text));
    } else {
      t.token_bytes_.emplace_back(text);  // control, user-defined, ...: their text as it is
    }
    const auto id = static_cast<std::int32_t>(i);
    if ((type == TokenType::control || type == TokenType::user_defined) && !text.empty()) {
      t.specials_by_first_byte_[static_cast<std::uint8_t>(text[0])].push_back(id);
    }
    if (type == TokenType::control || type == TokenType::user_defined) {
      if (std::find(k_end_of_turn_texts.begin(), k_end_of_turn_texts.end(), text) != k_end_of_turn_texts.end()) {
        t.end_of_generation_.push_back(id);
      }
    }
  }
  for (auto& bucket : t.specials_by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::int32_t a, std::int32_t b) {
      return t.token_text_[a].size() > t.token_text_[b].size();
    });
  }
  for (std::string_view key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const std::int32_t id = optional_id(file, key, tokens.size());
    if (id >= 0) t.end_of_generation_.push_back(id);
  }
  if (t.eos_id_ >= 0) t.end_of_generation_.push_back(t.eos_id_);
  std::sort(t.end_of_generation_.begin(), t.end_of_generation_.end());
  t.end_of_generation_.erase(std::unique(t.end_of_generation_.begin(), t.end_of_generation_.end()),
                             t.end_of_generation_.end());
  return t;
}

void Tokenizer::check_id(std::int32_t id, const char* what) const {
  LOWBIT_CHECK(id >= 0 && id < vocab_size(), what, ": token id ", id, " is outside [0, ", vocab_size(), ")");
}

TokenType Tokenizer::token_type(std::int32_t id) const {
  check_id(id, "token_type");
  return token_type_[id];
}

std::int32_t Tokenizer::special_at(std::string_view text, std::size_t pos, bool parse_control) const {
  for (std::int32_t id : specials_by_first_byte_[static_cast<std::uint8_t>(text[pos])]) {
    if (!parse_control && token_type_[id] == TokenType::control) continue;
    if (text.substr(pos, token_text_[id].size()) == token_text_[id]) return id;
  }
  return -1;
}

void Tokenizer::encode_plain(std::string_view text, std::vector<std::int32_t>& ids) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces;
  pre_.split(text, pieces);
  for (std::string_view piece : pieces) bpe_.encode(piece, ids);
}

bool Tokenizer::has_byte_token(std::uint8_t byte) const { return bpe_.byte_token(byte) >= 0; }

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos) {
    LOWBIT_CHECK(bos_id_ >= 0, "encode: add_bos is true, but the file has no tokenizer.ggml.bos_token_id");
    ids.push_back(bos_id_);
  }
  // Leftmost special token first, the longest of those that start there.
  std::size_t plain_start = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::int32_t id = special_at(text, pos, parse_special);
    if (id < 0) {
      ++pos;
      continue;
    }
    encode_plain(text.substr(plain_start, pos - plain_start), ids);
    ids.push_back(id);
    pos += token_text_[id].size();
    plain_start = pos;
  }
  encode_plain(text.substr(plain_start), ids);
  return ids;
}

std::string Tokenizer::token_bytes(std::int32_t id) const {
  check_id(id, "token_bytes");
  return token_bytes_[id];
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    LOWBIT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "decode: ids[", i, "] = ", ids[i], " is outside [0, ",
                 vocab_size(), ")");
    out += token_bytes_[ids[i]];
  }
  return out;
}

bool Tokenizer::is_end_of_generation(std::int32_t id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

std::string Tokenizer::apply_chat_template(std::string_view user_message) const {
  const ChatMessage turn{"user", std::string(user_message)};
  return apply_chat_template(std::span<const ChatMessage>(&turn, 1));
}

std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages) const {
  LOWBIT_CHECK(has_chat_template_, "tokenizer.chat_template: absent from the file (expected a ChatML template)");
  const std::string_view tmpl = chat_template_;
  const bool chatml = tmpl.find("<|im_start|>") != std::string_view::npos &&
                      tmpl.find("<|im_end|>") != std::string_view::npos;
  LOWBIT_CHECK(chatml, "tokenizer.chat_template: not a ChatML template (expected <|im_start|> and <|im_end|> in it; "
               "only ChatML is supported), got ", quoted(tmpl.substr(0, 120)), tmpl.size() > 120 ? "..." : "");
  LOWBIT_CHECK(!messages.empty(), "chat: expected at least one message");
  std::string out;
  const std::string system = default_system_message(tmpl);
  if (!system.empty() && messages.front().role != "system") out += "<|im_start|>system\n" + system + "<|im_end|>\n";
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace lowbit::engine
