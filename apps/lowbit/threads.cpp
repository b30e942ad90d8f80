#include "threads.h"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>

#include "cpu/thread_pool.h"

namespace lowbit::cli {

std::int64_t hardware_threads() { return cpu::available_cpus(); }

void ThreadsFlag::declare(Options& cli) {
  cli.integer("-t, --threads", &threads, 1, hardware_threads(),
              "CPU threads (default: all " + std::to_string(hardware_threads()) + " this process may use)");
}

std::int64_t ThreadsFlag::count() const { return threads > 0 ? threads : hardware_threads(); }

void ThreadsFlag::apply() const {
  omp_set_num_threads(static_cast<int>(count()));
  cpu::set_engine_threads(static_cast<int>(count()));
}

void prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace lowbit::cli
