// The packed weight layout of the weight-only GEMM (W4A16 / W8A16) and the value of
// a dequantized weight. Shared by the host repacker, the CPU reference and the CUDA
// kernels, so that all three agree on where every code and scale lives.
//
// W [N x K] is cut into tiles of 8 output rows (n) x 128 inputs (k): one "unit".
// A unit is what one warp reads with one 16-byte load per lane (INT4: 512 bytes) or
// two (INT8: 1024 bytes), laid out so that the lane's bytes are exactly its B
// fragments for eight mma.sync m16n8k16 (k16 x n8) products.
//
// k permutation. mma's k index within a k16 product does not have to be the matrix's
// k: any bijection applied to both A (activations) and B (weights) gives the same sum.
// Lane L (r = L / 4 picks n = 8 * tile + r, c = L % 4) holds, in product t (0..7) of a
// unit, mma-k {2c, 2c+1, 2c+8, 2c+9} = matrix k {32c + 4t + 0, 1, 2, 3}. So lane c
// owns the 32 consecutive k values 32c .. 32c+31 of the unit: its activations are one
// contiguous 64-byte run, and a group of 32 (64, 128) k values is one lane column
// (two, four), i.e. a lane needs one scale per (n, unit).
//
// Units are stored tile-major: unit (tile, step) at ((tile * k_steps) + step) *
// unit_bytes, so one tile's row of units streams sequentially.
//
// INT4 (u8 codes, two per byte): lane L's 16 bytes are 4 words; word w holds the
// lane's k = 32c + 8w + e, e = 0..7, at nibble (e / 2) + 4 * (e % 2) of the word
// (nibble i = bits 4i..4i+3 of the little-endian word). Then ((word >> 4i) & 0x000f000f)
// yields the two codes of one half2 B register (k pair e = 2i, 2i+1) in its two
// 16-bit lanes, ready for the magic-number conversion (0x6400 / 0x4300 | q).
//
// INT8: codes stored as u8 q + 128 (q ^ 0x80), so that 0x6400 | byte is the half
// 1024 + q + 128. The lane's 32 bytes are two 16-byte loads h = 0, 1 (unit offset
// (h * 32 + L) * 16); byte b of load h holds k = 32c + 16h + b.
//
// Scales and mins (act_dtype): [n_tiles][groups][8], element (n, g) at
// ((n / 8) * groups + g) * 8 + n % 8, so the eight n of a tile for one group are 16
// contiguous bytes. groups = k_steps * 128 / group_size for group_size 32, 64, 128
// (K padded to the unit); a per-channel scale (group_size == K, any other K) is
// group 0 of a single group.
//
// Padding: N is padded to a multiple of 8 and K to a multiple of 128. Padded codes
// are the "zero code" (Q4_1: 0, Q4_0: 8, INT8: q = 0); padded groups have zero scale
// and min, so padded rows and padded groups dequantize to exactly 0. Padded k inside
// the last real group dequantize to the group's min (Q4_1) but meet activations the
// kernels read as 0 beyond K, so they contribute exactly 0 (the min is finite).
//
// GGML block forms (WeightBlocks: Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K). The same
// units of 8 n x 128 k and the same lane map (lane c of row r owns k 32c .. 32c + 31, one
// ggml sub-block of 32, or two of 16), but each unit carries everything its weights need,
// so the kernels stream units only (no separate scale arrays):
//   low plane           the low bits of every code: 4 bits (Q5_*, Q4_K, Q5_K) exactly
//                       the INT4 layout above, [0, 512); 2 bits (Q3_K, Q2_K) [0, 256): lane
//                       L's 8 bytes at 8L, two u32 words, word w / 2 holding the lane's k
//                       = 8w + 2i + h at bits 2 (4 (w % 2) + i) + 16h, so ((word >> (8 (w %
//                       2) + 2i)) & 0x00030003) is the pair (2i, 2i + 1) of word w as INT4's;
//   six-bit codes       Q6_K instead of a low plane and high planes, [0, 768): lane L's 32
//                       whole codes in six u32 words, words 0-3 at 16L, 4-5 at 512 + 8L;
//                       words 3g .. 3g + 2 hold k 16g .. 16g + 15, the pair p = 4 (w % 2)
//                       + i (k 8w + 2i, + 1) in the halves of the pieces six_bit_piece(p, 0)
//                       | (p, 1): pairs 0-5 a field at bits 0-5 or 6-11 of a half, pairs 6
//                       and 7 put together from the halves' spare bits 12-15;
//   [low, +128 * P)     P high-bit planes (Q5_*, Q3_K: 1; Q4_K, Q2_K, Q6_K: 0): plane p,
//                       lane L at low + (32p + L) * 4, a u32 whose bit 4w + i + 16h is bit
//                       low_bits + p of the lane's code k = 8w + 2i + h (w = word, i = pair),
//                       so (plane >> (4w + i)) & 0x00010001 is the pair's bit at 0 / 16;
//   lane scales         u16 per lane at scale_offset() + 2L: Q5_0 / Q5_1 d (f16 bits);
//                       Q4_K / Q5_K the sub-block's 6-bit scale | 6-bit min << 8; Q6_K, Q3_K
//                       the int8 scales (Q3_K: its 6-bit scale - 32) of the lane's two
//                       sub-blocks of 16 (low byte: k 0..15); Q2_K the two sub-blocks' bytes
//                       as ggml stores them (4-bit scale | 4-bit min << 4; low byte k 0..15);
//   lane mins (Q5_1)    u16 f16 m per lane at scale_offset() + 64 + 2L;
//   row factors (K)     per row r of the tile at super_offset(): Q4_K / Q5_K / Q2_K u32 d |
//                       dmin << 16, Q6_K / Q3_K u16 d (f16 bits); repeated in both units of
//                       a 256-k super-block (K is a multiple of 256).
// Unit bytes: Q5_0 704, Q5_1 768, Q4_K 608, Q5_K 736, Q6_K 848, Q3_K 464, Q2_K 352; bits
// per weight 5.5, 6.0 (ggml's), 4.75, 5.75, 6.625, 3.625, 2.75 (ggml: 4.5, 5.5, 6.5625,
// 3.4375, 2.625: +5.6%, +4.5%, +1.0%, +5.5%, +4.8%, the row factors repeated per unit
// and Q3_K's 6-bit scales in bytes).
// Padding: every byte of a padded row or group is 0: zero scales (and d, dmin), so the
// padded weights are exactly 0.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "formats/float16.h"
#include "formats/hd.h"

namespace lowbit::formats {

constexpr int kPackTileN = 8;      // n per unit (mma n8)
constexpr int kPackStepK = 128;    // k per unit
constexpr int kPackLanes = 32;
constexpr int kPackLaneBytes4 = 16;  // INT4: one 16-byte load per lane per unit

// GGML block forms; the values equal lowbit::WeightBlocks' (core/layout.cpp checks).
enum class WeightBlocks : int { none = 0, q5_0 = 1, q5_1 = 2, q4_k = 3, q5_k = 4, q6_k = 5, q3_k = 6, q2_k = 7 };

// The bits of the low code plane (4: nibbles; 2: 2-bit fields; 6: Q6_K's whole codes)
// and its bytes a unit.
LOWBIT_HD constexpr int block_low_bits(WeightBlocks b) {
  return b == WeightBlocks::q3_k || b == WeightBlocks::q2_k ? 2 : b == WeightBlocks::q6_k ? 6 : 4;
}
LOWBIT_HD constexpr int block_low_bytes(WeightBlocks b) { return 128 * block_low_bits(b); }
// High-bit planes, and whether a form has lane mins / row factors (d, dmin).
LOWBIT_HD constexpr int block_high_planes(WeightBlocks b) {
  return b == WeightBlocks::q4_k || b == WeightBlocks::q2_k || b == WeightBlocks::q6_k || b == WeightBlocks::none
             ? 0
             : 1;
}
LOWBIT_HD constexpr bool block_is_k(WeightBlocks b) {
  return b == WeightBlocks::q4_k || b == WeightBlocks::q5_k || b == WeightBlocks::q6_k || b == WeightBlocks::q3_k ||
         b == WeightBlocks::q2_k;
}
// Sub-blocks of 16: a lane's k 0..15 and 16..31 have a scale (and min) each.
LOWBIT_HD constexpr bool block_halves(WeightBlocks b) {
  return b == WeightBlocks::q6_k || b == WeightBlocks::q3_k || b == WeightBlocks::q2_k;
}
LOWBIT_HD constexpr int block_scale_offset(WeightBlocks b) {
  return block_low_bytes(b) + 128 * block_high_planes(b);
}
LOWBIT_HD constexpr int block_super_offset(WeightBlocks b) { return block_scale_offset(b) + 64; }
LOWBIT_HD constexpr int block_super_bytes(WeightBlocks b) {
  return b == WeightBlocks::q6_k || b == WeightBlocks::q3_k ? 2 : 4;
}
LOWBIT_HD constexpr int block_unit_bytes(WeightBlocks b) {
  return b == WeightBlocks::q5_1   ? block_scale_offset(b) + 128
         : block_is_k(b)           ? block_super_offset(b) + 8 * block_super_bytes(b)
                                   : block_scale_offset(b) + 64;
}
// The ggml block (Q5_0 / Q5_1: 32) or super-block (K: 256) a row of K is cut into.
LOWBIT_HD constexpr int block_k(WeightBlocks b) { return block_is_k(b) ? 256 : 32; }
// The kernels' view of a lane's 2- or 4-bit low plane (block_lane_low_bytes(b) bytes at
// that many times the lane, read as u32 words): the pair (k 8w + 2i, + 1) is
// (word[block_pair_word(b, w)] >> block_pair_shift(b, w, i)) & block_pair_mask(b), the
// two codes' low bits at bits 0 and 16.
LOWBIT_HD constexpr int block_lane_low_bytes(WeightBlocks b) { return 4 * block_low_bits(b); }
LOWBIT_HD constexpr int block_pair_word(WeightBlocks b, int w) { return block_low_bits(b) == 2 ? w / 2 : w; }
LOWBIT_HD constexpr int block_pair_shift(WeightBlocks b, int w, int i) {
  return block_low_bits(b) == 2 ? 8 * (w % 2) + 2 * i : 4 * i;
}
LOWBIT_HD constexpr std::uint32_t block_pair_mask(WeightBlocks b) {
  return block_low_bits(b) == 2 ? 0x00030003u : 0x000f000fu;
}
// Q6_K's six-bit codes (the unit comment above): piece `part` (0, 1) of pair p (0..7) of a
// lane's word group, (word[3g + word] >> shift) & mask, the code bits at the mask's bits
// of each half; mask 0: no second piece. Pairs 0-5 cost the kernels one LOP3 (and one
// shift at bits 6-11), pairs 6 and 7 two shifts and two LOP3: ~3 instructions a pair with
// the f16 subtraction, against ~7 for a nibble plane and two one-bit planes.
struct CodePiece {
  int word;
  int shift;
  std::uint32_t mask;
};
LOWBIT_HD constexpr CodePiece six_bit_piece(int p, int part) {
  if (p < 6) return part == 0 ? CodePiece{p / 2, 6 * (p % 2), 0x003f003fu} : CodePiece{0, 0, 0u};
  if (p == 6) return part == 0 ? CodePiece{0, 12, 0x000f000fu} : CodePiece{1, 8, 0x00300030u};
  return part == 0 ? CodePiece{1, 14, 0x00030003u} : CodePiece{2, 10, 0x003c003cu};
}
// The byte offset in a unit of lane word u (0..5) of the six-bit codes.
LOWBIT_HD constexpr int six_bit_word_offset(int lane, int u) {
  return u < 4 ? 16 * lane + 4 * u : 512 + 8 * lane + 4 * (u - 4);
}
// The pieces hold each pair's 6 bits in both halves, within the half, and use every bit
// of a word group's three words exactly once.
constexpr bool six_bit_pieces_tile_the_words() {
  std::uint32_t used[3] = {0, 0, 0};
  for (int p = 0; p < 8; ++p) {
    unsigned covered = 0;
    for (int part = 0; part < 2; ++part) {
      const CodePiece piece = six_bit_piece(p, part);
      for (int d = 0; d < 16; ++d) {
        if (((piece.mask >> d) & 1u) == 0) continue;
        if (((piece.mask >> (16 + d)) & 1u) == 0 || d + piece.shift >= 16 || (covered >> d) & 1u) return false;
        covered |= 1u << d;
        for (int half = 0; half < 2; ++half) {
          const std::uint32_t bit = 1u << (16 * half + d + piece.shift);
          if (used[piece.word] & bit) return false;
          used[piece.word] |= bit;
        }
      }
      if ((piece.mask & 0xffffu) != (piece.mask >> 16)) return false;
    }
    if (covered != 0x3fu) return false;
  }
  return used[0] == 0xffffffffu && used[1] == 0xffffffffu && used[2] == 0xffffffffu;
}
static_assert(six_bit_pieces_tile_the_words(), "Q6_K's six-bit pieces");
// Units are copied in 16-byte vectors, and every lane's fields are aligned to their size.
static_assert(block_unit_bytes(WeightBlocks::q3_k) == 464 && block_unit_bytes(WeightBlocks::q2_k) == 352 &&
                  block_unit_bytes(WeightBlocks::q3_k) % 16 == 0 && block_unit_bytes(WeightBlocks::q2_k) % 16 == 0,
              "the 2-bit block forms' units");

struct WeightPackLayout {
  WeightBlocks blocks = WeightBlocks::none;  // a ggml block form (then bits: its low plane's, 4 or 2)
  int bits = 4;               // 4 or 8 (block forms: 4 or 2)
  bool zero_point = true;     // bits 4 only: w = q * s + m; else (q - 8) * s
  std::int64_t n = 0, k = 0;  // logical shape
  std::int64_t n_tiles = 0;   // ceil(N / 8)
  std::int64_t k_steps = 0;   // ceil(K / 128)
  std::int64_t groups = 0;    // groups per row in the packed scales (padded)
  int group_shift = 0;        // group of a lane column c within a unit: c >> group_shift
  int groups_per_step = 0;    // groups advanced per unit; 0 for one per-channel scale

  LOWBIT_HD std::int64_t unit_bytes() const {
    return blocks != WeightBlocks::none ? block_unit_bytes(blocks) : bits == 4 ? 512 : 1024;
  }
  LOWBIT_HD std::int64_t code_bytes() const { return n_tiles * k_steps * unit_bytes(); }
  // Block forms keep their scales inside the units: no scale array.
  LOWBIT_HD std::int64_t scale_count() const {
    return blocks != WeightBlocks::none ? 0 : n_tiles * groups * kPackTileN;
  }

  // Packed group of (any n, k), k < k_steps * 128.
  LOWBIT_HD std::int64_t group_of(std::int64_t kk) const {
    const std::int64_t step = kk / kPackStepK;
    const int c = static_cast<int>((kk % kPackStepK) / 32);
    return step * groups_per_step + (c >> group_shift);
  }
  LOWBIT_HD std::int64_t scale_index(std::int64_t nn, std::int64_t group) const {
    return ((nn / kPackTileN) * groups + group) * kPackTileN + nn % kPackTileN;
  }

  // Where the code of (n, k) lives: its byte, and the shift of its nibble in it (INT4:
  // 0 or 4; INT8: 0; a block form's 2-bit plane: 0, 2, 4, 6). A value, not an
  // out-parameter: `codes[place(&s)] >> s` would depend on the shift's operands being
  // evaluated left first, which C++17 requires but GCC's -fsanitize=shift does not do
  // (see docs/DESIGN.md, Sanitizers).
  struct CodePlace {
    std::int64_t byte;
    int shift;
  };
  LOWBIT_HD CodePlace code_place(std::int64_t nn, std::int64_t kk) const {
    const std::int64_t unit = (nn / kPackTileN) * k_steps + kk / kPackStepK;
    const int lane = static_cast<int>(nn % kPackTileN) * 4 + static_cast<int>((kk % kPackStepK) / 32);
    const int j = static_cast<int>(kk % 32);  // the lane's k index, 0..31
    if (bits == 4) {
      const int word = j / 8, e = j % 8;
      const int nibble = e / 2 + 4 * (e % 2);
      return {unit * unit_bytes() + lane * 16 + word * 4 + nibble / 2, 4 * (nibble % 2)};
    }
    if (bits == 2) {  // bit of the lane's 64: word w / 2, field 4 (w % 2) + i, half h
      const int w = j / 8, e = j % 8;
      const int bit = 32 * (w / 2) + 2 * (4 * (w % 2) + e / 2) + 16 * (e % 2);
      return {unit * unit_bytes() + lane * 8 + bit / 8, bit % 8};
    }
    const int h = j / 16, b = j % 16;
    return {unit * 1024 + (h * kPackLanes + lane) * 16 + b, 0};
  }

  // Block forms: the unit of (n, k), the lane, and the places of the other fields.
  LOWBIT_HD std::int64_t unit_base(std::int64_t nn, std::int64_t kk) const {
    return ((nn / kPackTileN) * k_steps + kk / kPackStepK) * unit_bytes();
  }
  LOWBIT_HD static int lane_of(std::int64_t nn, std::int64_t kk) {
    return static_cast<int>(nn % kPackTileN) * 4 + static_cast<int>((kk % kPackStepK) / 32);
  }
  // Bit bits + plane of the code of (n, k): its byte and the bit's shift in it.
  LOWBIT_HD CodePlace high_place(std::int64_t nn, std::int64_t kk, int plane) const {
    const int j = static_cast<int>(kk % 32), w = j / 8, e = j % 8;
    const int bit = 4 * w + e / 2 + 16 * (e % 2);
    return {unit_base(nn, kk) + block_low_bytes(blocks) + (plane * kPackLanes + lane_of(nn, kk)) * 4 + bit / 8,
            bit % 8};
  }
  LOWBIT_HD std::int64_t lane_scale_byte(std::int64_t nn, std::int64_t kk) const {
    return unit_base(nn, kk) + block_scale_offset(blocks) + 2 * lane_of(nn, kk);
  }
  LOWBIT_HD std::int64_t lane_min_byte(std::int64_t nn, std::int64_t kk) const {
    return lane_scale_byte(nn, kk) + 64;
  }
  LOWBIT_HD std::int64_t row_factor_byte(std::int64_t nn, std::int64_t kk) const {
    return unit_base(nn, kk) + block_super_offset(blocks) + (nn % kPackTileN) * block_super_bytes(blocks);
  }
};

// The layout of a block form (K a multiple of block_k(b), checked by the caller): the
// lane map of INT4 at group 32, its low plane nibbles or 2-bit fields.
LOWBIT_HD WeightPackLayout make_block_pack_layout(WeightBlocks b, std::int64_t n, std::int64_t k) {
  WeightPackLayout l;
  l.blocks = b;
  l.bits = block_low_bits(b);
  l.zero_point = false;
  l.n = n;
  l.k = k;
  l.n_tiles = (n + kPackTileN - 1) / kPackTileN;
  l.k_steps = (k + kPackStepK - 1) / kPackStepK;
  l.group_shift = 0;
  l.groups_per_step = kPackStepK / 32;
  l.groups = l.k_steps * l.groups_per_step;
  return l;
}

// Group sizes the format takes: 32, 64, 128, or k (one scale per output row).
LOWBIT_HD bool weight_group_size_ok(std::int64_t group_size, std::int64_t k) {
  return group_size == 32 || group_size == 64 || group_size == 128 || (group_size == k && k >= 1);
}

// The layout of a valid spec (check weight_group_size_ok and bits first).
LOWBIT_HD WeightPackLayout make_weight_pack_layout(int bits, bool zero_point, std::int64_t group_size, std::int64_t n,
                                                   std::int64_t k) {
  WeightPackLayout l;
  l.bits = bits;
  l.zero_point = bits == 4 && zero_point;
  l.n = n;
  l.k = k;
  l.n_tiles = (n + kPackTileN - 1) / kPackTileN;
  l.k_steps = (k + kPackStepK - 1) / kPackStepK;
  if (group_size == 32 || group_size == 64 || group_size == 128) {
    l.group_shift = group_size == 32 ? 0 : group_size == 64 ? 1 : 2;
    l.groups_per_step = static_cast<int>(kPackStepK / group_size);
    l.groups = l.k_steps * l.groups_per_step;
  } else {  // group_size == k: one scale per row
    l.group_shift = 2;
    l.groups_per_step = 0;
    l.groups = 1;
  }
  return l;
}

// ---- The dequantized value ------------------------------------------------------
//
// w = round_to_act_dtype(exact(q * s + m)), one rounding. The kernels get it from one
// __hfma2 / __hmul2 (f16x2 or bf16x2, single rounding); this host+device definition
// computes the same bits without an FMA of the act dtype:
//   q * s is exact in double (<= 8-bit code x 11-bit significand);
//   the sum with m is rounded to odd at double precision (TwoSum gives the error);
//   then rounded to odd at float precision, then to nearest even at the act dtype.
// Round-to-odd at p + 2 or more bits followed by round-to-nearest-even at p bits
// equals a single round-to-nearest-even (and rounding to odd twice equals rounding
// to odd once at the narrower width), so the result is the correctly rounded exact
// value, for f16 (p = 11) and bf16 (p = 8), subnormals and overflow included.

// a + b rounded to odd (53 bits); a, b finite.
LOWBIT_HD double add_round_to_odd(double a, double b) {
  const double sum = a + b;
  const double bb = sum - a;
  const double err = (a - (sum - bb)) + (b - bb);  // exact: a + b = sum + err
  if (err == 0.0 || sum - sum != 0.0) return sum;  // exact, or overflowed to inf
  std::uint64_t bits;
#if defined(__CUDA_ARCH__)
  bits = static_cast<std::uint64_t>(__double_as_longlong(sum));
#else
  std::memcpy(&bits, &sum, sizeof bits);
#endif
  if (bits & 1u) return sum;
  // Even and inexact: step one ulp toward the exact value (sign-magnitude bits).
  const bool away_from_zero = (err > 0.0) == (sum > 0.0);
  bits = away_from_zero ? bits + 1 : bits - 1;
  double out;
#if defined(__CUDA_ARCH__)
  out = __longlong_as_double(static_cast<long long>(bits));
#else
  std::memcpy(&out, &bits, sizeof out);
#endif
  return out;
}

// d rounded to odd at float precision (inf stays inf: every value that overflows
// float also rounds to inf in f16 and bf16).
LOWBIT_HD float double_to_float_round_to_odd(double d) {
  const float f = static_cast<float>(d);  // nearest even
  const double back = static_cast<double>(f);
  if (back == d || f - f != 0.0f || d != d) return f;  // exact, inf or NaN
  std::uint32_t bits = float_to_bits(f);
  if (bits & 1u) return f;
  // Even and inexact: the odd neighbour toward d (sign-magnitude bits). An
  // underflow to zero takes d's sign and grows to the smallest subnormal.
  const bool grow = (d < 0 ? -d : d) > (back < 0 ? -back : back);
  if (f == 0.0f) bits = d < 0 ? 0x80000000u : 0u;
  bits = grow ? bits + 1 : bits - 1;
  return bits_to_float(bits);
}

// The exact value rounded once to T (Half or BFloat16).
template <class T>
LOWBIT_HD T round_exact_to(double exact_rounded_to_odd) {
  return from_float<T>(double_to_float_round_to_odd(exact_rounded_to_odd));
}

// Decoded code value before scaling: Q4_1 q, Q4_0 q - 8, INT8 q. `stored` is what
// the packed codes hold (INT4: the nibble; INT8: the stored byte q + 128).
LOWBIT_HD int weight_code_value(const WeightPackLayout& l, int stored) {
  if (l.bits == 8) return stored - 128;
  return l.zero_point ? stored : stored - 8;
}

// The dequantized weight: T(q * s + m) (m = 0 without a zero point), one rounding.
template <class T>
LOWBIT_HD T dequant_weight(int q, T scale, T min) {
  const double product = static_cast<double>(q) * static_cast<double>(to_float(scale));  // exact
  return round_exact_to<T>(add_round_to_odd(product, static_cast<double>(to_float(min))));
}
template <class T>
LOWBIT_HD T dequant_weight(int q, T scale) {
  // No addend: the product is exact in double, so it is its own round-to-odd.
  return round_exact_to<T>(static_cast<double>(q) * static_cast<double>(to_float(scale)));
}

// ---- The value of a block form's weight ---------------------------------------------
//
// The weight the kernels multiply is f16, from the ggml value:
//   Q5_0  (q - 16) * d                 one rounding of the exact value (an HMUL2)
//   Q5_1  q * d + m                    one rounding of the exact value (an HFMA2), as
//                                      lowbit's Q4_1; ggml's f32 decoder rounds q * d + m
//                                      to f32 first, so a tie can land 1 f16 ulp apart
//   Q4_K, Q5_K  (d * sc) * q - dmin * mn   ggml's f32 value (d * sc and dmin * mn are
//                                      exact in f32, so is their product with q; one f32
//                                      rounding of the difference), then rounded to f16
//   Q6_K  (d * sc) * (q - 32)          ggml's f32 value (one f32 rounding), then to f16
//   Q3_K  (d * sc) * (q - 4)           as Q6_K (sc = the 6-bit scale - 32)
//   Q2_K  (d * sc) * q - dmin * mn     as Q4_K (4-bit sc and mn, a pair a sub-block of 16)
// with q the stored code (2 to 6 bits), sc / mn the sub-block's integer scale / min, d
// and dmin f16. The sub-block factors d * sc, dmin * mn are computed in f32 once per
// lane and unit by the kernels (exact, so the same as ggml's).
//
// `j` is the lane's k index (k % 32); `scale`, `min`, `factor` the unit's fields of the
// lane (see the layout above).
LOWBIT_HD Half block_weight_value(WeightBlocks b, int q, int j, std::uint16_t scale, std::uint16_t min,
                                  std::uint32_t factor) {
  switch (b) {
    case WeightBlocks::q5_0: return dequant_weight<Half>(q - 16, Half{scale});
    case WeightBlocks::q5_1: return dequant_weight<Half>(q, Half{scale}, Half{min});
    case WeightBlocks::q4_k:
    case WeightBlocks::q5_k:
    case WeightBlocks::q2_k: {
      // The sub-block's scale and min: Q4_K / Q5_K the u16's bytes, Q2_K the nibbles of
      // the half's byte.
      const unsigned half = j < 16 ? scale & 0xffu : scale >> 8u;
      const unsigned sc = b == WeightBlocks::q2_k ? half & 15u : scale & 0xffu;
      const unsigned mn = b == WeightBlocks::q2_k ? half >> 4u : scale >> 8u;
      const float s = to_float(Half{static_cast<std::uint16_t>(factor & 0xffffu)}) * static_cast<float>(sc);
      const float m = to_float(Half{static_cast<std::uint16_t>(factor >> 16)}) * static_cast<float>(mn);
      return from_float<Half>(s * static_cast<float>(q) - m);  // s * q exact: no contraction question
    }
    case WeightBlocks::q6_k:
    case WeightBlocks::q3_k: {
      const auto sc = static_cast<std::int8_t>(j < 16 ? scale & 0xffu : scale >> 8);
      const float s = to_float(Half{static_cast<std::uint16_t>(factor & 0xffffu)}) * static_cast<float>(sc);
      return from_float<Half>(s * static_cast<float>(q - (b == WeightBlocks::q6_k ? 32 : 4)));
    }
    case WeightBlocks::none: break;
  }
  return Half{0};
}

// Q6_K: the lane words holding the code of (n, k), piece by piece (six_bit_piece): the
// byte offset of each piece's word, where the code's bits sit in it, and which code bits
// the piece holds; `parts` pieces (1 or 2).
struct SixBitPlace {
  int parts;
  std::int64_t word_byte[2];
  int shift[2];
  std::uint32_t mask[2];
};
LOWBIT_HD SixBitPlace six_bit_place(const WeightPackLayout& l, std::int64_t nn, std::int64_t kk) {
  const int j = static_cast<int>(kk % 32), w = j / 8, p = 4 * (w % 2) + (j % 8) / 2;
  const std::int64_t unit = l.unit_base(nn, kk);
  const int lane = WeightPackLayout::lane_of(nn, kk);
  SixBitPlace out{};
  out.parts = p < 6 ? 1 : 2;
  for (int part = 0; part < out.parts; ++part) {
    const CodePiece piece = six_bit_piece(p, part);
    out.word_byte[part] = unit + six_bit_word_offset(lane, 3 * (w / 2) + piece.word);
    out.shift[part] = piece.shift + 16 * (j % 2);
    out.mask[part] = piece.mask & 0xffffu;
  }
  return out;
}
LOWBIT_HD std::uint32_t load_u32_le(const std::uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

// The stored code (before any offset) of (n, k) of a packed block form: its low plane's
// bits and its high-plane bit above them, or Q6_K's whole code.
LOWBIT_HD int block_code_at(const WeightPackLayout& l, const std::uint8_t* codes, std::int64_t nn, std::int64_t kk) {
  const int low_bits = block_low_bits(l.blocks);
  if (low_bits == 6) {
    const SixBitPlace at = six_bit_place(l, nn, kk);
    std::uint32_t q = 0;
    for (int part = 0; part < at.parts; ++part) {
      q |= (load_u32_le(codes + at.word_byte[part]) >> at.shift[part]) & at.mask[part];
    }
    return static_cast<int>(q);
  }
  const WeightPackLayout::CodePlace low = l.code_place(nn, kk);
  int q = (codes[low.byte] >> low.shift) & ((1 << low_bits) - 1);
  for (int plane = 0; plane < block_high_planes(l.blocks); ++plane) {
    const WeightPackLayout::CodePlace high = l.high_place(nn, kk, plane);
    q |= ((codes[high.byte] >> high.shift) & 1) << (low_bits + plane);
  }
  return q;
}

// Sets the stored code of (n, k) of a packed block form whose bits there are still 0: the
// twin of block_code_at.
inline void block_code_put(const WeightPackLayout& l, std::uint8_t* codes, std::int64_t nn, std::int64_t kk, int q) {
  const int low_bits = block_low_bits(l.blocks);
  if (low_bits == 6) {
    const SixBitPlace at = six_bit_place(l, nn, kk);
    static_assert(std::endian::native == std::endian::little, "the packed words are little-endian");
    for (int part = 0; part < at.parts; ++part) {
      std::uint32_t word;
      std::memcpy(&word, codes + at.word_byte[part], 4);
      word |= (static_cast<std::uint32_t>(q) & at.mask[part]) << at.shift[part];
      std::memcpy(codes + at.word_byte[part], &word, 4);
    }
    return;
  }
  const WeightPackLayout::CodePlace low = l.code_place(nn, kk);
  codes[low.byte] = static_cast<std::uint8_t>(codes[low.byte] | ((q & ((1 << low_bits) - 1)) << low.shift));
  for (int plane = 0; plane < block_high_planes(l.blocks); ++plane) {
    const WeightPackLayout::CodePlace high = l.high_place(nn, kk, plane);
    codes[high.byte] = static_cast<std::uint8_t>(codes[high.byte] | (((q >> (low_bits + plane)) & 1) << high.shift));
  }
}

// The weight (n, k) of a packed block form, read from its units (host or device bytes).
LOWBIT_HD Half block_weight_at(const WeightPackLayout& l, const std::uint8_t* codes, std::int64_t nn,
                               std::int64_t kk) {
  const int q = block_code_at(l, codes, nn, kk);
  auto u16_at = [&](std::int64_t byte) {
    return static_cast<std::uint16_t>(codes[byte] | (codes[byte + 1] << 8));
  };
  const std::uint16_t scale = u16_at(l.lane_scale_byte(nn, kk));
  const std::uint16_t min = l.blocks == WeightBlocks::q5_1 ? u16_at(l.lane_min_byte(nn, kk)) : std::uint16_t{0};
  std::uint32_t factor = 0;
  if (block_is_k(l.blocks)) {
    const std::int64_t f = l.row_factor_byte(nn, kk);
    factor = u16_at(f);
    if (block_super_bytes(l.blocks) == 4) factor |= static_cast<std::uint32_t>(u16_at(f + 2)) << 16;
  }
  return block_weight_value(l.blocks, q, static_cast<int>(kk % 32), scale, min, factor);
}

}  // namespace lowbit::formats
