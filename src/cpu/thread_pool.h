// A thread pool for the CPU forward pass that holds up when the cores are shared.
//
// run(tasks, body) calls body(i) for every i in [0, tasks) on the calling thread and
// the pool's workers and returns when all calls are done. Tasks are claimed one at a
// time from a shared counter, so a thread that the OS deschedules holds back only the
// task it is in: the others take the rest. A waiting thread spins for a short while
// (the gap between two regions of a forward pass is a few microseconds; it does not
// sched_yield, which would hand a busy neighbour process a whole time slice), and then
// sleeps in the kernel (futex), so that an idle worker never keeps a busy core from
// the thread that has work.
// (OpenMP's default, spinning ~3 ms before sleeping, made decode 36-50x slower when
// other processes used the cores; bench/notes/cpu_engine.md.)
//
// One run at a time: concurrent callers take turns. body must not throw (a worker
// has no caller to pass an exception to) and must not call run() on the same pool.
//
// A thread that the OS deschedules while it holds a task (a busy process on its core:
// a time slice of milliseconds) holds back the whole run(), however small the task.
// run_backed() is for jobs where that matters (a decode step is ~150 joins of ~40 us):
// its tasks are pure functions of a job that travels by value, so the caller, once
// every task is claimed and the job is still not done after a short wait, computes the
// unfinished tasks again itself ("backup tasks", as MapReduce runs stragglers). Each
// task's result is written by compute() into the running thread's own buffer and
// copied into place by commit() only by the first thread to finish it (a per-task
// generation tag), so a late thread never writes, and every thread computes from its
// own copy of the job (taken before it claims a task), so a late thread reads no
// memory the caller has reused since. The result is the same bits whichever thread
// commits a task: the same task computed from the same inputs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lowbit::cpu {

class ThreadPool {
 public:
  // `threads` >= 1 counts the caller: threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  template <class Body>
  void run(std::int64_t tasks, Body&& body) {
    if (tasks <= 0) return;
    if (tasks == 1 || workers_.empty()) {
      for (std::int64_t i = 0; i < tasks; ++i) body(i);
      return;
    }
    if (tasks > kMaxTasks) {  // groups of consecutive tasks, each a task of the pool
      const std::int64_t group = (tasks + kMaxTasks - 1) / kMaxTasks;
      auto grouped = [&](std::int64_t g) {
        for (std::int64_t i = g * group; i < tasks && i < (g + 1) * group; ++i) body(i);
      };
      run_erased((tasks + group - 1) / group,
                 [](void* ctx, std::int64_t g) { (*static_cast<decltype(grouped)*>(ctx))(g); }, &grouped);
      return;
    }
    auto* erased = &body;
    run_erased(tasks, [](void* ctx, std::int64_t i) { (*static_cast<decltype(erased)>(ctx))(i); }, erased);
  }

  // A job of `tasks` tasks whose compute(job, task, out) writes task `task`'s result
  // (out_floats floats at most) into `out`, a buffer of the running thread, from `job`
  // (job_bytes bytes, copied by each thread: trivially copyable data, pointers only to
  // memory that outlives the job, such as weights); commit(job, task, out) copies a
  // finished result into place and runs once per task. Returns when every task is
  // committed. Jobs that do not fit (backed_fits) run as run() does: each task's
  // compute then commit on the thread that claimed it.
  using Compute = void (*)(const void* job, std::int64_t task, float* out);
  using Commit = void (*)(const void* job, std::int64_t task, const float* out);
  static bool backed_fits(std::int64_t tasks, std::size_t job_bytes) {
    return tasks <= kMaxBackedTasks && job_bytes <= kMaxJobBytes;
  }
  void run_backed(std::int64_t tasks, const void* job, std::size_t job_bytes, std::int64_t out_floats,
                  Compute compute, Commit commit);
  // Returns once no thread is still computing a task of a finished backed job (a late
  // thread reads the job's weights): before the memory such jobs point to is freed.
  void quiesce();
  // The wait before the caller backs up unfinished tasks: this plus two of its own
  // tasks' time (default 20 us, or $LOWBIT_CPU_BACKUP_US); 0 backs them up at once
  // (tests: every task in flight is raced).
  void set_backup_delay_us(std::int64_t us) { backup_delay_ns_.store(us * 1000, std::memory_order_relaxed); }
  // Backup tasks committed so far (tasks the caller finished before the thread that
  // held them; counted for tests and measurements).
  std::int64_t backups() const { return backups_.load(std::memory_order_relaxed); }

  // How long a waiting thread spins before it sleeps, in microseconds (default 50;
  // $LOWBIT_CPU_SPIN_US overrides it for measurements; 0 sleeps at once).
  static std::int64_t spin_microseconds();

 private:
  using Call = void (*)(void*, std::int64_t);
  static constexpr std::int64_t kMaxTasks = (std::int64_t{1} << 20) - 1;
  static constexpr std::int64_t kMaxBackedTasks = 4096;
  static constexpr std::size_t kMaxJobBytes = 64 * 1024;
  void run_erased(std::int64_t tasks, Call call, void* ctx);
  void run_backed_serial(std::int64_t tasks, const void* job, std::int64_t out_floats, Compute compute,
                         Commit commit);
  // Whether this thread's result of `task` of job `generation` is the first: then it
  // commits it and counts it done.
  bool commit_first(std::uint32_t generation, std::int64_t task, Commit commit, const void* job, const float* out);
  void worker_loop();
  // Claims and runs tasks of job `generation` until none is left or the pool has
  // moved on to another job (a worker that woke late).
  std::int64_t work(std::uint32_t generation);  // returns the tasks it ran

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one run at a time
  // The current job in one word, so that a task is claimed (compare-and-swap) only
  // within the job it belongs to: generation (24 bits), task count (20), next
  // unclaimed task (20).
  std::atomic<std::uint64_t> state_{0};
  std::atomic<std::uint32_t> generation_{0};  // the futex sleeping workers wait on
  std::atomic<std::uint32_t> completed_{0};   // tasks of the job done; the caller waits on it
  // Read only after a task of the job is claimed, and written only when no task of
  // the previous job is running.
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  // A backed job, by value: word 0 compute, 1 commit, 2 out_floats, 3 job bytes, then
  // the job. Atomic words: a thread copies it before its claim, which proves the copy
  // was of this job (the next job is written only after every task was claimed).
  std::unique_ptr<std::atomic<std::uint64_t>[]> job_words_;
  // committed_[i] = the generation whose task i is committed (reset to the one before
  // at each backed job's start).
  std::unique_ptr<std::atomic<std::uint32_t>[]> committed_;
  std::atomic<int> in_work_{0};  // threads inside work() (quiesce waits for none)
  std::atomic<std::int64_t> backups_{0};
  std::atomic<std::int64_t> backup_delay_ns_;
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

// The pool of the engine's CPU sessions: created on first use with all the CPUs this
// process may run on, or with the count set_engine_threads() gave.
ThreadPool& engine_pool();
// quiesce() of the engine pool if there is one (before weights are freed).
void quiesce_engine_pool();
// Replaces the engine pool with one of `threads` (>= 1) threads. Not while a forward
// pass runs.
void set_engine_threads(int threads);
// The CPUs this process may run on (sched_getaffinity: taskset, a container's cpuset).
int available_cpus();

}  // namespace lowbit::cpu
