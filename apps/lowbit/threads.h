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

// OpenMP threads of the CPU library that sleep when idle: GCC's OpenMP reads
// OMP_WAIT_POLICY once, when it loads (before main), and by default spins ~3 ms at
// every join, which stalls other threads on a shared machine (measured: a 0.02 ms
// quantization took 12 ms with other processes on the 2 cores). Unless the user set
// OMP_WAIT_POLICY, this sets it to passive and re-executes the program (argv as
// given) so that the runtime sees it; if that fails it returns and the run goes on.
void prefer_passive_openmp(char** argv);

}  // namespace lowbit::cli
