// Decode attention over the mixed cache of core/kv_layout.h, read in place (flash-decoding).
//
// Grid (splits, kv_heads * head groups): a block takes one KV head, GQ of its query
// heads (so K and V are read once for all of them) and one split of the visible
// positions. Four warps; a position is read by D/16 lanes, each owning 16 channels (FP16:
// two 16-byte loads; INT8: one 16-byte load; INT4: one 8-byte load, + the f16 scale/min),
// so a warp covers 8 (D 64) or 4 (D 128) positions per step. Codes are dequantized in
// registers with the formats' decode formulas (q * s; fma(q, s, min)), never stored.
// Prefetch (the engine's decode graph, SplitArgs::prefetch): the rows of the first
// kPrefetchSteps steps are loaded before griddepcontrol.wait, so that their HBM latency
// overlaps the kernels before this one; only the rows this step's append writes (the new
// token, and under selective the token that left the window for the body) wait, and
// those are read past L1 (__ldcg: a neighbour's early load may have cached their line).
//   pass 1: scores of the split into shared memory (log2 domain: q is pre-scaled by
//           log2(e) / sqrt(D)); one warp per head takes the max, p = 2^(s - max), sum.
//   pass 2: acc += p * v in f32 registers, reduced over the warp's positions by shuffles
//           and over warps through shared memory, written with (max, sum) per split.
// The combine kernel rescales the splits' partials by 2^(m_s - M) and divides by the sum.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/device.h"
#include "cuda/flash/flash_cuda.h"
#include "cuda/kv/attention_common.cuh"
#include "cuda/kv/kv_cuda.h"
#include "core/pdl.cuh"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::kv {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChannels = 16;  // per lane
constexpr int kPrefetchSteps = 2;  // a warp's first steps held in registers (64 positions at D 64)

// Exact small integers to float without I2F (one PRMT or LOP + one FADD): the float
// 2^23 + b has b in its low mantissa bits. An i8 code q is stored as its two's complement byte;
// (byte ^ 0x80) as unsigned is q + 128, so q = (2^23 + (byte ^ 0x80)) - (2^23 + 128).
__device__ __forceinline__ float i8_as_float(std::uint32_t w, int i) {
  const std::uint32_t flipped = w ^ 0x80808080u;
  return __uint_as_float(__byte_perm(flipped, 0x4B000000u, 0x7540u | static_cast<unsigned>(i))) - 8388736.0f;
}
__device__ __forceinline__ float nibble_as_float(std::uint32_t w, int i) {
  return __uint_as_float(0x4B000000u | ((w >> (4 * i)) & 0xFu)) - 8388608.0f;
}

__device__ __forceinline__ void halves(const uint4& u, float* x) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

template <int Bits>
__device__ __forceinline__ bool in_body(const SplitArgs& a, int pos) {
  return Bits != 0 && pos >= a.sink_end && pos < a.recent_begin;
}

template <class T>
__device__ __forceinline__ T load(const T* p, bool past_l1) {
  return past_l1 ? __ldcg(p) : __ldg(p);
}

// A lane's 16 channels [sub * 16, sub * 16 + 16) of one row as stored: FP16 in a and b;
// body codes in a (INT8: 16 bytes; INT4: a.x, a.y), the f16 scale in b.x, the min in b.y.
struct RawRow {
  uint4 a, b;
};

// Rows: the rows form's kernel (its ring positions are read from the chunk or the
// snapshot); the decode kernels are compiled without that branch. Paged: the paged
// address map (paged_address.cuh).
template <int D, int Bits, bool Rows, bool Paged>
__device__ __forceinline__ RawRow load_raw(const SplitArgs& a, bool is_v, int head, int pos, int sub) {
  const KvLayerShape& s = a.shape;
  const KvPart part = is_v ? a.layer.v : a.layer.k;  // by value: a reference picked at run time forces local memory
  const bool past_l1 = a.prefetch && appended_now(a, pos);
  RawRow r{};
  if (!in_body<Bits>(a, pos)) {
    const std::uint16_t* row;
    if (Rows && s.window > 0 && pos >= s.sink && pos >= a.rows_pos0) {  // rows form: the chunk's
      row = reinterpret_cast<const std::uint16_t*>(is_v ? a.chunk_v : a.chunk_k) + (pos - a.rows_pos0) * a.chunk_ld +
            head * D;
    } else if (Rows && s.window > 0 && pos >= s.sink) {  // the ring's, before the chunk
      row = (is_v ? a.snap_v : a.snap_k) + (static_cast<long long>(head) * s.window + pos % s.window) * D;
    } else if (Paged && s.window == 0) {  // full: FP16 pages
      row = paged_f16_row(a.paged, a.table, is_v, head, pos);
    } else {
      const int slot = pos < s.sink ? pos : static_cast<int>(s.sink) + pos % static_cast<int>(s.window);
      row = part.f16 + (static_cast<long long>(head) * s.f16_slots() + slot) * D;
    }
    const uint4* p = reinterpret_cast<const uint4*>(row + sub * kChannels);
    r.a = load(p, past_l1);
    r.b = load(p + 1, past_l1);
    return r;
  }
  if constexpr (Bits != 0) {
    const BodyRow body = Paged ? paged_body_row(a.paged, a.table, is_v, pos) : contiguous_body_row(s, part, pos);
    r.b.x = load(body.scales + head, past_l1);  // f16 parameters
    if constexpr (Bits == 8) {
      r.a = load(reinterpret_cast<const uint4*>(body.codes + head * D + sub * kChannels), past_l1);
    } else {
      r.b.y = load(body.mins + head, past_l1);
      const auto* codes = reinterpret_cast<const uint2*>(body.codes + head * (D / 2) + sub * (kChannels / 2));
      const uint2 c = load(codes, past_l1);
      r.a.x = c.x;
      r.a.y = c.y;
    }
  }
  return r;
}

template <int Bits>
__device__ __forceinline__ void decode_raw(const RawRow& r, bool body, float (&x)[kChannels]) {
  if (!body) {
    halves(r.a, x);
    halves(r.b, x + 8);
    return;
  }
  if constexpr (Bits != 0) {
    const float scale = formats::half_to_float({static_cast<std::uint16_t>(r.b.x)});
    if constexpr (Bits == 8) {  // Int8Symmetric::decode: q * s
      const std::uint32_t w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
      for (int i = 0; i < kChannels; ++i) x[i] = i8_as_float(w[i / 4], i % 4) * scale;
    } else {  // Int4Asymmetric::decode: fma(q, s, min); low nibble first
      const float min = formats::half_to_float({static_cast<std::uint16_t>(r.b.y)});
#pragma unroll
      for (int i = 0; i < kChannels; ++i) x[i] = fmaf(nibble_as_float(i < 8 ? r.a.x : r.a.y, i % 8), scale, min);
    }
  }
}

// The 16 channels of visible position `pos` of one part, decoded.
template <int D, int Bits, bool Rows, bool Paged>
__device__ __forceinline__ void load_row(const SplitArgs& a, bool is_v, int head, int pos, int sub,
                                         float (&x)[kChannels]) {
  decode_raw<Bits>(load_raw<D, Bits, Rows, Paged>(a, is_v, head, pos, sub), in_body<Bits>(a, pos), x);
}

// Key blocks (core/kv_layout.h; the kernel's KB instantiation): the 16 channels of K at
// visible position pos. The complete blocks' codes decoded with their channels' f16
// parameters into f16 keys (the twin's values exactly: f16(q s + min), one rounding), the open block
// [open, recent_begin) FP16 from the staging ring, the sink and window as ever.
// Rows: the rows form's (its FP16 ring positions from the chunk or the snapshot).
// Paged: a position's codes in its page, a block's parameters in the page of its first
// position (core/kv_pages.h), the staging ring in the sequence's fixed area.
template <int D, int Bits, bool Rows, bool Paged>
__device__ __forceinline__ void load_key_block_row(const SplitArgs& a, int head, int pos, int sub, int open,
                                                   float (&x)[kChannels]) {
  const KvLayerShape& s = a.shape;
  const KvPart& part = a.layer.k;
  if (!in_body<Bits>(a, pos)) {
    load_row<D, Bits, Rows, Paged>(a, false, head, pos, sub, x);
    return;
  }
  // 32-bit index arithmetic (positions < 2^30, checked on the host): a 64-bit division
  // is a long call on the GPU, and this runs for every position.
  const int b = static_cast<int>(s.key_block), j = pos - static_cast<int>(s.body_base);
  const int block = j / b;
  if (pos >= open) {
    const long long slot = static_cast<long long>(head) * b + (j - block * b);
    const auto* p = reinterpret_cast<const uint4*>(part.staged + slot * D + sub * kChannels);
    halves(__ldg(p), x);
    halves(__ldg(p + 1), x + 8);
    return;
  }
  if constexpr (Bits != 0) {
    const std::uint16_t *scales = part.scales, *mins = part.mins;
    long long param = (static_cast<long long>(block) * s.kv_heads + head) * D + sub * kChannels;
    if constexpr (Paged) {
      const KvPageLayout& l = a.paged.layout;
      const std::uint8_t* page = page_of(a.paged, a.table, l.key_block_page(block));
      scales = reinterpret_cast<const std::uint16_t*>(page + l.scales_offset(false));
      mins = reinterpret_cast<const std::uint16_t*>(page + l.mins_offset(false));
      param = static_cast<long long>(head) * D + sub * kChannels;
    }
    const auto* sp = reinterpret_cast<const uint4*>(scales + param);
    float scale[kChannels];
    halves(__ldg(sp), scale);
    halves(__ldg(sp + 1), scale + 8);
    const BodyRow body = Paged ? paged_body_row(a.paged, a.table, false, pos) : contiguous_body_row(s, part, pos);
    if constexpr (Bits == 8) {
      const uint4 c = __ldg(reinterpret_cast<const uint4*>(body.codes + head * D + sub * kChannels));
      const std::uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (int i = 0; i < kChannels; ++i) x[i] = __half2float(__float2half_rn(i8_as_float(w[i / 4], i % 4) * scale[i]));
    } else {
      const auto* mp = reinterpret_cast<const uint4*>(mins + param);
      float min[kChannels];
      halves(__ldg(mp), min);
      halves(__ldg(mp + 1), min + 8);
      const uint2 c = __ldg(reinterpret_cast<const uint2*>(body.codes + head * (D / 2) + sub * (kChannels / 2)));
#pragma unroll
      for (int i = 0; i < kChannels; ++i) {
        x[i] = __half2float(__hfma(__float2half_rn(nibble_as_float(i < 8 ? c.x : c.y, i % 8)),
                                   __float2half_rn(scale[i]), __float2half_rn(min[i])));
      }
    }
  }
}

// KB: K in key blocks (the contiguous cache's forms; the host turns prefetch off, since
// the append that completes a block rewrites its codes).
template <int D, int GQ, int Bits, bool Rows, bool Paged, bool KB = false>
__global__ void __launch_bounds__(kThreads, 4) decode_split_kernel(SplitArgs args) {
  static_assert(!KB || Bits != 0, "key blocks: a body's forms");
  pdl_trigger();
  SplitArgs a = args;
  if (!a.prefetch) pdl_wait();
  if (a.device_pos) resolve_device_span(a);
  if constexpr (Paged && !Rows) {  // the rows form's table and fixed area are set by the host
    if (!enter_paged_row(a, D)) return;
  }
  const int active = active_splits(a);
  if (static_cast<int>(blockIdx.x) >= active) return;  // past the length: no partials (fused combine)
  if constexpr (Rows) {
    const long long z = blockIdx.z;
    resolve_span(a, a.rows_pos0 + a.row0 + z + 1);
    a.q += (a.row0 + z) * a.q_ld;
    a.acc += z * a.n_heads * a.splits * D;
    a.max_sum += z * a.n_heads * a.splits * 2;
    a.out = a.out_f16 ? static_cast<void*>(static_cast<__half*>(a.out) + z * a.out_ld)
                      : static_cast<void*>(static_cast<float*>(a.out) + z * a.out_ld);
  }
  constexpr int kLanesPerPos = D / kChannels;
  constexpr int kPosPerWarp = 32 / kLanesPerPos;
  constexpr int kStep = kWarps * kPosPerWarp;
  __shared__ float scores[GQ][kMaxSplit];
  __shared__ float red[kWarps][GQ][D];
  __shared__ float stats[GQ][2];

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int sub = lane % kLanesPerPos, row = lane / kLanesPerPos;
  const int groups = a.group / GQ;
  const int head = static_cast<int>(blockIdx.y) / groups;
  const int h0 = head * a.group + (static_cast<int>(blockIdx.y) % groups) * GQ;
  const int split = static_cast<int>(blockIdx.x);
  const int i0 = split * a.split_len;
  const int n = min(a.split_len, a.visible - i0);
  // Visible index -> position: the window policy skips the dropped middle.
  const int skip = a.shape.drops() ? a.recent_begin - a.sink_end : 0;
  auto position = [&](int i) { return i < a.sink_end ? i : i + skip; };
  const int open = KB ? static_cast<int>(a.shape.open_block_begin(a.recent_begin)) : 0;  // KB: the open block's first

  // The rows of the first kPrefetchSteps steps, K and V; under prefetch all but the
  // append's are loaded before the wait.
  RawRow kpre[kPrefetchSteps] = {}, vpre[kPrefetchSteps] = {};
  auto fetch = [&](bool appended) {
#pragma unroll
    for (int t = 0; t < kPrefetchSteps; ++t) {
      const int j = warp * kPosPerWarp + t * kStep + row;
      if (j >= n) continue;
      const int p = position(i0 + j);
      if ((a.prefetch && appended_now(a, p)) != appended) continue;
      if constexpr (!KB) kpre[t] = load_raw<D, Bits, Rows, Paged>(a, false, head, p, sub);  // KB: K decoded in pass 1
      vpre[t] = load_raw<D, Bits, Rows, Paged>(a, true, head, p, sub);
    }
  };
  fetch(false);
  if (a.prefetch) {
    pdl_wait();
    fetch(true);
  }

  float q[GQ][kChannels];
#pragma unroll
  for (int g = 0; g < GQ; ++g) {
    const uint4* p = reinterpret_cast<const uint4*>(a.q + (h0 + g) * D + sub * kChannels);
    // Not __ldg: q is the append's output, and ptxas may move a read-only (.nc) load
    // above griddepcontrol.wait.
    halves(__ldcg(p), q[g]);
    halves(__ldcg(p + 1), q[g] + 8);
#pragma unroll
    for (int c = 0; c < kChannels; ++c) q[g][c] *= a.q_scale;
  }

  // Pass 1: scores. Every lane of a warp runs every step (the shuffles need them all).
  // The steps past the prefetched ones are unrolled twice so that two steps' loads are
  // in flight at once: the kernel is latency-bound at decode sizes.
  auto score = [&](int j, const float (&x)[kChannels]) {
    float s[GQ];
#pragma unroll
    for (int g = 0; g < GQ; ++g) {
      s[g] = 0.0f;
#pragma unroll
      for (int c = 0; c < kChannels; ++c) s[g] = fmaf(q[g][c], x[c], s[g]);
#pragma unroll
      for (int o = 1; o < kLanesPerPos; o *= 2) s[g] += __shfl_xor_sync(0xffffffffu, s[g], o);
    }
    if (j < n && sub == 0) {
#pragma unroll
      for (int g = 0; g < GQ; ++g) scores[g][j] = s[g];
    }
  };
#pragma unroll
  for (int t = 0; t < kPrefetchSteps; ++t) {
    const int j = warp * kPosPerWarp + t * kStep + row;
    float x[kChannels] = {};
    if constexpr (KB) {
      if (j < n) load_key_block_row<D, Bits, Rows, Paged>(a, head, position(i0 + j), sub, open, x);
    } else {
      if (j < n) decode_raw<Bits>(kpre[t], in_body<Bits>(a, position(i0 + j)), x);
    }
    score(j, x);
  }
#pragma unroll 2
  for (int base = warp * kPosPerWarp + kPrefetchSteps * kStep; base < n; base += kStep) {
    const int j = base + row;
    float x[kChannels] = {};
    if constexpr (KB) {
      if (j < n) load_key_block_row<D, Bits, Rows, Paged>(a, head, position(i0 + j), sub, open, x);
    } else {
      if (j < n) load_row<D, Bits, Rows, Paged>(a, false, head, position(i0 + j), sub, x);
    }
    score(j, x);
  }
  __syncthreads();

  // Softmax of the split, one warp per head (GQ <= kWarps).
  if (warp < GQ) {
    float m = -INFINITY;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, scores[warp][j]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = exp2f(scores[warp][j] - m);
      scores[warp][j] = p;
      l += p;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) stats[warp][0] = m, stats[warp][1] = l;
  }
  __syncthreads();

  // Pass 2: p V (no shuffles in these loops).
  float acc[GQ][kChannels] = {};
  auto accumulate = [&](int j, const float (&x)[kChannels]) {
#pragma unroll
    for (int g = 0; g < GQ; ++g) {
      const float p = scores[g][j];
#pragma unroll
      for (int c = 0; c < kChannels; ++c) acc[g][c] = fmaf(p, x[c], acc[g][c]);
    }
  };
#pragma unroll
  for (int t = 0; t < kPrefetchSteps; ++t) {
    const int j = warp * kPosPerWarp + t * kStep + row;
    if (j >= n) continue;
    float x[kChannels];
    decode_raw<Bits>(vpre[t], in_body<Bits>(a, position(i0 + j)), x);
    accumulate(j, x);
  }
#pragma unroll 2
  for (int base = warp * kPosPerWarp + kPrefetchSteps * kStep; base < n; base += kStep) {
    const int j = base + row;
    if (j >= n) continue;
    float x[kChannels];
    load_row<D, Bits, Rows, Paged>(a, true, head, position(i0 + j), sub, x);
    accumulate(j, x);
  }
#pragma unroll
  for (int g = 0; g < GQ; ++g) {
#pragma unroll
    for (int c = 0; c < kChannels; ++c) {
#pragma unroll
      for (int o = kLanesPerPos; o < 32; o *= 2) acc[g][c] += __shfl_xor_sync(0xffffffffu, acc[g][c], o);
    }
  }
  if (row == 0) {
#pragma unroll
    for (int g = 0; g < GQ; ++g) {
#pragma unroll
      for (int c = 0; c < kChannels; ++c) red[warp][g][sub * kChannels + c] = acc[g][c];
    }
  }
  __syncthreads();
  if (active == 1) {  // nothing to combine: out = acc / l, the combine's value (its weight is 2^0)
    for (int t = static_cast<int>(threadIdx.x); t < GQ * D; t += kThreads) {
      const int g = t / D, d = t % D;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += red[w][g][d];
      const float v = sum / stats[g][1];
      if (a.out_f16) {
        static_cast<__half*>(a.out)[(h0 + g) * D + d] = __float2half_rn(v);
      } else {
        static_cast<float*>(a.out)[(h0 + g) * D + d] = v;
      }
    }
    return;
  }
  for (int t = static_cast<int>(threadIdx.x); t < GQ * D; t += kThreads) {
    const int g = t / D, d = t % D;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[w][g][d];
    a.acc[(static_cast<long long>(h0 + g) * a.splits + split) * D + d] = sum;
  }
  if (threadIdx.x < GQ) {
    float* ms = a.max_sum + (static_cast<long long>(h0 + threadIdx.x) * a.splits + split) * 2;
    ms[0] = stats[threadIdx.x][0];
    ms[1] = stats[threadIdx.x][1];
  }
  if (!a.counters) return;
  // Publish the partials, count this block; the last one of the row combines.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.y, 1u) == static_cast<unsigned>(active) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // scores[] is free now: it holds the combine weights (splits <= kMaxSplit, checked).
  __shared__ float totals[GQ];
  if (warp < GQ) {
    const float l = combine_weights(a.max_sum, a.splits, active, h0 + warp, scores[warp], lane);
    if (lane == 0) totals[warp] = l;
  }
  __syncthreads();
  for (int t = static_cast<int>(threadIdx.x); t < GQ * D / 4; t += kThreads) {
    const int g = 4 * t / D, h = h0 + g, c = 4 * t % D;
    store_quad(a.out, a.out_f16, static_cast<long long>(h) * D + c,
               combine_quad(a.acc, scores[g], totals[g], a.splits, active, D, h, c));
  }
  if (threadIdx.x == 0) a.counters[blockIdx.y] = 0;  // ready for the next call
}

// One block per query head (and row of the rows form: blockIdx.y), one thread per channel.
template <class Out>
__global__ void decode_combine_kernel(const float* acc, const float* max_sum, int splits, int d, Out* out,
                                      int n_heads, long long out_ld) {
  pdl_trigger();
  pdl_wait();
  const long long row = blockIdx.y;
  acc += row * n_heads * splits * d;
  max_sum += row * n_heads * splits * 2;
  out += row * out_ld;
  __shared__ float weights[kMaxSplit];
  __shared__ float total;
  const int h = static_cast<int>(blockIdx.x), c = static_cast<int>(threadIdx.x);
  if (c < 32) {
    const float l = combine_weights(max_sum, splits, splits, h, weights, c);
    if (c == 0) total = l;
  }
  __syncthreads();
  const float v = combine_channel(acc, weights, total, splits, d, h, c);
  if constexpr (sizeof(Out) == 4) {
    out[h * d + c] = v;
  } else {
    out[h * d + c] = __float2half_rn(v);
  }
}

}  // namespace

void launch_combine(const float* acc, const float* max_sum, int splits, int d, __half* out, int n_heads,
                    long long out_ld, long long rows, cudaStream_t stream) {
  launch_pdl(decode_combine_kernel<__half>, dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(rows)),
             static_cast<unsigned>(d), 0, stream, acc, max_sum, splits, d, out, n_heads, out_ld);
}

namespace {

template <int D, int GQ, bool Rows, bool Paged>
void launch_split(const SplitArgs& a, dim3 grid, cudaStream_t stream) {
  // Key blocks (check_key_blocks: a body): the contiguous forms, and paged the rows form
  // (the prefill's pieces; the batched decode reads them on mma_swap).
  if (a.shape.key_block > 0 && (!Paged || Rows)) {
    a.shape.body == KvBody::int8
        ? launch_pdl(decode_split_kernel<D, GQ, 8, Rows, Paged, true>, grid, kThreads, 0, stream, a)
        : launch_pdl(decode_split_kernel<D, GQ, 4, Rows, Paged, true>, grid, kThreads, 0, stream, a);
    return;
  }
  switch (a.shape.body) {
    case KvBody::none: launch_pdl(decode_split_kernel<D, GQ, 0, Rows, Paged>, grid, kThreads, 0, stream, a); break;
    case KvBody::int8: launch_pdl(decode_split_kernel<D, GQ, 8, Rows, Paged>, grid, kThreads, 0, stream, a); break;
    case KvBody::int4: launch_pdl(decode_split_kernel<D, GQ, 4, Rows, Paged>, grid, kThreads, 0, stream, a); break;
  }
}

template <int D, bool Paged>
void launch_split_gq(const SplitArgs& a, int gq, dim3 grid, cudaStream_t stream) {
  switch (gq) {
    case 1: launch_split<D, 1, false, Paged>(a, grid, stream); break;
    case 2: launch_split<D, 2, false, Paged>(a, grid, stream); break;
    case 3: launch_split<D, 3, false, Paged>(a, grid, stream); break;
    default: launch_split<D, 4, false, Paged>(a, grid, stream); break;
  }
}

// The rows form takes one query head a block (its kernels: 6 instantiations, not 24).
template <int D>
void launch_split(const SplitArgs& a, int gq, dim3 grid, cudaStream_t stream) {
  if (a.rows_pos0 >= 0) {
    a.table ? launch_split<D, 1, true, true>(a, grid, stream) : launch_split<D, 1, true, false>(a, grid, stream);
  } else if (a.paged.descs) {
    launch_split_gq<D, true>(a, gq, grid, stream);
  } else {
    launch_split_gq<D, false>(a, gq, grid, stream);
  }
}

}  // namespace

namespace {

// Bytes of the fused combine's counters at the start of a workspace: one unsigned a block
// row, rounded up to 16 bytes so that the partials after them keep their alignment.
std::size_t counters_bytes(std::size_t counters) { return (counters * sizeof(unsigned) + 15) / 16 * 16; }

// Whether the decode forms run on the tensor-core kernel.
bool uses_mma(std::int64_t n_heads, const KvLayerShape& shape, AttentionKernel kernel) {
  if (kernel == AttentionKernel::simt) return false;
  if (shape.key_block > 0) {
    // Key blocks: mma_swap reads them (its KB instantiation; a tile meets at most two key
    // blocks of a multiple of 16 positions), the others run on simt.
    const std::int64_t group = n_heads / shape.kv_heads;
    const bool swap_takes = group <= kMmaSwapMaxGroup && shape.key_block % 16 == 0;
    LOWBIT_CHECK(kernel != AttentionKernel::mma, "kv_attention: key blocks (--kv-key-block ", shape.key_block,
                 ") are read by the simt and mma_swap kernels, not mma");
    LOWBIT_CHECK(swap_takes || kernel == AttentionKernel::automatic, "kv_attention: mma_swap reads key blocks of a "
                 "multiple of 16 positions with GQA groups of up to ", kMmaSwapMaxGroup, ", got --kv-key-block ",
                 shape.key_block, " and a group of ", group);
    return swap_takes;
  }
  const bool fits = n_heads / shape.kv_heads <= kMmaMaxGroup;
  LOWBIT_CHECK(fits || kernel == AttentionKernel::automatic, "kv_attention: the mma kernel takes GQA groups of up to ",
               kMmaMaxGroup, " query heads, got ", n_heads / shape.kv_heads);
  return fits;
}

// Whether the mma kernel runs its swapped variant (positions as M, f16 P): automatic takes
// it where the group fits (H100: 2-20% faster than mma at every length and policy measured,
// bench/notes/decode.md); mma names the other variant.
bool uses_swap(std::int64_t n_heads, const KvLayerShape& shape, AttentionKernel kernel) {
  return (kernel == AttentionKernel::mma_swap || kernel == AttentionKernel::automatic) &&
         n_heads / shape.kv_heads <= kMmaSwapMaxGroup;
}

// Blocks a SM that the split plan fills the device with: the mma kernel's occupancy (3 for
// the quantized bodies at head_dim 128, 2 for FP16), 2 for the SIMT kernel.
int resident_blocks(const KvLayerShape& shape, bool mma, bool swap = false) {
  return mma ? mma_blocks_per_sm(shape, swap) : 2;
}

// Query heads a block of the kernel takes: mma all of a KV head's, simt 1 to 4.
std::int64_t heads_per_block(std::int64_t n_heads, const KvLayerShape& shape, bool mma) {
  return mma ? n_heads / shape.kv_heads : decode_heads_per_block(n_heads / shape.kv_heads);
}

// What the split planners take of a launch: its blocks a split (of one batch row), the
// kernel's blocks a SM, and its cost.
struct PlanInputs {
  std::int64_t blocks;
  int per_sm;
  const core::DecodeSplitCost* cost;
};
PlanInputs plan_inputs(const KvLayerShape& shape, std::int64_t n_heads, AttentionKernel kernel) {
  LOWBIT_CHECK(n_heads > 0 && shape.kv_heads > 0 && n_heads % shape.kv_heads == 0, "kv_attention: n_heads = ",
               n_heads, " is not a multiple of kv_heads = ", shape.kv_heads);
  const bool mma = uses_mma(n_heads, shape, kernel);
  const core::DecodeSplitCost& cost = !mma                         ? core::kSimtSplitCost
                                      : shape.body == KvBody::none ? core::kMmaF16SplitCost
                                                                   : core::kMmaQuantSplitCost;
  return PlanInputs{n_heads / heads_per_block(n_heads, shape, mma),
                    resident_blocks(shape, mma, mma && uses_swap(n_heads, shape, kernel)), &cost};
}

// The plan of `batch` rows (the paged form): the batch's blocks fill the device at the
// span's length.
DecodeSplitPlan batch_plan(const KvLayerShape& shape, const DecodeSpan& span, std::int64_t n_heads,
                           std::int64_t batch, AttentionKernel kernel) {
  const PlanInputs in = plan_inputs(shape, n_heads, kernel);
  return plan_decode_splits(span.visible(shape), batch * in.blocks, core::multiprocessor_count(), in.per_sm,
                            *in.cost);
}

// The single-sequence forms' plan (core::plan_sequence_splits): the graph form launches its
// `fill` splits for its capacity and each step takes the split length of its own.
core::SequenceSplitPlan sequence_plan(const KvLayerShape& shape, const DecodeSpan& span, std::int64_t n_heads,
                                      AttentionKernel kernel) {
  const PlanInputs in = plan_inputs(shape, n_heads, kernel);
  return core::plan_sequence_splits(span.visible(shape), in.blocks, core::multiprocessor_count(), in.per_sm,
                                    *in.cost);
}

}  // namespace

DecodeSplitPlan kv_attention_plan(const KvLayerShape& shape, const DecodeSpan& span, std::int64_t n_heads,
                                  AttentionKernel kernel) {
  return sequence_plan(shape, span, n_heads, kernel).plan;
}

namespace {

// The rows form's part of a launch: the chunk, the rows [row0, row0 + count) of it that
// this launch takes, and where the ring's positions before the chunk are.
struct RowsLaunch {
  ChunkRows chunk;
  std::int64_t row0, count;
  const std::uint16_t* snapshot;
  std::int64_t out_ld;
  // Paged (table set): the pool and the sequence's page table; the layer is its fixed area.
  PagedArgs paged{};
  const std::int32_t* table = nullptr;
};
constexpr std::int64_t kRowsSplit = 512;  // positions a split of the rows form

DecodeSplitPlan rows_plan(std::int64_t visible) { return decode_plan_of_length(visible, kRowsSplit); }

// The paged form's part of a launch: the batch, and where its rows' q and out are.
struct PagedLaunch {
  PagedArgs args;
  std::int64_t batch, q_ld, out_ld;
};

// Checks and launches; `span` is the one checked on the host (for a graph launch, that
// of max_length positions, which also fixes the plan; for the rows form, the last row's;
// for the paged form, max_length's). split_len > 0 replaces the plan's split length.
void launch_decode(const KvLayerShape& shape, const KvLayerBuffers& layer, const DecodeSpan& span,
                   const std::int32_t* device_pos, bool fused_combine, bool prefetch, const void* q,
                   std::int64_t n_heads, void* out, DType out_dtype, void* workspace, std::size_t workspace_bytes,
                   cudaStream_t stream, AttentionKernel kernel, const RowsLaunch* rows = nullptr,
                   const PagedLaunch* paged = nullptr, std::int64_t split_len = 0) {
  const std::int64_t d = shape.head_dim;
  LOWBIT_CHECK(d == 64 || d == 128, "kv_attention: head_dim = ", d, ", expected 64 or 128");
  if (paged && shape.key_block > 0) {  // the batched decode: mma_swap's paged KB instance
    check_paged_key_blocks(paged->args.layout, "paged_kv_attention");
    LOWBIT_CHECK(kernel != AttentionKernel::simt && uses_mma(n_heads, shape, kernel), "paged_kv_attention: key "
                 "blocks (--kv-key-block ", shape.key_block, ") are read by mma_swap only (GQA groups of up to ",
                 kMmaSwapMaxGroup, "), got a group of ", n_heads / shape.kv_heads);
  } else if (rows && rows->table && shape.key_block > 0) {  // a paged prefill's piece: the simt rows form
    check_paged_key_blocks(rows->paged.layout, "paged_kv_attention_rows");
  } else {
    check_key_blocks(shape, layer, "kv_attention");
  }
  // Key blocks: the append that completes a block rewrites its codes, so no row is read
  // before the append's grid is done.
  prefetch = prefetch && shape.key_block == 0;
  LOWBIT_CHECK(out_dtype == DType::f32 || out_dtype == DType::f16, "kv_attention: out dtype ",
               dtype_name(out_dtype), ", expected f32 or f16");
  LOWBIT_CHECK(0 <= span.sink_end && span.sink_end <= span.recent_begin && span.recent_begin <= span.end &&
                   span.end >= 1 && span.end < (std::int64_t{1} << 30),
               "kv_attention: span [", span.sink_end, ", ", span.recent_begin, ", ", span.end, ") is not ordered");
  LOWBIT_CHECK(span.sink_end <= shape.sink, "kv_attention: sink_end ", span.sink_end, " past the ", shape.sink,
               " sink slots");
  // The kernel's vector loads: 16 bytes of FP16, q and INT8 codes, 8 of INT4 codes; the
  // tensor-core kernels copy scales and mins as 4-byte pairs.
  auto aligned = [](const void* p, int bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; };
  LOWBIT_CHECK(aligned(q, 16) && aligned(layer.k.f16, 16) && aligned(layer.v.f16, 16) && aligned(layer.k.codes, 16) &&
                   aligned(layer.v.codes, 16),
               "kv_attention: q and the cache's FP16 and code buffers must be 16-byte aligned");
  LOWBIT_CHECK(aligned(layer.k.scales, 4) && aligned(layer.v.scales, 4) && aligned(layer.k.mins, 4) &&
                   aligned(layer.v.mins, 4),
               "kv_attention: the cache's scale and min buffers must be 4-byte aligned");
  LOWBIT_CHECK(span.end - std::max(span.recent_begin, shape.sink) <= shape.window, "kv_attention: ",
               span.end - span.recent_begin, " recent positions do not fit the window of ", shape.window);
  if (shape.body != KvBody::none && span.recent_begin > span.sink_end) {
    LOWBIT_CHECK(span.sink_end >= shape.body_base && span.recent_begin - shape.body_base <= shape.body_slots,
                 "kv_attention: body positions [", span.sink_end, ", ", span.recent_begin,
                 ") outside the body's slots");
  }
  const bool mma = !rows && uses_mma(n_heads, shape, kernel);
  const bool swap = mma && uses_swap(n_heads, shape, kernel);
  const AttentionKernel chosen = swap ? AttentionKernel::mma_swap : mma ? AttentionKernel::mma : AttentionKernel::simt;
  const core::SequenceSplitPlan sequence =
      rows || paged ? core::SequenceSplitPlan{} : sequence_plan(shape, span, n_heads, chosen);
  DecodeSplitPlan plan = rows    ? rows_plan(span.visible(shape))
                         : paged ? batch_plan(shape, span, n_heads, paged->batch, chosen)
                                 : sequence.plan;
  // The graph form launches the sequence plan's `fill` splits for its capacity (span) and
  // its kernels share each step's length over them (SplitArgs::balanced).
  const bool balanced = device_pos && sequence.fill > 0 && split_len == 0;
  if (balanced) plan.splits = sequence.fill;
  if (split_len > 0) {
    const std::int64_t longest = mma ? DecodeSplitPlan::kMaxMmaSplit : DecodeSplitPlan::kMaxSplit;
    LOWBIT_CHECK(!rows && split_len % 16 == 0 && split_len <= longest, "kv_attention: split_len ", split_len,
                 ", expected a multiple of 16 up to ", longest, mma ? " (tensor-core kernels)" : " (simt kernel)");
    plan = decode_plan_of_length(span.visible(shape), split_len);
  }
  LOWBIT_CHECK(plan.splits <= kMaxSplit, "kv_attention: ", span.visible(shape), " visible positions need ",
               plan.splits, " splits, more than the combine's ", kMaxSplit, " (contexts up to ~1M tokens)");
  const int group = static_cast<int>(n_heads / shape.kv_heads);
  const int gq = rows ? 1 : static_cast<int>(heads_per_block(n_heads, shape, mma));
  const std::int64_t row_count = rows ? rows->count : paged ? paged->batch : 1;
  // The fused combine's counters first, at a place no plan moves: calls of any max_length
  // (a batch engine's sequences of different capacities) may share one workspace, each
  // leaving the counters zero for the next. The partials follow.
  const std::size_t counter_bytes =
      fused_combine ? counters_bytes(static_cast<std::size_t>(row_count * (n_heads / gq))) : 0;
  const std::size_t partials = decode_workspace_bytes(n_heads, d, plan.splits) * static_cast<std::size_t>(row_count);
  const std::size_t need = counter_bytes + partials;
  LOWBIT_CHECK(workspace_bytes >= need, "kv_attention: workspace of ", workspace_bytes, " bytes, needs ", need);
  LOWBIT_CHECK(aligned(workspace, 16), "kv_attention: the workspace must be 16-byte aligned (the combines read the "
               "partials 16 bytes at a time)");
  SplitArgs a{shape,
              layer,
              static_cast<int>(span.sink_end),
              static_cast<int>(span.recent_begin),
              static_cast<int>(span.end),
              static_cast<int>(span.visible(shape)),
              static_cast<int>(plan.split_len),
              static_cast<int>(plan.splits),
              group,
              static_cast<int>(n_heads),
              1.4426950408889634f / std::sqrt(static_cast<float>(d)),
              device_pos,
              prefetch,
              static_cast<const __half*>(q),
              reinterpret_cast<float*>(static_cast<char*>(workspace) + counter_bytes),
              reinterpret_cast<float*>(static_cast<char*>(workspace) + counter_bytes) + row_count * n_heads * plan.splits * d,
              fused_combine ? static_cast<unsigned*>(workspace) : nullptr,
              out,
              out_dtype == DType::f16};
  a.balanced = balanced;
  if (shape.key_block > 0) a.key_block_div = core::FastDivisor(shape.key_block);
  if (rows) {
    const ChunkRows& c = rows->chunk;
    const auto* base = static_cast<const __half*>(c.base);
    a.rows_pos0 = c.pos0;
    a.row0 = rows->row0;
    a.chunk_k = base + c.k_col;
    a.chunk_v = base + c.v_col;
    a.chunk_ld = a.q_ld = c.ld;
    a.out_ld = rows->out_ld;
    if (rows->snapshot) {
      a.snap_k = rows->snapshot;
      a.snap_v = rows->snapshot + shape.kv_heads * shape.window * d;
    }
    if (rows->table) {
      a.paged = rows->paged;
      a.table = rows->table;
    }
  }
  if (paged) {
    a.paged = paged->args;
    a.q_ld = paged->q_ld;
    a.out_ld = paged->out_ld;
  }
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(n_heads / gq),
                  static_cast<unsigned>(row_count));
  if (mma) {
    launch_split_mma(a, grid, stream, swap, paged != nullptr);
  } else if (d == 64) {
    launch_split<64>(a, gq, grid, stream);
  } else {
    launch_split<128>(a, gq, grid, stream);
  }
  if (fused_combine || plan.splits == 1) return;  // one split: the split kernel wrote out
  const dim3 heads(static_cast<unsigned>(n_heads), static_cast<unsigned>(row_count));
  const auto threads = static_cast<unsigned>(d);
  if (out_dtype == DType::f32) {
    launch_pdl(decode_combine_kernel<float>, heads, threads, 0, stream, a.acc, a.max_sum, a.splits,
               static_cast<int>(d), static_cast<float*>(out), static_cast<int>(n_heads), a.out_ld);
  } else {
    launch_pdl(decode_combine_kernel<__half>, heads, threads, 0, stream, a.acc, a.max_sum, a.splits,
               static_cast<int>(d), static_cast<__half*>(out), static_cast<int>(n_heads), a.out_ld);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void kv_attention(const KvLayerShape& shape, const KvLayerBuffers& layer, const DecodeSpan& span, const void* q,
                  std::int64_t n_heads, void* out, DType out_dtype, void* workspace, std::size_t workspace_bytes,
                  cuda_stream_t stream, AttentionKernel kernel, std::int64_t split_len) {
  launch_decode(shape, layer, span, nullptr, false, false, q, n_heads, out, out_dtype, workspace, workspace_bytes,
                stream, kernel, nullptr, nullptr, split_len);
}

void kv_attention_at(const KvLayerShape& shape, const KvLayerBuffers& layer, const std::int32_t* device_pos,
                     std::int64_t max_length, const void* q, std::int64_t n_heads, void* out, DType out_dtype,
                     void* workspace, std::size_t workspace_bytes, cuda_stream_t stream, bool history_complete,
                     AttentionKernel kernel, std::int64_t split_len) {
  LOWBIT_CHECK(device_pos != nullptr, "kv_attention_at: null device position");
  launch_decode(shape, layer, decode_span(shape, max_length), device_pos, true, history_complete, q, n_heads, out,
                out_dtype, workspace, workspace_bytes, stream, kernel, nullptr, nullptr, split_len);
}

std::size_t kv_attention_rows_workspace(const KvLayerShape& shape, std::int64_t n_heads, std::int64_t rows,
                                            std::int64_t max_length) {
  LOWBIT_CHECK(rows >= 1 && max_length >= 1, "kv_attention_rows_workspace: rows ", rows, ", max_length ",
               max_length);
  const std::int64_t splits = rows_plan(decode_span(shape, max_length).visible(shape)).splits;
  return decode_workspace_bytes(n_heads, shape.head_dim, splits) * static_cast<std::size_t>(rows);
}

namespace {

// The flash kernel's view of a chunk over a contiguous cache of the policies with a body
// or a ring (cuda/flash flash_attention_over_mixed_cache).
flash::MixedCacheAttention mixed_cache_of(const KvLayerShape& shape, const KvLayerBuffers& layer,
                                          const ChunkRows& chunk, const void* snapshot, std::int64_t n_heads,
                                          void* out, std::int64_t out_ld) {
  const std::int64_t d = shape.head_dim;
  const auto* base = static_cast<const std::uint16_t*>(chunk.base);
  const auto* snap = static_cast<const std::uint16_t*>(snapshot);
  const std::int64_t ring = shape.kv_heads * shape.window * d;  // one part of the snapshot
  flash::MixedCacheAttention c;
  c.q = base;
  c.ldq = chunk.ld;
  c.chunk_k = base + chunk.k_col;
  c.chunk_v = base + chunk.v_col;
  c.chunk_ld = chunk.ld;
  c.snap_k = snap;
  c.snap_v = snap ? snap + ring : nullptr;
  c.f16_k = layer.k.f16;
  c.f16_v = layer.v.f16;
  c.f16_slots = shape.f16_slots();
  c.body_bits = static_cast<int>(shape.body);
  c.codes_k = layer.k.codes;
  c.codes_v = layer.v.codes;
  c.scales_k = layer.k.scales;
  c.scales_v = layer.v.scales;
  c.mins_k = layer.k.mins;
  c.mins_v = layer.v.mins;
  c.key_block = shape.key_blocks() ? shape.key_block : 0;
  c.snap_staged = snap && shape.key_blocks() ? snap + 2 * ring : nullptr;  // ring_snapshot_bytes' layout
  c.sink = shape.sink;
  c.window = shape.window;
  c.body_base = shape.body_base;
  c.out = out;
  c.ldo = out_ld;
  c.rows = chunk.rows;
  c.pos0 = chunk.pos0;
  c.heads = n_heads;
  c.kv_heads = shape.kv_heads;
  c.head_dim = d;
  return c;
}

// kv_attention_rows on a contiguous cache, or (table set) on a sequence's pages.
void attention_rows(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                    const void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream, const PagedArgs& paged,
                    const std::int32_t* table, AttentionKernel kernel, bool paged_entry) {
  const std::int64_t d = shape.head_dim;
  check_chunk_rows(shape, chunk, "kv_attention_rows");
  LOWBIT_CHECK(n_heads > 0 && n_heads % shape.kv_heads == 0, "kv_attention_rows: n_heads = ", n_heads,
               " is not a multiple of kv_heads = ", shape.kv_heads);
  LOWBIT_CHECK(chunk.k_col >= n_heads * d, "kv_attention_rows: k_col ", chunk.k_col, " inside the ", n_heads * d,
               " query columns");
  LOWBIT_CHECK(out != nullptr && out_ld >= n_heads * d && out_ld % 2 == 0 &&
                   reinterpret_cast<std::uintptr_t>(out) % 4 == 0,
               "kv_attention_rows: out_ld ", out_ld, " (even, >= ", n_heads * d, ") and a 4-byte aligned out");
  LOWBIT_CHECK(shape.window == 0 || chunk.pos0 <= shape.sink || snapshot != nullptr,
               "kv_attention_rows: the ring's positions before the chunk need its snapshot");
  LOWBIT_CHECK(kernel != AttentionKernel::mma_swap, "kv_attention_rows: mma_swap is a decode kernel; the rows form "
               "runs mma (tensor cores) or simt");
  // flash: Hopper's wgmma kernels where they run, on a contiguous cache (not the paged
  // entry: its window policy has no pages, table null, and keeps the rows kernel, as every
  // paged policy does). The full policy is flash's causal chunk over the FP16 slots (slot
  // = position, [kv_heads][slots][D]); the others its form over the sink, the body and
  // the recent keys, with key blocks over any chunk appended after the snapshot.
  const bool flash = kernel == AttentionKernel::automatic && !paged_entry;
  if (flash && shape.full()) {
    const flash::CacheAttention c{chunk.base, chunk.ld, layer.k.f16, layer.v.f16, d, shape.f16_slots() * d, out,
                                  out_ld, chunk.rows, chunk.pos0, n_heads, shape.kv_heads, d};
    if (flash::flash_attention_over_cache(c, stream)) return;
  }
  if (flash && !shape.full() &&
      flash::flash_attention_over_mixed_cache(mixed_cache_of(shape, layer, chunk, snapshot, n_heads, out, out_ld),
                                              stream)) {
    return;
  }
  // Else the tensor-core rows kernel, with key blocks over any chunk appended after the
  // snapshot (its rows read an open block's K from the chunk or the snapshot), or the
  // simt kernel, with key blocks over rows appended in order (kv_append), none but the last
  // completing a block, so that the others read its FP16 keys from the staging ring
  // (kv_prefill_key_blocks cuts a chunk so).
  const bool key_blocks = shape.key_block > 0;
  const bool mma = kernel != AttentionKernel::simt && rows_mma_takes(shape, n_heads);
  LOWBIT_CHECK(!key_blocks || !mma || chunk.pos0 <= shape.body_base || snapshot != nullptr,
               "kv_attention_rows: key blocks: the open block before the chunk needs the ring's snapshot");
  LOWBIT_CHECK(!key_blocks || mma || shape.next_block_completion(chunk.pos0) >= chunk.pos0 + chunk.rows - 1,
               "kv_attention_rows: key blocks (--kv-key-block ", shape.key_block, "): the row at ",
               shape.next_block_completion(chunk.pos0), " completes a block before the chunk's last row (",
               chunk.pos0 + chunk.rows - 1, "); cut the chunk there (kv_prefill_key_blocks)");
  if (mma) {
    RowsMmaArgs a{shape, layer, paged, table};
    a.chunk = static_cast<const __half*>(chunk.base);
    a.ld = chunk.ld;
    a.k_col = chunk.k_col;
    a.v_col = chunk.v_col;
    a.pos0 = static_cast<int>(chunk.pos0);
    a.rows = static_cast<int>(chunk.rows);
    if (snapshot) {  // ring_snapshot_bytes' layout
      a.snap_k = static_cast<const std::uint16_t*>(snapshot);
      a.snap_v = a.snap_k + shape.kv_heads * shape.window * d;
      a.snap_staged = a.snap_v + shape.kv_heads * shape.window * d;
    }
    a.n_heads = static_cast<int>(n_heads);
    a.q_scale = 1.4426950408889634f / std::sqrt(static_cast<float>(d));
    a.out = static_cast<__half*>(out);
    a.out_ld = out_ld;
    launch_rows_mma(a, workspace, workspace_bytes, stream);
    return;
  }
  LOWBIT_CHECK(kernel != AttentionKernel::mma, "kv_attention_rows: the mma kernel takes GQA groups of up to 64 and "
               "key blocks of 16 or more, got ", n_heads / shape.kv_heads, " and ", shape.key_block);
  // As many rows a launch as the workspace holds (the last row's plan serves them all).
  const DecodeSpan last = decode_span(shape, chunk.pos0 + chunk.rows);
  const std::size_t per_row = decode_workspace_bytes(n_heads, d, rows_plan(last.visible(shape)).splits);
  const auto per_launch = static_cast<std::int64_t>(workspace_bytes / per_row);
  LOWBIT_CHECK(per_launch >= 1, "kv_attention_rows: workspace of ", workspace_bytes, " bytes, a row needs ",
               per_row);
  for (std::int64_t r0 = 0; r0 < chunk.rows; r0 += per_launch) {
    const RowsLaunch rows{chunk, r0, std::min(per_launch, chunk.rows - r0), static_cast<const std::uint16_t*>(snapshot),
                          out_ld, paged, table};
    launch_decode(shape, layer, last, nullptr, false, false, chunk.base, n_heads,
                  static_cast<std::uint16_t*>(out) + r0 * out_ld, DType::f16, workspace, workspace_bytes, stream,
                  AttentionKernel::simt, &rows);
  }
}

}  // namespace

void kv_attention_rows(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                       const void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                       std::size_t workspace_bytes, cuda_stream_t stream, AttentionKernel kernel) {
  attention_rows(shape, layer, chunk, snapshot, n_heads, out, out_ld, workspace, workspace_bytes, stream, PagedArgs{},
                 nullptr, kernel, false);
}

bool kv_attention_rows_flash(const KvLayerShape& shape, const KvLayerBuffers& layer, const ChunkRows& chunk,
                             const void* snapshot, std::int64_t n_heads, void* out, std::int64_t out_ld) {
  check_chunk_rows(shape, chunk, "kv_attention_rows_flash");
  return !shape.full() &&
         flash::flash_mixed_cache_takes(mixed_cache_of(shape, layer, chunk, snapshot, n_heads, out, out_ld));
}

void paged_kv_attention_rows(const KvPageLayout& layout, const KvPagedLayer& layer, std::int32_t slot,
                             const std::int32_t* tables, const ChunkRows& chunk, const void* snapshot,
                             std::int64_t n_heads, void* out, std::int64_t out_ld, void* workspace,
                             std::size_t workspace_bytes, cuda_stream_t stream, std::int32_t* status,
                             AttentionKernel kernel) {
  check_paged_rows_call(layout, layer, slot, tables, chunk, "paged_kv_attention_rows");
  const bool pages = layout.has_pages();
  attention_rows(layout.shape, core::kv_fixed_area(layout, layer, slot), chunk, snapshot, n_heads, out, out_ld,
                 workspace, workspace_bytes, stream,
                 pages ? PagedArgs{layout, layer, nullptr, tables, status, layout.max_tokens} : PagedArgs{},
                 pages ? tables + slot * layout.table_stride : nullptr, kernel, true);
}

std::size_t kv_attention_workspace_bound(const KvLayerShape& shape, std::int64_t n_heads,
                                             std::int64_t max_length) {
  // A plan over max_length positions or fewer takes at most decode_splits_most splits
  // (core/kv_layout.h), for either kernel (the mma kernel's blocks take more heads: fewer
  // blocks a split, more splits); the counters of the fused combine are one a block row.
  std::int64_t bound = 1, rows_of_blocks = 0;
  for (const AttentionKernel kernel : {AttentionKernel::simt, AttentionKernel::mma, AttentionKernel::mma_swap}) {
    const bool mma = kernel != AttentionKernel::simt;
    if (mma && !uses_mma(n_heads, shape, AttentionKernel::automatic)) continue;
    const std::int64_t blocks = n_heads / heads_per_block(n_heads, shape, mma);
    const std::int64_t slots =
        std::int64_t{resident_blocks(shape, mma, uses_swap(n_heads, shape, kernel))} * core::multiprocessor_count();
    bound = std::max(bound, core::decode_splits_most(max_length, blocks, slots));
    rows_of_blocks = std::max(rows_of_blocks, blocks);
  }
  return decode_workspace_bytes(n_heads, shape.head_dim, bound) + counters_bytes(static_cast<std::size_t>(rows_of_blocks));
}

namespace {

void check_paged_call(const KvPageLayout& layout, const KvPagedLayer& layer, const PagedBatch& batch,
                      const BatchRows& rows, std::int64_t n_heads, const char* what) {
  const KvLayerShape& s = layout.shape;
  LOWBIT_CHECK(batch.descs && (batch.tables || !layout.has_pages()) && batch.batch >= 1 && batch.batch <= 65535,
               what, ": batch of ", batch.batch, " rows (1..65535) with device descriptors and page tables");
  LOWBIT_CHECK(batch.max_length >= 1 && batch.max_length <= layout.max_tokens && batch.max_length < (1ll << 30), what,
               ": max_length ", batch.max_length, ", expected 1..", layout.max_tokens);
  LOWBIT_CHECK((layer.pages || !layout.has_pages()) && (layer.fixed || layout.fixed_bytes() == 0), what,
               ": the layer's pages or fixed areas are missing");
  LOWBIT_CHECK(layout.page_tokens % 16 == 0 && layout.page_tokens > 0, what, ": page_tokens ", layout.page_tokens,
               ", expected a multiple of 16");
  LOWBIT_CHECK(n_heads > 0 && n_heads % s.kv_heads == 0, what, ": n_heads = ", n_heads,
               " is not a multiple of kv_heads = ", s.kv_heads);
  const std::int64_t d = s.head_dim;
  auto aligned = [](std::int64_t halves) { return halves % 8 == 0; };  // 16 bytes
  LOWBIT_CHECK(rows.base && reinterpret_cast<std::uintptr_t>(rows.base) % 16 == 0 && aligned(rows.ld) &&
                   aligned(rows.k_col) && aligned(rows.v_col) && rows.k_col >= n_heads * d &&
                   rows.v_col >= n_heads * d && rows.ld >= rows.k_col + s.kv_heads * d &&
                   rows.ld >= rows.v_col + s.kv_heads * d,
               what, ": rows of ld ", rows.ld, ", k_col ", rows.k_col, ", v_col ", rows.v_col,
               " (16-byte aligned; q's ", n_heads * d, " columns first, K and V inside a row)");
}

}  // namespace

DecodeSplitPlan paged_kv_attention_plan(const KvPageLayout& layout, std::int64_t n_heads, std::int64_t batch,
                                        std::int64_t max_length, AttentionKernel kernel) {
  LOWBIT_CHECK(batch >= 1 && max_length >= 1, "paged_kv_attention: batch ", batch, ", max_length ", max_length);
  return batch_plan(layout.shape, decode_span(layout.shape, max_length), n_heads, batch, kernel);
}

std::size_t paged_kv_attention_workspace(const KvPageLayout& layout, std::int64_t n_heads, std::int64_t batch,
                                         std::int64_t max_length) {
  std::size_t bound = 0;
  for (const AttentionKernel kernel : {AttentionKernel::simt, AttentionKernel::mma, AttentionKernel::mma_swap}) {
    if (kernel != AttentionKernel::simt && !uses_mma(n_heads, layout.shape, AttentionKernel::automatic)) continue;
    if (kernel == AttentionKernel::mma && layout.shape.key_block > 0) continue;  // mma_swap reads key blocks
    const bool mma = kernel != AttentionKernel::simt;
    const std::int64_t splits = paged_kv_attention_plan(layout, n_heads, batch, max_length, kernel).splits;
    const std::int64_t blocks = n_heads / heads_per_block(n_heads, layout.shape, mma);
    bound = std::max(bound, decode_workspace_bytes(n_heads, layout.shape.head_dim, splits) *
                                    static_cast<std::size_t>(batch) +
                                counters_bytes(static_cast<std::size_t>(blocks * batch)));
  }
  return bound;
}

void paged_kv_attention(const KvPageLayout& layout, const KvPagedLayer& layer, const PagedBatch& batch,
                        const BatchRows& rows, std::int64_t n_heads, void* out, std::int64_t out_ld, DType out_dtype,
                        void* workspace, std::size_t workspace_bytes, cuda_stream_t stream, bool history_complete,
                        AttentionKernel kernel, std::int64_t split_len) {
  check_paged_call(layout, layer, batch, rows, n_heads, "paged_kv_attention");
  LOWBIT_CHECK(out && out_ld >= n_heads * layout.shape.head_dim, "paged_kv_attention: out_ld ", out_ld, " < ",
               n_heads * layout.shape.head_dim);
  const PagedLaunch paged{PagedArgs{layout, layer, batch.descs, batch.tables, batch.status, batch.max_length},
                          batch.batch, rows.ld, out_ld};
  launch_decode(layout.shape, KvLayerBuffers{}, decode_span(layout.shape, batch.max_length), nullptr, true,
                history_complete, rows.base, n_heads, out, out_dtype, workspace, workspace_bytes, stream, kernel,
                nullptr, &paged, split_len);
}

void paged_kv_check_status(std::int32_t* status, cuda_stream_t stream) {
  LOWBIT_CHECK(status != nullptr, "paged_kv_check_status: null status");
  std::int32_t bits = 0;
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(&bits, status, sizeof bits, cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (bits == 0) return;
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(status, 0, sizeof bits, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  LOWBIT_FAIL("paged kv: the kernels skipped rows with", (bits & kPagedBadSlot ? " a slot outside the pool's" : ""),
              (bits & kPagedBadPosition ? " a position past max_length" : ""),
              (bits & kPagedBadPage ? " a page-table entry outside the pool" : ""), " (status ", bits, ")");
}

}  // namespace lowbit::cuda::kv
