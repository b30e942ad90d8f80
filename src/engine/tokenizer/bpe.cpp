#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <shared_mutex>

#include "engine/tokenizer/pretokenize.h"

namespace lowbit::engine {
namespace {

bool printable_byte(std::uint8_t b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

struct Alphabet {
  std::array<std::uint32_t, 256> to_codepoint{};
  std::array<std::int16_t, 324> to_byte{};  // code points 0..323 cover the whole alphabet
  Alphabet() {
    to_byte.fill(-1);
    std::uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_codepoint[b] = printable_byte(static_cast<std::uint8_t>(b)) ? static_cast<std::uint32_t>(b) : next++;
      to_byte[to_codepoint[b]] = static_cast<std::int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet table;
  return table;
}

void append_utf8(std::uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::uint32_t decode_utf8(std::string_view s, std::size_t i, std::size_t n) {
  const auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

// Pieces longer than this are rarely seen twice; caching them would only grow the map.
constexpr std::size_t k_max_cached_piece = 128;
// Bounded memory: the cache starts over when it holds this many pieces.
constexpr std::size_t k_max_cached_pieces = 1 << 18;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

std::uint32_t byte_to_codepoint(std::uint8_t byte) { return alphabet().to_codepoint[byte]; }

int codepoint_to_byte(std::uint32_t codepoint) {
  return codepoint < alphabet().to_byte.size() ? alphabet().to_byte[codepoint] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_to_codepoint(static_cast<std::uint8_t>(c)), out);
  return out;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence_length(text, i);
    const int byte = n == 0 ? -1 : codepoint_to_byte(decode_utf8(text, i, n));
    if (byte >= 0) {
      out += static_cast<char>(byte);
    } else {
      out.append(text.substr(i, n == 0 ? 1 : n));
    }
    i += n == 0 ? 1 : n;
  }
  return out;
}

struct BpeModel::Cache {
  std::shared_mutex mutex;
  std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>> pieces;
};

BpeModel::BpeModel(const std::array<std::int32_t, 256>& byte_tokens, std::unordered_map<std::uint64_t, Merge> merges)
    : byte_tokens_(byte_tokens), merges_(std::move(merges)), cache_(std::make_unique<Cache>()) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

void BpeModel::encode(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (piece.size() <= 1 || piece.size() > k_max_cached_piece) {
    merge_uncached(piece, out);
    return;
  }
  {
    std::shared_lock lock(cache_->mutex);
    auto found = cache_->pieces.find(piece);
    if (found != cache_->pieces.end()) {
      out.insert(out.end(), found->second.begin(), found->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_uncached(piece, out);
  std::unique_lock lock(cache_->mutex);
  if (cache_->pieces.size() >= k_max_cached_pieces) cache_->pieces.clear();
  cache_->pieces.try_emplace(std::string(piece), out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

void BpeModel::merge_uncached(std::string_view piece, std::vector<std::int32_t>& out) const {
  // Symbols in a linked list (merged-away ones get id -1), and a min-heap of candidate
  // pairs by (rank, position of the left symbol). A popped candidate is still good when
  // both symbols still hold the ids it was made from: then the pair exists as ranked.
  struct Symbol {
    std::int32_t id, prev, next;
  };
  struct Candidate {
    std::int32_t rank, pos, left, right, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (const char c : piece) {
    const std::int32_t id = byte_tokens_[static_cast<std::uint8_t>(c)];
    if (id < 0) continue;  // no token for this byte: left out
    const auto at = static_cast<std::int32_t>(symbols.size());
    if (at > 0) symbols.back().next = at;
    symbols.push_back({id, at - 1, -1});
  }
  const std::size_t n = symbols.size();
  if (n <= 1) {
    if (n == 1) out.push_back(symbols[0].id);
    return;
  }
  std::vector<Candidate> heap;
  const auto consider = [&](std::int32_t pos) {
    if (pos < 0 || symbols[pos].next < 0) return;
    const std::int32_t left = symbols[pos].id, right = symbols[symbols[pos].next].id;
    auto found = merges_.find(pair_key(left, right));
    if (found == merges_.end()) return;
    heap.push_back({found->second.rank, pos, left, right, found->second.result});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) consider(static_cast<std::int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.pos];
    if (left.id != c.left || left.next < 0 || symbols[left.next].id != c.right) continue;
    Symbol& right = symbols[left.next];
    left.id = c.result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace lowbit::engine
