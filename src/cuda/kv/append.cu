// Appending one token to a layer's decode cache (layout: core/kv_layout.h). One warp per
// (KV head, K or V): a lane holds head_dim / 32 consecutive values, the warp reduces the
// head's statistics with shuffles and encodes from registers with lowbit's formats
// arithmetic (formats::HalfParams: f16 scale / min, codes encoded with the rounded
// values), so the codes, scales and mins equal cpu::kv_quantize() on the CPU.
// RoPE rides on the append (and on rope_rows for prefill): the normal style's pairs are
// consecutive channels within a lane; NEOX's (i, i + rope_dims / 2) span lanes and meet
// in shared memory. The style is a template argument, so the normal kernels are the
// code they were before NEOX existed.
// With history_complete (the engine's decode graph) the work that does not need this
// step's k, v and q runs before griddepcontrol.wait, beside the kernels before it: the
// RoPE angles are loaded, and selective's token leaving the window is quantized (its
// FP16 slot was written steps ago; the body slot it fills is read by no one before the
// attention after this kernel).
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kv/kv_cuda.h"
#include "cuda/kv/paged_address.cuh"
#include "core/pdl.cuh"
#include "formats/code_scheme.h"
#include "formats/hadamard.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::kv {
namespace {

struct AppendArgs {
  KvLayerShape shape;
  KvLayerBuffers layer;
  long long pos;
  const std::int32_t* device_pos;  // when set, the position is *device_pos (CUDA graphs)
  const __half* k;
  const __half* v;
  AppendRope rope;  // rope.cos null: no rotation
  bool history_complete;
  std::uint16_t* ring_backup;  // selective: the overwritten ring slot's FP16 values, [2][kv_heads][D]
  // Paged form (paged.descs set; kernels compiled with Paged): blockIdx.z is the batch
  // row, its k, v and q in the rows (rows_ld halves apart; q at column 0).
  PagedArgs paged{};
  long long rows_ld = 0, k_col = 0, v_col = 0;
};

// The angles of `pos` for a lane's E / 2 pairs of consecutive channels (c0 = lane * E,
// E even, so pairs stay in the lane); pairs past rope_dims get none (rotated: no).
template <int E>
struct LaneAngles {
  float cos[E / 2], sin[E / 2];
  bool rotated[E / 2];
};

template <int E>
__device__ __forceinline__ LaneAngles<E> lane_angles(const AppendRope& r, long long pos, int c0) {
  const int half = static_cast<int>(r.rope_dims / 2);
  LaneAngles<E> t{};
#pragma unroll
  for (int p = 0; p < E / 2; ++p) {
    const int i = c0 / 2 + p;
    t.rotated[p] = r.cos != nullptr && 2 * i < r.rope_dims;
    if (t.rotated[p]) {
      t.cos[p] = r.cos[pos * half + i];
      t.sin[p] = r.sin[pos * half + i];
    }
  }
  return t;
}

// Rotates the lane's pairs, rounding to f16 as a stored value would be.
template <int E>
__device__ __forceinline__ void rotate(const LaneAngles<E>& t, float (&x)[E]) {
#pragma unroll
  for (int e = 0; e < E; e += 2) {
    if (!t.rotated[e / 2]) continue;
    const float c = t.cos[e / 2], s = t.sin[e / 2];
    const float a = x[e], b = x[e + 1];
    // Explicit roundings, no FMA contraction: the CPU's (a c - b s) to the bit.
    x[e] = __half2float(__float2half_rn(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s))));
    x[e + 1] = __half2float(__float2half_rn(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c))));
  }
}

// NEOX (rope.neox): channel c < half = rope_dims / 2 pairs with c + half, so a pair
// spans lanes. A lane's E channels c0 + e each take the angles of pair c mod half and a
// role: 0 not rotated (c >= rope_dims), 1 the pair's first, 2 its second.
template <int E>
struct NeoxAngles {
  float cos[E], sin[E];
  int role[E];
  int half;
};

template <int E>
__device__ __forceinline__ NeoxAngles<E> neox_angles(const AppendRope& r, long long pos, int c0) {
  const int half = static_cast<int>(r.rope_dims / 2);
  NeoxAngles<E> t{};
  t.half = half;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int c = c0 + e;
    t.role[e] = r.cos == nullptr || c >= 2 * half ? 0 : c < half ? 1 : 2;
    if (t.role[e] != 0) {
      const int i = c < half ? c : c - half;
      t.cos[e] = r.cos[pos * half + i];
      t.sin[e] = r.sin[pos * half + i];
    }
  }
  return t;
}

// The NEOX rotation of a warp's head (D = 32 E values, E consecutive ones a lane): the
// partners come through shared memory (the block is this one warp), the arithmetic and
// its f16 rounding are the normal pairs'. Every lane of the warp must call it.
template <int E>
__device__ __forceinline__ void rotate(const NeoxAngles<E>& t, float (&x)[E]) {
  __shared__ float head[32 * E];
  const int c0 = static_cast<int>(threadIdx.x) * E;
#pragma unroll
  for (int e = 0; e < E; ++e) head[c0 + e] = x[e];
  __syncwarp();
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (t.role[e] == 0) continue;
    const float c = t.cos[e], s = t.sin[e];
    // (a, b) = (x[c], x[c + half]): the first gets a c - b s, the second a s + b c.
    const float a = t.role[e] == 1 ? x[e] : head[c0 + e - t.half];
    const float b = t.role[e] == 1 ? head[c0 + e + t.half] : x[e];
    const float y = t.role[e] == 1 ? __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s))
                                   : __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    x[e] = __half2float(__float2half_rn(y));
  }
  __syncwarp();  // every partner read before the next head's values are written
}

// A lane's angles in the style of the kernel's instantiation.
template <int E, bool kNeox>
using Angles = std::conditional_t<kNeox, NeoxAngles<E>, LaneAngles<E>>;

template <int E, bool kNeox>
__device__ __forceinline__ Angles<E, kNeox> load_angles(const AppendRope& r, long long pos, int c0) {
  if constexpr (kNeox) {
    return neox_angles<E>(r, pos, c0);
  } else {
    return lane_angles<E>(r, pos, c0);
  }
}

// The normalized Walsh-Hadamard transform of a warp's head (D = 32 E values, E
// consecutive ones a lane), rounded to f16: formats::hadamard_rotate's butterflies in its
// order, stages below E within the lane, the others with the lane lane ^ (h / E). Every
// lane of the warp must call it.
template <int E>
__device__ __forceinline__ void hadamard_head(float (&x)[E]) {
  const int lane = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int h = 1; h < E; h *= 2) {
#pragma unroll
    for (int i = 0; i < E; ++i) {
      if (i & h) continue;
      const float lo = x[i], hi = x[i + h];
      x[i] = formats::hadamard_butterfly(lo, hi, false);
      x[i + h] = formats::hadamard_butterfly(hi, lo, true);
    }
  }
#pragma unroll
  for (int h = E; h < 32 * E; h *= 2) {
    const int mask = h / E;
    const bool upper = (lane & mask) != 0;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const float other = __shfl_xor_sync(0xffffffffu, x[i], mask);
      x[i] = formats::hadamard_butterfly(x[i], other, upper);
    }
  }
  const float scale = formats::hadamard_scale(32 * E);
#pragma unroll
  for (int i = 0; i < E; ++i) x[i] = __half2float(__float2half_rn(formats::hadamard_normalize(x[i], scale)));
}

// E f16 values (as __half or as their bits) to float.
template <int E, class H>
__device__ __forceinline__ void load_halves(const H* p, float (&x)[E]) {
#pragma unroll
  for (int i = 0; i < E; ++i) {
    if constexpr (std::is_same_v<H, __half>) {
      x[i] = __half2float(p[i]);
    } else {
      x[i] = __half2float(__ushort_as_half(p[i]));
    }
  }
}

// Rotates E f16 values in place (a lane's share of a query or key head), then applies
// the Hadamard transform to the head when asked (the whole warp calls this).
template <int E, class A>
__device__ __forceinline__ void rotate_in_place(const A& t, __half* p, bool hadamard) {
  float x[E];
  load_halves(p, x);
  rotate<E>(t, x);
  if (hadamard) hadamard_head<E>(x);
#pragma unroll
  for (int i = 0; i < E; ++i) p[i] = __float2half_rn(x[i]);
}

// Quantizes one head's D values (E per lane) into a body position's rows (`rows`: its
// KV head 0's).
template <int D, class Scheme>
__device__ void quantize_head(const BodyRow& rows, int head, const float (&x)[D / 32]) {
  constexpr int E = D / 32;
  const int lane = static_cast<int>(threadIdx.x);
  std::uint32_t abs_bits = 0;
  float lo = x[0], hi = x[0];
#pragma unroll
  for (int i = 0; i < E; ++i) {
    abs_bits = max(abs_bits, formats::abs_bits(x[i]));
    lo = fminf(lo, x[i]);
    hi = fmaxf(hi, x[i]);
  }
  abs_bits = __reduce_max_sync(0xffffffffu, abs_bits);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  const auto p = formats::HalfParams<Scheme>::from_range(formats::bits_to_float(abs_bits), lo, hi);
  std::uint8_t* codes = rows.codes + head * (Scheme::kBits == 8 ? D : D / 2);
  if constexpr (Scheme::kBits == 8) {
    std::uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < E; ++i) packed |= Scheme::to_storage(p.encode(x[i])) << (8 * i);
    if constexpr (E == 2) {
      reinterpret_cast<std::uint16_t*>(codes)[lane] = static_cast<std::uint16_t>(packed);
    } else {
      reinterpret_cast<std::uint32_t*>(codes)[lane] = packed;
    }
  } else {
    std::uint32_t packed = 0;  // column 2j in the low nibble of byte j
#pragma unroll
    for (int i = 0; i < E; ++i) packed |= Scheme::to_storage(p.encode(x[i])) << (4 * i);
    if constexpr (E == 2) {
      codes[lane] = static_cast<std::uint8_t>(packed);
    } else {
      reinterpret_cast<std::uint16_t*>(codes)[lane] = static_cast<std::uint16_t>(packed);
    }
  }
  if (lane == 0) {
    rows.scales[head] = p.scale.bits;
    if constexpr (Scheme::kBits == 4) rows.mins[head] = p.min.bits;  // INT4 asymmetric
  }
}

// Key blocks (core/kv_layout.h): block `block` of K's body, complete, quantized per
// channel over its B positions: a lane owns its E channels c0 .. c0 + E - 1 in every slot,
// load(i, x) giving slot i's (the staging ring's, which it wrote or its counterpart in an
// earlier launch did; or the chunk's and the snapshot's), takes their statistics over the
// B slots, then encodes each slot into its position's code row. The arithmetic of
// quantize_head per channel: cpu::kv_quantize over the transposed block.
// Where a key block's parameters ([H][D] f16 scales, INT4 also mins) and its positions'
// code rows (KV head 0's) go: the contiguous cache's (core/kv_layout.h) or, paged, the
// page of the block's first position and each position's page (core/kv_pages.h; null:
// not in the table, flagged, nothing written).
struct KeyBlockParams {
  std::uint16_t* scales;
  std::uint16_t* mins;
};
struct ContiguousKeyBlocks {
  const KvLayerShape* s;
  KvPart part;
  __device__ KeyBlockParams params(long long block) const {
    const long long at = block * s->kv_heads * s->head_dim;
    return KeyBlockParams{part.scales + at, part.mins ? part.mins + at : nullptr};
  }
  __device__ std::uint8_t* codes(long long pos) const { return contiguous_body_row(*s, part, pos).codes; }
};
struct PagedKeyBlocks {
  const PagedArgs* p;
  const std::int32_t* table;
  __device__ KeyBlockParams params(long long block) const {
    std::uint8_t* page = page_or_null(*p, table, p->layout.key_block_page(block));
    if (!page) return KeyBlockParams{nullptr, nullptr};
    return KeyBlockParams{reinterpret_cast<std::uint16_t*>(page + p->layout.scales_offset(false)),
                          reinterpret_cast<std::uint16_t*>(page + p->layout.mins_offset(false))};
  }
  __device__ std::uint8_t* codes(long long pos) const {
    std::uint8_t* page = page_or_null(*p, table, pos);
    return page ? body_row_in(p->layout, page, false, pos).codes : nullptr;
  }
};

// kWarps warps share a block (threadIdx.y the warp): warp w takes slots w, w + kWarps, ..,
// and the warps' statistics meet in shared memory: maxima and minima, exact in any order.
// lo and hi start at NaN, which fminf / fmaxf drop, so a warp without slots adds nothing.
template <int D, int kWarps>
struct KeyBlockStats {
  std::uint32_t abs_bits[kWarps][D];
  float lo[kWarps][D], hi[kWarps][D];
};

template <int D, class Scheme, int kWarps, class Load, class Dest>
__device__ void quantize_key_block(const KvLayerShape& s, const Dest& dest, int head, long long block,
                                   const Load& load) {
  constexpr int E = D / 32;
  const int lane = static_cast<int>(threadIdx.x), warp = kWarps > 1 ? static_cast<int>(threadIdx.y) : 0;
  const int c0 = lane * E;
  const int b = static_cast<int>(s.key_block);
  std::uint32_t abs_bits[E];
  float lo[E], hi[E];
#pragma unroll
  for (int e = 0; e < E; ++e) abs_bits[e] = 0, lo[e] = __int_as_float(0x7fffffff), hi[e] = lo[e];
  for (int i = warp; i < b; i += kWarps) {
    float x[E];
    load(i, x);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      abs_bits[e] = max(abs_bits[e], formats::abs_bits(x[e]));
      lo[e] = fminf(lo[e], x[e]);
      hi[e] = fmaxf(hi[e], x[e]);
    }
  }
  if constexpr (kWarps > 1) {
    __shared__ KeyBlockStats<D, kWarps> stats;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      stats.abs_bits[warp][c0 + e] = abs_bits[e], stats.lo[warp][c0 + e] = lo[e], stats.hi[warp][c0 + e] = hi[e];
    }
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        abs_bits[e] = max(abs_bits[e], stats.abs_bits[w][c0 + e]);
        lo[e] = fminf(lo[e], stats.lo[w][c0 + e]);
        hi[e] = fmaxf(hi[e], stats.hi[w][c0 + e]);
      }
    }
  }
  formats::HalfParams<Scheme> p[E];
  const KeyBlockParams params = dest.params(block);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    p[e] = formats::HalfParams<Scheme>::from_range(formats::bits_to_float(abs_bits[e]), lo[e], hi[e]);
    if (warp != 0) continue;
    if (params.scales) params.scales[head * D + c0 + e] = p[e].scale.bits;
    if constexpr (Scheme::kBits == 4) {
      if (params.mins) params.mins[head * D + c0 + e] = p[e].min.bits;
    }
  }
  for (int i = warp; i < b; i += kWarps) {
    float x[E];
    load(i, x);
    const long long pos = s.body_base + block * b + i;
    std::uint8_t* row = dest.codes(pos);
    if (!row) continue;
    std::uint8_t* codes = row + head * (Scheme::kBits == 8 ? D : D / 2);
    std::uint32_t packed = 0;  // as quantize_head packs a lane's E codes
#pragma unroll
    for (int e = 0; e < E; ++e) packed |= Scheme::to_storage(p[e].encode(x[e])) << (Scheme::kBits * e);
    if constexpr (Scheme::kBits == 8 && E == 2) {
      reinterpret_cast<std::uint16_t*>(codes)[lane] = static_cast<std::uint16_t>(packed);
    } else if constexpr (Scheme::kBits == 8) {
      reinterpret_cast<std::uint32_t*>(codes)[lane] = packed;
    } else if constexpr (E == 2) {
      codes[lane] = static_cast<std::uint8_t>(packed);
    } else {
      reinterpret_cast<std::uint16_t*>(codes)[lane] = static_cast<std::uint16_t>(packed);
    }
  }
}

// Key blocks: a lane's E FP16 values of K at body position pos into the staging ring;
// the warp quantizes the block when pos completes it.
template <int D, class Scheme, class Dest>
__device__ void stage_key(const KvLayerShape& s, const KvPart& part, const Dest& dest, int head, long long pos,
                          const float (&x)[D / 32]) {
  constexpr int E = D / 32;
  const long long slot = s.staged_slot(pos);
  std::uint16_t* dst = part.staged + (head * s.key_block + slot) * D + static_cast<int>(threadIdx.x) * E;
#pragma unroll
  for (int e = 0; e < E; ++e) dst[e] = __half_as_ushort(__float2half_rn(x[e]));  // exact: f16 values
  if (slot == s.key_block - 1) {
    const std::uint16_t* staged = part.staged + head * s.key_block * D + static_cast<int>(threadIdx.x) * E;
    auto load = [&](int i, float (&x)[E]) { load_halves(staged + static_cast<long long>(i) * D, x); };
    quantize_key_block<D, Scheme, 1>(s, dest, head, (pos - s.body_base) / s.key_block, load);
  }
}

// Where the append of position pos writes (Paged: through the row's table; a page the
// table does not hold is flagged and yields null: nothing is written).
template <bool Paged>
__device__ __forceinline__ std::uint8_t* write_page(const AppendArgs& a, const std::int32_t* table, long long pos) {
  if constexpr (Paged) {
    return page_or_null(a.paged, table, pos);
  } else {
    return nullptr;
  }
}

template <int D, class Scheme, bool kNeox, bool Paged>
__global__ void __launch_bounds__(32) kv_append_kernel(AppendArgs args) {
  constexpr int E = D / 32;
  pdl_trigger();
  if (!args.history_complete) pdl_wait();
  AppendArgs a = args;
  const KvLayerShape& s = a.shape;
  long long pos = a.device_pos ? static_cast<long long>(*a.device_pos) : a.pos;
  const std::int32_t* table = nullptr;
  if constexpr (Paged) {
    PagedRow row;
    const long long b = blockIdx.z;
    if (!paged_row(a.paged, static_cast<int>(b), row)) return;
    pos = row.pos;
    table = row.table;
    if (row.fixed) enter_fixed_area(a.paged.layout, row.fixed, a.layer);
    const __half* base = a.k + b * a.rows_ld;  // a.k: the rows' base
    a.k = base + a.k_col;
    a.v = base + a.v_col;
    a.rope.q = const_cast<__half*>(base);
  }
  const int head = static_cast<int>(blockIdx.x);
  const int c0 = static_cast<int>(threadIdx.x) * E;
  const bool is_v = blockIdx.y == 1;
  const Angles<E, kNeox> angles = is_v ? Angles<E, kNeox>{} : load_angles<E, kNeox>(a.rope, pos, c0);  // V: not rotated
  const KvPart part = is_v ? a.layer.v : a.layer.k;  // by value: a reference picked at run time forces local memory
  // The FP16 slot of pos (window, selective, full; not int8 / int4, whose sink and
  // window are 0); paged full: in its page (null: not held).
  auto f16_slot = [&]() -> std::uint16_t* {
    if (Paged && s.window == 0) {
      std::uint8_t* page = write_page<Paged>(a, table, pos);
      return page ? f16_row_in(a.paged.layout, page, is_v, head, pos) + c0 : nullptr;
    }
    return part.f16 + (head * s.f16_slots() + s.slot(pos)) * D + c0;
  };
  // Where a completed key block goes.
  auto key_blocks = [&] {
    if constexpr (Paged) {
      return PagedKeyBlocks{&a.paged, table};
    } else {
      return ContiguousKeyBlocks{&s, part};
    }
  };
  // The body rows of position p (null codes: not held).
  auto body_rows = [&](long long p) -> BodyRow {
    if constexpr (Paged) {
      std::uint8_t* page = write_page<Paged>(a, table, p);
      return page ? body_row_in(a.paged.layout, page, is_v, p) : BodyRow{};
    } else {
      return contiguous_body_row(s, part, p);
    }
  };
  if constexpr (Scheme::kBits != 0) {
    if (blockIdx.y < 2 && s.window > 0 && pos >= s.sink + s.window) {
      // pos - window leaves the window; its ring slot is pos's. Quantize its FP16 value
      // before the new token overwrites it (the same lane reads and writes).
      const std::uint16_t* slot = f16_slot();
      float old[E];
      load_halves(slot, old);
      if (!is_v && s.key_block > 0) {  // key blocks: staged (the block quantized when complete)
        stage_key<D, Scheme>(s, part, key_blocks(), head, pos - s.window, old);
      } else {
        const BodyRow rows = body_rows(pos - s.window);
        if (rows.codes) quantize_head<D, Scheme>(rows, head, old);
      }
      if (a.ring_backup) {  // so that this append can be taken back (kv_restore_ring_slot)
        std::uint16_t* b = a.ring_backup + ((is_v ? s.kv_heads : 0) + head) * D + c0;
#pragma unroll
        for (int i = 0; i < E; ++i) b[i] = slot[i];
      }
    }
  }
  if (a.history_complete) pdl_wait();
  if (blockIdx.y == 2) {  // the query heads of this KV head's group, rotated in place
    const int group = static_cast<int>(a.rope.n_heads / s.kv_heads);
    for (int h = head * group; h < (head + 1) * group; ++h) {
      rotate_in_place<E>(angles, static_cast<__half*>(a.rope.q) + h * D + c0, a.rope.hadamard);
    }
    return;
  }
  float x[E];
  load_halves((is_v ? a.v : a.k) + head * D + c0, x);
  if (!is_v) rotate<E>(angles, x);
  if (!is_v && a.rope.hadamard) hadamard_head<E>(x);  // the warp's branch is uniform (blockIdx.y)

  if constexpr (Scheme::kBits != 0) {
    if (s.window == 0) {  // int8 / int4: every token quantized on arrival (key blocks: staged)
      if (!is_v && s.key_block > 0) {
        stage_key<D, Scheme>(s, part, key_blocks(), head, pos, x);
        return;
      }
      const BodyRow rows = body_rows(pos);
      if (rows.codes) quantize_head<D, Scheme>(rows, head, x);
      return;
    }
  }
  std::uint16_t* slot = f16_slot();
  if (!slot) return;
#pragma unroll
  for (int i = 0; i < E; ++i) slot[i] = __half_as_ushort(__float2half_rn(x[i]));  // exact: x holds f16 values
}

// Prefill, RoPE: grid (kv_heads, 2, rows); y = 0 rotates the row's K head, y = 1 the
// query heads of its group.
template <int D, bool kNeox>
__global__ void __launch_bounds__(32) rope_rows_kernel(ChunkRows c, AppendRope rope, int kv_heads) {
  constexpr int E = D / 32;
  pdl_trigger();
  pdl_wait();
  const int row = static_cast<int>(blockIdx.z), head = static_cast<int>(blockIdx.x);
  const int c0 = static_cast<int>(threadIdx.x) * E;
  const Angles<E, kNeox> angles = load_angles<E, kNeox>(rope, c.pos0 + row, c0);
  __half* base = static_cast<__half*>(c.base) + row * c.ld;
  const int group = static_cast<int>(rope.n_heads / kv_heads);
  const int first = blockIdx.y == 0 ? 0 : head * group, last = blockIdx.y == 0 ? 1 : (head + 1) * group;
  for (int h = first; h < last; ++h) {
    rotate_in_place<E>(angles, blockIdx.y == 0 ? base + c.k_col + head * D + c0 : base + h * D + c0, rope.hadamard);
  }
}

struct AppendRowsArgs {
  KvLayerShape shape;
  KvLayerBuffers layer;  // paged: the sequence's fixed area (window, selective)
  ChunkRows chunk;
  const std::uint16_t* snapshot;  // [2][kv_heads][window][D], then key blocks' staging ring [kv_heads][B][D]
  // Key blocks: K's body positions from here on are the staging ring's last writers in the
  // chunk (the B before the body's end: the block left open and, as the rows' appends in
  // order leave them, the last ones of the block before it); the blocks the chunk
  // completes are quantized by kv_quantize_key_blocks_kernel.
  long long key_staged_from = 0;
  // Paged form (kernels compiled with Paged): the pool and the sequence's page table.
  PagedArgs paged{};
  const std::int32_t* table = nullptr;
};

// Prefill, append: grid (kv_heads, 2 (K, V), rows), one warp each; order-free, so the
// rows run in parallel: a ring slot is written by its last writer in the chunk only, and
// a token leaving the window is read from the chunk or the snapshot, never from the ring.
template <int D, class Scheme, bool Paged>
__global__ void __launch_bounds__(32) kv_append_rows_kernel(AppendRowsArgs a) {
  constexpr int E = D / 32;
  pdl_trigger();
  pdl_wait();
  const KvLayerShape& s = a.shape;
  const ChunkRows& c = a.chunk;
  const int row = static_cast<int>(blockIdx.z), head = static_cast<int>(blockIdx.x);
  const bool is_v = blockIdx.y == 1;
  const int c0 = static_cast<int>(threadIdx.x) * E;
  const long long t = c.pos0 + row;
  const KvPart part = is_v ? a.layer.v : a.layer.k;  // by value: a reference picked at run time forces local memory
  auto chunk_row = [&](long long r) {
    return static_cast<const __half*>(c.base) + r * c.ld + (is_v ? c.v_col : c.k_col) + head * D + c0;
  };
  // The body rows of position p (paged: in its page; null codes when the table does not
  // hold it, flagged: nothing is written).
  auto body_rows = [&](long long p) -> BodyRow {
    if constexpr (Paged) {
      std::uint8_t* page = page_or_null(a.paged, a.table, p);
      return page ? body_row_in(a.paged.layout, page, is_v, p) : BodyRow{};
    } else {
      return contiguous_body_row(s, part, p);
    }
  };
  // Body token u's value v: quantized; with key blocks K's staged where u is its slot's
  // last writer (its block's quantization reads the chunk and the snapshot).
  auto to_body = [&](long long u, const float (&v)[E]) {
    if constexpr (Scheme::kBits != 0) {
      if (!is_v && s.key_block > 0) {
        if (u >= a.key_staged_from) {
          std::uint16_t* dst = part.staged + (head * s.key_block + s.staged_slot(u)) * D + c0;
#pragma unroll
          for (int e = 0; e < E; ++e) dst[e] = __half_as_ushort(__float2half_rn(v[e]));  // exact: f16 values
        }
        return;
      }
      const BodyRow rows = body_rows(u);
      if (rows.codes) quantize_head<D, Scheme>(rows, head, v);
    }
  };
  float x[E];
  load_halves(chunk_row(row), x);
  if constexpr (Scheme::kBits != 0) {
    if (s.window == 0) {  // int8 / int4: every token quantized on arrival
      to_body(t, x);
      return;
    }
    if (t >= s.sink + s.window) {  // t - window leaves the window
      const long long u = t - s.window;
      float old[E];
      if (u >= c.pos0) {
        load_halves(chunk_row(u - c.pos0), old);
      } else {
        load_halves(a.snapshot + ((is_v ? s.kv_heads : 0) + head) * s.window * D + (u % s.window) * D + c0, old);
      }
      to_body(u, old);
    }
  }
  const bool in_ring = s.window > 0 && t >= s.sink;
  if (in_ring && t < c.pos0 + c.rows - s.window) return;  // a later row of the chunk takes this slot
  std::uint16_t* slot;
  if (Paged && s.window == 0) {  // full: the FP16 row in its page
    std::uint8_t* page = page_or_null(a.paged, a.table, t);
    if (!page) return;
    slot = f16_row_in(a.paged.layout, page, is_v, head, t) + c0;
  } else {
    slot = part.f16 + (head * s.f16_slots() + s.slot(t)) * D + c0;
  }
#pragma unroll
  for (int i = 0; i < E; ++i) slot[i] = __half_as_ushort(__float2half_rn(x[i]));
}

// Key blocks, prefill: grid (kv_heads, blocks), kQuantizeWarps warps each (one warp left
// the grid's few blocks latency-bound on its serial slot loop): K's blocks that the chunk
// completes, first_block on, quantized from their FP16 values: a position in the chunk
// from its row, one before it from the snapshot (the ring's, or the staging ring's where
// it had left the window).
constexpr int kQuantizeWarps = 8;

template <int D, class Scheme, bool Paged>
__global__ void __launch_bounds__(32 * kQuantizeWarps)
    kv_quantize_key_blocks_kernel(AppendRowsArgs a, long long first_block) {
  constexpr int E = D / 32;
  pdl_trigger();
  pdl_wait();
  const KvLayerShape& s = a.shape;
  const ChunkRows& c = a.chunk;
  const int head = static_cast<int>(blockIdx.x), c0 = static_cast<int>(threadIdx.x) * E;
  const long long block = first_block + blockIdx.y;
  const std::uint16_t* staged = a.snapshot + 2 * s.kv_heads * s.window * D;
  auto dest = [&] {
    if constexpr (Paged) {
      return PagedKeyBlocks{&a.paged, a.table};
    } else {
      return ContiguousKeyBlocks{&s, a.layer.k};
    }
  };
  quantize_key_block<D, Scheme, kQuantizeWarps>(s, dest(), head, block, [&](int i, float (&x)[E]) {
    const long long p = s.body_base + block * s.key_block + i;
    if (p >= c.pos0) {
      load_halves(static_cast<const __half*>(c.base) + (p - c.pos0) * c.ld + c.k_col + head * D + c0, x);
    } else if (p > c.pos0 - 1 - s.window) {  // in the ring before the chunk
      load_halves(a.snapshot + (head * s.window + p % s.window) * D + c0, x);
    } else {
      load_halves(staged + (head * s.key_block + s.staged_slot(p)) * D + c0, x);
    }
  });
}

// A scheme with no body: FP16 only.
struct NoBody {
  static constexpr int kBits = 0;
};

template <int D, bool kNeox, bool Paged>
void launch(const AppendArgs& a, dim3 grid, cudaStream_t stream) {
  switch (a.shape.body) {
    case KvBody::none: launch_pdl(kv_append_kernel<D, NoBody, kNeox, Paged>, grid, 32, 0, stream, a); break;
    case KvBody::int8:
      launch_pdl(kv_append_kernel<D, formats::Int8Symmetric, kNeox, Paged>, grid, 32, 0, stream, a);
      break;
    case KvBody::int4:
      launch_pdl(kv_append_kernel<D, formats::Int4Asymmetric, kNeox, Paged>, grid, 32, 0, stream, a);
      break;
  }
}

// grid (kv_heads, K / V / the query heads with rope, batch rows of the paged form).
template <int D>
void launch(const AppendArgs& a, cudaStream_t stream, unsigned rows) {
  const dim3 grid(static_cast<unsigned>(a.shape.kv_heads), a.rope.cos ? 3 : 2, rows);
  const bool neox = a.rope.cos && a.rope.neox;
  if (a.paged.descs) {
    neox ? launch<D, true, true>(a, grid, stream) : launch<D, false, true>(a, grid, stream);
  } else {
    neox ? launch<D, true, false>(a, grid, stream) : launch<D, false, false>(a, grid, stream);
  }
}

void run(const AppendArgs& a, cudaStream_t stream, unsigned rows = 1) {
  LOWBIT_CHECK(a.shape.head_dim == 64 || a.shape.head_dim == 128, "kv_append: head_dim = ", a.shape.head_dim,
               ", expected 64 or 128");
  if (a.paged.descs != nullptr) {
    check_paged_key_blocks(a.paged.layout, "paged_kv_append");
  } else {
    check_key_blocks(a.shape, a.layer, "kv_append");
  }
  LOWBIT_CHECK(!a.rope.hadamard || a.rope.cos,
               "kv_append: the Hadamard rotation rides on the fused rope (set its tables and q)");
  if (a.rope.cos) {
    LOWBIT_CHECK(a.rope.sin && a.rope.q && a.rope.rope_dims > 0 && a.rope.rope_dims % 2 == 0 &&
                     a.rope.rope_dims <= a.shape.head_dim && a.rope.n_heads > 0 &&
                     a.rope.n_heads % a.shape.kv_heads == 0,
                 "kv_append: rope with rope_dims ", a.rope.rope_dims, " (even, <= head_dim ", a.shape.head_dim,
                 "), ", a.rope.n_heads, " query heads (a multiple of ", a.shape.kv_heads, "), tables and q set");
  }
  if (a.shape.head_dim == 64) {
    launch<64>(a, stream, rows);
  } else {
    launch<128>(a, stream, rows);
  }
}

// Key blocks, prefill: grid (kv_heads, 2 (K, V)), one warp each, the chunk's rows in
// order (RoPE applied already): what `rows` kv_append launches write, in one. A lane
// reads and writes only its own channels (the ring slot of the token leaving the window
// before the new token overwrites it, the staging ring), so program order is the only
// order needed; quantize_head's shuffles take the whole warp (uniform branches).
template <int D, class Scheme>
__global__ void __launch_bounds__(32) kv_append_rows_in_order_kernel(KvLayerShape s, KvLayerBuffers layer,
                                                                     ChunkRows c) {
  constexpr int E = D / 32;
  pdl_trigger();
  pdl_wait();
  const int head = static_cast<int>(blockIdx.x);
  const bool is_v = blockIdx.y == 1;
  const int c0 = static_cast<int>(threadIdx.x) * E;
  const KvPart part = is_v ? layer.v : layer.k;  // by value: a reference picked at run time forces local memory
  for (long long r = 0; r < c.rows; ++r) {
    const long long pos = c.pos0 + r;
    float x[E];
    load_halves(static_cast<const __half*>(c.base) + r * c.ld + (is_v ? c.v_col : c.k_col) + head * D + c0, x);
    if (s.window == 0) {  // int8 / int4: K staged, V quantized on arrival
      if (is_v) {
        quantize_head<D, Scheme>(contiguous_body_row(s, part, pos), head, x);
      } else {
        stage_key<D, Scheme>(s, part, ContiguousKeyBlocks{&s, part}, head, pos, x);
      }
      continue;
    }
    std::uint16_t* slot = part.f16 + (head * s.f16_slots() + s.slot(pos)) * D + c0;
    if (pos >= s.sink + s.window) {  // selective: pos - window leaves the window (its slot is pos's)
      float old[E];
      load_halves(slot, old);
      if (is_v) {
        quantize_head<D, Scheme>(contiguous_body_row(s, part, pos - s.window), head, old);
      } else {
        stage_key<D, Scheme>(s, part, ContiguousKeyBlocks{&s, part}, head, pos - s.window, old);
      }
    }
#pragma unroll
    for (int i = 0; i < E; ++i) slot[i] = __half_as_ushort(__float2half_rn(x[i]));  // exact: f16 values
  }
}

}  // namespace

void kv_append_rows_in_order(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                             cuda_stream_t stream) {
  check_chunk_rows(shape, chunk, "kv_append_rows_in_order");
  check_key_blocks(shape, layer, "kv_append_rows_in_order");
  LOWBIT_CHECK(shape.key_blocks(), "kv_append_rows_in_order: a cache with key blocks (else kv_append_rows)");
  const dim3 grid(static_cast<unsigned>(shape.kv_heads), 2);
  auto go = [&](auto kernel) { launch_pdl(kernel, grid, 32, 0, stream, shape, layer, chunk); };
  const bool int8 = shape.body == KvBody::int8;
  if (shape.head_dim == 64) {
    int8 ? go(kv_append_rows_in_order_kernel<64, formats::Int8Symmetric>)
         : go(kv_append_rows_in_order_kernel<64, formats::Int4Asymmetric>);
  } else {
    int8 ? go(kv_append_rows_in_order_kernel<128, formats::Int8Symmetric>)
         : go(kv_append_rows_in_order_kernel<128, formats::Int4Asymmetric>);
  }
}

void kv_append(const KvLayerShape& shape, const KvLayerBuffers& layer, std::int64_t pos, const void* k, const void* v,
               cuda_stream_t stream, const AppendRope* rope) {
  const std::int64_t capacity = kv_positions_held(shape);
  LOWBIT_CHECK(pos >= 0 && pos < capacity, "kv_append: position ", pos, " outside the cache (", capacity,
               " tokens)");
  run(AppendArgs{shape, layer, pos, nullptr, static_cast<const __half*>(k), static_cast<const __half*>(v),
                 rope ? *rope : AppendRope{}, false, nullptr},
      stream);
}

void rope_rows(const KvLayerShape& shape, const ChunkRows& chunk, const AppendRope& rope, cuda_stream_t stream) {
  check_chunk_rows(shape, chunk, "rope_rows");
  LOWBIT_CHECK(rope.cos && rope.sin && rope.rope_dims > 0 && rope.rope_dims % 2 == 0 &&
                   rope.rope_dims <= shape.head_dim && rope.n_heads > 0 && rope.n_heads % shape.kv_heads == 0 &&
                   chunk.k_col >= rope.n_heads * shape.head_dim,
               "rope_rows: rope_dims ", rope.rope_dims, " (even, <= head_dim ", shape.head_dim, "), ", rope.n_heads,
               " query heads (a multiple of ", shape.kv_heads, ", before k_col ", chunk.k_col, "), tables set");
  const dim3 grid(static_cast<unsigned>(shape.kv_heads), 2, static_cast<unsigned>(chunk.rows));
  const int kv_heads = static_cast<int>(shape.kv_heads);
  auto go = [&](auto kernel) { launch_pdl(kernel, grid, 32, 0, stream, chunk, rope, kv_heads); };
  if (shape.head_dim == 64) {
    go(rope.neox ? rope_rows_kernel<64, true> : rope_rows_kernel<64, false>);
  } else {
    go(rope.neox ? rope_rows_kernel<128, true> : rope_rows_kernel<128, false>);
  }
}

std::size_t ring_snapshot_bytes(const KvLayerShape& shape) {
  return static_cast<std::size_t>(2 * shape.kv_heads * shape.window * shape.head_dim * 2) + shape.staged_bytes();
}

void kv_snapshot_ring(const KvLayerShape& shape, const KvLayerBuffers& layer, void* snapshot, cuda_stream_t stream) {
  if (ring_snapshot_bytes(shape) == 0) return;
  LOWBIT_CHECK(snapshot != nullptr, "kv_append_rows: the window's ring and the staging ring need a snapshot buffer");
  const std::int64_t d = shape.head_dim;
  auto* dst = static_cast<std::uint8_t*>(snapshot);
  if (shape.window > 0) {
    const std::size_t width = static_cast<std::size_t>(shape.window * d * 2);
    const std::size_t pitch = static_cast<std::size_t>(shape.f16_slots() * d * 2);
    const std::size_t rows = static_cast<std::size_t>(shape.kv_heads);
    for (const KvPart* part : {&layer.k, &layer.v}) {
      const auto* ring = reinterpret_cast<const std::uint8_t*>(part->f16 + shape.sink * d);
      LOWBIT_CUDA_CHECK(cudaMemcpy2DAsync(dst, width, ring, pitch, width, rows, cudaMemcpyDeviceToDevice, stream));
      dst += width * rows;
    }
  }
  if (shape.key_blocks()) {
    LOWBIT_CHECK(layer.k.staged != nullptr, "kv_snapshot_ring: key blocks without a staging ring");
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(dst, layer.k.staged, shape.staged_bytes(), cudaMemcpyDeviceToDevice, stream));
  }
}

namespace {

template <int D, bool Paged>
void launch_append_rows(const AppendRowsArgs& a, dim3 grid, cudaStream_t stream) {
  switch (a.shape.body) {
    case KvBody::none: launch_pdl(kv_append_rows_kernel<D, NoBody, Paged>, grid, 32, 0, stream, a); break;
    case KvBody::int8: launch_pdl(kv_append_rows_kernel<D, formats::Int8Symmetric, Paged>, grid, 32, 0, stream, a); break;
    case KvBody::int4: launch_pdl(kv_append_rows_kernel<D, formats::Int4Asymmetric, Paged>, grid, 32, 0, stream, a); break;
  }
}

// Key blocks: the blocks the chunk completes, [first, end), quantized (contiguous cache).
template <int D, bool Paged>
void quantize_key_blocks(const AppendRowsArgs& a, long long first, long long end, cudaStream_t stream) {
  if (end <= first) return;
  const dim3 grid(static_cast<unsigned>(a.shape.kv_heads), static_cast<unsigned>(end - first));
  const dim3 threads(32, kQuantizeWarps);
  auto kernel = a.shape.body == KvBody::int8 ? kv_quantize_key_blocks_kernel<D, formats::Int8Symmetric, Paged>
                                             : kv_quantize_key_blocks_kernel<D, formats::Int4Asymmetric, Paged>;
  launch_pdl(kernel, grid, threads, 0, stream, a, first);
}

// kv_append_rows on a contiguous cache, or (a.table set) on a sequence's pages.
void append_rows(AppendRowsArgs a, void* snapshot, cudaStream_t stream) {
  const KvLayerShape& shape = a.shape;
  const KvLayerBuffers& layer = a.layer;
  const ChunkRows& chunk = a.chunk;
  const std::int64_t d = shape.head_dim;
  kv_snapshot_ring(shape, layer, snapshot, stream);
  long long first_block = 0, end_block = 0;
  if (shape.key_blocks()) {
    // K's body ends at the body's end before the chunk and after it (int8 / int4: window 0).
    auto body_end = [&](std::int64_t length) { return std::max(shape.body_base, length - shape.window); };
    const std::int64_t end = body_end(chunk.pos0 + chunk.rows);
    a.key_staged_from = end - shape.key_block;
    first_block = (shape.open_block_begin(body_end(chunk.pos0)) - shape.body_base) / shape.key_block;
    end_block = (shape.open_block_begin(end) - shape.body_base) / shape.key_block;
  }
  const dim3 grid(static_cast<unsigned>(shape.kv_heads), 2, static_cast<unsigned>(chunk.rows));
  const bool paged = a.table != nullptr;
  if (d == 64) {
    paged ? launch_append_rows<64, true>(a, grid, stream) : launch_append_rows<64, false>(a, grid, stream);
    paged ? quantize_key_blocks<64, true>(a, first_block, end_block, stream)
          : quantize_key_blocks<64, false>(a, first_block, end_block, stream);
  } else {
    paged ? launch_append_rows<128, true>(a, grid, stream) : launch_append_rows<128, false>(a, grid, stream);
    paged ? quantize_key_blocks<128, true>(a, first_block, end_block, stream)
          : quantize_key_blocks<128, false>(a, first_block, end_block, stream);
  }
}

}  // namespace

void kv_append_rows(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk, void* snapshot,
                    cuda_stream_t stream) {
  check_chunk_rows(shape, chunk, "kv_append_rows");
  check_key_blocks(shape, layer, "kv_append_rows");
  append_rows(AppendRowsArgs{shape, layer, chunk, static_cast<const std::uint16_t*>(snapshot)}, snapshot, stream);
}

void paged_kv_append_rows(const KvPageLayout& layout, const KvPagedLayer& layer, std::int32_t slot,
                          const std::int32_t* tables, const ChunkRows& chunk, void* snapshot, cuda_stream_t stream,
                          std::int32_t* status) {
  check_chunk_rows(layout.shape, chunk, "paged_kv_append_rows");
  check_paged_key_blocks(layout, "paged_kv_append_rows");
  check_paged_rows_call(layout, layer, slot, tables, chunk, "paged_kv_append_rows");
  AppendRowsArgs a{layout.shape, core::kv_fixed_area(layout, layer, slot), chunk,
                   static_cast<const std::uint16_t*>(snapshot)};
  if (layout.has_pages()) {
    a.paged = PagedArgs{layout, layer, nullptr, tables, status, layout.max_tokens};
    a.table = tables + slot * layout.table_stride;
  }
  append_rows(a, snapshot, stream);
}

void kv_append_at(const KvLayerShape& shape, const KvLayerBuffers& layer, const std::int32_t* device_pos,
                  const void* k, const void* v, cuda_stream_t stream, const AppendRope* rope, bool history_complete,
                  void* ring_backup) {
  LOWBIT_CHECK(device_pos != nullptr, "kv_append_at: null device position");
  run(AppendArgs{shape, layer, 0, device_pos, static_cast<const __half*>(k), static_cast<const __half*>(v),
                 rope ? *rope : AppendRope{}, history_complete, static_cast<std::uint16_t*>(ring_backup)},
      stream);
}

std::size_t ring_backup_bytes(const KvLayerShape& shape) {
  return shape.body != KvBody::none && shape.window > 0
             ? static_cast<std::size_t>(2 * shape.kv_heads * shape.head_dim * 2)
             : 0;
}

namespace {

// grid (kv_heads, 2), one warp each: the backup of K or V of one head back into its slot.
__global__ void __launch_bounds__(32) restore_ring_slot_kernel(KvLayerShape s, KvLayerBuffers layer, long long pos,
                                                               const std::uint16_t* backup) {
  pdl_trigger();
  pdl_wait();
  const int head = static_cast<int>(blockIdx.x);
  const bool is_v = blockIdx.y == 1;
  const KvPart part = is_v ? layer.v : layer.k;  // by value: a reference picked at run time forces local memory
  const long long d = s.head_dim;
  std::uint16_t* slot = part.f16 + (head * s.f16_slots() + s.slot(pos)) * d;
  const std::uint16_t* b = backup + ((is_v ? s.kv_heads : 0) + head) * d;
  for (long long i = threadIdx.x; i < d; i += 32) slot[i] = b[i];
}

}  // namespace

void kv_restore_ring_slot(const KvLayerShape& shape, const KvLayerBuffers& layer, std::int64_t pos,
                          const void* ring_backup, cuda_stream_t stream) {
  if (ring_backup_bytes(shape) == 0 || pos < shape.sink + shape.window) return;  // nothing was overwritten
  LOWBIT_CHECK(ring_backup != nullptr && pos < kv_positions_held(shape), "kv_restore_ring_slot: position ", pos,
               " outside the cache or no backup");
  launch_pdl(restore_ring_slot_kernel, dim3(static_cast<unsigned>(shape.kv_heads), 2), 32, 0, stream, shape, layer,
             static_cast<long long>(pos), static_cast<const std::uint16_t*>(ring_backup));
}

void paged_kv_append(const KvPageLayout& layout, const KvPagedLayer& layer, const PagedBatch& batch,
                     const BatchRows& rows, std::int64_t n_heads, cuda_stream_t stream, const AppendRope* rope,
                     bool history_complete) {
  const KvLayerShape& s = layout.shape;
  const std::int64_t d = s.head_dim;
  LOWBIT_CHECK(batch.descs && (batch.tables || !layout.has_pages()) && batch.batch >= 1 && batch.batch <= 65535,
               "paged_kv_append: batch of ", batch.batch, " rows (1..65535) with device descriptors and page tables");
  LOWBIT_CHECK(batch.max_length >= 1 && batch.max_length <= layout.max_tokens, "paged_kv_append: max_length ",
               batch.max_length, ", expected 1..", layout.max_tokens);
  LOWBIT_CHECK((layer.pages || !layout.has_pages()) && (layer.fixed || layout.fixed_bytes() == 0),
               "paged_kv_append: the layer's pages or fixed areas are missing");
  LOWBIT_CHECK(rows.base && rows.k_col >= n_heads * d && rows.v_col >= n_heads * d &&
                   rows.ld >= rows.k_col + s.kv_heads * d && rows.ld >= rows.v_col + s.kv_heads * d,
               "paged_kv_append: rows of ld ", rows.ld, ", k_col ", rows.k_col, ", v_col ", rows.v_col, " for ",
               n_heads, " query heads first and K, V inside a row");
  AppendArgs a{s, KvLayerBuffers{}, 0, nullptr, static_cast<const __half*>(rows.base), nullptr,
               rope ? *rope : AppendRope{}, history_complete, nullptr};
  a.rope.n_heads = n_heads;
  a.rope.q = rows.base;
  a.paged = PagedArgs{layout, layer, batch.descs, batch.tables, batch.status, batch.max_length};
  a.rows_ld = rows.ld;
  a.k_col = rows.k_col;
  a.v_col = rows.v_col;
  run(a, stream, static_cast<unsigned>(batch.batch));
}

}  // namespace lowbit::cuda::kv
