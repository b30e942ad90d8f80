#include "cpu/thread_pool.h"

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "lowbit/error.h"

namespace lowbit::cpu {
namespace {

// state_: generation (23 bits) | backed (1) | task count (20) | next unclaimed task (20).
constexpr int kGenerationShift = 41, kBackedShift = 40, kTasksShift = 20;
constexpr std::uint32_t kGenerationMask = (1u << 23) - 1;
constexpr std::uint64_t kFieldMask = (std::uint64_t{1} << 20) - 1;
constexpr std::size_t kHeaderWords = 4;  // compute, commit, out_floats, job bytes

std::uint32_t generation_of(std::uint64_t state) { return static_cast<std::uint32_t>(state >> kGenerationShift); }
bool backed_of(std::uint64_t state) { return ((state >> kBackedShift) & 1) != 0; }
std::uint64_t make_state(std::uint32_t generation, bool backed, std::int64_t tasks) {
  return (static_cast<std::uint64_t>(generation & kGenerationMask) << kGenerationShift) |
         (static_cast<std::uint64_t>(backed) << kBackedShift) | (static_cast<std::uint64_t>(tasks) << kTasksShift);
}
std::int64_t tasks_of(std::uint64_t state) { return static_cast<std::int64_t>((state >> kTasksShift) & kFieldMask); }
std::int64_t next_of(std::uint64_t state) { return static_cast<std::int64_t>(state & kFieldMask); }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until ready() or the spin budget is spent. It does not sched_yield: with a
// busy process on the same core, a yield hands that process the rest of a time slice
// (milliseconds), so a worker that yielded between regions missed the next ones and
// its core's half share went to waste (tg128 beside a pinned busy loop: 58 tok/s with
// the yield, 67 without; bench/notes/cpu_engine.md). After the budget it sleeps.
template <class Ready>
bool spin_until(Ready ready) {
  static const std::int64_t budget_us = ThreadPool::spin_microseconds();
  if (budget_us <= 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(budget_us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

std::int64_t backup_delay_ns() {
  static const std::int64_t ns = [] {
    const char* value = std::getenv("LOWBIT_CPU_BACKUP_US");
    if (value && *value) {
      char* end = nullptr;
      const long long parsed = std::strtoll(value, &end, 10);
      if (end && *end == '\0' && parsed >= 0 && parsed <= 10000000) return static_cast<std::int64_t>(parsed) * 1000;
    }
    return std::int64_t{20000};
  }();
  return ns;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
  backup_delay_ns_.store(backup_delay_ns(), std::memory_order_relaxed);
  job_words_ = std::make_unique<std::atomic<std::uint64_t>[]>(kHeaderWords + kMaxJobBytes / 8);
  committed_ = std::make_unique<std::atomic<std::uint32_t>[]>(static_cast<std::size_t>(kMaxBackedTasks));
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

std::int64_t ThreadPool::work(std::uint32_t generation) {
  in_work_.fetch_add(1);
  // This thread's copy of a backed job and its result buffer.
  thread_local std::vector<std::uint64_t> job;
  thread_local std::vector<float> out;
  bool have_job = false;
  std::int64_t ran = 0;
  std::uint64_t state = state_.load(std::memory_order_acquire);
  for (;;) {
    if (generation_of(state) != (generation & kGenerationMask) || next_of(state) >= tasks_of(state)) break;
    const bool backed = backed_of(state);
    if (backed && !have_job) {
      // Copied before the claim: a claim that succeeds proves the job was not yet
      // replaced when the copy was taken (the next job is written only after every
      // task of this one is claimed). A copy that fails that proof is never used.
      const std::size_t bytes = std::min<std::size_t>(job_words_[3].load(std::memory_order_relaxed), kMaxJobBytes);
      job.resize(kHeaderWords + (bytes + 7) / 8);
      for (std::size_t i = 0; i < job.size(); ++i) job[i] = job_words_[i].load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      have_job = true;
    }
    if (!state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      continue;
    }
    const std::int64_t task = next_of(state);
    const std::int64_t tasks = tasks_of(state);
    ++ran;
    if (backed) {
      out.resize(static_cast<std::size_t>(job[2]));
      reinterpret_cast<Compute>(job[0])(job.data() + kHeaderWords, task, out.data());
      commit_first(generation, task, reinterpret_cast<Commit>(job[1]), job.data() + kHeaderWords, out.data());
    } else {
      call_(ctx_, task);
      if (completed_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(tasks) &&
          caller_sleeping_.load()) {
        completed_.notify_one();
      }
    }
    state = state_.load(std::memory_order_acquire);
  }
  in_work_.fetch_sub(1);
  return ran;
}

bool ThreadPool::commit_first(std::uint32_t generation, std::int64_t task, Commit commit, const void* job,
                              const float* out) {
  std::atomic<std::uint32_t>& tag = committed_[static_cast<std::size_t>(task)];
  std::uint32_t seen = tag.load(std::memory_order_acquire);
  do {
    // Committed in this job already, or a later job's (this thread is late).
    if (static_cast<std::int32_t>(seen - generation) >= 0) return false;
  } while (!tag.compare_exchange_weak(seen, generation, std::memory_order_acq_rel, std::memory_order_acquire));
  commit(job, task, out);
  completed_.fetch_add(1, std::memory_order_acq_rel);
  return true;
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
  state_.store(make_state(generation, false, tasks), std::memory_order_release);
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

void ThreadPool::run_backed(std::int64_t tasks, const void* job, std::size_t job_bytes, std::int64_t out_floats,
                            Compute compute, Commit commit) {
  if (tasks <= 0) return;
  if (tasks == 1 || workers_.empty() || !backed_fits(tasks, job_bytes)) {
    // Every task computed and committed by the thread that claims it.
    run(tasks, [&](std::int64_t task) {
      thread_local std::vector<float> out;
      out.resize(static_cast<std::size_t>(out_floats));
      compute(job, task, out.data());
      commit(job, task, out.data());
    });
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  // The previous job is complete: every one of its tasks was claimed, so no thread
  // copies the job words now.
  job_words_[0].store(reinterpret_cast<std::uint64_t>(compute), std::memory_order_relaxed);
  job_words_[1].store(reinterpret_cast<std::uint64_t>(commit), std::memory_order_relaxed);
  job_words_[2].store(static_cast<std::uint64_t>(out_floats), std::memory_order_relaxed);
  job_words_[3].store(job_bytes, std::memory_order_relaxed);
  for (std::size_t i = 0; i < (job_bytes + 7) / 8; ++i) {
    std::uint64_t word = 0;
    std::memcpy(&word, static_cast<const char*>(job) + i * 8, std::min<std::size_t>(8, job_bytes - i * 8));
    job_words_[kHeaderWords + i].store(word, std::memory_order_relaxed);
  }
  const std::uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  for (std::int64_t i = 0; i < tasks; ++i) {
    committed_[static_cast<std::size_t>(i)].store(generation - 1, std::memory_order_relaxed);
  }
  completed_.store(0, std::memory_order_relaxed);
  state_.store(make_state(generation, true, tasks), std::memory_order_release);
  generation_.store(generation);
  if (sleeping_workers_.load() > 0) generation_.notify_all();

  const std::int64_t start = now_ns();
  const std::int64_t ran = work(generation);
  // Every task is claimed. Wait a little for the others' tasks ($LOWBIT_CPU_BACKUP_US,
  // default 20 us, plus two of this thread's own; 0: at once), then compute the unfinished ones
  // again here: a thread that still holds one has most likely been descheduled. The
  // caller never sleeps in a backed job: it either sees the job done or does it.
  const std::int64_t fixed = backup_delay_ns_.load(std::memory_order_relaxed);
  const std::int64_t delay = fixed == 0 ? 0 : fixed + (ran > 0 ? 2 * (now_ns() - start) / ran : 0);
  const std::int64_t backup_at = now_ns() + delay;
  const auto total = static_cast<std::uint32_t>(tasks);
  thread_local std::vector<float> out;
  for (int round = 0; completed_.load(std::memory_order_acquire) != total; ++round) {
    if (round % 16 != 15 || now_ns() < backup_at) {
      cpu_relax();
      continue;
    }
    for (std::int64_t task = 0; task < tasks; ++task) {
      if (committed_[static_cast<std::size_t>(task)].load(std::memory_order_acquire) == generation) continue;
      out.resize(static_cast<std::size_t>(out_floats));
      compute(job, task, out.data());
      if (commit_first(generation, task, commit, job, out.data())) backups_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void ThreadPool::quiesce() {
  std::lock_guard<std::mutex> lock(run_mutex_);
  while (in_work_.load() != 0) std::this_thread::yield();
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

void quiesce_engine_pool() {
  std::lock_guard<std::mutex> lock(engine_pool_mutex());
  if (engine_pool_slot()) engine_pool_slot()->quiesce();
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
