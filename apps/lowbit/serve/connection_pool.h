// cpp-httplib's task queue for lowbit serve. The library runs a connection's whole life
// on one worker (its keep-alive requests, a streamed answer, up to 5 s of waiting for the
// next request), so with its fixed pool of N workers, N idle keep-alive connections (a
// client's connection pool) leave every new client queued for seconds. This pool starts a
// worker whenever a connection arrives and none is idle, up to `max_workers`, and lets
// the workers beyond `min_workers` exit after `linger` without work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

#include <httplib.h>

namespace lowbit::serve {

class ConnectionPool : public httplib::TaskQueue {
 public:
  ConnectionPool(std::size_t min_workers, std::size_t max_workers, std::chrono::milliseconds linger);
  ~ConnectionPool() override;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then waits for every worker to exit.
  void shutdown() override;
  // Workers alive now.
  std::size_t workers();

 private:
  void start_worker();  // with mutex_ held
  void work();

  const std::size_t min_workers_, max_workers_;
  const std::chrono::milliseconds linger_;
  std::mutex mutex_;
  std::condition_variable wake_, exited_;
  std::deque<std::function<void()>> jobs_;
  std::size_t workers_ = 0, idle_ = 0;
  bool stopping_ = false;
};

}  // namespace lowbit::serve
