// Division of non-negative 31-bit integers by a divisor known only at run time, as a
// multiply-high, an add and a shift (Granlund and Montgomery's round-up method): for a
// kernel's per-tile index arithmetic, where an integer division costs a ~20-instruction
// sequence. Built on the host; exact for every n in [0, 2^31) and every divisor in
// [1, 2^31) (the CPU tests check it against `/`).
#pragma once

#include <cstdint>

#include "formats/hd.h"
#include "lowbit/error.h"

namespace lowbit::core {

struct alignas(8) FastDivisor {  // aligned: a kernel loads magic and shift as one 8-byte word
  std::uint32_t magic = 1;        // the divisor 1 by default
  int shift = 0;

  FastDivisor() = default;
  // shift = ceil(log2(d)); magic = floor(2^32 (2^shift - d) / d) + 1 < 2^32, so that
  // n / d = (umulhi(n, magic) + n) >> shift for n < 2^31 (the sum fits 32 bits).
  explicit FastDivisor(std::int64_t d) {
    LOWBIT_CHECK(d >= 1 && d < (std::int64_t{1} << 31), "fast divisor: ", d, " is not in [1, 2^31)");
    const auto divisor = static_cast<std::uint64_t>(d);
    while ((std::uint64_t{1} << shift) < divisor) ++shift;
    const std::uint64_t excess = (std::uint64_t{1} << shift) - divisor;  // < divisor
    magic = static_cast<std::uint32_t>((excess << 32) / divisor + 1);
  }

  LOWBIT_HD std::uint32_t divide(std::uint32_t n) const {  // n < 2^31
#if defined(__CUDA_ARCH__)
    const std::uint32_t high = __umulhi(n, magic);
#else
    const auto high = static_cast<std::uint32_t>((std::uint64_t{n} * magic) >> 32);
#endif
    return (high + n) >> shift;
  }
};

}  // namespace lowbit::core
