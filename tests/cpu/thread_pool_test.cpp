// The engine's thread pool (cpu/thread_pool.h): every task runs exactly once, on
// several threads, over many back-to-back jobs (a worker that wakes late must not
// run a task of the next job), beyond the per-job task limit, and with callers on
// several threads at once.
#include <gtest/gtest.h>

#include <atomic>
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
