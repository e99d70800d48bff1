// SPDX-License-Identifier: MIT
// One Future over several: a DeviceGroup's call starts a Future on each device's manager and
// hands back one whose event is a user event (of the first manager's context) that completes
// once every part's event has (clSetEventCallback on each). A part that failed on the device, or
// in the work clbuf finished on the host, is reported through the joined Future's Outcome, never
// through the user event's status (which would fail every command queued after it). The parts'
// Futures are kept by the joined one: what host memory they own lives until it is done.
#ifndef CLBUF_DETAIL_JOINED_FUTURE_HPP
#define CLBUF_DETAIL_JOINED_FUTURE_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <type_traits>
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
                        std::shared_ptr<const void> host, std::shared_ptr<const Outcome> outcome) {
    using Stored = typename Future<R>::Stored;
    if constexpr (std::is_same<V, NoValue>::value) {
      return Future<R>(operation, std::move(event), Stored(), std::move(host), std::move(outcome));
    } else {
      return Future<R>(operation, std::move(event), Stored(std::move(value)), std::move(host),
                       std::move(outcome));
    }
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

/// The shared state of a joined Future: how many parts are left, the user event to complete,
/// and where failures go.
struct JoinState {
  /// Collects the parts' host-side failures, then lets the user event complete.
  void finish() noexcept {
    for (const auto& part : parts) {
      try {
        part->rethrow();
      } catch (const Error& error) {
        outcome->failed(error);
      }
    }
    if (user() != nullptr) CLBUF_CL(clSetUserEventStatus)(user(), CL_COMPLETE);
  }

  std::atomic<std::size_t> remaining{0};
  cl::Event user;
  const char* operation = "wait";
  std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();
  std::vector<std::shared_ptr<const Outcome>> parts;  // the parts' own Outcomes
};

/// clSetEventCallback's callback: one part has ended (`status` < 0: failed). `data` is a
/// heap-held shared_ptr to the state, deleted here.
inline void CL_CALLBACK joined_part_ended(cl_event event, cl_int status, void* data) {
  auto* holder = static_cast<std::shared_ptr<JoinState>*>(data);
  cl_int now = CL_COMPLETE;  // as a Future's wait() would learn it (clGetEventInfo)
  if (CLBUF_CL(clGetEventInfo)(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(now), &now,
                               nullptr) == CL_SUCCESS &&
      now < 0) {
    status = now;
  }
  JoinState& state = **holder;
  if (status < 0) {
    state.outcome->failed(state.operation, status, "a shard's transfer failed on the device");
  }
  if (state.remaining.fetch_sub(1) == 1) state.finish();
  delete holder;
}

/// Counts `event` in: its callback ends the part, or, when the callback cannot be set, a wait
/// on the host here.
inline void join_event(const std::shared_ptr<JoinState>& state, cl_event event) {
  auto* holder = new std::shared_ptr<JoinState>(state);
  if (CLBUF_CL(clSetEventCallback)(event, CL_COMPLETE, joined_part_ended, holder) == CL_SUCCESS) {
    return;
  }
  CLBUF_CL(clWaitForEvents)(1, &event);
  cl_int status = CL_COMPLETE;
  if (CLBUF_CL(clGetEventInfo)(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status,
                               nullptr) != CL_SUCCESS) {
    status = CL_OUT_OF_RESOURCES;
  }
  joined_part_ended(event, status, holder);
}

/// One Future<R> holding `value` over `parts` (Futures of managers, started): it completes once
/// all have, its event a user event of `context` (null when no part left anything to wait for).
template <class R, class V = NoValue>
Future<R> joined(const char* operation, cl_context context, std::vector<Future<void>> parts,
                 V value = V()) {
  auto state = std::make_shared<JoinState>();
  state->operation = operation;
  std::vector<cl_event> events;
  for (const Future<void>& part : parts) {
    if (part.event()() != nullptr) events.push_back(part.event()());
    if (FutureAccess::outcome(part)) state->parts.push_back(FutureAccess::outcome(part));
  }
  auto kept = std::make_shared<std::vector<Future<void>>>(std::move(parts));
  cl::Event event;
  if (!events.empty()) {
    cl_int err = CL_SUCCESS;
    state->user = cl::Event(CLBUF_CL(clCreateUserEvent)(context, &err), false);
    check(err, operation, "clCreateUserEvent");
    event = state->user;
    state->remaining.store(events.size());
    for (cl_event part : events) join_event(state, part);
  } else {
    state->finish();
  }
  return FutureAccess::make<R>(operation, std::move(event), std::move(value), std::move(kept),
                               state->outcome);
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
