// SPDX-License-Identifier: MIT
// The gate every BufferManager call passes: any number of calls at once (shared), cleanup()
// alone (exclusive), and once cleanup() has begun no new call enters, so threads that keep
// calling cannot starve it (a reader-preferring shared_mutex would).
#ifndef CLBUF_DETAIL_GATE_HPP
#define CLBUF_DETAIL_GATE_HPP

#include <clbuf/error.hpp>

#include <atomic>
#include <mutex>
#include <shared_mutex>

namespace clbuf {
namespace detail {

class Gate {
 public:
  using Entry = std::shared_lock<std::shared_mutex>;

  /// Enters for one call. @throws Error (code CL_SUCCESS) once closing has begun.
  Entry enter(const char* operation) const {
    if (closing_.load(std::memory_order_acquire)) fail_cleaned_up(operation);
    Entry entry(mutex_);
    if (closed_) fail_cleaned_up(operation);
    return entry;
  }

  /// Stops new calls, waits for those inside, and runs `release` once, alone; false (and
  /// `release` not run) when the gate was already closed.
  template <class Release>
  bool close(Release&& release) {
    closing_.store(true, std::memory_order_release);
    std::unique_lock<std::shared_mutex> lock(mutex_);
    if (closed_) return false;
    closed_ = true;
    release();
    return true;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::atomic<bool> closing_{false};
  bool closed_ = false;  // under mutex_
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_GATE_HPP
