// SPDX-License-Identifier: MIT
// One Future over several: a DeviceGroup's call starts a Future on each device's manager and
// hands back one whose event is a user event (of the first manager's context) that completes
// once every part's event has: when the last part's event callback runs, or when a thread waits
// for the joined Future (or asks ready()), whichever comes first. The second matters where a
// driver accepts callbacks and never calls them (oclgrind 21.10), and it keeps every blocking
// wait on the application's threads (oclgrind's runtime is not safe against a second thread
// waiting on a queue). A part that failed on the device, or in the work clbuf finished on the
// host, is reported through the joined Future's Outcome, never through the user event's status
// (which would fail every command queued after it). The joined Future keeps the parts' Futures:
// what host memory they own lives until it is done.
#ifndef CLBUF_DETAIL_JOINED_FUTURE_HPP
#define CLBUF_DETAIL_JOINED_FUTURE_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// The value of a joined Future<void>.
struct NoValue {};

/// What a Future holds, for the helpers below (Future's friend).
struct FutureAccess {
  /// A Future<R> of `value` (NoValue for Future<void>).
  template <class R, class V>
  static Future<R> make(const char* operation, cl::Event event, V value,
                        std::shared_ptr<const void> host, std::shared_ptr<const Outcome> outcome,
                        std::shared_ptr<Settle> settle) {
    using Stored = typename Future<R>::Stored;
    Stored stored;
    if constexpr (!std::is_same<V, NoValue>::value) stored = Stored(std::move(value));
    Future<R> future(operation, std::move(event), std::move(stored), std::move(host),
                     std::move(outcome));
    future.settle_ = std::move(settle);
    return future;
  }
  template <class R>
  static const std::shared_ptr<const Outcome>& outcome(const Future<R>& future) noexcept {
    return future.outcome_;
  }
  template <class R>
  static void keep(Future<R>& future, std::shared_ptr<const void> more) {
    future.host_ =
        std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(
            std::move(future.host_), std::move(more));
  }
};

/// The state of a joined Future: the parts' events and Outcomes, the user event to complete,
/// and where failures go.
class JoinState : public Settle {
 public:
  /// From a waiting thread: collects the parts (waiting for them when `wait`; else only once
  /// all have ended) and completes the user event.
  void settle(bool wait) noexcept override {
    if (claimed_.load(std::memory_order_acquire)) return;  // done, or being done
    if (!wait) {
      for (const cl::Event& event : events) {
        if (status_of(event()) > 0) return;  // queued, submitted or running
      }
    }
    finish(wait);
  }

  /// From a part's event callback: the last one collects the parts (all have ended: no wait,
  /// which a callback must not do).
  void part_ended() noexcept {
    if (remaining.fetch_sub(1) == 1) finish(false);
  }

  /// Once (the first caller; the others return at once: a callback must never block, and a
  /// waiting thread then waits for the user event): records each part's failure, then
  /// completes the user event.
  void finish(bool wait) noexcept {
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return;
    for (std::size_t i = 0; i < events.size(); ++i) {
      cl_event event = events[i]();
      if (wait) CLBUF_CL(clWaitForEvents)(1, &event);  // a failure shows in the status
      const cl_int status = status_of(event);
      if (status < 0) {
        outcome->failed(operation, status,
                        "part " + std::to_string(i) + " of the transfer failed on the device");
      }
    }
    for (const auto& part : parts) {
      try {
        part->rethrow();
      } catch (const Error& error) {
        outcome->failed(error);
      }
    }
    if (user() != nullptr) CLBUF_CL(clSetUserEventStatus)(user(), CL_COMPLETE);
  }

  cl::Event user;
  std::vector<cl::Event> events;  // the parts' (not null)
  std::atomic<std::size_t> remaining{0};
  const char* operation = "wait";
  std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();
  std::vector<std::shared_ptr<const Outcome>> parts;  // the parts' own Outcomes

 private:
  static cl_int status_of(cl_event event) noexcept {
    cl_int status = CL_COMPLETE;
    if (CLBUF_CL(clGetEventInfo)(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status,
                                 nullptr) != CL_SUCCESS) {
      return CL_OUT_OF_RESOURCES;
    }
    return status;
  }

  std::atomic<bool> claimed_{false};
};

/// The callbacks a driver has not called yet, each a heap-held shared_ptr to its state. Held
/// here, so that memory stays reachable: a driver may call a callback after the joined Future
/// has been settled and destroyed, even after main() has returned (a leak check at exit would
/// count it lost), and oclgrind never calls one. Never destroyed, as a callback may come late.
struct PendingCallbacks {
  std::mutex mutex;
  std::unordered_set<std::shared_ptr<JoinState>*> held;

  static PendingCallbacks& instance() {
    static PendingCallbacks* pending = new PendingCallbacks();  // NOLINT: never destroyed
    return *pending;
  }
};

/// clSetEventCallback's callback: one part has ended. `data` is a holder of the state from
/// PendingCallbacks, deleted here.
inline void CL_CALLBACK joined_part_ended(cl_event, cl_int, void* data) {
  auto* holder = static_cast<std::shared_ptr<JoinState>*>(data);
  {
    PendingCallbacks& pending = PendingCallbacks::instance();
    std::lock_guard<std::mutex> lock(pending.mutex);
    pending.held.erase(holder);
  }
  (*holder)->part_ended();
  delete holder;
}

/// Asks for joined_part_ended() when `part` ends; when the driver refuses, a waiting thread
/// settles the state.
inline void join_callback(const std::shared_ptr<JoinState>& state, cl_event part) {
  PendingCallbacks& pending = PendingCallbacks::instance();
  auto* holder = new std::shared_ptr<JoinState>(state);
  {
    std::lock_guard<std::mutex> lock(pending.mutex);
    pending.held.insert(holder);
  }
  if (CLBUF_CL(clSetEventCallback)(part, CL_COMPLETE, joined_part_ended, holder) != CL_SUCCESS) {
    {
      std::lock_guard<std::mutex> lock(pending.mutex);
      pending.held.erase(holder);
    }
    delete holder;
  }
}

/// One Future<R> holding `value` over `parts` (Futures of managers, started): it completes once
/// all have, its event a user event of `context` (null when no part left anything to wait for).
template <class R, class V = NoValue>
Future<R> joined(const char* operation, cl_context context, std::vector<Future<void>> parts,
                 V value = V()) {
  auto state = std::make_shared<JoinState>();
  state->operation = operation;
  for (const Future<void>& part : parts) {
    if (part.event()() != nullptr) state->events.push_back(part.event());
    if (FutureAccess::outcome(part)) state->parts.push_back(FutureAccess::outcome(part));
  }
  auto kept = std::make_shared<std::vector<Future<void>>>(std::move(parts));
  cl::Event event;
  if (state->events.empty()) {
    state->finish(false);
  } else {
    cl_int err = CL_SUCCESS;
    state->user = cl::Event(CLBUF_CL(clCreateUserEvent)(context, &err), false);
    check(err, operation, "clCreateUserEvent");
    event = state->user;
    state->remaining.store(state->events.size());
    for (const cl::Event& part : state->events) join_callback(state, part());
  }
  return FutureAccess::make<R>(operation, std::move(event), std::move(value), std::move(kept),
                               state->outcome, state);
}

/// `future`, also keeping `more` alive until its work is done.
template <class R>
Future<R> keeping(Future<R> future, std::shared_ptr<const void> more) {
  FutureAccess::keep(future, std::move(more));
  return future;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_JOINED_FUTURE_HPP
