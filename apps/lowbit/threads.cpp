#include "threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace lowbit::cli {

// The CPUs this process may run on (taskset, a container's cpuset), else the machine's.
std::int64_t hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::thread::hardware_concurrency()));
}

void ThreadsFlag::declare(Options& cli) {
  cli.integer("-t, --threads", &threads, 1, hardware_threads(),
              "CPU threads (default: all " + std::to_string(hardware_threads()) + " this process may use)");
}

std::int64_t ThreadsFlag::count() const { return threads > 0 ? threads : hardware_threads(); }

void ThreadsFlag::apply() const { omp_set_num_threads(static_cast<int>(count())); }

}  // namespace lowbit::cli
