// SPDX-License-Identifier: MIT
// The gate every BufferManager call passes: any number of calls at once, cleanup() alone, and
// once cleanup() has begun no new call enters, so threads that keep calling cannot starve it.
// A call's way in and out is one atomic addition each (a shared_mutex took ~85 instructions a
// call, on the seed round trip's hot path); cleanup() waits on a condition variable for the
// calls inside to leave.
#ifndef CLBUF_DETAIL_GATE_HPP
#define CLBUF_DETAIL_GATE_HPP

#include <clbuf/error.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace clbuf {
namespace detail {

class Gate {
 public:
  /// One call inside the gate, from enter() to its destruction.
  class Entry {
   public:
    Entry() noexcept = default;  // outside any gate
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    Entry(Entry&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
    Entry& operator=(Entry&& other) noexcept {
      if (this != &other) {
        if (gate_ != nullptr) gate_->leave();
        gate_ = other.gate_;
        other.gate_ = nullptr;
      }
      return *this;
    }
    ~Entry() {
      if (gate_ != nullptr) gate_->leave();
    }

   private:
    friend class Gate;
    explicit Entry(const Gate* gate) noexcept : gate_(gate) {}
    const Gate* gate_ = nullptr;
  };

  /// Enters for one call. @throws Error (code CL_SUCCESS) once closing has begun.
  CLBUF_DETAIL_INLINE Entry enter(const char* operation) const {
    // Calls that come once closing has begun leave without counting themselves in, so that
    // threads that keep calling cannot keep close() waiting.
    if (closing_.load(std::memory_order_relaxed)) fail_cleaned_up(operation);
    // Sequentially consistent, as close(): either close() sees this call inside and waits for
    // it, or this call sees closing_ and leaves (both may happen; never neither).
    inside_.fetch_add(1);
    if (closing_.load()) {
      leave();
      fail_cleaned_up(operation);
    }
    return Entry(this);
  }

  /// Stops new calls, waits for those inside, and runs `release` once, alone; false (and
  /// `release` not run) when the gate was already closed. A close() that meets another one
  /// running waits for it to end, then returns false.
  template <class Release>
  bool close(Release&& release) {
    static_assert(noexcept(release()), "a release that threw would leave other close() waiting");
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (closing_.load()) {
        changed_.wait(lock, [this] { return closed_; });
        return false;
      }
      closing_.store(true);
      changed_.wait(lock, [this] { return inside_.load() == 0; });
    }
    // Outside the mutex: no call is inside and none enters now (one refused meanwhile counts
    // itself in and out again, and may take the mutex to wake a close() that no longer waits;
    // it never waits for `release`, which may join threads).
    release();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    changed_.notify_all();
    return true;
  }

 private:
  CLBUF_DETAIL_INLINE void leave() const noexcept {
    // The last call out after closing began wakes close(): it stored closing_ before it saw
    // this call inside, so this load sees it (both sequentially consistent).
    if (inside_.fetch_sub(1) == 1 && closing_.load()) wake_close();
  }
  CLBUF_DETAIL_COLD void wake_close() const noexcept {
    std::lock_guard<std::mutex> lock(mutex_);  // close() is waiting, or about to wait
    changed_.notify_all();
  }

  mutable std::atomic<std::size_t> inside_{0};  // calls inside
  std::atomic<bool> closing_{false};
  mutable std::mutex mutex_;                 // close(), and waking it
  mutable std::condition_variable changed_;  // the calls inside have left, or closed_ was set
  bool closed_ = false;                      // under mutex_
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_GATE_HPP
