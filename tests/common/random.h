// Fresh random inputs on every run: the seed comes from std::random_device, is shown
// with every failure of the enclosing scope, and LOWBIT_TEST_SEED=<seed> replays it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace lowbit::test {

using Rng = std::mt19937;

inline std::uint32_t test_seed() {
  if (const char* fixed = std::getenv("LOWBIT_TEST_SEED")) {
    return static_cast<std::uint32_t>(std::strtoul(fixed, nullptr, 0));
  }
  return std::random_device{}();
}

}  // namespace lowbit::test

// Declares `Rng rng` seeded afresh, and records the seed in every failure message.
#define LOWBIT_TEST_RNG(rng)                                                                        \
  const std::uint32_t rng##_seed = ::lowbit::test::test_seed();                                     \
  SCOPED_TRACE("random seed " + std::to_string(rng##_seed) + " (replay: LOWBIT_TEST_SEED=" +        \
               std::to_string(rng##_seed) + ")");                                                   \
  ::lowbit::test::Rng rng(rng##_seed)
