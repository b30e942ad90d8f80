// serve::ConnectionPool (apps/lowbit/serve/connection_pool.h): jobs that block (an idle
// keep-alive connection) do not hold back later ones while workers may still be
// started; the cap holds; surplus workers exit after their linger; shutdown runs what
// is queued and waits for every worker.
#include "serve/connection_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace {

using namespace std::chrono_literals;
using lowbit::serve::ConnectionPool;

// A gate the blocked jobs wait at, and a count of jobs running at once.
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> running{0}, done{0};

  std::function<void()> job() {
    return [this] {
      ++running;
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [this] { return open; });
      --running;
      ++done;
    };
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      open = true;
    }
    cv.notify_all();
  }
};

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(ConnectionPool, BlockedJobsDoNotHoldBackNewOnesUpToTheCap) {
  Gate gate;
  ConnectionPool pool(2, 6, 50ms);
  for (int i = 0; i < 8; ++i) pool.enqueue(gate.job());
  // 6 workers (the cap) run 6 jobs at once, 2 wait for a free worker.
  EXPECT_TRUE(eventually([&] { return gate.running == 6; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(gate.running, 6);
  EXPECT_EQ(pool.workers(), 6u);
  std::atomic<bool> quick{false};
  pool.enqueue([&] { quick = true; });
  gate.release();
  EXPECT_TRUE(eventually([&] { return gate.done == 8 && quick; }));
  pool.shutdown();
}

TEST(ConnectionPool, SurplusWorkersExitAndNewOnesStartAgain) {
  ConnectionPool pool(1, 4, 20ms);
  for (int round = 0; round < 3; ++round) {  // each round needs 4 workers at once again
    Gate gate;
    for (int i = 0; i < 4; ++i) pool.enqueue(gate.job());
    EXPECT_TRUE(eventually([&] { return gate.running == 4; })) << "round " << round;
    EXPECT_EQ(pool.workers(), 4u);
    gate.release();
    EXPECT_TRUE(eventually([&] { return gate.done == 4; })) << "round " << round;
    // Past the linger the 3 surplus workers exit; the first stays.
    EXPECT_TRUE(eventually([&] { return pool.workers() == 1; })) << "round " << round;
  }
}

TEST(ConnectionPool, ShutdownRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    ConnectionPool pool(1, 1, 10ms);
    for (int i = 0; i < 20; ++i) {
      pool.enqueue([&] {
        std::this_thread::sleep_for(1ms);
        ++ran;
      });
    }
    pool.shutdown();
    EXPECT_EQ(ran, 20);
  }  // the destructor's second shutdown returns at once
  EXPECT_EQ(ran, 20);
}

}  // namespace
