// The engine's thread pool (cpu/thread_pool.h): every task runs exactly once, on
// several threads, over many back-to-back jobs (a worker that wakes late must not
// run a task of the next job), beyond the per-job task limit, and with callers on
// several threads at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "common/expect_error.h"
#include "cpu/thread_pool.h"

namespace lowbit::test {
namespace {

using cpu::ThreadPool;

void expect_each_once(ThreadPool& pool, std::int64_t tasks) {
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(tasks));
  pool.run(tasks, [&](std::int64_t i) { runs[static_cast<std::size_t>(i)].fetch_add(1); });
  for (std::int64_t i = 0; i < tasks; ++i) ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << "task " << i;
}

TEST(ThreadPool, EveryTaskRunsOnce) {
  for (int threads : {1, 2, 3, 8}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (std::int64_t tasks : {0, 1, 2, 3, 7, 64, 1000}) expect_each_once(pool, tasks);
  }
}

TEST(ThreadPool, MoreTasksThanOneJobHolds) {
  ThreadPool pool(3);
  expect_each_once(pool, (std::int64_t{1} << 20) + 5);
}

TEST(ThreadPool, WorkersShareTheTasks) {
  ThreadPool pool(4);
  std::mutex m;
  std::set<std::thread::id> seen;
  // Tasks long enough that one thread cannot take them all before the others wake.
  pool.run(64, [&](std::int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(m);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_GE(seen.size(), 2u);
}

TEST(ThreadPool, ManyBackToBackJobsStayApart) {
  ThreadPool pool(4);
  std::vector<std::int64_t> sums(2000);
  for (std::size_t job = 0; job < sums.size(); ++job) {
    std::atomic<std::int64_t> sum{0};
    const auto tasks = static_cast<std::int64_t>(1 + job % 13);
    pool.run(tasks, [&, job](std::int64_t i) { sum.fetch_add(static_cast<std::int64_t>(job) * 100 + i); });
    ASSERT_EQ(sum.load(), static_cast<std::int64_t>(job) * 100 * tasks + tasks * (tasks - 1) / 2) << "job " << job;
  }
}

TEST(ThreadPool, CallersOnSeveralThreadsTakeTurns) {
  ThreadPool pool(3);
  std::atomic<bool> ok{true};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int job = 0; job < 300; ++job) {
        std::atomic<int> count{0};
        pool.run(17, [&](std::int64_t) { count.fetch_add(1); });
        if (count.load() != 17) ok = false;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_TRUE(ok.load());
}

// run_backed: a job whose tasks travel by value. Task i's result is `base + i` in
// out[0]; commit copies it to y[i] and counts the commit.
struct BackedJob {
  float* y;
  std::atomic<int>* commits;           // per task
  std::atomic<int>* stalls_left;       // tasks a worker (not the caller) sleeps in
  const std::thread::id* caller;
  std::atomic<int>* stalled_in;        // the task a worker slept in, or -1
  int stall_ms;
  float base;

  static void compute(const void* job, std::int64_t task, float* out) {
    const auto& j = *static_cast<const BackedJob*>(job);
    if (std::this_thread::get_id() != *j.caller && j.stalls_left->fetch_sub(1) > 0) {
      j.stalled_in->store(static_cast<int>(task));
      std::this_thread::sleep_for(std::chrono::milliseconds(j.stall_ms));  // descheduled, as it were
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));  // a task long enough to share
    }
    out[0] = j.base + static_cast<float>(task);
  }
  static void commit(const void* job, std::int64_t task, const float* out) {
    const auto& j = *static_cast<const BackedJob*>(job);
    j.y[task] = out[0];
    j.commits[task].fetch_add(1);
  }
};

TEST(ThreadPool, BackedJobEveryTaskCommittedOnce) {
  // What compute() reads must outlive the job (a late thread may still read it after
  // run_backed returns); y and commits are touched only by commit(), within the job.
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> stalls{0}, stalled_in{-1};
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (std::int64_t tasks : {1, 2, 7, 64}) {
      std::vector<float> y(static_cast<std::size_t>(tasks), -1.0f);
      std::vector<std::atomic<int>> commits(static_cast<std::size_t>(tasks));
      const BackedJob job{y.data(), commits.data(), &stalls, &caller, &stalled_in, 0, 100.0f};
      pool.run_backed(tasks, &job, sizeof job, 1, &BackedJob::compute, &BackedJob::commit);
      for (std::int64_t i = 0; i < tasks; ++i) {
        EXPECT_EQ(y[static_cast<std::size_t>(i)], 100.0f + static_cast<float>(i));
        EXPECT_EQ(commits[static_cast<std::size_t>(i)].load(), 1);
      }
    }
  }
}

// A worker that stalls in a task (as a thread descheduled by a busy process on its
// core) holds the job back only ~20 us + two tasks: the caller computes the task
// again and commits it; the worker's result, finished later, is dropped, and does not
// land in the next job's outputs either.
TEST(ThreadPool, BackedJobDoesNotWaitForAStalledWorker) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  constexpr int kStallMs = 300;
  constexpr std::int64_t kTasks = 64;
  std::vector<float> y1(kTasks, -1.0f), y2(kTasks, -1.0f);
  std::vector<std::atomic<int>> commits1(kTasks), commits2(kTasks);
  std::atomic<int> stalls{1}, stalled_in{-1}, no_stalls{0}, unused{-1};
  const BackedJob job1{y1.data(), commits1.data(), &stalls, &caller, &stalled_in, kStallMs, 100.0f};
  const std::int64_t backups_before = pool.backups();
  const auto start = std::chrono::steady_clock::now();
  // The worker may not wake before the caller has claimed every task: try a few jobs.
  for (int attempt = 0; attempt < 50 && stalled_in.load() < 0; ++attempt) {
    pool.run_backed(kTasks, &job1, sizeof job1, 1, &BackedJob::compute, &BackedJob::commit);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_GE(stalled_in.load(), 0) << "the worker never took a task";
  EXPECT_LT(ms, kStallMs / 2) << "the job waited for the stalled worker";
  EXPECT_GE(pool.backups() - backups_before, 1);
  // The next job runs while the worker still sleeps in job 1's task.
  const BackedJob job2{y2.data(), commits2.data(), &no_stalls, &caller, &unused, 0, 1000.0f};
  pool.run_backed(kTasks, &job2, sizeof job2, 1, &BackedJob::compute, &BackedJob::commit);
  pool.quiesce();  // the worker has woken and finished its late task
  const double ms_all = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(ms_all, kStallMs);
  for (std::int64_t i = 0; i < kTasks; ++i) {
    const auto u = static_cast<std::size_t>(i);
    EXPECT_EQ(y1[u], 100.0f + static_cast<float>(i)) << "task " << i;
    EXPECT_EQ(y2[u], 1000.0f + static_cast<float>(i)) << "task " << i;
    EXPECT_EQ(commits2[u].load(), 1) << "task " << i;
  }
}

TEST(ThreadPool, EnginePoolFollowsTheThreadCount) {
  cpu::set_engine_threads(2);
  EXPECT_EQ(cpu::engine_pool().threads(), 2);
  cpu::set_engine_threads(1);
  EXPECT_EQ(cpu::engine_pool().threads(), 1);
  expect_each_once(cpu::engine_pool(), 10);
  EXPECT_GE(cpu::available_cpus(), 1);
  EXPECT_LOWBIT_ERROR(cpu::set_engine_threads(0), "engine threads: 0, expected >= 1");
  EXPECT_LOWBIT_ERROR(ThreadPool(0), "threads = 0, expected >= 1");
  cpu::set_engine_threads(cpu::available_cpus());
}

}  // namespace
}  // namespace lowbit::test
