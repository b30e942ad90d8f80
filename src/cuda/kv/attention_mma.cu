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
#include <cuda_fp16.h>

#include <cstdint>

#include "core/pdl.cuh"
#include "cuda/kv/attention_common.cuh"
#include "cuda/kv/kv_cuda.h"
#include "cuda/mma.cuh"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::kv {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 16;  // positions a warp takes at a time (the k of the P V mma)

// N bytes from p into words (N a multiple of 4), 16 / 8 / 4 bytes at a time; past L1
// when the row may have been cached there before its writer finished.
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
// count / 2 words of f16 pairs (the order of the codes kept). INT8 (two's complement):
// 0x6400 | (b ^ 0x80) is the f16 1024 + b + 128; INT4 (unsigned): 0x6400 | n is 1024 + n.
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
#pragma unroll
    for (int i = Count / 8 - 1; i >= 0; --i) {  // word i feeds words 4i .. 4i + 3
      const std::uint32_t x = w[i];
      const __half2 bias = __float2half2_rn(1024.0f);
#pragma unroll
      for (int k = 3; k >= 0; --k) {
        const std::uint32_t byte = (x >> (8 * k)) & 0xFFu;
        const std::uint32_t pair = (byte & 0xFu) | ((byte >> 4) << 16) | 0x64006400u;
        const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&pair), bias);
        w[4 * i + k] = *reinterpret_cast<const std::uint32_t*>(&v);
      }
    }
  }
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

// Where visible index i of the split lives, and in which form.
struct Where {
  int pos;
  bool body;
};

template <int Bits>
__device__ __forceinline__ Where where(const SplitArgs& a, int i) {
  const int skip = a.shape.drops() ? a.recent_begin - a.sink_end : 0;
  const int pos = i < a.sink_end ? i : i + skip;
  return Where{pos, Bits != 0 && pos >= a.sink_end && pos < a.recent_begin};
}

template <int D, int Bits>
__global__ void __launch_bounds__(kThreads) kv_attention_mma_kernel(SplitArgs args) {
  constexpr int kKSteps = D / 16;      // k steps of Q K^T
  constexpr int kNTiles = D / 8;       // n tiles of P V
  constexpr int kKWords = D / 8;       // a lane's quarter of a K row as f16 pairs
  constexpr int kVWords = D / 16;      // a lane's eighth of a V row as f16 pairs
  pdl_trigger();
  SplitArgs a = args;
  if (!a.prefetch) pdl_wait();
  if (a.device_pos) resolve_span(a, static_cast<long long>(*a.device_pos) + 1);
  const KvLayerShape& s = a.shape;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, c = lane % 4;
  const int head = static_cast<int>(blockIdx.y), h0 = head * a.group;
  const int split = static_cast<int>(blockIdx.x);
  const int i0 = split * a.split_len;
  const int n = min(a.split_len, a.visible - i0);
  const int tiles = (n + kTile - 1) / kTile;

  // One tile's loads: lane (g, c) reads quarter c of K rows g and g + 8, and eighth g of
  // V rows 2c, 2c + 1, 2c + 8, 2c + 9 (with the parameters of those four positions).
  struct Tile {
    std::uint32_t k[2][kKWords];
    std::uint32_t v[4][kVWords];
    float ks[4], km[4], vs[4], vm[4];  // the parameters of the S columns / V rows (1, 0: FP16)
    bool k_body[2], v_body[4];
  };
  // appended: true loads only the rows this step's append writes (after the wait), false
  // the others (before it, under prefetch); both when the history is not complete.
  auto load_tile = [&](int t, Tile& x, int phase) {
    const int base = t * kTile;
    auto wanted = [&](int pos) {
      if (!a.prefetch) return phase == 0;
      return appended_now(a, pos) == (phase == 1);
    };
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = base + g + 8 * r;
      if (j >= n) {
        if (phase == 0) {
#pragma unroll
          for (int w = 0; w < kKWords; ++w) x.k[r][w] = 0;
          x.k_body[r] = false;
        }
        continue;
      }
      const Where at = where<Bits>(a, i0 + j);
      if (!wanted(at.pos)) continue;
      const bool past_l1 = a.prefetch && appended_now(a, at.pos);
      x.k_body[r] = at.body;
      if (!at.body) {
        const int slot = at.pos < s.sink ? at.pos : static_cast<int>(s.sink) + at.pos % static_cast<int>(s.window);
        const std::uint16_t* row = a.layer.k.f16 + (static_cast<long long>(head) * s.f16_slots() + slot) * D;
        load_words<D / 2>(row + c * (D / 4), past_l1, x.k[r]);
      } else if constexpr (Bits != 0) {
        const long long param = static_cast<long long>(at.pos - s.body_base) * s.kv_heads + head;
        const std::uint8_t* codes = a.layer.k.codes + param * (Bits == 8 ? D : D / 2);
        load_words<D * Bits / 32>(codes + c * (D * Bits / 32), past_l1, x.k[r]);
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = base + 2 * c + (u & 1) + 8 * (u >> 1);
      if (j >= n) {
        if (phase == 0) {
#pragma unroll
          for (int w = 0; w < kVWords; ++w) x.v[u][w] = 0;
          x.v_body[u] = false;
          x.ks[u] = x.vs[u] = 1.0f;
          x.km[u] = x.vm[u] = 0.0f;
        }
        continue;
      }
      const Where at = where<Bits>(a, i0 + j);
      if (!wanted(at.pos)) continue;
      const bool past_l1 = a.prefetch && appended_now(a, at.pos);
      x.v_body[u] = at.body;
      x.ks[u] = x.vs[u] = 1.0f;
      x.km[u] = x.vm[u] = 0.0f;
      if (!at.body) {
        const int slot = at.pos < s.sink ? at.pos : static_cast<int>(s.sink) + at.pos % static_cast<int>(s.window);
        const std::uint16_t* row = a.layer.v.f16 + (static_cast<long long>(head) * s.f16_slots() + slot) * D;
        load_words<D / 4>(row + g * (D / 8), past_l1, x.v[u]);
      } else if constexpr (Bits != 0) {
        const long long param = static_cast<long long>(at.pos - s.body_base) * s.kv_heads + head;
        const std::uint8_t* codes = a.layer.v.codes + param * (Bits == 8 ? D : D / 2);
        load_words<D * Bits / 64>(codes + g * (D * Bits / 64), past_l1, x.v[u]);
        auto param_of = [&](const std::uint16_t* p) {
          return formats::half_to_float({past_l1 ? __ldcg(p + param) : __ldg(p + param)});
        };
        x.ks[u] = param_of(a.layer.k.scales);
        x.vs[u] = param_of(a.layer.v.scales);
        if constexpr (Bits == 4) {
          x.km[u] = param_of(a.layer.k.mins);
          x.vm[u] = param_of(a.layer.v.mins);
        }
      }
    }
  };

  Tile cur;
  const int first = warp;
  if (first < tiles) load_tile(first, cur, 0);
  if (a.prefetch) {
    pdl_wait();
    if (first < tiles) load_tile(first, cur, 1);
  }

  // Q as A fragments (rows g and g + 8; quarter c of head_dim), and sum(q) per row for
  // INT4 keys' minimums. The fragments are the same for every warp: kept in shared memory
  // (a lane reads its own 16 bytes a k step), which leaves registers to the loads.
  __shared__ uint4 qf[kKSteps][32];
  float sum_q[2] = {0.0f, 0.0f};
  {
    std::uint32_t rows[2][kKWords];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int hq = g + 8 * r;
      if (hq < a.group) {
        load_words<D / 2>(a.q + static_cast<long long>(h0 + hq) * D + c * (D / 4), false, rows[r]);
      } else {
#pragma unroll
        for (int w = 0; w < kKWords; ++w) rows[r][w] = 0;
      }
#pragma unroll
      for (int w = 0; w < kKWords; ++w) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&rows[r][w]));
        sum_q[r] += f.x + f.y;
      }
      sum_q[r] += __shfl_xor_sync(0xffffffffu, sum_q[r], 1);
      sum_q[r] += __shfl_xor_sync(0xffffffffu, sum_q[r], 2);
    }
    if (warp == 0) {
#pragma unroll
      for (int k = 0; k < kKSteps; ++k) {
        qf[k][lane] = make_uint4(rows[0][2 * k], rows[1][2 * k], rows[0][2 * k + 1], rows[1][2 * k + 1]);
      }
    }
  }
  __syncthreads();

  float o[kNTiles][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, vmin[2] = {0.0f, 0.0f};
  for (int t = first; t < tiles; t += kWarps) {
    if (t != first) load_tile(t, cur, 0), load_tile(t, cur, 1);
    // Codes become their values; parameters stay outside.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (Bits != 0 && cur.k_body[r]) codes_to_halves<Bits, D / 4>(cur.k[r]);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (Bits != 0 && cur.v_body[u]) codes_to_halves<Bits, D / 8>(cur.v[u]);
    }
    float sacc[2][4] = {};
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      const uint4 q = qf[k][lane];
#pragma unroll
      for (int r = 0; r < 2; ++r) mma_16816<__half>(sacc[r], q.x, q.y, q.z, q.w, cur.k[r][2 * k], cur.k[r][2 * k + 1]);
    }
    // sacc[r][e]: row (query head) g + 8 (e / 2), column (position) 8 r + 2 c + e % 2 = u.
    float p[2][4];
#pragma unroll
    for (int row = 0; row < 2; ++row) {
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int j = t * kTile + 2 * c + (u & 1) + 8 * (u >> 1);
        const float raw = sacc[u >> 1][2 * row + (u & 1)];
        const float score = fmaf(raw, cur.ks[u], cur.km[u] * sum_q[row]) * a.q_scale;
        p[row][u] = j < n ? score : -INFINITY;
        mx = fmaxf(mx, p[row][u]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[row], mx);
      const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[row] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        p[row][u] = m_new == -INFINITY ? 0.0f : exp2f(p[row][u] - m_new);
        sum += p[row][u];
      }
      l[row] = fmaf(l[row], alpha, sum);
      m[row] = m_new;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        o[j][2 * row] *= alpha;
        o[j][2 * row + 1] *= alpha;
      }
      float vm_sum = 0.0f;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        vm_sum = fmaf(p[row][u], cur.vm[u], vm_sum);
        p[row][u] *= cur.vs[u];
      }
      vmin[row] = fmaf(vmin[row], alpha, vm_sum);
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
      const std::uint32_t b0 = __byte_perm(cur.v[0][j / 2], cur.v[1][j / 2], sel);
      const std::uint32_t b1 = __byte_perm(cur.v[2][j / 2], cur.v[3][j / 2], sel);
      mma_16816<__half>(o[j], hi[0], hi[1], hi[2], hi[3], b0, b1);
      mma_16816<__half>(o[j], lo[0], lo[1], lo[2], lo[3], b0, b1);
    }
  }

  // A row's sum and minimum term over its four lanes; the minimums join every channel.
#pragma unroll
  for (int row = 0; row < 2; ++row) {
    l[row] += __shfl_xor_sync(0xffffffffu, l[row], 1);
    l[row] += __shfl_xor_sync(0xffffffffu, l[row], 2);
    vmin[row] += __shfl_xor_sync(0xffffffffu, vmin[row], 1);
    vmin[row] += __shfl_xor_sync(0xffffffffu, vmin[row], 2);
  }

  // The block's four warps into one (max, sum, output) per query head, in shared memory.
  __shared__ float red_o[kWarps][kMmaMaxGroup][D];
  __shared__ float red_ml[kWarps][kMmaMaxGroup][2];
#pragma unroll
  for (int row = 0; row < 2; ++row) {
    const int hq = g + 8 * row;
    if (hq < a.group) {
      // C column 2c + e of n tile j is dim (2c + e) * kNTiles + j.
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        red_o[warp][hq][(2 * c) * kNTiles + j] = o[j][2 * row] + vmin[row];
        red_o[warp][hq][(2 * c + 1) * kNTiles + j] = o[j][2 * row + 1] + vmin[row];
      }
      if (c == 0) red_ml[warp][hq][0] = m[row], red_ml[warp][hq][1] = l[row];
    }
  }
  __syncthreads();
  for (int idx = static_cast<int>(threadIdx.x); idx < a.group * D; idx += kThreads) {
    const int hq = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_ml[w][hq][0]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = mx == -INFINITY ? 0.0f : exp2f(red_ml[w][hq][0] - mx);
      sum = fmaf(red_ml[w][hq][1], weight, sum);
      acc = fmaf(red_o[w][hq][d], weight, acc);
    }
    const int hg = h0 + hq;
    if (a.splits == 1) {  // nothing to combine: out = acc / l
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
  if (a.splits == 1 || !a.counters) return;
  // Publish the partials, count this block; the last one of its KV head combines.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.y, 1u) == static_cast<unsigned>(a.splits) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  __shared__ float weights[kMaxSplit];
  __shared__ float total;
  for (int hq = 0; hq < a.group; ++hq) {
    const int hg = h0 + hq;
    if (warp == 0) {
      const float t = combine_weights(a.max_sum, a.splits, hg, weights, lane);
      if (lane == 0) total = t;
    }
    __syncthreads();
    for (int idx = static_cast<int>(threadIdx.x); idx < D / 2; idx += kThreads) {
      const int ch = 2 * idx;
      const float2 v = combine_pair(a.acc, weights, total, a.splits, D, hg, ch);
      if (a.out_f16) {
        static_cast<__half*>(a.out)[hg * D + ch] = __float2half_rn(v.x);
        static_cast<__half*>(a.out)[hg * D + ch + 1] = __float2half_rn(v.y);
      } else {
        static_cast<float*>(a.out)[hg * D + ch] = v.x;
        static_cast<float*>(a.out)[hg * D + ch + 1] = v.y;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) a.counters[blockIdx.y] = 0;  // ready for the next call
}

template <int D>
void launch_d(const SplitArgs& a, dim3 grid, cudaStream_t stream) {
  switch (a.shape.body) {
    case KvBody::none: launch_pdl(kv_attention_mma_kernel<D, 0>, grid, kThreads, 0, stream, a); break;
    case KvBody::int8: launch_pdl(kv_attention_mma_kernel<D, 8>, grid, kThreads, 0, stream, a); break;
    case KvBody::int4: launch_pdl(kv_attention_mma_kernel<D, 4>, grid, kThreads, 0, stream, a); break;
  }
}

}  // namespace

void launch_split_mma(const SplitArgs& a, dim3 grid, cudaStream_t stream) {
  if (a.shape.head_dim == 64) {
    launch_d<64>(a, grid, stream);
  } else {
    launch_d<128>(a, grid, stream);
  }
}

}  // namespace lowbit::cuda::kv
