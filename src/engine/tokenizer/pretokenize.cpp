#include "engine/tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <utility>

#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

// The regexes, written out for PCRE2 from the sources named. \s is spelled [\s\x{85}]:
// PCRE2's UCP \s leaves out U+0085 (NEL), which Oniguruma (HF tokenizers) and
// llama.cpp count as whitespace.
//
// GPT-2's split, as HF tokenizers' ByteLevel pre-tokenizer has it (use_regex = true).
// llama.cpp's list drops the final |\s+ because it keeps unmatched text as pieces,
// which this splitter does too, so the two agree.
constexpr std::string_view k_gpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\x{85}\p{L}\p{N}]+|[\s\x{85}]+(?![^\s\x{85}])|[\s\x{85}]+)";
// Every digit a piece of its own: HF's Digits(individual_digits = true), llama.cpp's
// "\p{N}" stage for LLAMA_VOCAB_PRE_TYPE_SMOLLM (and STARCODER, REFACT, ...).
constexpr std::string_view k_digits = R"(\p{N})";
// Llama 3's split (its tokenizer.json / tiktoken pattern), and Qwen2's (llama.cpp's
// LLAMA_VOCAB_PRE_TYPE_QWEN2), which differs only in its numbers: runs of up to three
// digits for Llama 3, every digit on its own for Qwen2. The case-insensitive
// contractions are spelled out as llama.cpp does: PCRE2's (?i) would also fold the
// long s (U+017F) and the Kelvin sign into 's' and 'k'.
std::string tiktoken_style(std::string_view numbers) {
  std::string pattern = R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)";
  pattern += numbers;
  pattern += R"(| ?[^\s\x{85}\p{L}\p{N}]+[\r\n]*|[\s\x{85}]*[\r\n]+|[\s\x{85}]+(?![^\s\x{85}])|[\s\x{85}]+)";
  return pattern;
}

struct Preset {
  std::string_view name;
  std::vector<std::string_view> stages;
};

const std::array<Preset, 6>& presets() {
  static const std::string llama3 = tiktoken_style(R"(\p{N}{1,3})"), qwen2 = tiktoken_style(k_digits);
  static const std::array<Preset, 6> table{{
      {"smollm", {k_digits, k_gpt2}},
      {"gpt2", {k_gpt2}},
      {"default", {k_gpt2}},
      {"llama3", {llama3}},
      {"llama-bpe", {llama3}},
      {"qwen2", {qwen2}},
  }};
  return table;
}

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

}  // namespace

std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  const std::size_t left = text.size() - i;
  // Allowed range of the second byte narrows for E0, ED, F0, F4 (overlongs,
  // surrogates, > U+10FFFF); the rest are plain continuation bytes.
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && is_continuation(at(i + 1)) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3) return 0;
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return at(i + 1) >= lo && at(i + 1) <= hi && is_continuation(at(i + 2)) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4) return 0;
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return at(i + 1) >= lo && at(i + 1) <= hi && is_continuation(at(i + 2)) && is_continuation(at(i + 3)) ? 4 : 0;
  }
  return 0;
}

// One compiled pattern; shared by copies of the PreTokenizer (matching only reads it).
class PreTokenizer::Regex {
 public:
  explicit Regex(std::string_view pattern) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                          &error, &error_offset, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      LOWBIT_FAIL("pre-tokenizer regex '", pattern, "': PCRE2 cannot compile it at offset ", error_offset, ": ",
                  reinterpret_cast<const char*>(message));
    }
    // Without JIT (a build of PCRE2 that lacks it) pcre2_match interprets: slower, same result.
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the matches of the pattern in `piece` and the gaps between them. The
  // subject is the piece alone, so lookaheads see its end, not the text after it.
  void split(std::string_view piece, pcre2_match_data* match, std::vector<std::string_view>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    std::size_t gap = 0, start = 0;
    while (start < piece.size()) {
      const int rc = pcre2_match(code_, subject, piece.size(), start, PCRE2_NO_UTF_CHECK, match, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      LOWBIT_CHECK(rc >= 0, "pre-tokenizer: pcre2_match failed with code ", rc);
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      const std::size_t begin = ovector[0], end = ovector[1];
      if (end == begin) {  // none of the patterns matches empty; step one character if one ever does
        start = begin + 1;
        while (start < piece.size() && is_continuation(static_cast<unsigned char>(piece[start]))) ++start;
        continue;
      }
      if (begin > gap) out.push_back(piece.substr(gap, begin - gap));
      out.push_back(piece.substr(begin, end - begin));
      gap = start = end;
    }
    if (gap < piece.size()) out.push_back(piece.substr(gap));
  }

 private:
  pcre2_code* code_ = nullptr;
};

PreTokenizer::PreTokenizer(std::string name, std::vector<std::shared_ptr<const Regex>> stages)
    : name_(std::move(name)), stages_(std::move(stages)) {}

const std::vector<std::string_view>& PreTokenizer::supported_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const Preset& p : presets()) out.push_back(p.name);
    return out;
  }();
  return names;
}

PreTokenizer PreTokenizer::for_name(std::string_view name) {
  for (const Preset& preset : presets()) {
    if (preset.name != name) continue;
    std::vector<std::shared_ptr<const Regex>> stages;
    for (std::string_view pattern : preset.stages) stages.push_back(std::make_shared<const Regex>(pattern));
    return PreTokenizer(std::string(name), std::move(stages));
  }
  std::string supported;
  for (std::string_view n : supported_names()) supported += (supported.empty() ? "" : ", ") + std::string(n);
  LOWBIT_FAIL("tokenizer.ggml.pre: unknown pre-tokenizer '", name, "' (supported: ", supported, ")");
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  MatchData match(pcre2_match_data_create(1, nullptr));
  LOWBIT_CHECK(match != nullptr, "pre-tokenizer: out of memory for PCRE2 match data");
  std::vector<std::string_view> current, next;
  const auto run_stages = [&](std::string_view run) {
    current.assign(1, run);
    for (std::size_t s = 0; s < stages_.size(); ++s) {
      const bool last = s + 1 == stages_.size();
      std::vector<std::string_view>& out = last ? pieces : next;
      if (!last) next.clear();
      for (std::string_view piece : current) stages_[s]->split(piece, match.get(), out);
      if (!last) std::swap(current, next);
    }
  };
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t run_start = i;
    std::size_t n = 0;
    while (i < text.size() && (n = utf8_sequence_length(text, i)) != 0) i += n;
    if (i > run_start) run_stages(text.substr(run_start, i - run_start));
    if (i < text.size()) pieces.push_back(text.substr(i++, 1));  // a byte outside valid UTF-8
  }
}

}  // namespace lowbit::engine
