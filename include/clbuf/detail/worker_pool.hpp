// SPDX-License-Identifier: MIT
// The worker threads behind clbuf's large host copies and staged transfers: one job at a time
// runs on the calling thread and on up to `limit - 1` helpers, each taking work from state the
// job shares (a chunk counter), so a job completes correctly with however many threads the host
// lets clbuf start, even none.
#ifndef CLBUF_DETAIL_WORKER_POOL_HPP
#define CLBUF_DETAIL_WORKER_POOL_HPP

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace clbuf {
namespace detail {

class WorkerPool {
 public:
  /// At most `limit` threads take part in a job, the calling thread included.
  explicit WorkerPool(unsigned limit) noexcept : limit_(std::max(limit, 1u)) {}

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  unsigned limit() const noexcept { return limit_; }

  /// Calls `task(i)` once for each participant i (0 on the calling thread), at most `wanted`
  /// participants, and returns when all have returned. `task` must not throw and must complete
  /// the job whatever the number of participants. Returns the number that took part.
  template <class Task>
  unsigned run(unsigned wanted, Task& task) noexcept {
    std::lock_guard<std::mutex> serial(serial_);  // one job at a time
    const unsigned helpers = start_helpers(std::clamp(wanted, 1u, limit_) - 1);
    if (helpers == 0) {
      task(0u);
      return 1;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      call_ = [](void* job, unsigned index) { (*static_cast<Task*>(job))(index); };
      active_ = helpers;
      pending_ = helpers;
      ++generation_;
    }
    start_.notify_all();
    task(0u);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
    return helpers + 1;
  }

 private:
  /// Starts helpers up to `count`; returns how many exist. A host that refuses a thread (a
  /// thread limit, no address space for a stack) leaves fewer, and the jobs run on those.
  unsigned start_helpers(unsigned count) noexcept {
    while (workers_.size() < count) {
      const unsigned index = static_cast<unsigned>(workers_.size()) + 1;
      try {
        workers_.emplace_back([this, index] { loop(index); });
      } catch (...) {  // std::system_error or std::bad_alloc: run with the threads there are
        break;
      }
    }
    return std::min(count, static_cast<unsigned>(workers_.size()));
  }

  void loop(unsigned index) noexcept {
    std::uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index > active_) continue;  // not needed for this job
      void* task = task_;
      void (*call)(void*, unsigned) = call_;
      lock.unlock();
      call(task, index);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const unsigned limit_;
  std::mutex serial_;
  std::mutex mutex_;  // guards everything below
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  void* task_ = nullptr;
  void (*call_)(void*, unsigned) = nullptr;
  unsigned active_ = 0;   // helpers 1..active_ take part in the current job
  unsigned pending_ = 0;  // helpers not yet done with it
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_WORKER_POOL_HPP
