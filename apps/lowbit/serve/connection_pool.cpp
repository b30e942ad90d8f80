#include "serve/connection_pool.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <utility>

namespace lowbit::serve {

ConnectionPool::ConnectionPool(std::size_t min_workers, std::size_t max_workers, std::chrono::milliseconds linger)
    : min_workers_(std::max<std::size_t>(min_workers, 1)),
      max_workers_(std::max(max_workers, std::max<std::size_t>(min_workers, 1))),
      linger_(linger) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < min_workers_; ++i) start_worker();
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::start_worker() {
  // Detached: a worker's last touch of the pool is its exit count under the mutex, which
  // shutdown() waits for.
  try {
    std::thread([this] { work(); }).detach();
    ++workers_;
  } catch (const std::system_error&) {
    // No thread to be had (the system's limit): the job waits for a busy worker.
  }
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.push_back(std::move(fn));
  if (idle_ < jobs_.size() && workers_ < max_workers_) start_worker();
  wake_.notify_one();
}

void ConnectionPool::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    wake_.wait_for(lock, linger_, [this] { return stopping_ || !jobs_.empty(); });
    --idle_;
    if (!jobs_.empty()) {
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
      continue;
    }
    if (stopping_ || workers_ > min_workers_) break;  // stopping, or a surplus worker that lingered
  }
  --workers_;
  exited_.notify_all();
}

std::size_t ConnectionPool::workers() {
  std::lock_guard<std::mutex> lock(mutex_);
  return workers_;
}

void ConnectionPool::shutdown() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
  exited_.wait(lock, [this] { return workers_ == 0; });
}

}  // namespace lowbit::serve
