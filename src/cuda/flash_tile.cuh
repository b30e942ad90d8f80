// FlashAttention-2's inner steps for one warp's 16 query rows and a tile of kBN keys, on
// mma.sync m16n8k16 with f32 accumulators: S = Q K^T, the online softmax in the exp2
// domain, O = O corr + P V with P rounded to the input type. Shared by flash_attention's
// kernel (cuda/flash/flash_attention.cu, also the seed-004 pipeline's attention) and the
// prefill rows kernel over the KV cache (cuda/kv/attention_rows_mma.cu). K and V tiles
// are [keys][HD] in shared memory, their 16-byte chunks swizzled (swizzle below); lane =
// 4 r + c holds rows r and r + 8 of the accumulators (cuda/mma.cuh). T: __half or
// __nv_bfloat16, the type of Q, K, V and P.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/fast_math.cuh"
#include "cuda/mma.cuh"

namespace lowbit::cuda::flash {

// 16-byte chunk `chunk` of tile row `row` sits at chunk ^ (row & 7): the 8 rows that an
// ldmatrix phase reads land on 8 different bank groups.
__device__ __forceinline__ int swizzle(int row, int chunk) { return chunk ^ (row & 7); }

__device__ __forceinline__ std::uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

// A pair of T from two floats (rounded to nearest), as one 32-bit fragment register.
template <class T>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    return pack_half2(lo, hi);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
}

// The warp's Q fragments (its 16 rows of the Q tile at sq, rows warp * 16 ..), for all
// HD / 16 k-steps; loaded once, kept in registers for every key tile.
template <int HD>
__device__ __forceinline__ void load_q(std::uint32_t (&qf)[HD / 16][4], std::uint32_t sq, int warp, int lane) {
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    const int row = warp * 16 + lane % 16;
    ldmatrix_x4(qf[ks], sq + row * (2 * HD) + swizzle(row, 2 * ks + lane / 16) * 16);
  }
}

// s (16 x kBN, zeroed here) = Q K^T: qf the warp's Q fragments, sk the K tile's address.
template <int HD, int kBN, class T = __half>
__device__ __forceinline__ void qk_tile(float (&s)[kBN / 8][4], const std::uint32_t (&qf)[HD / 16][4],
                                        std::uint32_t sk, int lane) {
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
#pragma unroll
    for (int jp = 0; jp < kBN / 16; ++jp) {
      const int key = jp * 16 + (lane % 8) + (lane / 16) * 8;
      std::uint32_t kf[4];
      ldmatrix_x4(kf, sk + key * (2 * HD) + swizzle(key, 2 * ks + (lane / 8) % 2) * 16);
      mma_16816<T>(s[2 * jp], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], kf[0], kf[1]);
      mma_16816<T>(s[2 * jp + 1], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], kf[2], kf[3]);
    }
  }
}

// The online softmax of rows r (e = 0, 1) and r + 8 (e = 2, 3) over the tile's scores
// (masked ones -inf): s becomes p = 2^(s sl2 - m), m the rows' running max (in the exp2
// domain, the same on the 4 lanes of a row), l this lane's part of the running sum;
// corr the factor the rows' earlier O and sums take. kMaxSlack > 0: m moves only when
// the tile's max passes it by more than kMaxSlack, so p stays at most 2^kMaxSlack and corr
// is exactly 1 on most tiles, where a caller can skip O's rescaling (FlashAttention-4's
// lazy rescaling; the quotient O / l is the same, p's rounding relative as before).
template <int kBN, int kMaxSlack = 0>
__device__ __forceinline__ void softmax_tile(float (&s)[kBN / 8][4], float (&m)[2], float (&l)[2], float sl2,
                                             float (&corr)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hr], s[j][2 * hr + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = kMaxSlack == 0 ? fmaxf(m[hr], mx * sl2)
                                       : (mx * sl2 > m[hr] + static_cast<float>(kMaxSlack) ? mx * sl2 : m[hr]);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet
    corr[hr] = kMaxSlack > 0 && m_new == m[hr] ? 1.0f : exp2_approx(m[hr] - m_use);
    m[hr] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
      for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
        s[j][e] = exp2_approx(fmaf(s[j][e], sl2, -m_use));
        sum += s[j][e];
      }
    }
    l[hr] = l[hr] * corr[hr] + sum;  // lane-partial; reduced once at the end
  }
}

// o = o corr + P V: P is p (softmax_tile's s) as T A fragments (the accumulator and A
// layouts line up), V's fragments by ldmatrix.trans from the tile at sv.
template <int HD, int kBN, class T = __half>
__device__ __forceinline__ void pv_tile(float (&o)[HD / 8][4], const float (&corr)[2], const float (&s)[kBN / 8][4],
                                        std::uint32_t sv, int lane) {
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) {
    o[d][0] *= corr[0], o[d][1] *= corr[0];
    o[d][2] *= corr[1], o[d][3] *= corr[1];
  }
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    const std::uint32_t pa[4] = {pack_pair<T>(s[2 * kk][0], s[2 * kk][1]), pack_pair<T>(s[2 * kk][2], s[2 * kk][3]),
                                 pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                 pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
      std::uint32_t vf[4];
      ldmatrix_x4_trans(vf, sv + key * (2 * HD) + swizzle(key, 2 * dp + lane / 16) * 16);
      mma_16816<T>(o[2 * dp], pa[0], pa[1], pa[2], pa[3], vf[0], vf[1]);
      mma_16816<T>(o[2 * dp + 1], pa[0], pa[1], pa[2], pa[3], vf[2], vf[3]);
    }
  }
}

// The end of a row block: o / l for the rows row0 and row0 + 8 of a sequence (l this
// lane's part of the sums, reduced over the row's 4 lanes here), written as T pairs at
// out + (first + row) ld + col (first: the sequence's first row of out, col: the head's
// first channel); rows from q_len on are not written. Lane c holds channels 8d + 2c, + 1.
template <int HD, class T>
__device__ __forceinline__ void store_rows(const float (&o)[HD / 8][4], const float (&l)[2], std::uint16_t* out,
                                           long long ld, int first, int col, int row0, int q_len, int c) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float sum = l[hr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int row = row0 + 8 * hr;
    if (row >= q_len) continue;
    std::uint16_t* dst = out + static_cast<long long>(first + row) * ld + col + 2 * c;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
      *reinterpret_cast<std::uint32_t*>(dst + d * 8) = pack_pair<T>(o[d][2 * hr] * inv, o[d][2 * hr + 1] * inv);
    }
  }
}

}  // namespace lowbit::cuda::flash
