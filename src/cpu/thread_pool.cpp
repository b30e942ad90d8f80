#include "cpu/thread_pool.h"

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "lowbit/error.h"

namespace lowbit::cpu {
namespace {

constexpr int kGenerationShift = 40, kTasksShift = 20;
constexpr std::uint64_t kFieldMask = (std::uint64_t{1} << 20) - 1;

std::uint32_t generation_of(std::uint64_t state) { return static_cast<std::uint32_t>(state >> kGenerationShift); }
std::int64_t tasks_of(std::uint64_t state) { return static_cast<std::int64_t>((state >> kTasksShift) & kFieldMask); }
std::int64_t next_of(std::uint64_t state) { return static_cast<std::int64_t>(state & kFieldMask); }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until ready() or the spin budget is spent; every few rounds it offers the
// core to another runnable thread (sched_yield returns at once when there is none).
template <class Ready>
bool spin_until(Ready ready) {
  static const std::int64_t budget_us = ThreadPool::spin_microseconds();
  if (budget_us <= 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(budget_us);
  for (int round = 0;; ++round) {
    for (int i = 0; i < 16; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (round % 4 == 3) {
      sched_yield();
      if (std::chrono::steady_clock::now() >= deadline) return ready();
    }
  }
}

}  // namespace

std::int64_t ThreadPool::spin_microseconds() {
  const char* value = std::getenv("LOWBIT_CPU_SPIN_US");
  if (value && *value) {
    char* end = nullptr;
    const long long parsed = std::strtoll(value, &end, 10);
    if (end && *end == '\0' && parsed >= 0 && parsed <= 1000000) return parsed;
  }
  return 50;
}

ThreadPool::ThreadPool(int threads) {
  LOWBIT_CHECK(threads >= 1, "thread pool: threads = ", threads, ", expected >= 1");
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work(std::uint32_t generation) {
  std::uint64_t state = state_.load(std::memory_order_acquire);
  for (;;) {
    if (generation_of(state) != (generation & ((1u << 24) - 1)) || next_of(state) >= tasks_of(state)) return;
    if (!state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      continue;
    }
    const std::int64_t task = next_of(state);
    call_(ctx_, task);
    const auto tasks = static_cast<std::uint32_t>(tasks_of(state));
    if (completed_.fetch_add(1, std::memory_order_acq_rel) + 1 == tasks && caller_sleeping_.load()) {
      completed_.notify_one();
    }
    state = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  std::uint32_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      sleeping_workers_.fetch_add(1);
      while (generation_.load() == seen) generation_.wait(seen);
      sleeping_workers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    work(seen);
  }
}

void ThreadPool::run_erased(std::int64_t tasks, Call call, void* ctx) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  // The previous job is complete (its caller waited for it), so no thread reads these now.
  call_ = call;
  ctx_ = ctx;
  completed_.store(0, std::memory_order_relaxed);
  const std::uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  const std::uint64_t state = (static_cast<std::uint64_t>(generation & ((1u << 24) - 1)) << kGenerationShift) |
                              (static_cast<std::uint64_t>(tasks) << kTasksShift);
  state_.store(state, std::memory_order_release);
  generation_.store(generation);
  if (sleeping_workers_.load() > 0) generation_.notify_all();

  work(generation);
  const auto total = static_cast<std::uint32_t>(tasks);
  auto done = [&] { return completed_.load(std::memory_order_acquire) == total; };
  if (!spin_until(done)) {
    caller_sleeping_.store(true);
    for (std::uint32_t now = completed_.load(); now != total; now = completed_.load()) completed_.wait(now);
    caller_sleeping_.store(false);
  }
}

namespace {

std::mutex& engine_pool_mutex() {
  static std::mutex m;
  return m;
}
std::unique_ptr<ThreadPool>& engine_pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}

}  // namespace

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadPool& engine_pool() {
  std::lock_guard<std::mutex> lock(engine_pool_mutex());
  std::unique_ptr<ThreadPool>& pool = engine_pool_slot();
  if (!pool) pool = std::make_unique<ThreadPool>(available_cpus());
  return *pool;
}

void set_engine_threads(int threads) {
  LOWBIT_CHECK(threads >= 1, "engine threads: ", threads, ", expected >= 1");
  std::lock_guard<std::mutex> lock(engine_pool_mutex());
  std::unique_ptr<ThreadPool>& pool = engine_pool_slot();
  if (pool && pool->threads() == threads) return;
  pool.reset();
  pool = std::make_unique<ThreadPool>(threads);
}

}  // namespace lowbit::cpu
