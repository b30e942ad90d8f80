// Poison for outputs: every output buffer is filled with it before an op runs, so an
// element the op failed to write (or a byte it wrote past its tensor) shows up.
#pragma once

#include <cstdint>

namespace lowbit::test {

constexpr std::uint8_t kCodePoison = 0x5a;   // codes (i8 90, or int4 nibbles 10 and 5)
constexpr std::uint8_t kFloatPoison = 0xff;  // f32, f16 and bf16 made of 0xff bytes are NaN

}  // namespace lowbit::test
