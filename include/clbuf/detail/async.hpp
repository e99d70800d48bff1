// SPDX-License-Identifier: MIT
// The parts of asynchronous operations that clbuf finishes on the host (staged transfers, copies
// between contexts): the Outcome a background job reports to its Future, the UserEvent that
// holds the manager's queue until the job is done, and the Background thread that runs jobs in
// the order they were submitted.
//
// The shape of one such operation, at the call (all enqueued under one lock, so queue order and
// job order agree):
//   main queue:   ... earlier work ... -> marker M -> barrier B (waits for user event U) -> later
//   work background:   waits for its turn, runs its commands on a side queue (each waits for M),
//   then
//                 completes U
// The Future waits for B, so it completes after the last byte has landed and after everything
// queued before it; work the user enqueues after the call (or on another queue, waiting for
// Future::event()) sees the result. A failure in the job is recorded in the Outcome and U still
// completes, so the queue never stalls: the Future reports the error at wait() / get().
#ifndef CLBUF_DETAIL_ASYNC_HPP
#define CLBUF_DETAIL_ASYNC_HPP

#include <clbuf/detail/queue.hpp>
#include <clbuf/error.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// Held while an asynchronous operation enqueues its markers and barriers (on one queue or, for
/// copies between contexts, two), takes its turn among staged transfers and posts its job to a
/// Background thread. One lock for the process makes these steps of each operation one step in a
/// single order: a job waits (through its markers, its turn or its thread's queue) only for jobs
/// that came before it, so no set of them can wait for each other. Never held while waiting for a
/// job to run (except when a job must run in place because no thread could be started: the jobs
/// it then waits for need no lock).
inline std::mutex& submission_mutex() noexcept {
  static std::mutex mutex;
  return mutex;
}

/// How a background job ended; read by the Future once the job's event has completed.
class Outcome {
 public:
  /// Records the first failure only.
  void failed(const Error& error) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (code_ != CL_SUCCESS || error.code() == CL_SUCCESS) return;
    code_ = error.code();
    try {
      message_ = error.what();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the code alone still reports the failure
    }
  }
  void failed(const char* operation, cl_int code, const std::string& details) noexcept {
    try {
      failed(Error(code, error_message(operation, code, details)));
    } catch (...) {  // no memory for the text
      failed(Error(code, std::string()));
    }
  }

  /// Throws the recorded failure; nothing when the job succeeded.
  void rethrow() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (code_ != CL_SUCCESS) throw Error(code_, message_);
  }

 private:
  mutable std::mutex mutex_;
  cl_int code_ = CL_SUCCESS;
  std::string message_;
};

/// Work a Future does on the thread that waits for it (or asks ready()) before its event can
/// complete: a joined Future's parts (joined_future.hpp), on drivers that never call event
/// callbacks. `wait`: block until done; else only when that needs no wait.
class Settle {
 public:
  virtual ~Settle() = default;
  virtual void settle(bool wait) noexcept = 0;
};

/// What an asynchronous operation started: the event its Future waits for (null when nothing is
/// left to wait for) and, when clbuf finishes part of the work on the host, where that part
/// reports how it ended.
struct Started {
  cl::Event event;
  std::shared_ptr<Outcome> outcome;
};

/// A user event (clCreateUserEvent) that is completed exactly once: by complete(), or by the
/// destructor, so no command waiting for it can be left waiting forever.
class UserEvent {
 public:
  UserEvent() = default;
  UserEvent(const char* operation, cl_context context) {
    cl_int err = CL_SUCCESS;
    event_ = cl::Event(CLBUF_CL(clCreateUserEvent)(context, &err), false);
    check(err, operation, "clCreateUserEvent");
  }
  UserEvent(UserEvent&& other) noexcept
      : event_(std::exchange(other.event_, cl::Event())),
        barrier_(std::exchange(other.barrier_, cl::Event())) {}
  UserEvent& operator=(UserEvent&& other) noexcept {
    if (this != &other) {
      complete();
      event_ = std::exchange(other.event_, cl::Event());
      barrier_ = std::exchange(other.barrier_, cl::Event());
    }
    return *this;
  }
  UserEvent(const UserEvent&) = delete;
  UserEvent& operator=(const UserEvent&) = delete;
  ~UserEvent() { complete(); }

  cl_event get() const noexcept { return event_(); }

  /// Holds `queue`'s later commands until complete(); returns the barrier's event. The barrier
  /// is kept until then: PoCL 3.1 aborts the process in clSetUserEventStatus when a barrier
  /// waiting for the user event has already failed (a command before it on the queue failed,
  /// e.g. one waiting for an application's event that failed) and been released by its owner.
  cl::Event barrier(const char* operation, const Queue& queue) {
    barrier_ = queue.barrier(operation, {event_()});
    return barrier_;
  }

  /// Lets every command waiting for the event run; a second call does nothing. A job's failure
  /// is reported through its Outcome, never through the event's status, which would fail every
  /// command queued after it.
  void complete() noexcept {
    if (event_() == nullptr) return;
    CLBUF_CL(clSetUserEventStatus)(event_(), CL_COMPLETE);
    event_ = cl::Event();
    barrier_ = cl::Event();
  }

 private:
  cl::Event event_;
  cl::Event barrier_;  // a barrier waiting for event_, kept until complete()
};

/// The background half of an asynchronous job whose bytes clbuf moves on the host (a staged
/// transfer, a file's bytes): flushes `main` (the job's marker on it must reach the device), runs
/// `work`, records its failure in `outcome` (an Error as it is, anything else as out of host
/// memory: "<what> ran out of host memory"), runs `release` (gives back what the job holds: a
/// turn, the caller's memory, a file), completes `landed` and flushes `main` again, so that the
/// barrier waiting for `landed`, and what follows it, run.
template <class Work, class Release>
void finish_background_job(cl_command_queue main, const char* operation, const char* what,
                           Outcome& outcome, UserEvent& landed, Work&& work,
                           Release&& release) noexcept {
  const cl_int err = CLBUF_CL(clFlush)(main);
  if (err != CL_SUCCESS) {
    outcome.failed(operation, err, std::string("clFlush failed before ") + what);
  } else {
    try {
      work();
    } catch (const Error& e) {
      outcome.failed(e);
    } catch (...) {
      outcome.failed(operation, CL_OUT_OF_HOST_MEMORY,
                     std::string(what) + " ran out of host memory");
    }
  }
  release();
  landed.complete();
  CLBUF_CL(clFlush)(main);
}

/// The handles of `after` to wait for: null handles are skipped (a Future with nothing left to
/// wait for has a null event), and each other one must be of `context`.
/// @throws Error CL_INVALID_CONTEXT naming the event that is not. Wraps clGetEventInfo.
inline std::vector<cl_event> wait_list_of(const char* operation,
                                          const std::vector<cl::Event>& after, cl_context context) {
  std::vector<cl_event> events;
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (after[i]() == nullptr) continue;
    cl_context of = nullptr;
    check(CLBUF_CL(clGetEventInfo)(after[i](), CL_EVENT_CONTEXT, sizeof(of), &of, nullptr),
          operation, "clGetEventInfo(CL_EVENT_CONTEXT)");
    if (of != context) {
      fail(operation, CL_INVALID_CONTEXT,
           "event " + std::to_string(i) +
               " of `after` belongs to another OpenCL context than "
               "this BufferManager's");
    }
    events.push_back(after[i]());
  }
  return events;
}

/// One thread that runs posted jobs in order. When the host refuses the thread, post() runs the
/// job on the calling thread instead: the operation then blocks, and stays correct.
class Background {
 public:
  Background() = default;
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  ~Background() { stop(); }

  /// Runs `job` (which must not throw) after every job posted before it.
  void post(std::function<void()> job) noexcept {
    bool queued = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (start_locked()) {
        try {
          jobs_.emplace_back();  // may throw; the move below cannot
          jobs_.back() = std::move(job);
          ++posted_;
          queued = true;
        } catch (...) {  // NOLINT(bugprone-empty-catch): no memory for the entry: run it here
        }
      }
    }
    if (queued) {
      wake_.notify_one();
      return;
    }
    drain();  // in order behind the jobs already posted
    job();
  }

  /// Returns when every job posted so far has run.
  void drain() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t target = posted_;
    idle_.wait(lock, [&] { return done_ >= target; });
  }

  /// Runs what is queued, then ends the thread; post() afterwards starts a new one.
  void stop() noexcept {
    std::thread thread;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      thread = std::move(thread_);
    }
    wake_.notify_all();
    if (thread.joinable()) thread.join();
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = false;
  }

 private:
  bool start_locked() noexcept {
    if (thread_.joinable()) return true;
    try {
      thread_ = std::thread([this] { loop(); });
      return true;
    } catch (...) {  // std::system_error: no thread to be had
      return false;
    }
  }

  void loop() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      job = nullptr;  // what the job holds is let go before it counts as done
      lock.lock();
      ++done_;
      idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> jobs_;
  std::thread thread_;
  std::uint64_t posted_ = 0, done_ = 0;
  bool stop_ = false;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_ASYNC_HPP
