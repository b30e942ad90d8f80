// The KV cache's key rotation (QuaRot's lever): the normalized Walsh-Hadamard transform
// H / sqrt(n) of a head vector of n = 2^k values, an orthogonal and symmetric matrix
// (its own inverse), so (H q) . (H k) = q . k while the rotated key spreads an outlier
// channel over all n channels, which per-token 4-bit codes then hold.
//
// One order of operations, which the CPU and the GPU (a warp, shuffles) both follow, so
// that both round alike: log2(n) butterfly stages h = 1, 2, 4, .. n / 2, each pairing
// i (bit h clear) with i + h as (x[i] + x[i + h], x[i] - x[i + h]), then one multiply by
// hadamard_scale(n) (1 / sqrt(n) rounded to f32: exact for n = 64 (1/8), 16, 256 ..).
// Each stage's sums are exact in neither order, but a + b = b + a in IEEE arithmetic,
// so a lane that computes the pair from the other side gets the same bits.
#pragma once

#include <cstdint>

#include "formats/hd.h"

namespace lowbit::formats {

// n a power of two >= 1.
LOWBIT_HD bool hadamard_size_ok(std::int64_t n) { return n >= 1 && (n & (n - 1)) == 0; }

// 1 / sqrt(n) as an f32 constant for the sizes the cache uses (64, 128) and every other
// power of two up to 2^16 (computed once in double, then rounded).
LOWBIT_HD float hadamard_scale(std::int64_t n) {
  double s = 1.0;
  std::int64_t m = n;
  while (m >= 4) {  // 1 / sqrt(4^j) = 2^-j, exact
    s *= 0.5;
    m /= 4;
  }
  if (m == 2) s *= 0.70710678118654752440;  // 1 / sqrt(2)
  return static_cast<float>(s);
}

// The butterfly stage h on one pair: the value at the lower index (bit h clear) becomes
// lo + hi, the one at the upper index lo - hi. `own` is this element, `other` its pair.
LOWBIT_HD float hadamard_butterfly(float own, float other, bool upper) {
  return upper ? sub_rn(other, own) : add_rn(own, other);
}

LOWBIT_HD float hadamard_normalize(float x, float scale) { return mul_rn(x, scale); }

// In place, x[0..n): x <- H x / sqrt(n). Applying it twice gives x back up to rounding.
LOWBIT_HD void hadamard_rotate(float* x, std::int64_t n) {
  for (std::int64_t h = 1; h < n; h *= 2) {
    for (std::int64_t i = 0; i < n; ++i) {
      if (i & h) continue;
      const float lo = x[i], hi = x[i + h];
      x[i] = hadamard_butterfly(lo, hi, false);
      x[i + h] = hadamard_butterfly(hi, lo, true);
    }
  }
  const float s = hadamard_scale(n);
  for (std::int64_t i = 0; i < n; ++i) x[i] = hadamard_normalize(x[i], s);
}

}  // namespace lowbit::formats
