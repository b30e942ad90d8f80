// The layout of one layer's decode KV cache (include/lowbit/kv_cache.h), as its CPU
// twin and its kernels address it: plain pointers and sizes, no ownership; host and
// device functions (LOWBIT_HD), no CUDA headers, so the CPU tests check the arithmetic.
//
// Per layer, K and V each have (H = kv_heads, D = head_dim):
//   f16    [H][f16_slots][D] FP16 bits. Slots [0, sink) hold positions 0..sink-1;
//          slots sink + (pos % window) are the window's ring buffer. Per KV head, so
//          that one head's positions are contiguous for the kernel's 16-byte loads.
//          full: f16_slots = max_tokens, slot = pos (sink = max_tokens, no ring).
//   codes  [body_pos][H][code_bytes] quantized body by position (body_pos = pos -
//          body_base): D bytes (INT8 symmetric, i8) or D/2 (INT4 asymmetric, low
//          nibble first): the codes of cpu::kv_quantize() over a [H x D] token
//          matrix (one group per head).
//   scales [body_pos][H] f16, mins [body_pos][H] f16 (INT4 only): formats::HalfParams,
//          the f32 scale / min rounded to f16, the codes encoded with the rounded values.
// Only the default group (one scale (+ min) per token per KV head) is laid out here.
//
// Key blocks (key_block = B > 0, KIVI; the engine's --kv-key-block; the paged pool's
// placement: core/kv_pages.h): K's body is quantized per channel over blocks of B body positions (body index
// j = pos - body_base, block j / B) once the block is complete, from FP16 values kept
// until then in a staging ring. V is unchanged. K then has:
//   codes  as above, by position ([body_pos][H][code_bytes]), each code that of its
//          channel's group in its block;
//   scales [block][H][D] f16, mins [block][H][D] f16 (INT4): per block and channel;
//   staged [H][B][D] FP16 bits: body index j in slot j % B. The open block (the body
//          positions past the last complete block) is read from here.
// The codes and parameters equal cpu::kv_quantize over the block's transposed [H*D x B]
// FP16 values (one group per channel): what the engine's KvCache (stage_key) computes.
//
// A query at the last position sees (DecodeSpan):
//   [0, sink_end)              FP16, slot = pos
//   [sink_end, recent_begin)   the quantized body (selective, int8, int4), or dropped
//                              (window)
//   [recent_begin, end)        FP16 ring slots (window, selective)
// full: sink_end = recent_begin = end; int8 / int4: sink_end = 0, recent_begin = end.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "formats/hd.h"
#include "lowbit/error.h"
#include "lowbit/kv_cache.h"
#include "lowbit/tensor.h"

namespace lowbit::core {

enum class KvBody : int { none = 0, int4 = 4, int8 = 8 };

// Sizes of one layer's cache; the same for K and V. (LOWBIT_HD: the kernels use these.)
struct KvLayerShape {
  std::int64_t kv_heads = 0, head_dim = 0;
  std::int64_t sink = 0, window = 0;  // FP16 slots: sink + window (full: sink = max_tokens)
  KvBody body = KvBody::none;
  std::int64_t body_base = 0;   // first quantized position (selective: sink)
  std::int64_t body_slots = 0;  // positions the body holds
  std::int64_t key_block = 0;   // K per channel over blocks of this many body positions (0: per token)

  LOWBIT_HD std::int64_t f16_slots() const { return sink + window; }
  LOWBIT_HD std::int64_t code_bytes() const { return body == KvBody::int4 ? head_dim / 2 : head_dim; }
  LOWBIT_HD bool has_mins() const { return body == KvBody::int4; }
  LOWBIT_HD bool drops() const { return body == KvBody::none && window > 0; }  // window policy
  LOWBIT_HD bool full() const { return body == KvBody::none && window == 0; }  // full policy: every slot FP16
  LOWBIT_HD std::int64_t slot(std::int64_t pos) const { return pos < sink ? pos : sink + pos % window; }

  std::size_t f16_bytes() const { return static_cast<std::size_t>(kv_heads * f16_slots() * head_dim * 2); }
  std::size_t code_bytes_total() const {
    return body == KvBody::none ? 0 : static_cast<std::size_t>(body_slots * kv_heads * code_bytes());
  }
  std::size_t param_count() const {
    return body == KvBody::none ? 0 : static_cast<std::size_t>(body_slots * kv_heads);
  }
  static constexpr std::size_t kParamBytes = 2;  // f16 scales and mins
  std::size_t param_bytes_total() const { return param_count() * kParamBytes * (has_mins() ? 2 : 1); }

  // Key blocks (key_block > 0 with a body).
  LOWBIT_HD bool key_blocks() const { return key_block > 0 && body != KvBody::none; }
  // The first body position of the open block when the body holds [body_base, body_end).
  LOWBIT_HD std::int64_t open_block_begin(std::int64_t body_end) const {
    const std::int64_t n = body_end > body_base ? body_end - body_base : 0;
    return body_base + n / key_block * key_block;
  }
  LOWBIT_HD std::int64_t staged_slot(std::int64_t pos) const { return (pos - body_base) % key_block; }
  // The first position >= t whose append completes a block: its body token (the token
  // itself, or under selective the one leaving the window, t - window) is a block's last.
  LOWBIT_HD std::int64_t next_block_completion(std::int64_t t) const {
    const std::int64_t offset = body_base + window;  // int8 / int4: window 0, body_base 0
    const std::int64_t j = t > offset ? t - offset : 0;
    return offset + j + (key_block - 1 - j % key_block);
  }
  // Scales (and as many mins) of K: one per channel per complete block.
  std::size_t key_param_count() const {
    return key_blocks() ? static_cast<std::size_t>(body_slots / key_block * kv_heads * head_dim) : param_count();
  }
  std::size_t staged_bytes() const {
    return key_blocks() ? static_cast<std::size_t>(kv_heads * key_block * head_dim * 2) : 0;
  }
};

// One part (K or V) of one layer on the device.
struct KvPart {
  std::uint16_t* f16 = nullptr;  // FP16 bits
  std::uint8_t* codes = nullptr;
  std::uint16_t* scales = nullptr;  // f16 bits
  std::uint16_t* mins = nullptr;    // f16 bits, INT4 only
  std::uint16_t* staged = nullptr;  // K with key blocks: the open block's FP16 bits, [H][key_block][D]
};

struct KvLayerBuffers {
  KvPart k, v;
};

// The positions the newest query (at end - 1) reads, by form.
struct DecodeSpan {
  std::int64_t sink_end = 0, recent_begin = 0, end = 0;
  // Positions the kernel reads: the quantized body counts unless the policy drops it.
  LOWBIT_HD std::int64_t visible(const KvLayerShape& s) const {
    return sink_end + (s.drops() ? 0 : recent_begin - sink_end) + (end - recent_begin);
  }
};

// The layer shape of a spec; throws lowbit::Error naming the field of a bad one.
KvLayerShape kv_layer_shape(const KvCacheSpec& spec);
// The shape with K in blocks of key_block body positions (0: per token; policies without
// a body ignore it); throws lowbit::Error naming kv_key_block for a bad size (the GPU
// takes even sizes 2..1024: its INT4 bytes pair channels, the twin's pair tokens).
KvLayerShape with_key_block(KvLayerShape s, std::int64_t key_block);

// What the query at the last of `length` (>= 1) positions reads; unchecked, for kernels
// that read the length from device memory.
LOWBIT_HD DecodeSpan decode_span_unchecked(const KvLayerShape& s, std::int64_t length) {
  DecodeSpan span;
  span.end = length;
  if (s.window == 0 && s.body == KvBody::none) {  // full
    span.sink_end = span.recent_begin = length;
  } else if (s.window == 0) {  // int8 / int4
    span.sink_end = 0;
    span.recent_begin = length;
  } else {  // window / selective: the ring holds the last `window` positions
    span.sink_end = s.sink < length ? s.sink : length;
    span.recent_begin = span.sink_end > length - s.window ? span.sink_end : length - s.window;
  }
  return span;
}

// The checked form.
inline DecodeSpan decode_span(const KvLayerShape& s, std::int64_t length) {
  LOWBIT_CHECK(length >= 1, "decode span: length = ", length, ", expected >= 1");
  return decode_span_unchecked(s, length);
}

// The forms of the prefill rows kernel (cuda/kv/attention_rows_mma.cu), as ints: the row
// at position t sees position s <= t in
//   FP16  s < sink (full: sink = max_tokens, every position), or s > t - window;
//   body  sink <= s <= t - window (selective), every s (int8 / int4: window 0);
// nothing else (the window policy drops the body; int8 / int4 have no FP16 positions):
// decode_span(t + 1)'s [0, sink_end), [recent_begin, end) and its body between them.
// With key blocks of B (kv_layout.h) the body splits in two by the row's quantized end
// q(t), the end of its last complete block (KvFlashSegments::quantized_end):
//   body  s < q(t): K and V quantized;
//   open  q(t) <= s <= t - window: K FP16 (the block is open at t), V quantized.
// A kernel block of rows [tmin, tmax] reads a tile of `tile` positions at n0 in a view
// (kFp16, kBody, kOpen) when some row reads some of its positions in that form; views()
// says how many a tile has (3 with key blocks), and item = views() * tile + view.
struct KvRowForms {
  enum View : int { kFp16 = 0, kBody = 1, kOpen = 2 };
  int sink = 0, window = 0, body_base = 0, key_block = 0;
  bool f16 = false, body = false;

  LOWBIT_HD explicit KvRowForms(const KvLayerShape& s)
      : sink(static_cast<int>(s.sink < (1 << 30) ? s.sink : (1 << 30))),
        window(static_cast<int>(s.window)),
        body_base(static_cast<int>(s.body_base < (1 << 30) ? s.body_base : (1 << 30))),
        key_block(s.key_blocks() ? static_cast<int>(s.key_block) : 0),
        f16(s.body == KvBody::none || s.window > 0),
        body(s.body != KvBody::none) {}
  LOWBIT_HD int views() const { return key_block > 0 ? 3 : 2; }
  // The body's first position: the sink's end under selective, 0 for int8 / int4.
  LOWBIT_HD int body_lo() const { return window > 0 ? sink : 0; }
  // The end of the positions whose K the row at t reads quantized (t - window + 1 per token).
  LOWBIT_HD int quantized_end(int t) const {
    const int end = t - window + 1;
    if (key_block == 0 || end <= body_base) return end;
    return body_base + (end - body_base) / key_block * key_block;
  }
  // The forms' tests take the rows' quantized ends from the caller where a kernel has
  // them (q_t = quantized_end(t); its rows are fixed: one division a row, not one a test).
  LOWBIT_HD bool f16_at(int t, int s) const { return f16 && s <= t && (s < sink || (window > 0 && s > t - window)); }
  LOWBIT_HD bool body_at(int t, int q_t, int s) const { return body && s >= body_lo() && s < q_t && s <= t; }
  LOWBIT_HD bool body_at(int t, int s) const { return body_at(t, quantized_end(t), s); }
  LOWBIT_HD bool open_at(int t, int q_t, int s) const { return key_block > 0 && s >= q_t && s <= t - window; }
  LOWBIT_HD bool open_at(int t, int s) const { return open_at(t, quantized_end(t), s); }
  LOWBIT_HD bool at(int view, int t, int q_t, int s) const {
    return view == kBody ? body_at(t, q_t, s) : view == kOpen ? open_at(t, q_t, s) : f16_at(t, s);
  }
  LOWBIT_HD bool at(int view, int t, int s) const { return at(view, t, quantized_end(t), s); }
  // Whether some row in [tmin, tmax] reads s in the view (q_min, q_max: their quantized
  // ends). Open: a position before tmin's window edge is open for tmin from its quantized
  // end on; one past it is open for the row whose window it just left unless it is a
  // block's last (which that row quantizes).
  LOWBIT_HD bool needed(int view, int tmin, int tmax, int q_min, int q_max, int s) const {
    if (s > tmax) return false;
    if (view == kBody) return body && s >= body_lo() && s < q_max;
    if (view == kOpen) {
      if (key_block == 0 || s < body_base || s < q_min || s > tmax - window) return false;
      return s < tmin - window || (s + 1 - body_base) % key_block != 0;
    }
    return f16 && (s < sink || (window > 0 && s > tmin - window));
  }
  LOWBIT_HD bool needed(int view, int tmin, int tmax, int s) const {
    return needed(view, tmin, tmax, quantized_end(tmin), quantized_end(tmax), s);
  }
  // Whether some position of the tile [n0, n0 + tile) is needed (open: of two positions
  // in its range at most one is a block's last).
  LOWBIT_HD bool tile_needed(int view, int tmin, int tmax, int n0, int tile) const {
    if (n0 > tmax) return false;
    const int n1 = n0 + tile - 1;
    if (view == kBody) {
      const int lo = body_lo() > n0 ? body_lo() : n0;
      return body && lo < quantized_end(tmax) && lo <= n1;
    }
    if (view == kOpen) {
      if (key_block == 0) return false;
      int lo = quantized_end(tmin) > n0 ? quantized_end(tmin) : n0;
      lo = lo > body_base ? lo : body_base;
      const int hi = n1 < tmax - window ? n1 : tmax - window;
      return lo < hi || (lo == hi && needed(kOpen, tmin, tmax, lo));
    }
    return f16 && (n0 < sink || (window > 0 && n1 > tmin - window));
  }
  // Whether every row in [tmin, tmax] reads every position of the tile in the view.
  LOWBIT_HD bool tile_whole(int view, int tmin, int tmax, int q_min, int q_max, int n0, int tile) const {
    const int n1 = n0 + tile - 1;
    if (n1 > tmin) return false;
    if (view == kBody) return body && n0 >= body_lo() && n1 < q_min;
    if (view == kOpen) return key_block > 0 && n0 >= q_max && n1 <= tmin - window;
    return f16 && (n1 < sink || (window > 0 && n0 > tmax - window));
  }
  LOWBIT_HD bool tile_whole(int view, int tmin, int tmax, int n0, int tile) const {
    return tile_whole(view, tmin, tmax, quantized_end(tmin), quantized_end(tmax), n0, tile);
  }
};

// The flash prefill over a mixed cache (cuda/flash/flash_wgmma_cache.cu): a block of rows
// at positions [tmin, tmax] reads one virtual key sequence of segments, each starting on
// a tile of `tile` keys, each position s of a segment masked by its rule for the row at t
// (visible), so that a row sees every position once, in the form the cache held at t:
//   sink    [0, min(sink, tmax + 1)), FP16 slots                      s <= t
//   body    [body_base, q(tmax)), quantized                           s < q(t)
//   open    [max(body_base, q(tmin)), tmax - window + 1): K FP16,     q(t) <= s <= t - window
//           V quantized (key blocks only)
//   recent  [max(sink, tmin - window + 1), tmax + 1), FP16 from the   t - window < s <= t
//           chunk (s >= pos0) or the ring's snapshot (s < pos0)
// where q(t) (quantized_end) is the end of the positions whose K the cache held quantized
// at t: t - window + 1 (every body position), or with key blocks of B the end of the last
// complete block (the open block's K is FP16: from the chunk, the ring's snapshot or the
// staging ring's). int8 / int4 (body, no window, sink 0): the body (and open) alone;
// window (no body): no body. Positions of a tile at or past its segment's end are not
// read (zeros) and masked. The methods' kKeyBlocks false: a kernel compiled for caches
// without key blocks (key_block 0), without their arithmetic.
struct KvFlashSegments {
  LOWBIT_HD static int min_int(int a, int b) { return a < b ? a : b; }
  enum Segment : int { sink_segment = 0, body_segment = 1, open_segment = 2, recent_segment = 3 };
  struct Tile {
    int segment, first, end;  // positions [first, first + tile) of the segment, those below end read
  };
  // No member initializers: a kernel keeps one in shared memory (trivially constructed).
  int window, tile_keys, body_base, key_block;
  int sink_end, body_lo, body_hi, open_lo, open_hi, recent_lo, recent_hi;
  int body_tile, open_tile, recent_tile, tiles;  // the segments' first tiles; all tiles

  KvFlashSegments() = default;
  LOWBIT_HD KvFlashSegments(int sink, int window_, int body_base_, bool has_body, int tmin, int tmax, int tile,
                            int key_block_ = 0)
      : window(window_), tile_keys(tile), body_base(body_base_), key_block(has_body ? key_block_ : 0) {
    const bool f16 = !has_body || window > 0;  // int8 / int4 have no FP16 slots
    sink_end = f16 ? (sink < tmax + 1 ? sink : tmax + 1) : 0;
    body_lo = body_base;
    body_hi = has_body && quantized_end(tmax) > body_lo ? quantized_end(tmax) : body_lo;
    open_lo = quantized_end(tmin) > body_lo ? quantized_end(tmin) : body_lo;
    open_hi = key_block > 0 && tmax - window + 1 > open_lo ? tmax - window + 1 : open_lo;
    recent_lo = sink > tmin - window + 1 ? sink : tmin - window + 1;
    recent_hi = window > 0 && tmax + 1 > recent_lo ? tmax + 1 : recent_lo;
    body_tile = (sink_end + tile - 1) / tile;
    open_tile = body_tile + (body_hi - body_lo + tile - 1) / tile;
    recent_tile = open_tile + (open_hi - open_lo + tile - 1) / tile;
    tiles = recent_tile + (recent_hi - recent_lo + tile - 1) / tile;
  }
  // The end of the positions whose K the row at t sees quantized.
  template <bool kKeyBlocks = true>
  LOWBIT_HD int quantized_end(int t) const {
    const int end = t - window + 1;
    if (!kKeyBlocks || key_block == 0 || end <= body_base) return end;
    return body_base + (end - body_base) / key_block * key_block;
  }
  template <bool kKeyBlocks = true>
  LOWBIT_HD Tile at(int t) const {
    if (t >= recent_tile) return Tile{recent_segment, recent_lo + (t - recent_tile) * tile_keys, recent_hi};
    if (kKeyBlocks && t >= open_tile) return Tile{open_segment, open_lo + (t - open_tile) * tile_keys, open_hi};
    if (t >= body_tile) return Tile{body_segment, body_lo + (t - body_tile) * tile_keys, body_hi};
    return Tile{sink_segment, t * tile_keys, sink_end};
  }
  // Whether the row at t sees position s of a tile of `segment` (s below the tile's end).
  template <bool kKeyBlocks = true>
  LOWBIT_HD bool visible(int segment, int t, int s) const {
    int lo, hi;
    visible_span<kKeyBlocks>(segment, t, quantized_end<kKeyBlocks>(t), lo, hi);
    return s >= lo && s < hi;
  }
  // The positions [lo, hi) of a tile of `segment` that the row at t sees (q_t =
  // quantized_end(t), from the caller: a kernel's rows are fixed, so it divides by
  // key_block once a row, not once a position, and masks a row's scores by two compares).
  template <bool kKeyBlocks = true>
  LOWBIT_HD void visible_span(int segment, int t, int q_t, int& lo, int& hi) const {
    lo = 0;
    hi = t + 1;
    const int f16_from = t - window + 1;  // the recent positions' first; the body's end per token
    if (segment == recent_segment) {
      lo = f16_from;
    } else if (segment == body_segment) {
      hi = min_int(hi, kKeyBlocks ? q_t : f16_from);
    } else if (kKeyBlocks && segment == open_segment) {
      lo = q_t;
      hi = min_int(hi, f16_from);
    }
  }
  // Whether every row in [t_lo, t_hi] sees every position of the tile (no mask needed).
  template <bool kKeyBlocks = true>
  LOWBIT_HD bool whole(const Tile& k, int t_lo, int t_hi) const {
    return whole_with<kKeyBlocks>(k, t_lo, t_hi, quantized_end<kKeyBlocks>(t_lo), quantized_end<kKeyBlocks>(t_hi));
  }
  // The same with q_lo, q_hi = quantized_end(t_lo), quantized_end(t_hi) from the caller.
  template <bool kKeyBlocks = true>
  LOWBIT_HD bool whole_with(const Tile& k, int t_lo, int t_hi, int q_lo, int q_hi) const {
    const int last = k.first + tile_keys - 1;
    if (last >= k.end || last > t_lo) return false;
    if (!kKeyBlocks) {
      return k.segment == body_segment     ? last <= t_lo - window
             : k.segment == recent_segment ? k.first > t_hi - window
                                           : true;
    }
    return k.segment == body_segment     ? last < q_lo
           : k.segment == open_segment   ? k.first >= q_hi && last <= t_lo - window
           : k.segment == recent_segment ? k.first > t_hi - window
                                         : true;
  }
};

// The prefill rows kernel's items: tile j of `tile` positions in view v is item views j +
// v (views: f.views(), which a kernel passes as a constant); a block of rows [tmin, tmax]
// walks the items of its split, tiles [first_tile, end_tile), that some row reads. The
// item after `item` (start: views first_tile - 1), or -1.
LOWBIT_HD int next_rows_item(const KvRowForms& f, int views, int item, int end_tile, int tmin, int tmax, int tile) {
  for (++item; item < views * end_tile; ++item) {
    if (f.tile_needed(item % views, tmin, tmax, item / views * tile, tile)) return item;
  }
  return -1;
}

// Its grid: blocks of `block_rows` query rows (rows x the group's query heads), so
// block_rows / group chunk rows a block; split-K over the positions while the blocks do
// not reach `target_blocks`, a split at least 8 tiles, at most `max_splits` (what the
// workspace holds). Split s of a block takes tiles [s split_tiles, (s + 1) split_tiles).
struct RowsTilePlan {
  std::int64_t rows_per_block = 0, row_tiles = 0, tiles = 0, splits = 1, split_tiles = 0;
};
inline RowsTilePlan plan_rows_tiles(std::int64_t rows, std::int64_t pos0, std::int64_t kv_heads, std::int64_t group,
                                    std::int64_t block_rows, std::int64_t tile, std::int64_t target_blocks,
                                    std::int64_t max_splits) {
  RowsTilePlan p;
  p.rows_per_block = block_rows / group;
  p.row_tiles = (rows + p.rows_per_block - 1) / p.rows_per_block;
  p.tiles = (pos0 + rows - 1) / tile + 1;  // the last row's
  const std::int64_t blocks = p.row_tiles * kv_heads;
  std::int64_t splits = std::min({(target_blocks + blocks - 1) / blocks, (p.tiles + 7) / 8, max_splits});
  splits = std::max<std::int64_t>(splits, 1);
  p.split_tiles = (p.tiles + splits - 1) / splits;
  p.splits = (p.tiles + p.split_tiles - 1) / p.split_tiles;
  return p;
}

// Flash-decoding split over the visible positions: at least kMinSplit positions a split
// (a block has work to amortize its combine record), at most kMaxSplit for the SIMT
// kernel (the split's scores live in shared memory) and kMaxMmaSplit for the tensor-core
// kernels (a page record a tile of 16 in shared memory), lengths a multiple of kAlign.
// kMaxSplit is also the most splits the combine takes.
struct DecodeSplitPlan {
  static constexpr std::int64_t kMinSplit = 64, kMaxSplit = 1024, kMaxMmaSplit = 4096, kAlign = 32;
  std::int64_t splits = 0, split_len = 0;
};

// The plan that cuts `visible` positions into splits of split_len (the last one shorter).
inline DecodeSplitPlan decode_plan_of_length(std::int64_t visible, std::int64_t split_len) {
  return DecodeSplitPlan{(visible + split_len - 1) / split_len, split_len};
}

// The split length when at most `splits` splits share `visible` positions: the fewest
// rounds of kMinSplit positions (a tensor-core block's 4 warps, a 16-position tile each)
// that fit, so that a block's warps walk as few tiles one after another as the splits
// allow, on as few blocks as that takes. The single-sequence plan takes it where its
// blocks fit one wave (cuda/kv/attention.cu), and the graph form's kernels take it again
// at each step's own length, so that a step's splits follow its length rather than the
// capacity its graph was planned for. Rounds, not tiles: in the 8B decode step at ~2.4K
// positions 31 splits of 80 ran 3% slower than 26 of 96 (the same two-tile chain on more
// blocks), 20 of 128 2% faster (H200, bench/notes/decode.md).
LOWBIT_HD std::int64_t split_len_at(std::int64_t visible, std::int64_t splits) {
  constexpr std::int64_t kRound = DecodeSplitPlan::kMinSplit;
  return (visible + kRound * splits - 1) / (kRound * splits) * kRound;
}

// The most splits a plan over `visible` positions or fewer takes (what a workspace must
// hold; it grows with visible): twice the fewest the lengths allow or twice the count
// whose blocks fill the `slots` once, whichever is more, at most kMaxSplit (the
// combine's limit) unless the lengths need more.
inline std::int64_t decode_splits_most(std::int64_t visible, std::int64_t blocks_per_split, std::int64_t slots) {
  using P = DecodeSplitPlan;
  const std::int64_t fewest = (visible + P::kMaxSplit - 1) / P::kMaxSplit;
  const std::int64_t fill_once = (slots + blocks_per_split - 1) / blocks_per_split;
  return std::max(fewest, std::min(2 * std::max(fewest, fill_once), P::kMaxSplit));
}

// What the split plan's model charges a kernel, in positions of work: `fixed` a block
// (its setup, partials and share of the combine), `per_split` a split (the last block's
// combine reads every split's partials), and the longest split it takes. Waves: with
// `whole_waves` a grid of blocks costs ceil(blocks / slots) waves (a last wave half full
// costs a whole one); otherwise blocks / slots waves plus `tail` when they exceed one
// wave (the blocks are scheduled as slots free up), and one wave when they do not.
struct DecodeSplitCost {
  std::int64_t longest = DecodeSplitPlan::kMaxSplit;
  double fixed = static_cast<double>(DecodeSplitPlan::kMinSplit), per_split = 0.0, tail = 0.0;
  bool whole_waves = true;
};
// The SIMT kernel's (the defaults), and the tensor-core kernels': FP16 rows, quantized
// bodies. The latter two were fitted to the H200's sweep of forced lengths (B = 1 at 8K
// and 32K, B = 16 and 64 at 2K and 8K; bench/notes/decode.md, session 25) and apply only
// where the batch alone fills the device: where the default plan's blocks fit in one
// wave, splits are what fill it, and its short ones measured best (B = 1 at 2K and 8K,
// the engine's decode step).
inline constexpr DecodeSplitCost kSimtSplitCost{};
inline constexpr DecodeSplitCost kMmaF16SplitCost{DecodeSplitPlan::kMaxMmaSplit, 448.0, 4.0, 0.0, false};
inline constexpr DecodeSplitCost kMmaQuantSplitCost{DecodeSplitPlan::kMaxMmaSplit, 736.0, 8.0, 0.5, false};

// The split count by the model above: blocks of equal work run on `slots` (per_sm x
// sm_count, as many as the kernel keeps resident). With whole waves, B = 16 sequences x
// 8 KV heads in 3 splits of 736 on 264 slots are 1.45 waves (2 x 800), in 4 of 544 1.94
// (2 x 608). Each count's split length is the shortest that covers the positions
// (balanced splits); of equal costs, the fewest splits.
inline DecodeSplitPlan plan_decode_splits(std::int64_t visible, std::int64_t blocks_per_split, int sm_count,
                                          int per_sm = 2, const DecodeSplitCost& c = kSimtSplitCost) {
  LOWBIT_CHECK(visible >= 1 && blocks_per_split >= 1 && sm_count >= 1 && per_sm >= 1, "decode split plan: visible ",
               visible, ", blocks_per_split ", blocks_per_split, ", sm_count ", sm_count, ", per_sm ", per_sm);
  using P = DecodeSplitPlan;
  const std::int64_t slots = static_cast<std::int64_t>(per_sm) * sm_count;
  if (!c.whole_waves) {
    const P fill = plan_decode_splits(visible, blocks_per_split, sm_count, per_sm);
    if (fill.splits * blocks_per_split <= slots) return fill;
  }
  const std::int64_t most = decode_splits_most(visible, blocks_per_split, slots);
  auto balanced = [&](std::int64_t splits) {
    std::int64_t len = (visible + splits - 1) / splits;
    len = std::clamp<std::int64_t>((len + P::kAlign - 1) / P::kAlign * P::kAlign, P::kMinSplit, c.longest);
    return P{(visible + len - 1) / len, len};
  };
  auto cost = [&](const P& p) {
    const std::int64_t blocks = p.splits * blocks_per_split;
    const double waves = c.whole_waves      ? static_cast<double>((blocks + slots - 1) / slots)
                         : blocks <= slots ? 1.0
                                           : static_cast<double>(blocks) / static_cast<double>(slots) + c.tail;
    return waves * (static_cast<double>(p.split_len) + c.fixed) + c.per_split * static_cast<double>(p.splits);
  };
  P best = balanced((visible + c.longest - 1) / c.longest);
  // Every count the lengths reach, one a length, from the fewest splits up.
  for (std::int64_t len = c.longest - P::kAlign; len >= P::kMinSplit; len -= P::kAlign) {
    const P p = balanced((visible + len - 1) / len);
    if (p.splits <= most && cost(p) < cost(best)) best = p;
  }
  return best;
}

// One sequence's plan (the single-sequence forms of cuda/kv/attention.cu): where the
// default plan's blocks fit one wave, `fill` splits, as many as two blocks an SM hold (the
// quantized kernels keep three resident, but in the 8B step, H200 bench decode, selective8
// ran +0.7% at 2K and +4.3% at 8K on two, -5% on one; FP16 on one -6%), each
// split_len_at(visible, fill) long; so that the graph form can launch `fill` splits for its
// capacity and let each step take the split length of its own. fill 0: the default plan
// stands (a grid past one wave, or splits longer than the kernel takes).
struct SequenceSplitPlan {
  DecodeSplitPlan plan;
  std::int64_t fill = 0;
};
inline constexpr int kSequenceFillPerSm = 2;
inline SequenceSplitPlan plan_sequence_splits(std::int64_t visible, std::int64_t blocks_per_split, int sm_count,
                                              int per_sm, const DecodeSplitCost& c) {
  const DecodeSplitPlan plan = plan_decode_splits(visible, blocks_per_split, sm_count, per_sm, c);
  const std::int64_t slots = static_cast<std::int64_t>(per_sm) * sm_count;
  const std::int64_t fill = static_cast<std::int64_t>(std::min(per_sm, kSequenceFillPerSm)) * sm_count / blocks_per_split;
  if (plan.splits * blocks_per_split > slots || fill < 1 || split_len_at(visible, fill) > c.longest) return {plan, 0};
  return {decode_plan_of_length(visible, split_len_at(visible, fill)), fill};
}

// Query heads per block: the largest of 4, 3, 2, 1 dividing the GQA group, so that a
// block reads its KV head once for all of them (a group of 8 takes two blocks).
inline int decode_heads_per_block(std::int64_t group) {
  for (int g : {4, 3, 2}) {
    if (group % g == 0) return g;
  }
  return 1;
}

// Scratch floats of the split partials: per query head and split, max, sum and head_dim
// accumulators.
inline std::size_t decode_workspace_bytes(std::int64_t n_heads, std::int64_t head_dim, std::int64_t max_splits) {
  return static_cast<std::size_t>(n_heads * max_splits * (head_dim + 2)) * sizeof(float);
}

// Positions a cache can be appended at: the window policy's ring never fills (any); every
// other form holds max_tokens.
inline std::int64_t kv_positions_held(const KvLayerShape& shape) {
  if (shape.body == KvBody::none && shape.window > 0) return std::numeric_limits<std::int64_t>::max();
  return shape.window == 0 && shape.body != KvBody::none ? shape.body_slots
                                                         : shape.sink + shape.window + shape.body_slots;
}

}  // namespace lowbit::core
