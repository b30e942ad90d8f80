// -t, --threads N: how many CPU threads the command's CPU work uses, 1 .. the
// hardware threads of this machine (default: all of them).
#pragma once

#include <cstdint>

#include "options.h"

namespace lowbit::cli {

struct ThreadsFlag {
  std::int64_t threads = 0;  // 0: not given (all hardware threads)
  void declare(Options& cli);
  // Sets the thread count of the CPU library (OpenMP) and of the engine's CPU sessions.
  void apply() const;
  std::int64_t count() const;  // what apply() sets
};

// The CPUs this process may run on (taskset, a container's cpuset).
std::int64_t hardware_threads();

}  // namespace lowbit::cli
