// Decode attention over the mixed cache on tensor cores (flash-decoding): for each
// split of the visible positions and each KV head, one block of 4 warps computes the
// attention of all G query heads of that KV head (G <= 16: the rows of an m16n8k16 mma).
//
// A warp takes tiles of 16 positions (tiles warp, warp + 4, ... of its split) and keeps
// an online softmax per query head in registers:
//   S = Q K^T   16 x 16, two m16n8 tiles; Q's row h holds query head h (rows >= G zero).
//               The reduction over head_dim runs inside the mma: its k index is permuted
//               so that lane (g, c) (g = lane / 4, c = lane % 4) reads the contiguous
//               quarter c of K row g (and of row g + 8): 16-byte loads straight from the
//               cache, no shuffles, no shared memory.
//   O += P V    P (16 x 16 positions) is the S accumulator as an A fragment; V's columns
//               are permuted so that lane (g, c) reads the contiguous eighth g of the V
//               rows 2c, 2c + 1, 2c + 8, 2c + 9: again 16-byte loads. P is split into
//               f16 hi + lo parts (two mma), which keeps it to ~22 bits: the result is as
//               close to the FP64 twin as the SIMT kernel's f32 arithmetic.
// Quantized tokens enter the mma as their integer codes (exact in f16) and their f16
// parameters are applied outside it, in f32: a key's score is s (q . codes) (+ m sum(q)
// for INT4's minimum), a value's weight p s (and p m into a per-head sum). Every
// position of a tile may take another form (sink, quantized body, window ring).
// The partials (max, sum, unnormalized output per query head and split) are those of
// the SIMT kernel, so the combine (attention_common.cuh) is shared.
//
// Variant `Swap` (AttentionKernel::mma_swap, G <= 8; automatic's choice where G fits,
// measured 2-20% faster on the H100; mma names the kernel above), positions as the mma's M:
//   S^T = K Q^T  16 positions x 8 heads, one m16n8 tile: K's rows g, g + 8 (quarter c,
//               the same loads) are the A fragment, Q the B fragment (column g = head g):
//               D / 16 mma a tile instead of 2 D / 16.
//   P^T          the S^T accumulator (positions g, g + 8; heads 2c, 2c + 1) packed to f16
//               (no lo part: FlashAttention's practice) and transposed per 8 x 8 half by
//               movmatrix.trans: exactly the B fragment of P^T (positions 2c, 2c + 1 |
//               2c + 8, 2c + 9 of head g). 2 F2FP + 2 MOVM a tile.
//   O^T += V^T P^T  V^T (16 channels x 16 positions) as the A fragment from the same V
//               loads (rows g / g + 8 of m tile i: halves 2i / 2i + 1 of lane g's eighth),
//               4 PRMT a mma: D / 16 mma a tile instead of 2 D / 8.
// Its running max / sum are per head 2c, 2c + 1 (the max shuffled over the 8 lanes of a
// column, the sums kept per lane and reduced after the loop); the scale / min of a
// position applies to rows g, g + 8, so a lane needs the parameters of 2 positions, not 4.
//
// Key blocks (core/kv_layout.h; the KB instantiation of Swap; paged too): K's body
// positions in a complete block b have per-channel parameters s_b, m_b. A body row's codes
// become f16 keys k = f16(q s_b + m_b) by one rounding (one HFMA2 a channel pair, the
// flash prefill's producers' values and the twin's, read_key_blocks), which the mma
// scores against Q's own fragment: the scores are f32-exact for those keys, as the other
// instantiations' are for theirs. A tile meets up to two key blocks (B a multiple of 16):
// each row takes its block's parameters, copied with the tile's codes into the ring.
// Positions of the open block are FP16 keys from the staging ring, scored like the sink
// and window. A warp finds its next tile's key block from its last one's by compares.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "core/pdl.cuh"
#include "cuda/async_copy.cuh"
#include "cuda/fast_math.cuh"
#include "cuda/kv/attention_common.cuh"
#include "cuda/kv/kv_cuda.h"
#include "cuda/lop3.cuh"
#include "cuda/mma.cuh"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::kv {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 16;  // positions a warp takes at a time (the k of the P V mma)

// N bytes from p into words (N a multiple of 4), 16 / 8 / 4 bytes at a time; past L1
// when the row may have been cached there before its writer finished, and for anything
// written by the kernel this one waits for (griddepcontrol.wait): ptxas may move a
// read-only (.nc) load above the wait.
template <int N>
__device__ __forceinline__ void load_words(const void* p, bool past_l1, std::uint32_t* w) {
  if constexpr (N >= 16) {
#pragma unroll
    for (int i = 0; i < N / 16; ++i) {
      const uint4* q = static_cast<const uint4*>(p) + i;
      const uint4 v = past_l1 ? __ldcg(q) : __ldg(q);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (N == 8) {
    const uint2* q = static_cast<const uint2*>(p);
    const uint2 v = past_l1 ? __ldcg(q) : __ldg(q);
    w[0] = v.x, w[1] = v.y;
  } else {
    const auto* q = static_cast<const std::uint32_t*>(p);
    w[0] = past_l1 ? __ldcg(q) : __ldg(q);
  }
}

// Codes -> their values as f16 pairs, in place: `count` codes in the first words become
// count / 2 words of f16 pairs. INT8 (two's complement): 0x6400 | (b ^ 0x80) is the f16
// 1024 + b + 128, pairs in channel order. INT4 (unsigned, the even channel in the low
// nibble): each word of 8 channels becomes the pairs (j, j + 4), j = 0..3 (the kernel's
// other operands of those channels follow the same order: interleave_quads,
// channel_of_half). Pairs 0 and 2 take the nibbles at bits 0 / 8 (mask 0x000f000f):
// 0x6400 | n is 1024 + n; pairs 1 and 3 those at bits 4 / 12 in place (mask 0x00f000f0):
// 1024 + 16n, and fma(v, 1/16, -64) = n exactly. One shift (>> 8) serves pairs 2 and 3:
// 1 SHF + 4 LOP3 + 4 half ops a word, where a shift and mask a pair took 3 SHF + 8 LOP3
// (the compiler splits each mask-and-or in two) + 4 HADD2 (the weight-only GEMV's decode).
// INT4: the f16 pair of the nibbles at bits 0 / 16 of t (low_pair) or at bits 4 / 20
// (high_pair): 0x6400 | n is 1024 + n, and 1024 + 16n in place, fma(v, 1/16, -64) = n.
// The constants come from the caller (made once a loop, not once a pair).
struct Int4Pairs {
  __half2 bias = __float2half2_rn(1024.0f), sixteenth = __float2half2_rn(0.0625f), sub16 = __float2half2_rn(-64.0f);
  __device__ __forceinline__ std::uint32_t low(std::uint32_t t) const {
    const std::uint32_t v = and_or<0x000f000fu, 0x64006400u>(t);
    const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&v), bias);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  __device__ __forceinline__ std::uint32_t high(std::uint32_t t) const {
    const std::uint32_t v = and_or<0x00f000f0u, 0x64006400u>(t);
    const __half2 h = __hfma2(*reinterpret_cast<const __half2*>(&v), sixteenth, sub16);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
};

template <int Bits, int Count>
__device__ __forceinline__ void codes_to_halves(std::uint32_t* w) {
  if constexpr (Bits == 8) {
#pragma unroll
    for (int i = Count / 4 - 1; i >= 0; --i) {  // descending: word i feeds words 2i, 2i + 1
      const std::uint32_t flipped = w[i] ^ 0x80808080u;
      const __half2 bias = __float2half2_rn(1152.0f);
      const std::uint32_t lo = __byte_perm(flipped, 0x64646464u, 0x4140u);
      const std::uint32_t hi = __byte_perm(flipped, 0x64646464u, 0x4342u);
      const __half2 a = __hsub2(*reinterpret_cast<const __half2*>(&lo), bias);
      const __half2 b = __hsub2(*reinterpret_cast<const __half2*>(&hi), bias);
      w[2 * i] = *reinterpret_cast<const std::uint32_t*>(&a);
      w[2 * i + 1] = *reinterpret_cast<const std::uint32_t*>(&b);
    }
  } else if constexpr (Bits == 4) {
    const Int4Pairs pairs;
#pragma unroll
    for (int i = Count / 8 - 1; i >= 0; --i) {  // word i feeds words 4i .. 4i + 3
      const std::uint32_t x = w[i], hi = x >> 8;
      w[4 * i] = pairs.low(x);
      w[4 * i + 1] = pairs.high(x);
      w[4 * i + 2] = pairs.low(hi);
      w[4 * i + 3] = pairs.high(hi);
    }
  }
}

// INT4's channel order for f16 words in channel order (Q, and the FP16 tokens of an INT4
// cache): each 4 words of channels 0..7 become the pairs (0, 4), (1, 5), (2, 6), (3, 7).
template <int Bits, int Words>
__device__ __forceinline__ void interleave_quads(std::uint32_t* w) {
  if constexpr (Bits == 4) {
#pragma unroll
    for (int i = 0; i < Words; i += 4) {
      const std::uint32_t n0 = w[i], n1 = w[i + 1], n2 = w[i + 2], n3 = w[i + 3];
      w[i] = __byte_perm(n0, n2, 0x5410u);
      w[i + 1] = __byte_perm(n0, n2, 0x7632u);
      w[i + 2] = __byte_perm(n1, n3, 0x5410u);
      w[i + 3] = __byte_perm(n1, n3, 0x7632u);
    }
  }
}

// The channel (within a lane's group of V channels) of half j of its V words.
template <int Bits>
__device__ __forceinline__ constexpr int channel_of_half(int j) {
  return Bits == 4 ? 8 * (j / 8) + (j / 2) % 4 + 4 * (j % 2) : j;
}

__device__ __forceinline__ std::uint32_t pack_halves(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

// a (hi) + the remainder (lo), each an f16 pair: a + b exact to ~22 bits.
__device__ __forceinline__ void split_halves(float a, float b, std::uint32_t& hi, std::uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 back = __half22float2(h);
  hi = *reinterpret_cast<const std::uint32_t*>(&h);
  lo = pack_halves(a - back.x, b - back.y);
}

// The 8 x 8 b16 matrix of a warp (lane (g, c): row g, columns 2c, 2c + 1) transposed.
__device__ __forceinline__ std::uint32_t transpose_8x8(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Bit views of an f16 pair (key blocks' decode).
__device__ __forceinline__ __half2 half2_of(std::uint32_t w) { return *reinterpret_cast<const __half2*>(&w); }
__device__ __forceinline__ std::uint32_t bits_of(__half2 h) { return *reinterpret_cast<const std::uint32_t*>(&h); }

// Where visible index i of the split lives, and in which form.
struct Where {
  int pos;
  bool body;
};

// The FP16 slot of a visible FP16 position: the sink's own, or the window ring's. A ring
// position is one of the last `window` (pos > end - 1 - window), so its slot follows from
// end_slot = (end - 1) % window without a division per position.
__device__ __forceinline__ int f16_slot(const KvLayerShape& s, int pos, int end, int end_slot) {
  if (pos < s.sink) return pos;
  const int back = end - 1 - pos, window = static_cast<int>(s.window);
  return static_cast<int>(s.sink) + (end_slot >= back ? end_slot - back : end_slot - back + window);
}

template <int Bits>
__device__ __forceinline__ Where where(const SplitArgs& a, int i) {
  const int skip = a.shape.drops() ? a.recent_begin - a.sink_end : 0;
  const int pos = i < a.sink_end ? i : i + skip;
  return Where{pos, Bits != 0 && pos >= a.sink_end && pos < a.recent_begin};
}

// A warp's tile in registers, ready for the math: K rows g and g + 8 (quarter c) and V
// rows 2c, 2c + 1, 2c + 8, 2c + 9 (eighth g) as f16 pairs (codes as their integer
// values), and the parameters of the four S columns / V rows (1 and 0 for FP16 tokens).
template <int D>
struct TileRegs {
  std::uint32_t k[2][D / 8];
  std::uint32_t v[4][D / 16];
  std::uint32_t va[D / 16][4];  // Swap: V^T's A fragments, m tile i (v_fragments)
  float ks[4], km[4], vs[4], vm[4];
};

// Swap: V^T's A fragment of m tile i, rows (channels: halves 2i | 2i + 1 of eighth g) x
// columns (positions 2c, 2c + 1 | 2c + 8, 2c + 9), from the V rows u = 0..3 (positions
// 2c, 2c + 1, 2c + 8, 2c + 9): 4 PRMT a mma.
template <int D>
__device__ __forceinline__ void v_fragments(TileRegs<D>& x) {
#pragma unroll
  for (int i = 0; i < D / 16; ++i) {
    x.va[i][0] = __byte_perm(x.v[0][i], x.v[1][i], 0x5410u);
    x.va[i][1] = __byte_perm(x.v[0][i], x.v[1][i], 0x7632u);
    x.va[i][2] = __byte_perm(x.v[2][i], x.v[3][i], 0x5410u);
    x.va[i][3] = __byte_perm(x.v[2][i], x.v[3][i], 0x7632u);
  }
}

// The same fragments straight from the INT4 codes of the four V rows (raw[u]: eighth g,
// D / 64 words of 8 codes): the words of two rows are merged first (PRMT: row u's 4 low
// or high bytes in the low half, row u + 1's in the high half), so that each nibble
// conversion of codes_to_halves yields a pair (row u, row u + 1) of one channel, which is
// what the fragment holds: 2 PRMT a code word pair instead of 8 after the conversion.
// Channel order as v_fragments' over codes_to_halves (m tile 4w + m: channels 8w + m and
// 8w + m + 4 of the eighth).
template <int D>
__device__ __forceinline__ void v_fragments_int4(const std::uint32_t (&raw)[4][D / 64], TileRegs<D>& x) {
  const Int4Pairs pairs;
#pragma unroll
  for (int w = 0; w < D / 64; ++w) {
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {  // rows 0, 1 -> fragment registers 0, 1; rows 2, 3 -> 2, 3
      const std::uint32_t r0 = raw[2 * pair][w], r1 = raw[2 * pair + 1][w];
      const std::uint32_t lo = __byte_perm(r0, r1, 0x5410u), hi = __byte_perm(r0, r1, 0x7632u);  // channels 0-3 | 4-7
      const std::uint32_t lo8 = lo >> 8, hi8 = hi >> 8;
      x.va[4 * w + 0][2 * pair] = pairs.low(lo), x.va[4 * w + 1][2 * pair] = pairs.high(lo);
      x.va[4 * w + 2][2 * pair] = pairs.low(lo8), x.va[4 * w + 3][2 * pair] = pairs.high(lo8);
      x.va[4 * w + 0][2 * pair + 1] = pairs.low(hi), x.va[4 * w + 1][2 * pair + 1] = pairs.high(hi);
      x.va[4 * w + 2][2 * pair + 1] = pairs.low(hi8), x.va[4 * w + 3][2 * pair + 1] = pairs.high(hi8);
    }
  }
}

// The same fragments straight from the INT8 codes of the four V rows (raw[u]: eighth g,
// D / 32 words of 4 codes): the bytes of two rows interleaved first (PRMT: row u's byte j,
// row u + 1's byte j, row u's byte j + 1, row u + 1's), so that each byte-pair conversion
// of codes_to_halves yields a pair (row u, row u + 1) of one channel, which is what the
// fragment holds: 2 PRMT a code word pair instead of 4 after the conversion.
template <int D>
__device__ __forceinline__ void v_fragments_int8(const std::uint32_t (&raw)[4][D / 32], TileRegs<D>& x) {
  const __half2 bias = __float2half2_rn(1152.0f);
  auto pair_at = [&](std::uint32_t merged, std::uint32_t selector) {  // bytes 0, 1 (0x4140) or 2, 3 (0x4342)
    const std::uint32_t v = __byte_perm(merged, 0x64646464u, selector);
    const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&v), bias);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  };
#pragma unroll
  for (int w = 0; w < D / 32; ++w) {
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {  // rows 0, 1 -> fragment registers 0, 1; rows 2, 3 -> 2, 3
      const std::uint32_t r0 = raw[2 * pair][w], r1 = raw[2 * pair + 1][w];
      // Channels 4w, 4w + 1 | 4w + 2, 4w + 3 of both rows, sign bits flipped (codes_to_halves).
      const std::uint32_t lo = __byte_perm(r0, r1, 0x5140u) ^ 0x80808080u;
      const std::uint32_t hi = __byte_perm(r0, r1, 0x7362u) ^ 0x80808080u;
      x.va[2 * w][2 * pair] = pair_at(lo, 0x4140u), x.va[2 * w][2 * pair + 1] = pair_at(lo, 0x4342u);
      x.va[2 * w + 1][2 * pair] = pair_at(hi, 0x4140u), x.va[2 * w + 1][2 * pair + 1] = pair_at(hi, 0x4342u);
    }
  }
}

// A warp's online softmax over its tiles, for query heads g and g + 8 (Swap: heads 2c and
// 2c + 1, l and vmin this lane's part of the sums, m the head's).
template <int D, bool Swap = false>
struct WarpState {
  float o[Swap ? D / 16 : D / 8][4];
  float m[2], l[2], vmin[2];
};

// Tile-local index of S column / V row u of lane (g, c).
__device__ __forceinline__ int column_of(int c, int u) { return 2 * c + (u & 1) + 8 * (u >> 1); }

// One tile: S = Q K^T (scaled, masked past `valid` positions), the online softmax, O += P V.
template <int D>
__device__ __forceinline__ void tile_math(const TileRegs<D>& x, int valid, const uint4 (*qf)[32], int lane,
                                          float q_scale, const float (&sum_q)[2], WarpState<D>& st) {
  constexpr int kKSteps = D / 16, kNTiles = D / 8;
  const int c = lane % 4;
  float sacc[2][4] = {};
#pragma unroll
  for (int k = 0; k < kKSteps; ++k) {
    const uint4 q = qf[k][lane];
#pragma unroll
    for (int r = 0; r < 2; ++r) mma_16816<__half>(sacc[r], q.x, q.y, q.z, q.w, x.k[r][2 * k], x.k[r][2 * k + 1]);
  }
  // sacc[r][e]: row (query head) g + 8 (e / 2), column (position) 8 r + 2 c + e % 2.
  float p[2][4], alpha[2];
#pragma unroll
  for (int row = 0; row < 2; ++row) {
    float mx = -INFINITY;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float raw = sacc[u >> 1][2 * row + (u & 1)];
      const float score = fmaf(raw, x.ks[u], x.km[u] * sum_q[row]) * q_scale;
      p[row][u] = column_of(c, u) < valid ? score : -INFINITY;
      mx = fmaxf(mx, p[row][u]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(st.m[row], mx);
    alpha[row] = m_new == -INFINITY ? 1.0f : exp2_approx(st.m[row] - m_new);
    float sum = 0.0f, vm_sum = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      p[row][u] = m_new == -INFINITY ? 0.0f : exp2_approx(p[row][u] - m_new);
      sum += p[row][u];
      vm_sum = fmaf(p[row][u], x.vm[u], vm_sum);
      p[row][u] *= x.vs[u];
    }
    st.l[row] = fmaf(st.l[row], alpha[row], sum);
    st.vmin[row] = fmaf(st.vmin[row], alpha[row], vm_sum);
    st.m[row] = m_new;
  }
  // The running maximum of a head rarely moves once a few tiles are in: the accumulators
  // are rescaled only when some lane's did (a warp-uniform branch).
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      st.o[j][0] *= alpha[0];
      st.o[j][1] *= alpha[0];
      st.o[j][2] *= alpha[1];
      st.o[j][3] *= alpha[1];
    }
  }
  std::uint32_t hi[4], lo[4];
  split_halves(p[0][0], p[0][1], hi[0], lo[0]);
  split_halves(p[1][0], p[1][1], hi[1], lo[1]);
  split_halves(p[0][2], p[0][3], hi[2], lo[2]);
  split_halves(p[1][2], p[1][3], hi[3], lo[3]);
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    // B: rows (positions) 2c, 2c + 1 | 2c + 8, 2c + 9 of column g: dim g * kNTiles + j.
    const std::uint32_t sel = j % 2 ? 0x7632u : 0x5410u;
    const std::uint32_t b0 = __byte_perm(x.v[0][j / 2], x.v[1][j / 2], sel);
    const std::uint32_t b1 = __byte_perm(x.v[2][j / 2], x.v[3][j / 2], sel);
    mma_16816<__half>(st.o[j], hi[0], hi[1], hi[2], hi[3], b0, b1);
    mma_16816<__half>(st.o[j], lo[0], lo[1], lo[2], lo[3], b0, b1);
  }
}

// One tile, positions as M (Swap): S^T = K Q^T, the online softmax, O^T += V^T P^T. x's
// parameters [0], [1] are those of positions g, g + 8 (K rows r); qb[i][lane] holds Q row
// g's words 4i .. 4i + 3 of quarter c (the B fragments of k steps 2i, 2i + 1); sum_q[h] is
// sum(q) of head 2c + h. The scores of heads past the group are finite (q = 0) and unused.
// KB (key blocks): K's rows are f16 keys (their parameters applied), x.ks / x.km not read.
template <int D, int Bits, bool KB = false>
__device__ __forceinline__ void tile_math_swap(const TileRegs<D>& x, int valid, const uint4 (*qb)[32], int lane,
                                               float q_scale, const float (&sum_q)[2], WarpState<D, true>& st) {
  constexpr int kKSteps = D / 16, kMTiles = D / 16;
  const int g = lane / 4;
  // Two accumulators (even / odd k steps): two chains of D / 32 mma, not one of D / 16.
  float sacc[2][4] = {};
#pragma unroll
  for (int i = 0; i < kKSteps / 2; ++i) {
    const uint4 q = qb[i][lane];
    mma_16816<__half>(sacc[0], x.k[0][4 * i], x.k[1][4 * i], x.k[0][4 * i + 1], x.k[1][4 * i + 1], q.x, q.y);
    mma_16816<__half>(sacc[1], x.k[0][4 * i + 2], x.k[1][4 * i + 2], x.k[0][4 * i + 3], x.k[1][4 * i + 3], q.z, q.w);
  }
  // sacc[.][2 r + h]: row (position) g + 8 r, column (query head) 2c + h.
  float p[4], alpha[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float raw = sacc[0][2 * r + h] + sacc[1][2 * r + h];
      float score;
      if constexpr (Bits == 0 || KB) {
        score = raw * q_scale;
      } else {
        const float ks = x.ks[r], km = Bits == 4 ? x.km[r] : 0.0f;
        score = fmaf(raw, ks, km * sum_q[h]) * q_scale;
      }
      p[2 * r + h] = g + 8 * r < valid ? score : -INFINITY;
      mx = fmaxf(mx, p[2 * r + h]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    // Row 0 of a tile is always valid, so m_new is finite (the guards of tile_math are not
    // needed): exp2 of -inf - m_new, and of the first tile's -inf - m_new, is 0.
    const float m_new = fmaxf(st.m[h], mx);
    alpha[h] = exp2_approx(st.m[h] - m_new);
    float sum = 0.0f, vm_sum = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float& e = p[2 * r + h];
      e = exp2_approx(e - m_new);
      sum += e;
      if constexpr (Bits == 4) vm_sum = fmaf(e, x.vm[r], vm_sum);
      if constexpr (Bits != 0) e *= x.vs[r];
    }
    st.l[h] = fmaf(st.l[h], alpha[h], sum);
    st.vmin[h] = fmaf(st.vmin[h], alpha[h], vm_sum);
    st.m[h] = m_new;
  }
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
      st.o[i][0] *= alpha[0];
      st.o[i][1] *= alpha[1];
      st.o[i][2] *= alpha[0];
      st.o[i][3] *= alpha[1];
    }
  }
  // P^T's B fragment: rows (positions) 2c, 2c + 1 | 2c + 8, 2c + 9 of column (head) g.
  const std::uint32_t b0 = transpose_8x8(pack_halves(p[0], p[1]));
  const std::uint32_t b1 = transpose_8x8(pack_halves(p[2], p[3]));
#pragma unroll
  for (int i = 0; i < kMTiles; ++i) mma_16816<__half>(st.o[i], x.va[i][0], x.va[i][1], x.va[i][2], x.va[i][3], b0, b1);
}

// Where a tile's rows are in a page (its first row; the tile's 16 are consecutive).
struct TilePage {
  std::uint8_t* page;
  int row;
};

constexpr int kKbStages = 3;  // Smem's ring stages of a quantized body

// Key blocks' shared memory (KB: Smem's base; empty otherwise, so that the other
// instantiations keep their size). Per warp and ring stage, the f16 scales and (INT4) mins
// of the up to two key blocks of the stage's tile, copied with its codes.
template <int D>
struct KbSmem {
  uint4 params[kWarps][kKbStages][2][2][D / 8];  // [warp][stage][block of the tile][scales | mins]
};
template <int D, bool KB>
struct KbArea {};
template <int D>
struct KbArea<D, true> {
  KbSmem<D> kb;
};

// The shared memory of a block: Q's fragments and (paged) the split's tile pages for the
// whole loop; then either the
// quantized kernels' cp.async rings (during the loop) or the warps' results and the
// combine's weights (after it).
template <int D, int Bits, bool KB = false>
struct Smem : KbArea<D, KB> {
  static constexpr int kStages = Bits == 0 ? 1 : kKbStages;  // FP16 caches use no ring
  static constexpr int kCodeBytes = Bits == 0 ? 16 : D * Bits / 8;
  static constexpr int kPitch = kCodeBytes + 16;  // padded rows: 16-byte reads without bank conflicts
  struct alignas(16) Stage {
    std::uint8_t k[kTile][kPitch], v[kTile][kPitch];
    // Per row, the f16 pairs holding its K scale, K min, V scale, V min (in the pair's
    // high half when the value's index is odd: param_odd).
    std::uint32_t params[kTile][4];
  };
  struct After {
    float o[kWarps][kMmaMaxGroup][D];
    float ml[kWarps][kMmaMaxGroup][2];
    float weights[kMaxSplit];
    float totals[kMmaMaxGroup];
  };
  uint4 qf[D / 16][32];
  TilePage pages[DecodeSplitPlan::kMaxMmaSplit / kTile];  // paged: a tile's page and first row
  union {
    Stage ring[kWarps][kStages];
    After after;
  };
  static constexpr std::size_t bytes() { return sizeof(Smem); }
};

// Loads of one FP16 token's rows for a lane: quarter c of its K row, eighth g of its V row.
// N bytes of shared memory (16 / 8 / 4 at a time) into words.
template <int N>
__device__ __forceinline__ void load_shared(const std::uint8_t* p, std::uint32_t* w) {
  if constexpr (N >= 16) {
#pragma unroll
    for (int i = 0; i < N / 16; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (N == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else {
    w[0] = *reinterpret_cast<const std::uint32_t*>(p);
  }
}

// Brings the 128-byte line at p into L2.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Paged: full's FP16 rows are in pages (paged_address.cuh); the fixed area of window and
// selective is addressed as the contiguous buffer.
template <int D, bool Paged>
__device__ __forceinline__ const std::uint16_t* f16_row(const SplitArgs& a, bool is_v, int pos, int end_slot) {
  const int head = static_cast<int>(blockIdx.y);
  if (Paged && a.shape.window == 0) return paged_f16_row(a.paged, a.table, is_v, head, pos);
  const std::uint16_t* f16 = is_v ? a.layer.v.f16 : a.layer.k.f16;
  return f16 + (static_cast<long long>(head) * a.shape.f16_slots() + f16_slot(a.shape, pos, a.end, end_slot)) * D;
}

// Where a body position's rows are (head 0; positions kv_heads rows apart).
template <bool Paged>
__device__ __forceinline__ BodyRow body_row(const SplitArgs& a, bool is_v, int pos) {
  if constexpr (Paged) {
    return paged_body_row(a.paged, a.table, is_v, pos);
  } else {
    // Pointers selected, not a reference into `a`: that would put `a` in local memory.
    const KvPart part{nullptr, is_v ? a.layer.v.codes : a.layer.k.codes, is_v ? a.layer.v.scales : a.layer.k.scales,
                      is_v ? a.layer.v.mins : a.layer.k.mins};
    return contiguous_body_row(a.shape, part, pos);
  }
}

// KB: K in key blocks (Swap, a body; the kernel comment "Key blocks"; paged: each block's
// parameters in the page of its first position, the open block in the row's fixed area).
template <int D, int Bits, bool Swap, bool Paged, bool KB = false>
__global__ void __launch_bounds__(kThreads, Bits == 0 ? 1 : 3) kv_attention_mma_kernel(SplitArgs args) {
  static_assert(!KB || (Swap && Bits != 0), "key blocks: mma_swap over a body");
  constexpr int kKSteps = D / 16, kNTiles = D / 8;
  using S = Smem<D, Bits, KB>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  S& sm = *reinterpret_cast<S*>(smem_raw);
  // The next kernel, the O projection's GEMV, launches after our main loop: launched at
  // our start, its blocks would take the room our grid leaves on an SM (the quantized
  // kernels, 3 blocks an SM by their bounds, always leave a GEMV block's registers; FP16
  // where the plan's grid is under 2 blocks an SM) and stream their weights against our
  // loads (B = 1 selective8 at 2K: +3.3 us here and +3.7 us in the GEMV a layer).
  SplitArgs a = args;
  if (!a.prefetch) pdl_wait();
  if (a.device_pos) resolve_device_span(a);
  if constexpr (Paged) {
    if (!enter_paged_row(a, D)) return;
  }
  const int active = active_splits(a);
  if (static_cast<int>(blockIdx.x) >= active) return;  // past the length: no partials (fused combine)
  const KvLayerShape& s = a.shape;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, c = lane % 4;
  const int head = static_cast<int>(blockIdx.y), h0 = head * a.group;
  const int split = static_cast<int>(blockIdx.x);
  const int i0 = split * a.split_len;
  const int n = min(a.split_len, a.visible - i0);
  const int tiles = (n + kTile - 1) / kTile;
  const int end_slot = s.window > 0 ? (a.end - 1) % static_cast<int>(s.window) : 0;
  auto past_l1 = [&](int pos) { return a.prefetch && appended_now(a, pos); };

  // A tile of 16 body positions (almost all of them at long contexts) takes the paths
  // without per-position checks: its rows are consecutive in the cache (a position is
  // its visible index under the quantized policies, which drop nothing; paged: of one
  // page, P being a multiple of 16 and the tile 16-aligned).
  auto body_tile = [&](int base) {
    return base + kTile <= n && i0 + base >= a.sink_end && i0 + base + kTile <= a.recent_begin;
  };
  // Paged: the 16 positions of a tile share a page (splits and tiles start at multiples
  // of 16; a page holds a multiple of 16) and are consecutive rows in it. Each paged tile's
  // page and first row (full: every tile; quantized: the body tiles) are looked up once
  // for the block, a thread a tile, before the loop: looked up in the loop, each tile's
  // table load was waited for before its rows could be, and its divisions and 64-bit
  // arithmetic made a quantized tile's issue path ~190 instructions.
  if constexpr (Paged) {
    if (Bits != 0 || s.window == 0) {
      for (int t = static_cast<int>(threadIdx.x); t < tiles; t += kThreads) {
        if (Bits == 0 || body_tile(t * kTile)) {
          const long long pos = i0 + t * kTile;
          sm.pages[t] = TilePage{page_of(a.paged, a.table, pos), row_in_page(a.paged.layout, pos)};
        }
      }
      __syncthreads();
    }
  }
  // Paged full: a tile's K and V rows of this head (the first one's; the others D apart).
  // Null rows elsewhere: f16_row finds each row.
  using TileRows = F16Rows;
  auto tile_rows = [&](int base) {
    if constexpr (Paged && Bits == 0) {
      if (s.window == 0 && base < n) {
        const TilePage tp = sm.pages[base / kTile];
        return TileRows{f16_row_at(a.paged.layout, tp.page, false, head, tp.row),
                        f16_row_at(a.paged.layout, tp.page, true, head, tp.row)};
      }
    }
    return TileRows{};
  };

  // Direct loads of FP16 tokens (every token under full and window; the sink and the
  // window's ring under selective), zeros past the split. `tile`: tile_rows' of j's tile.
  auto load_f16_k = [&](std::uint32_t (&dst)[D / 8], int j, const TileRows& tile) {
    if (j >= n) {
#pragma unroll
      for (int w = 0; w < D / 8; ++w) dst[w] = 0;
      return;
    }
    const int pos = where<Bits>(a, i0 + j).pos;
    const std::uint16_t* row = tile.k ? tile.k + (j % kTile) * D : f16_row<D, Paged>(a, false, pos, end_slot);
    load_words<D / 2>(row + c * (D / 4), past_l1(pos), dst);
    interleave_quads<Bits, D / 8>(dst);
  };
  // V's rows also set their parameters (1, 0).
  auto load_f16_v = [&](TileRegs<D>& x, int u, int j, const TileRows& tile) {
    if constexpr (!Swap) {  // Swap: the parameters are those of the K rows (stage or constant)
      x.ks[u] = x.vs[u] = 1.0f;
      x.km[u] = x.vm[u] = 0.0f;
    }
    if (j >= n) {
#pragma unroll
      for (int w = 0; w < D / 16; ++w) x.v[u][w] = 0;
      return;
    }
    const int pos = where<Bits>(a, i0 + j).pos;
    const std::uint16_t* row = tile.v ? tile.v + (j % kTile) * D : f16_row<D, Paged>(a, true, pos, end_slot);
    load_words<D / 4>(row + g * (D / 8), past_l1(pos), x.v[u]);
    interleave_quads<Bits, D / 16>(x.v[u]);
  };

  WarpState<D, Swap> st;
  constexpr int kOTiles = Swap ? D / 16 : kNTiles;
#pragma unroll
  for (int j = 0; j < kOTiles; ++j) st.o[j][0] = st.o[j][1] = st.o[j][2] = st.o[j][3] = 0.0f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = st.vmin[0] = st.vmin[1] = 0.0f;
  float sum_q[2] = {0.0f, 0.0f};
  // A warp's tiles: every 4th, from its own. So the tiles of FP16 rows at a split's ends
  // (the sink; the window and, with key blocks, the open block), whose rows are loaded
  // directly and not through the ring, fall to different warps: a run of consecutive
  // tiles a warp put them all in the last warp's run, the split's tail (ncu, session 39).
  constexpr int kStride = kWarps;
  const int first = warp, end_tile = tiles;

  // FP16 caches: each tile's loads straight into registers at the top of its iteration
  // (a tile of FP16 rows is 256 bytes a lane in flight).
  TileRegs<D> head_tile;
  if constexpr (Bits == 0) {
    if (first < tiles) {
      const int base = first * kTile;
      if (a.prefetch) {  // rows other than the new token's before the wait
        const TileRows tile = tile_rows(base);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int j = base + g + 8 * r;
          if (j >= n || !appended_now(a, where<Bits>(a, i0 + j).pos)) load_f16_k(head_tile.k[r], j, tile);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int j = base + column_of(c, u);
          if (j >= n || !appended_now(a, where<Bits>(a, i0 + j).pos)) load_f16_v(head_tile, u, j, tile);
        }
      }
    }
  }

  // Quantized caches: a ring of kStages tiles a warp in shared memory filled by cp.async
  // (codes, and the scale / min pairs) kStages - 1 tiles ahead; FP16 tokens among them
  // (sink, ring) are loaded directly when used.
  constexpr int kCodeBytes = S::kCodeBytes;
  constexpr int kChunks = kTile * kCodeBytes / 16;  // 16-byte copies a part a tile
  constexpr int kRowChunks = kCodeBytes / 16;       // 16-byte copies a row
  // Contiguous: a position's rows begin at its body slot x kv_heads, in 32-bit factors
  // (slots < 2^30, kv_heads <= 1024), so that each tile pays one wide multiply for its
  // rows, not the 64-bit products of body_row (~25 instructions on a tile's issue path).
  const int body_base32 = static_cast<int>(s.body_base), kv_heads32 = static_cast<int>(s.kv_heads);
  auto slot_rows = [&](int pos) { return static_cast<long long>(pos - body_base32) * kv_heads32; };
  // Body tile t's first rows (KV head 0).
  auto body_tile_rows = [&](int t) -> BodyRows {
    if constexpr (Paged) {
      const TilePage tp = sm.pages[t];
      return BodyRows{body_row_at(a.paged.layout, tp.page, false, tp.row),
                      body_row_at(a.paged.layout, tp.page, true, tp.row)};
    } else {
      const long long r = slot_rows(i0 + t * kTile);
      auto rows_of = [&](const KvPart& part) {  // INT8 bodies have no mins (null, never read)
        return BodyRow{part.codes + r * kCodeBytes, part.scales + r, Bits == 4 ? part.mins + r : nullptr};
      };
      return BodyRows{rows_of(a.layer.k), rows_of(a.layer.v)};
    }
  };
  // Scales and mins are [position][kv_head] f16 in 4-byte aligned parts (paged: a page's,
  // of P x H elements; contiguous: checked by the host). A lane copies the aligned pair
  // that holds its row's value, which is the pair's high half when the value's index in
  // the part is odd. Paged, a tile's first row is a multiple of 16: the parity is the
  // row's within the tile.
  const long long body_params = s.body_slots * s.kv_heads;
  auto contiguous_index = [&](int t, int row) { return slot_rows(i0 + t * kTile + row) + head; };
  // The index's parity of a tile's row `row`, in 32-bit unsigned arithmetic (a product's
  // low bit is that of its factors' low bits). Tile t starts 16 t positions after the
  // split's first, an even count, so the parity is every tile's: a lane's constant, made
  // once rather than on each tile's path.
  auto param_odd = [&](int row) {
    const unsigned r = Paged ? row : static_cast<unsigned>(i0 - s.body_base + row);
    return ((r * static_cast<unsigned>(s.kv_heads) + static_cast<unsigned>(head)) & 1u) != 0;
  };
  const int param_row = lane % kTile, param_part = lane / kTile;  // a lane's (row, part) of a tile
  // KB: K's body positions before kb_open are in complete key blocks (codes, per block and
  // channel parameters); those from kb_open to recent_begin are the open block's FP16 keys
  // in the staging ring. V is per token throughout.
  const int kb_block = KB ? static_cast<int>(s.key_block) : 1, kb_base = static_cast<int>(s.body_base);
  const int kb_open = KB ? static_cast<int>(s.open_block_begin(a.recent_begin)) : 0;
  KbSmem<D>* kb_smem = nullptr;  // KB: sm.kb (the other instantiations have none)
  if constexpr (KB) kb_smem = &sm.kb;
  // The key block of body position pos (>= kb_base): a multiply-high and a shift.
  auto kb_block_of = [&](int pos) {
    return static_cast<int>(a.key_block_div.divide(static_cast<std::uint32_t>(pos - kb_base)));
  };
  // The positions [lo, hi) of tile `base` in complete key blocks (lo >= hi: none), and the
  // key blocks of the first and last (a tile meets at most two: key_block % 16 == 0, so the
  // last is the first's or the next).
  const int kb_end = min(i0 + n, kb_open);  // the split's complete-block positions end here
  struct KbRange {
    int lo, hi, b0, b1;
  };
  auto kb_range = [&](int base) {
    KbRange r;
    r.lo = max(i0 + base, a.sink_end);
    r.hi = min(i0 + base + kTile, kb_end);
    r.b0 = r.lo < r.hi ? kb_block_of(r.lo) : 0;
    r.b1 = r.b0 + (r.lo < r.hi && r.hi - 1 >= kb_base + (r.b0 + 1) * kb_block ? 1 : 0);
    return r;
  };
  // Where the second key block of the tile in each ring stage starts (INT_MAX: the tile
  // meets one), noted by the issue that copies its parameters, read by the take: three
  // registers, selected, not an array (a runtime index would put it in local memory).
  static_assert(kKbStages == 3, "a register a stage");
  int kb_second_0 = INT_MAX, kb_second_1 = INT_MAX, kb_second_2 = INT_MAX;
  auto kb_note_second = [&](int slot, int at) {
    kb_second_0 = slot == 0 ? at : kb_second_0;
    kb_second_1 = slot == 1 ? at : kb_second_1;
    kb_second_2 = slot == 2 ? at : kb_second_2;
  };
  auto kb_second_of = [&](int slot) { return slot == 0 ? kb_second_0 : slot == 1 ? kb_second_1 : kb_second_2; };
  auto issue = [&](int t, int slot) {
    if (Bits != 0 && t < end_tile && body_tile(t * kTile)) {
      typename S::Stage& stage = sm.ring[warp][slot];
      const BodyRows kv = body_tile_rows(t);
      // A tile's rows span less than 2^31 bytes (16 rows of kv_heads <= 1024 heads).
      const int code0 = head * kCodeBytes, row_bytes = static_cast<int>(s.kv_heads) * kCodeBytes;
#pragma unroll
      for (int i = 0; i < 2 * kChunks / 32; ++i) {
        constexpr int kPerPart = kChunks / 32;
        const int q = lane + 32 * (kPerPart > 0 ? i % kPerPart : 0), row = q / kRowChunks, chunk = q % kRowChunks;
        const std::uint8_t* codes = i < kPerPart ? kv.k.codes : kv.v.codes;
        std::uint8_t* dst = (i < kPerPart ? stage.k[row] : stage.v[row]) + chunk * 16;
        cp_async16(dst, codes + (code0 + row * row_bytes + chunk * 16), 16);
      }
      const bool odd = param_odd(param_row);
      const int at = param_row * static_cast<int>(s.kv_heads) + head - (odd ? 1 : 0);
      // Pointers selected, not a reference to kv.k or kv.v: that would put kv in local
      // memory, a store and a dependent load on every tile's issue path.
      const std::uint16_t* scales = param_part ? kv.v.scales : kv.k.scales;
      const std::uint16_t* mins = param_part ? kv.v.mins : kv.k.mins;
      if (KB && param_part == 0) {
        // K's parameters are per key block (below), not per token.
      } else if (!Paged && !odd && contiguous_index(t, param_row) + 1 >= body_params) {
        // The buffer's last value at an even index: a 4-byte copy, even one zero-filling
        // its second half, is an access past the buffer (compute-sanitizer flags it).
        stage.params[param_row][2 * param_part] = __ldcg(scales + at);
        if constexpr (Bits == 4) stage.params[param_row][2 * param_part + 1] = __ldcg(mins + at);
      } else {
        cp_async4(&stage.params[param_row][2 * param_part], scales + at);
        if constexpr (Bits == 4) cp_async4(&stage.params[param_row][2 * param_part + 1], mins + at);
      }
    } else if (Bits != 0 && t < end_tile) {
      typename S::Stage& stage = sm.ring[warp][slot];
      const int base = t * kTile;
      if constexpr (2 * kChunks / 32 > 4) {
        // INT8 at D = 128, eight copies a lane: rolled, a row (K's and V's chunk) a pass.
        // Unrolled, this branch was ~680 instructions in each of issue()'s three call
        // sites, which the cold splits (sink, window, a split's end) stall fetching; rolled,
        // the step's selective8 attention at 8B 2K is 8% faster. The same form with two
        // passes (INT4) made selective4's 7% slower, and so did other changes to this
        // loop: those keep the unrolled form, its SASS byte for byte (so the copy is
        // written twice: a shared lambda changed it; bench/notes/decode.md, session 31).
        constexpr int kRowsPerPass = 32 / kRowChunks;
        const int chunk = lane % kRowChunks;
#pragma unroll 1
        for (int row = lane / kRowChunks; row < kTile; row += kRowsPerPass) {
          const int j = base + row;
          const Where at = j < n ? where<Bits>(a, i0 + j) : Where{0, false};
#pragma unroll
          for (int part = 0; part < 2; ++part) {
            std::uint8_t* dst = (part == 0 ? stage.k[row] : stage.v[row]) + chunk * 16;
            if (j < n && at.body) {
              const BodyRow rows = body_row<Paged>(a, part != 0, at.pos);
              cp_async16(dst, rows.codes + static_cast<long long>(head) * kCodeBytes + chunk * 16, 16);
            } else {
              cp_async16(dst, a.paged.layer.pages ? a.paged.layer.pages : part == 0 ? a.layer.k.codes : a.layer.v.codes,
                         0);  // zeros: an FP16 token's or one past the split (a valid address, nothing read)
            }
          }
        }
      } else {
#pragma unroll
        for (int q = lane; q < 2 * kChunks; q += 32) {
          const int part = q / kChunks, row = (q % kChunks) / (kCodeBytes / 16), chunk = q % (kCodeBytes / 16);
          const int j = base + row;
          std::uint8_t* dst = (part == 0 ? stage.k[row] : stage.v[row]) + chunk * 16;
          const Where at = j < n ? where<Bits>(a, i0 + j) : Where{0, false};
          if (j < n && at.body) {
            const BodyRow rows = body_row<Paged>(a, part != 0, at.pos);
            cp_async16(dst, rows.codes + static_cast<long long>(head) * kCodeBytes + chunk * 16, 16);
          } else {
            cp_async16(dst, a.paged.layer.pages ? a.paged.layer.pages : part == 0 ? a.layer.k.codes : a.layer.v.codes,
                       0);  // zeros: an FP16 token's or one past the split (a valid address, nothing read)
          }
        }
      }
      // The tile's FP16 rows (the sink and window; KB: the open block's staged keys) are
      // loaded directly when it is taken, two tiles from now, and their latency ends a
      // split (ncu, session 39: selective's launches have a tail): into L2 now, a row and
      // part a lane (L2, not L1: the append may still be writing the newest row, and L2
      // is where writes land). Swap only: the other variant's D = 128 instances, at their
      // register bound, spill with it.
      if constexpr (Swap) {
        const int row = lane % kTile, part = lane / kTile, j = base + row;
        if (j < n) {
          const Where at = where<Bits>(a, i0 + j);
          const std::uint16_t* f16 = nullptr;
          if (!at.body) {
            f16 = f16_row<D, Paged>(a, part != 0, at.pos, end_slot);
          } else if (KB && part == 0 && at.pos >= kb_open) {
            f16 = a.layer.k.staged + (static_cast<long long>(head) * kb_block + (at.pos - kb_base) % kb_block) * D;
          }
          if (f16 != nullptr) {
#pragma unroll
            for (int line = 0; line < D * 2 / 128; ++line) prefetch_l2(f16 + 64 * line);
          }
        }
      }
      // The parameters of a tile with FP16 tokens or an end: loaded here (such tiles are
      // few) and stored in both halves of the pair, so either half reads them.
      const int j = base + param_row;
      std::uint32_t scale = 0x3c00u, min = 0;  // 1 and 0: an FP16 token's, or one past the split
      if (j < n) {
        const Where at = where<Bits>(a, i0 + j);
        if (at.body && (!KB || param_part != 0)) {  // KB: K's parameters are per key block
          const BodyRow rows = body_row<Paged>(a, param_part != 0, at.pos);
          scale = __ldcg(rows.scales + head);
          if constexpr (Bits == 4) min = __ldcg(rows.mins + head);
        }
      }
      stage.params[param_row][2 * param_part] = scale | scale << 16;
      stage.params[param_row][2 * param_part + 1] = min | min << 16;
    }
    if constexpr (KB) {
      // The scales (and mins) of the tile's key blocks: one or two vectors of D f16 each.
      const KbRange r = t < end_tile ? kb_range(t * kTile) : KbRange{0, 0, 0, 0};
      kb_note_second(slot, r.b1 > r.b0 ? kb_base + r.b1 * kb_block : INT_MAX);
      if (r.lo < r.hi) {
        constexpr int kVec = D / 8, kPerBlock = (Bits == 4 ? 2 : 1) * kVec;  // 16-byte copies
        const int copies = kPerBlock * (r.b1 > r.b0 ? 2 : 1);
#pragma unroll
        for (int k = 0; k < (2 * kPerBlock + 31) / 32; ++k) {  // at most two a lane
          const int q = lane + 32 * k;
          if (q >= copies) break;
          const int which = q / kPerBlock, vec = (q % kPerBlock) / kVec, chunk = q % kVec;
          const std::uint16_t* src;
          if constexpr (Paged) {  // in the page of the block's first position, [H][D] (core/kv_pages.h)
            const KvPageLayout& l = a.paged.layout;
            const std::uint8_t* page = page_of(a.paged, a.table, l.key_block_page(r.b0 + which));
            src = reinterpret_cast<const std::uint16_t*>(page + (vec ? l.mins_offset(false) : l.scales_offset(false))) +
                  head * D + chunk * 8;
          } else {
            const long long at = (static_cast<long long>(r.b0 + which) * s.kv_heads + head) * D + chunk * 8;
            src = (vec ? a.layer.k.mins : a.layer.k.scales) + at;
          }
          cp_async16(&kb_smem->params[warp][slot][which][vec][chunk], src, 16);
        }
      }
    }
    cp_async_commit();
  };
  // Under prefetch, a warp whose first tiles hold a body token this step's append wrote
  // (int8 / int4: the new one; selective: the one that left the window) issues them
  // after the wait. Quantized policies drop nothing: a position is its visible index.
  auto holds_appended = [&](int t) {
    if (!a.prefetch || t >= end_tile) return false;
    auto in_tile = [&](int pos) {
      return pos >= 0 && appended_now(a, pos) && where<Bits>(a, pos).body && pos >= i0 + t * kTile &&
             pos < i0 + (t + 1) * kTile;
    };
    return in_tile(a.end - 1) || in_tile(a.recent_begin - 1);
  };
  const bool early = Bits != 0 && !(holds_appended(first) || holds_appended(first + kStride));
  // One call site for both orders (the wait is a no-op the second time): each inlined
  // issue() is ~850 instructions of SASS, and the quantized step's attention at 2K stalls
  // on fetching its instructions (bench/notes/decode.md, session 30).
  if (a.prefetch && !early) pdl_wait();
  if constexpr (Bits != 0) {
    issue(first, 0);
    issue(first + kStride, 1);
  }
  if (a.prefetch) pdl_wait();

  // Q as A fragments (rows g and g + 8; quarter c of head_dim), and sum(q) per row for
  // INT4 keys' minimums. The fragments are the same for every warp: kept in shared memory
  // (a lane reads its own 16 bytes a k step), which leaves registers to the loads.
  {
    std::uint32_t rows[2][D / 8];
#pragma unroll
    for (int r = 0; r < (Swap ? 1 : 2); ++r) {  // Swap: G <= 8, row g only
      const int hq = g + 8 * r;
      if (hq < a.group) {
        // Past L1: q is the append's output (load_words).
        load_words<D / 2>(a.q + static_cast<long long>(h0 + hq) * D + c * (D / 4), true, rows[r]);
      } else {
#pragma unroll
        for (int w = 0; w < D / 8; ++w) rows[r][w] = 0;
      }
#pragma unroll
      for (int w = 0; w < D / 8; ++w) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&rows[r][w]));
        sum_q[r] += f.x + f.y;
      }
      interleave_quads<Bits, D / 8>(rows[r]);
      sum_q[r] += __shfl_xor_sync(0xffffffffu, sum_q[r], 1);
      sum_q[r] += __shfl_xor_sync(0xffffffffu, sum_q[r], 2);
    }
    if constexpr (Swap) {
      // B fragments (column g = head g): words 4i .. 4i + 3 of row g; sum(q) of heads 2c, 2c + 1.
      if (warp == 0) {
#pragma unroll
        for (int i = 0; i < kKSteps / 2; ++i) {
          sm.qf[i][lane] = make_uint4(rows[0][4 * i], rows[0][4 * i + 1], rows[0][4 * i + 2], rows[0][4 * i + 3]);
        }
      }
      const float own = sum_q[0];
      sum_q[0] = __shfl_sync(0xffffffffu, own, 8 * c);
      sum_q[1] = __shfl_sync(0xffffffffu, own, 8 * c + 4);
    } else if (warp == 0) {
#pragma unroll
      for (int k = 0; k < kKSteps; ++k) {
        sm.qf[k][lane] = make_uint4(rows[0][2 * k], rows[1][2 * k], rows[0][2 * k + 1], rows[1][2 * k + 1]);
      }
    }
  }
  __syncthreads();

  // KB: the open key block's FP16 K row of pos (the staging ring), quarter c in Q's order.
  auto load_staged_k = [&](std::uint32_t (&dst)[D / 8], int pos) {
    const int ring_slot = (pos - kb_base) % kb_block;
    const std::uint16_t* row = a.layer.k.staged + (static_cast<long long>(head) * kb_block + ring_slot) * D;
    load_words<D / 2>(row + c * (D / 4), past_l1(pos), dst);
    interleave_quads<Bits, D / 8>(dst);
  };
  // KB: the body rows' codes (x.k[r], made halves; decode[r]: a row in a complete key
  // block) into their f16 keys q s + m, one rounding a channel (HFMA2; INT8: q s), with
  // the parameters of key block which[r] of the stage's tile (0: its first, 1: its
  // second), quarter c in the codes' channel order. 16 bytes of parameters at a time
  // (registers: the D = 128 instances are at their bound), loaded once where both rows
  // share a block.
  auto kb_decode = [&](TileRegs<D>& x, int stage_slot, const bool (&decode)[2], const int (&which)[2]) {
    const auto* params = reinterpret_cast<const std::uint8_t*>(kb_smem->params[warp][stage_slot]);
    const bool shared_block = decode[0] && which[0] == which[1];
#pragma unroll
    for (int i = 0; i < D / 32; ++i) {  // words 4i .. 4i + 3 of each row
      std::uint32_t sw[2][4], mw[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (!decode[r]) continue;
        if (r == 1 && shared_block) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            sw[1][e] = sw[0][e];
            if constexpr (Bits == 4) mw[1][e] = mw[0][e];
          }
        } else {
          // Block which[r]'s scales (D f16), then its mins.
          const std::uint8_t* at = params + (which[r] ? sizeof(uint4[2][D / 8]) : 0) + c * (D / 2) + 16 * i;
          load_shared<16>(at, sw[r]);
          interleave_quads<Bits, 4>(sw[r]);
          if constexpr (Bits == 4) {
            load_shared<16>(at + D * 2, mw[r]);  // the mins after D f16 scales
            interleave_quads<Bits, 4>(mw[r]);
          }
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          std::uint32_t& k = x.k[r][4 * i + e];
          k = Bits == 4 ? bits_of(__hfma2(half2_of(k), half2_of(sw[r][e]), half2_of(mw[r][e])))
                        : bits_of(__hmul2(half2_of(k), half2_of(sw[r][e])));
        }
      }
    }
  };

  int slot = 0;
  for (int t = first; t < end_tile; t += kStride) {
    const int base = t * kTile;
    TileRegs<D> x;
    if constexpr (Bits == 0) {
      const TileRows tile = tile_rows(base);
      if (t == first) {
        x = head_tile;
        if (a.prefetch) {  // the new token's rows, after the wait
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int j = base + g + 8 * r;
            if (j < n && appended_now(a, where<Bits>(a, i0 + j).pos)) load_f16_k(x.k[r], j, tile);
          }
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int j = base + column_of(c, u);
            if (j < n && appended_now(a, where<Bits>(a, i0 + j).pos)) load_f16_v(x, u, j, tile);
          }
        } else {
#pragma unroll
          for (int r = 0; r < 2; ++r) load_f16_k(x.k[r], base + g + 8 * r, tile);
#pragma unroll
          for (int u = 0; u < 4; ++u) load_f16_v(x, u, base + column_of(c, u), tile);
        }
      } else {
#pragma unroll
        for (int r = 0; r < 2; ++r) load_f16_k(x.k[r], base + g + 8 * r, tile);
#pragma unroll
        for (int u = 0; u < 4; ++u) load_f16_v(x, u, base + column_of(c, u), tile);
      }
    } else {
      cp_async_wait<S::kStages - 2>();  // this lane's copies of tile t have landed ...
      __syncwarp();                     // ... and every lane's; the slot read last iteration is free
      issue(t + 2 * kStride, slot + 2 >= S::kStages ? slot + 2 - S::kStages : slot + 2);
      const typename S::Stage& stage = sm.ring[warp][slot];
      // A row's parameter of the pair (index p of K scale, K min, V scale, V min).
      auto param = [&](int row, int p) {
        const std::uint32_t pair = stage.params[row][p];
        return formats::half_to_float({static_cast<std::uint16_t>(param_odd(row) ? pair >> 16 : pair)});
      };
      // The tile's rows from the stage; `checked` (a tile with FP16 tokens or an end):
      // each row tested, FP16 tokens loaded directly. Body tiles compile without the tests.
      // KB: where the tile's second key block starts (its issue noted it; INT_MAX: one block).
      const int kb_second = KB ? kb_second_of(slot) : INT_MAX;
      auto take = [&](auto checked) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = g + 8 * r, j = base + row;
          if (checked && j < n && !where<Bits>(a, i0 + j).body) {
            load_f16_k(x.k[r], j, TileRows{});
          } else if (KB && checked && j < n && i0 + j >= kb_open) {
            load_staged_k(x.k[r], i0 + j);
          } else {
            load_shared<kCodeBytes / 4>(stage.k[row] + c * (kCodeBytes / 4), x.k[r]);
            codes_to_halves<Bits, D / 4>(x.k[r]);
          }
          if constexpr (Swap) {  // every row's (an FP16 token's and one past the split: 1, 0)
            if constexpr (!KB) {  // KB: K's parameters are the key block's (kb_decode)
              x.ks[r] = param(row, 0);
              x.km[r] = Bits == 4 ? param(row, 1) : 0.0f;
            }
            x.vs[r] = param(row, 2);
            x.vm[r] = Bits == 4 ? param(row, 3) : 0.0f;
          }
        }
        if constexpr (KB) {
          bool decode[2];
          int which[2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int pos = i0 + base + g + 8 * r;
            decode[r] = !checked || (pos >= a.sink_end && pos < kb_end);
            which[r] = pos >= kb_second ? 1 : 0;
          }
          kb_decode(x, slot, decode, which);
        }
        if constexpr (Swap && !decltype(checked)::value) {  // a body tile: fragments from the codes
          std::uint32_t raw[4][kCodeBytes / 32];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            load_shared<kCodeBytes / 8>(stage.v[column_of(c, u)] + g * (kCodeBytes / 8), raw[u]);
          }
          if constexpr (Bits == 4) {
            v_fragments_int4<D>(raw, x);
          } else {
            v_fragments_int8<D>(raw, x);
          }
        } else {
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int row = column_of(c, u), j = base + row;
            if (checked && j < n && !where<Bits>(a, i0 + j).body) {
              load_f16_v(x, u, j, TileRows{});
            } else {
              load_shared<kCodeBytes / 8>(stage.v[row] + g * (kCodeBytes / 8), x.v[u]);
              codes_to_halves<Bits, D / 8>(x.v[u]);
              if constexpr (!Swap) {
                x.ks[u] = param(row, 0);
                x.km[u] = Bits == 4 ? param(row, 1) : 0.0f;
                x.vs[u] = param(row, 2);
                x.vm[u] = Bits == 4 ? param(row, 3) : 0.0f;
              }
            }
          }
          if constexpr (Swap) v_fragments(x);  // a tile with FP16 tokens or an end
        }
      };
      if (body_tile(base) && (!KB || i0 + base + kTile <= kb_open)) {  // KB: no open key block row
        take(std::false_type{});
      } else {
        take(std::true_type{});
      }
      slot = slot + 1 == S::kStages ? 0 : slot + 1;
    }
    if constexpr (Swap) {
      if constexpr (Bits == 0) v_fragments(x);  // quantized: take() made them (cheaper from the codes)
      tile_math_swap<D, Bits, KB>(x, n - base, sm.qf, lane, a.q_scale, sum_q, st);
    } else {
      tile_math<D>(x, n - base, sm.qf, lane, a.q_scale, sum_q, st);
    }
  }
  if constexpr (Bits != 0) cp_async_wait<0>();
  pdl_trigger();

  // A row's sum and minimum term over its four lanes (Swap: a head's over the 8 lanes of
  // its column); the minimums join every channel.
#pragma unroll
  for (int row = 0; row < 2; ++row) {
#pragma unroll
    for (int o = Swap ? 4 : 1; o <= (Swap ? 16 : 2); o *= 2) {
      st.l[row] += __shfl_xor_sync(0xffffffffu, st.l[row], o);
      st.vmin[row] += __shfl_xor_sync(0xffffffffu, st.vmin[row], o);
    }
  }

  // The block's four warps into one (max, sum, output) per query head, in shared memory
  // (the rings' bytes: every warp is past its loop).
  __syncthreads();
  auto& after = sm.after;
  if constexpr (Swap) {
    // C row g | g + 8 of m tile i is channel g * kNTiles + channel_of_half(2i | 2i + 1); column
    // 2c + h is head 2c + h.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int hq = 2 * c + h;
      if (hq < a.group) {
#pragma unroll
        for (int i = 0; i < kOTiles; ++i) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            after.o[warp][hq][g * kNTiles + channel_of_half<Bits>(2 * i + e)] = st.o[i][2 * e + h] + st.vmin[h];
          }
        }
        if (g == 0) after.ml[warp][hq][0] = st.m[h], after.ml[warp][hq][1] = st.l[h];
      }
    }
  } else {
#pragma unroll
    for (int row = 0; row < 2; ++row) {
      const int hq = g + 8 * row;
      if (hq < a.group) {
        // C column 2c + e of n tile j is channel (2c + e) * kNTiles + channel_of_half(j).
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          after.o[warp][hq][(2 * c) * kNTiles + channel_of_half<Bits>(j)] = st.o[j][2 * row] + st.vmin[row];
          after.o[warp][hq][(2 * c + 1) * kNTiles + channel_of_half<Bits>(j)] = st.o[j][2 * row + 1] + st.vmin[row];
        }
        if (c == 0) after.ml[warp][hq][0] = st.m[row], after.ml[warp][hq][1] = st.l[row];
      }
    }
  }
  __syncthreads();
  for (int idx = static_cast<int>(threadIdx.x); idx < a.group * D; idx += kThreads) {
    const int hq = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, after.ml[w][hq][0]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = mx == -INFINITY ? 0.0f : exp2f(after.ml[w][hq][0] - mx);
      sum = fmaf(after.ml[w][hq][1], weight, sum);
      acc = fmaf(after.o[w][hq][d], weight, acc);
    }
    const int hg = h0 + hq;
    if (active == 1) {  // nothing to combine: out = acc / l
      const float v = acc / sum;
      if (a.out_f16) {
        static_cast<__half*>(a.out)[hg * D + d] = __float2half_rn(v);
      } else {
        static_cast<float*>(a.out)[hg * D + d] = v;
      }
      continue;
    }
    a.acc[(static_cast<long long>(hg) * a.splits + split) * D + d] = acc;
    if (d == 0) {
      float* ms = a.max_sum + (static_cast<long long>(hg) * a.splits + split) * 2;
      ms[0] = mx;
      ms[1] = sum;
    }
  }
  if (active == 1 || !a.counters) return;
  // Publish the partials, count this block; the last one of its KV head combines.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.y, 1u) == static_cast<unsigned>(active) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The heads' combine weights side by side when they fit (a warp a head at a time),
  // else one head after another.
  const int heads_at_once = max(1, min(a.group, kMaxSplit / active));
  if (D == 128 && Bits == 0 && a.group * D / 4 <= kThreads && heads_at_once == a.group) {
    // One pass, a quad a thread (a group of up to 4 heads): its first partials in flight
    // while the weights are made. FP16 caches at head_dim 128 only: the quantized
    // instances, at their register bound, lost their main loop's schedule to the early
    // registers (8B selective4 -1.5 to -2%, full +0.2 to +0.5%: bench/notes/decode.md,
    // session 42), and at head_dim 64 the instances under 128 registers grew past them.
    const int idx = static_cast<int>(threadIdx.x), hq = idx / (D / 4), ch = 4 * (idx % (D / 4));
    const bool mine = hq < a.group;
    const float4* partials = quad_partials(a.acc, a.splits, D, h0 + hq, ch);
    float4 v[kEarlySplits];
    if (mine) load_early_partials(partials, active, D, v);
    for (int w_hq = warp; w_hq < a.group; w_hq += kWarps) {
      const float t = combine_weights(a.max_sum, a.splits, active, h0 + w_hq, after.weights + w_hq * active, lane);
      if (lane == 0) after.totals[w_hq] = t;
    }
    __syncthreads();
    if (mine) {
      store_quad(a.out, a.out_f16, static_cast<long long>(h0 + hq) * D + ch,
                 combine_quad_early(partials, v, after.weights + hq * active, after.totals[hq], active, D));
    }
    if (threadIdx.x == 0) a.counters[blockIdx.y] = 0;  // ready for the next call
    return;
  }
  for (int first_head = 0; first_head < a.group; first_head += heads_at_once) {
    const int count = min(heads_at_once, a.group - first_head);
    for (int hq = warp; hq < count; hq += kWarps) {
      const float t =
          combine_weights(a.max_sum, a.splits, active, h0 + first_head + hq, after.weights + hq * active, lane);
      if (lane == 0) after.totals[hq] = t;
    }
    __syncthreads();
    for (int idx = static_cast<int>(threadIdx.x); idx < count * D / 4; idx += kThreads) {
      const int hq = idx / (D / 4), ch = 4 * (idx % (D / 4)), hg = h0 + first_head + hq;
      const float4 v =
          combine_quad(a.acc, after.weights + hq * active, after.totals[hq], a.splits, active, D, hg, ch);
      store_quad(a.out, a.out_f16, static_cast<long long>(hg) * D + ch, v);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) a.counters[blockIdx.y] = 0;  // ready for the next call
}

// Once per instantiation (and device, in practice one): the shared-memory opt-in, and the
// blocks a SM keeps resident (the split plan fills the device with that many).
template <int D, int Bits, bool Swap, bool Paged, bool KB = false>
int resident(void (*kernel)(SplitArgs)) {
  static const int blocks = [&] {
    constexpr int bytes = static_cast<int>(Smem<D, Bits, KB>::bytes());
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    int per_sm = 0;
    LOWBIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, bytes));
    return std::max(per_sm, 1);
  }();
  return blocks;
}

template <int D, int Bits, bool Paged>
int launch_kernel(const SplitArgs* a, dim3 grid, cudaStream_t stream, bool swap) {
  auto* kernel = swap ? kv_attention_mma_kernel<D, Bits, true, Paged> : kv_attention_mma_kernel<D, Bits, false, Paged>;
  const int blocks = swap ? resident<D, Bits, true, Paged>(kernel) : resident<D, Bits, false, Paged>(kernel);
  if (a) launch_pdl(kernel, grid, kThreads, Smem<D, Bits>::bytes(), stream, *a);
  return blocks;
}

// Key blocks: the swapped variant's KB instantiation (the only tensor-core kernel that
// reads them; uses_mma in attention.cu sends the others to simt, or refuses them paged).
template <int D, int Bits, bool Paged>
int launch_key_blocks(const SplitArgs* a, dim3 grid, cudaStream_t stream) {
  auto* kernel = kv_attention_mma_kernel<D, Bits, true, Paged, true>;
  const int blocks = resident<D, Bits, true, Paged, true>(kernel);
  if (a) launch_pdl(kernel, grid, kThreads, Smem<D, Bits, true>::bytes(), stream, *a);
  return blocks;
}

// Launches when `a` is set; returns the instantiation's resident blocks a SM.
template <int D, bool Paged>
int launch_d(const KvLayerShape& shape, const SplitArgs* a, dim3 grid, cudaStream_t stream, bool swap) {
  if (shape.key_block > 0) {  // check_key_blocks: a body
    return shape.body == KvBody::int8 ? launch_key_blocks<D, 8, Paged>(a, grid, stream)
                                      : launch_key_blocks<D, 4, Paged>(a, grid, stream);
  }
  switch (shape.body) {
    case KvBody::none: return launch_kernel<D, 0, Paged>(a, grid, stream, swap);
    case KvBody::int8: return launch_kernel<D, 8, Paged>(a, grid, stream, swap);
    case KvBody::int4: return launch_kernel<D, 4, Paged>(a, grid, stream, swap);
  }
  return 1;
}

int launch_or_query(const KvLayerShape& shape, const SplitArgs* a, dim3 grid, cudaStream_t stream, bool swap,
                    bool paged) {
  if (paged) {
    return shape.head_dim == 64 ? launch_d<64, true>(shape, a, grid, stream, swap)
                                : launch_d<128, true>(shape, a, grid, stream, swap);
  }
  return shape.head_dim == 64 ? launch_d<64, false>(shape, a, grid, stream, swap)
                              : launch_d<128, false>(shape, a, grid, stream, swap);
}

}  // namespace

void launch_split_mma(const SplitArgs& a, dim3 grid, cudaStream_t stream, bool swap, bool paged) {
  launch_or_query(a.shape, &a, grid, stream, swap && a.group <= kMmaSwapMaxGroup, paged);
}

int mma_blocks_per_sm(const KvLayerShape& shape, bool swap, bool paged) {
  return launch_or_query(shape, nullptr, dim3(), nullptr, swap, paged);
}

}  // namespace lowbit::cuda::kv
