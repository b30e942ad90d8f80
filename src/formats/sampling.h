// The value-level arithmetic of token sampling, one definition for the CPU sampler
// (engine/sampling.h, the oracle) and the GPU kernel (cuda/model/sampling.cu), so that
// both draw the same token from the same logits, parameters and seed.
//
// Per row of logits (llama.cpp's chain: penalties, top-k, top-p, min-p, temperature,
// draw):
//   l      = sanitize(logit): NaN -> -inf, +inf -> FLT_MAX, -0 -> +0
//   l      = penalize(l, count) for each token seen in the request's penalty window
//   key    = order_key(l, id): larger logit first, then lower id (unique per token)
//   greedy (temperature <= 0, or no logit above -inf): the token of the largest key
//   top-k  = the k largest keys
//   W_i    = floor(exp(l_i - l_max) * 2^36), an integer weight (exp_nonpositive below)
//   top-p  = the shortest key-ordered prefix of the top-k set whose W sum reaches
//            ceil(p * the set's W sum), computed exactly in integers
//   min-p  = tokens with exp(l_i - l_max) >= min_p
//   V_i    = floor(exp((l_i - l_max) / temperature) * 2^36) for the tokens kept
//   draw   = r = floor(u * sum(V) / 2^64), u the request's SplitMix64 output for this
//            draw; the token is the lowest id whose inclusive prefix sum of V (in id
//            order) exceeds r.
// Sums are integers, so their order does not matter (a parallel reduction equals a
// loop); every float operation is one IEEE operation, spelled __f*_rn on the device
// so that nvcc cannot contract it (the host builds with -ffp-contract=off). A token
// whose weight is below 2^-36 of the top token's is never drawn.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "formats/hd.h"

namespace lowbit::formats::sampling {

// One row's parameters for one draw (plain data, host and device).
struct RowParams {
  float temperature = 0.0f;        // <= 0: greedy
  std::int32_t top_k = 0;          // <= 0 (or >= vocab): off
  float top_p = 1.0f;              // >= 1: off
  float min_p = 0.0f;              // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off
  float frequency_penalty = 0.0f;  // 0: off
  float presence_penalty = 0.0f;   // 0: off
  std::uint64_t seed = 0;
  std::uint64_t draw = 0;          // index of this draw in the request's random stream
};

constexpr int kWeightBits = 36;

LOWBIT_HD bool greedy(const RowParams& p) { return !(p.temperature > 0.0f); }
LOWBIT_HD bool top_k_active(const RowParams& p, std::int64_t vocab) { return p.top_k > 0 && p.top_k < vocab; }
LOWBIT_HD bool top_p_active(const RowParams& p) { return p.top_p < 1.0f; }
LOWBIT_HD bool min_p_active(const RowParams& p) { return p.min_p > 0.0f; }

LOWBIT_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
LOWBIT_HD float rint_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::rint(x);  // the default rounding mode: to nearest, ties to even
#endif
}

LOWBIT_HD float sanitize(float logit) {
  if (logit != logit) return -INFINITY;  // NaN
  if (logit > FLT_MAX) return FLT_MAX;
  return logit == 0.0f ? 0.0f : logit;   // -0 -> +0: equal logits get equal keys
}

// llama.cpp's penalties for a token seen `count` (> 0) times in the window: the
// repetition penalty divides a positive logit and multiplies a non-positive one, then
// l -= count * frequency + presence.
LOWBIT_HD float penalize(float logit, std::int32_t count, const RowParams& p) {
  const float l = logit <= 0.0f ? mul_rn(logit, p.repeat_penalty) : div_rn(logit, p.repeat_penalty);
  return sanitize(sub_rn(l, add_rn(mul_rn(static_cast<float>(count), p.frequency_penalty), p.presence_penalty)));
}

// Orders tokens by sanitized logit (descending), then id (ascending): the larger key
// comes first. The high word maps the float's bits to an unsigned order.
LOWBIT_HD std::uint64_t order_key(float logit, std::int32_t id) {
  const std::uint32_t bits = float_to_bits(logit);
  const std::uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<std::uint64_t>(ordered) << 32) | (0xffffffffu - static_cast<std::uint32_t>(id));
}
LOWBIT_HD std::int32_t key_id(std::uint64_t key) {
  return static_cast<std::int32_t>(0xffffffffu - static_cast<std::uint32_t>(key & 0xffffffffu));
}
LOWBIT_HD float key_logit(std::uint64_t key) {
  const auto ordered = static_cast<std::uint32_t>(key >> 32);
  return bits_to_float((ordered & 0x80000000u) ? (ordered & 0x7fffffffu) : ~ordered);
}

// exp(x) for x <= 0 from IEEE operations only (Cody-Waite reduction by ln 2, a
// degree-7 Taylor polynomial in Horner form, scaling by 2^k through the exponent
// bits): the same bits on host and device. 0 below -86 (and for -inf / NaN), 1 at 0.
LOWBIT_HD float exp_nonpositive(float x) {
  if (!(x >= -86.0f)) return 0.0f;
  if (x >= 0.0f) return 1.0f;
  const float k = rint_even(mul_rn(x, 1.44269504f));          // x / ln 2, in [-124, 0]
  float r = fma_rn(k, -0.693145751953125f, x);                 // ln 2, high part (exact product)
  r = fma_rn(k, -1.42860677e-06f, r);                          // ln 2, low part
  float poly = fma_rn(1.98412698e-04f, r, 1.38888889e-03f);    // 1/7!, 1/6!
  poly = fma_rn(poly, r, 8.33333377e-03f);                     // 1/5!
  poly = fma_rn(poly, r, 4.16666679e-02f);                     // 1/4!
  poly = fma_rn(poly, r, 1.66666672e-01f);                     // 1/3!
  poly = fma_rn(poly, r, 0.5f);
  poly = fma_rn(poly, r, 1.0f);
  poly = fma_rn(poly, r, 1.0f);
  const auto exponent = static_cast<std::uint32_t>(static_cast<std::int32_t>(k) + 127);
  return mul_rn(poly, bits_to_float(exponent << 23));  // 2^k, k >= -124: no subnormals
}

// e in [0, 1] as an integer with kWeightBits fraction bits, rounded down (exact
// scaling by a power of two, then truncation).
LOWBIT_HD std::uint64_t fixed_weight(float e) {
  return static_cast<std::uint64_t>(mul_rn(e, 68719476736.0f));  // 2^36
}

// W_i: the top-p / min-p weight (before temperature).
LOWBIT_HD float relative_probability(float logit, float max_logit) { return exp_nonpositive(sub_rn(logit, max_logit)); }
// V_i: the draw weight after temperature (> 0).
LOWBIT_HD std::uint64_t draw_weight(float logit, float max_logit, float temperature) {
  return fixed_weight(exp_nonpositive(div_rn(sub_rn(logit, max_logit), temperature)));
}

// 64 x 64 -> 128-bit product, from 32-bit halves (the same on both sides).
struct U128 {
  std::uint64_t hi, lo;
};
LOWBIT_HD U128 mul_wide(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32, b_lo = b & 0xffffffffu, b_hi = b >> 32;
  const std::uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
  const std::uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
  return {hh + (lh >> 32) + (hl >> 32) + (mid >> 32), (mid << 32) | (ll & 0xffffffffu)};
}

// ceil(mass * p) for 0 < p < 1, exactly: p = m / 2^s with m its 24-bit significand.
LOWBIT_HD std::uint64_t top_p_target(std::uint64_t mass, float p) {
  const std::uint32_t bits = float_to_bits(p);
  const std::uint32_t biased = (bits >> 23) & 0xffu, fraction = bits & 0x7fffffu;
  const std::uint64_t m = biased == 0 ? fraction : (fraction | 0x800000u);
  const int shift = biased == 0 ? 149 : 150 - static_cast<int>(biased);  // >= 24 for p < 1
  const U128 product = mul_wide(mass, m);
  if (shift >= 128) return (product.hi | product.lo) != 0 ? 1 : 0;
  std::uint64_t quotient;
  bool remainder;
  if (shift >= 64) {
    quotient = product.hi >> (shift - 64);
    remainder = product.lo != 0 || (shift > 64 && (product.hi & ((std::uint64_t{1} << (shift - 64)) - 1)) != 0);
  } else {
    quotient = (product.lo >> shift) | (product.hi << (64 - shift));
    remainder = (product.lo & ((std::uint64_t{1} << shift) - 1)) != 0;
  }
  return quotient + (remainder ? 1 : 0);
}

// The draw-th output of SplitMix64 (Steele, Lea and Flood 2014) seeded with `seed`:
// the generator's state after draw + 1 increments of the golden gamma, mixed.
LOWBIT_HD std::uint64_t splitmix64(std::uint64_t seed, std::uint64_t draw) {
  std::uint64_t z = seed + (draw + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A uniform integer in [0, total): floor(random * total / 2^64).
LOWBIT_HD std::uint64_t scale_draw(std::uint64_t random, std::uint64_t total) { return mul_wide(random, total).hi; }

}  // namespace lowbit::formats::sampling
