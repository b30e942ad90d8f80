// The KV cache of one sequence as the CPU reference holds it, with the policies of
// include/lowbit/kv_cache.h:
//   full       every token in FP16
//   window     sink tokens + the most recent `window` tokens in FP16, older ones dropped
//   selective  sink + window in FP16; a token leaving the window is quantized (from its
//              FP16 value) and kept: INT8 symmetric or INT4 asymmetric
//   int8/int4  every token quantized on arrival (from its f32 value)
// "The most recent `window` tokens" include the one just appended: after token t is
// stored, tokens t - window + 1 .. t are in the window.
//
// Quantization is lowbit's INT8 symmetric / INT4 asymmetric code schemes with f16
// parameters (cpu/kv_cache.h, formats::HalfParams: scale and min computed in f32,
// rounded to f16, codes encoded with the rounded values; the GPU append's arithmetic):
// one token's K (or V) is a [kv_heads x head_dim] matrix, one f16 scale per token per
// head (per_token) or per kv_group channels of a head (per_group), + an f16 min for
// INT4; a kv_group of whole heads makes it a [1 x kv_dim] row with groups of those heads.
//
// Storage is what a GPU cache holds (FP16 bits, codes, scales, mins); bytes() counts it
// exactly. Next to it the CPU reference keeps decoded f32 mirrors of every position's
// forms (each decoded from the stored bits when written or quantized), so attention
// does not decode a token once per query, and a batch of queries can each read the
// form its own time would have seen (prefill == token-by-token decode) in parallel.
// The mirrors are scratch and not counted in bytes().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lowbit/kv_cache.h"  // KvPolicy
#include "lowbit/quant.h"

namespace lowbit::engine {

// The key / value rotation before quantization (formats/hadamard.h, QuaRot's lever):
// off; k: every head of K rotated by the normalized Walsh-Hadamard transform (after
// RoPE), which leaves q . k unchanged when the query is rotated alike; kv: V too (the
// attention output is then rotated back). Only quantizing policies rotate: their FP16
// window holds the rotated FP16 values, which are quantized when they leave it.
enum class KvRotate : std::uint8_t { off, k, kv };
const char* kv_rotate_name(KvRotate rotate);
KvRotate parse_kv_rotate(const char* name);  // "off" | "k" | "kv"; throws naming it

struct KvCacheOptions {
  KvPolicy policy = KvPolicy::full;
  std::int64_t sink = 16;    // window / selective
  std::int64_t window = 32;  // window / selective
  int kv_bits = 8;           // selective: 8 or 4 (int8 / int4 imply theirs)
  // Channels per scale (and min). 0 = the default, head_dim: one scale (INT8) or
  // scale + min (INT4) per token per head. Otherwise a multiple of 16 below head_dim
  // (lowbit's per_group rule), or a multiple of head_dim dividing kv_heads * head_dim
  // (whole heads; kv_dim = one per token per layer). With f16 parameters, INT4 at
  // head_dim 64 costs 0.2897x of FP16 at 4096 tokens (sink 16, window 32), INT8 0.5213x
  // (kv_cache_test; f32 parameters were 0.3206x and 0.5367x).
  std::int64_t kv_group = 0;
  KvRotate kv_rotate = KvRotate::off;
  // INT4 codes: asymmetric (scale + min, the default) or symmetric (scale only, codes
  // -8..7). INT8 is always symmetric.
  bool kv_symmetric = false;
  // Keys per channel over blocks of kv_key_block tokens (KIVI): 0 = off (keys per token,
  // as values). A block is quantized once all its tokens are there (int8 / int4: when
  // its last token arrives; selective: when its last token leaves the FP16 window), from
  // their FP16 values, one f16 scale (+ min) per channel per block; until then its
  // tokens stay FP16 in a staging area of kv_key_block slots (counted in bytes()).
  // 2..1024; the GPU takes even sizes in its one-sequence cache (GpuSession), not in the
  // paged one (GpuBatchEngine).
  std::int64_t kv_key_block = 0;
};

struct KvShape {
  std::int64_t layers = 0, kv_heads = 0, head_dim = 0;
  std::int64_t kv_dim() const { return kv_heads * head_dim; }
};

class KvCache {
 public:
  // Throws lowbit::Error for bad shapes or options (naming the option).
  KvCache(KvShape shape, KvCacheOptions options, std::int64_t max_tokens);

  const KvShape& shape() const { return shape_; }
  const KvCacheOptions& options() const { return options_; }
  std::int64_t max_tokens() const { return max_tokens_; }

  // Tokens appended to `layer` so far (every layer has the same count after a full
  // forward step).
  std::int64_t length(std::int64_t layer) const { return length_[static_cast<std::size_t>(layer)]; }
  std::int64_t length() const { return length_.empty() ? 0 : length_[0]; }

  // Appends n tokens' K and V (rows of kv_dim f32, RoPE already applied) to `layer`.
  // Throws if that would exceed max_tokens. Appending n tokens at once is the same as
  // n single appends.
  void append(std::int64_t layer, std::int64_t n, const float* k, const float* v);

  // What the query at position t (< length(layer)) sees in `layer`, as one-at-a-time
  // decoding would have had it when token t was appended: the positions in
  // [0, sink_end) and [recent_begin, end), end = t + 1; every other one is dropped.
  struct Visible {
    std::int64_t sink_end, recent_begin, end;
  };
  Visible visible(std::int64_t layer, std::int64_t t) const;
  // Decoded K / V row (kv_dim f32) of a visible position, in the form the query at
  // t reads it (for selective: FP16 while in t's window, quantized once older).
  const float* key(std::int64_t layer, std::int64_t pos, std::int64_t t) const;
  const float* value(std::int64_t layer, std::int64_t pos, std::int64_t t) const;
  // The same for a query at the last appended position: what the cache holds now.
  const float* key(std::int64_t layer, std::int64_t pos) const { return key(layer, pos, length(layer) - 1); }
  const float* value(std::int64_t layer, std::int64_t pos) const { return value(layer, pos, length(layer) - 1); }

  // Bytes the cache holds now (FP16 parts, codes, scales, mins), and what it would
  // hold at `tokens` tokens.
  std::size_t bytes() const { return bytes_at(shape_, options_, length()); }
  static std::size_t bytes_at(const KvShape& shape, const KvCacheOptions& options, std::int64_t tokens);

  // Which lowbit code scheme and granularity the policy uses (int8 / int4 / selective);
  // its parameters are stored as f16 (cpu/kv_cache.h), not quantize()'s f32.
  QuantSpec quant_spec() const { return spec_; }
  bool quantizes() const { return quantizes_; }

  void reset();

 private:
  struct Part {  // K or V of one layer
    std::vector<std::uint16_t> f16;   // FP16 slots, kv_dim each
    std::vector<std::uint8_t> codes;  // quantized slots, code_bytes each
    std::vector<std::uint16_t> scales, mins;  // f16 bits, params_per_token each
    std::vector<float> decoded16;     // [max_tokens x kv_dim]: FP16 forms, decoded
    std::vector<float> decodedq;      // [max_tokens x kv_dim]: quantized forms, decoded
    std::int64_t block = 0;           // keys with kv_key_block: tokens a block (0: per token)
    std::vector<std::uint16_t> staged;  // [block x kv_dim] FP16 bits of the open block
  };
  // kv_key_block: token pos's FP16 value (rotated if the part is) into the open block
  // (slot `index` % block of the block's order); quantizes the block when it is full.
  void stage_key(Part& part, std::int64_t pos, std::int64_t index, const std::uint16_t* f16, bool rotated);
  // The time from which the query reads a blocked key at pos quantized.
  std::int64_t block_done(std::int64_t pos) const;
  const float* read(const Part& part, std::int64_t pos, std::int64_t t) const;

  void append_one_part(Part& part, std::int64_t pos, const float* x, bool rotated);
  void quantize_into(Part& part, std::int64_t slot, std::int64_t n, const float* x, float* decoded, bool rotated);
  // Rotates (or rotates back: the transform is its own inverse) every head of n rows.
  void rotate_heads(float* x, std::int64_t n) const;
  std::int64_t f16_slot(std::int64_t pos) const;

  KvShape shape_;
  KvCacheOptions options_;
  std::int64_t max_tokens_;
  QuantSpec spec_{};
  bool quantizes_ = false;
  std::int64_t code_bytes_ = 0;        // per token (all heads)
  std::int64_t params_per_token_ = 0;  // scales (and mins) per token (all heads)
  std::int64_t rows_per_token_ = 0, quant_cols_ = 0;
  std::vector<Part> keys_, values_;
  std::vector<std::int64_t> length_;
  std::vector<float> scratch_, rotated_;
  bool rotate_k_ = false, rotate_v_ = false;
};

}  // namespace lowbit::engine
