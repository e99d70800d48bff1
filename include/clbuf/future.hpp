// SPDX-License-Identifier: MIT
// clbuf::Future<R>: the result of an asynchronous transfer, owning the host memory it touches.
#ifndef CLBUF_FUTURE_HPP
#define CLBUF_FUTURE_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/detail/event.hpp>
#include <clbuf/error.hpp>

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace clbuf {

class BufferManager;
namespace detail {
struct FutureAccess;
}  // namespace detail

/// The result of an asynchronous operation (upload_async(), download_async(), fill_async(), ...);
/// Future<void> for operations with no value to hand over. Move-only. Owns (or keeps alive)
/// every byte of host memory the operation reads or writes that the caller did not promise to
/// keep, so that memory is never released while the device may still touch it: destroying a
/// Future that was never waited for waits first. event() is what a kernel of the application
/// waits for to run after the operation, without a host wait in between.
template <class R>
class [[nodiscard]] Future {
 public:
  Future() = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  /// Takes over `other`'s transfer; `other` becomes empty (valid() is false).
  Future(Future&& other) noexcept
      : operation_(other.operation_),
        event_(std::move(other.event_)),
        value_(std::exchange(other.value_, std::nullopt)),
        host_(std::move(other.host_)),
        outcome_(std::move(other.outcome_)),
        settle_(std::move(other.settle_)),
        taken_(other.taken_) {}

  /// Waits for this Future's own transfer (errors ignored, as the destructor does), then takes
  /// over `other`'s; `other` becomes empty.
  Future& operator=(Future&& other) noexcept {
    if (this != &other) {
      wait_quietly();
      operation_ = other.operation_;
      event_ = std::move(other.event_);
      value_ = std::exchange(other.value_, std::nullopt);
      host_ = std::move(other.host_);
      outcome_ = std::move(other.outcome_);
      settle_ = std::move(other.settle_);
      taken_ = other.taken_;
    }
    return *this;
  }

  CLBUF_DETAIL_INLINE ~Future() { wait_quietly(); }

  /// True while the result has not been taken by get().
  bool valid() const noexcept { return value_.has_value(); }

  /// The event that completes with the operation, for the wait list of an application's own
  /// command (a kernel on manager.queue() or on another queue of its context). A null handle
  /// when nothing was left to wait for (the operation finished during the call, or moved no
  /// bytes); wait_list() gives a list to pass either way.
  const cl::Event& event() const noexcept { return event_; }

  /// {event()}, or an empty list when event() is null: a wait list OpenCL accepts as it is.
  std::vector<cl::Event> wait_list() const {
    return event_() == nullptr ? std::vector<cl::Event>() : std::vector<cl::Event>{event_};
  }

  /// The transfer has completed (successfully or not). Wraps clGetEventInfo.
  /// @throws Error if the event cannot be queried.
  bool ready() const {
    if (settle_) settle_->settle(false);
    if (event_() == nullptr) return true;
    const cl_int status = status_of_event();
    return status == CL_COMPLETE || status < 0;
  }

  /// Blocks until the transfer has completed. Several threads may wait on one Future at once.
  /// Wraps clWaitForEvents.
  /// @throws Error with the failed command's code if the transfer failed on the device.
  void wait() const {
    if (settle_) settle_->settle(true);
    if (event_() == nullptr) return;
    cl_event event = event_();
    const cl_int err = CLBUF_CL(clWaitForEvents)(1, &event);
    // Nothing is released here: wait() is const, and several threads may wait at once. The
    // host memory is let go by get(), by assignment or by destruction.
    if (err != CL_SUCCESS) fail_wait(err);
    if (outcome_) outcome_->rethrow();  // a failure in the part clbuf ran on the host
  }

  /// wait(), then hands over the result; once only.
  /// @throws Error if the transfer failed, or (code CL_SUCCESS) if the result was already taken.
  R get() {
    if (!value_) fail_taken();
    wait();
    host_.reset();  // the transfer has ended: its host memory is no longer in use
    taken_ = true;  // nothing left for the destructor to wait for
    if constexpr (std::is_void<R>::value) {
      value_.reset();
    } else {
      R result = std::move(*value_);
      value_.reset();
      return result;
    }
  }

 private:
  friend class BufferManager;
  friend struct detail::FutureAccess;

  struct Nothing {};
  using Stored = std::conditional_t<std::is_void<R>::value, Nothing, R>;

  Future(const char* operation, cl::Event event, Stored value, std::shared_ptr<const void> host,
         std::shared_ptr<const detail::Outcome> outcome = nullptr)
      : operation_(operation),
        event_(std::move(event)),
        value_(std::move(value)),
        host_(std::move(host)),
        outcome_(std::move(outcome)) {}

  cl_int status_of_event() const { return detail::checked_event_status(operation_, event_()); }

  // The failures of wait() and get(), out of line: their messages kept both from inlining into
  // a small call's caller (issue 47).
  [[noreturn]] CLBUF_DETAIL_COLD void fail_wait(cl_int err) const {
    // A command that failed makes clWaitForEvents fail (CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_
    // WAIT_LIST); its own code is its execution status. Asked only then: the query costs as
    // much again as a small transfer's wait on NVIDIA's driver (1.2 us, bench/seed_profile).
    const cl_int status = status_of_event();
    if (status < 0) detail::fail(operation_, status, "the transfer failed on the device");
    detail::fail_call(err, operation_, "clWaitForEvents");
  }
  [[noreturn]] CLBUF_DETAIL_COLD void fail_taken() const {
    detail::fail(operation_, CL_SUCCESS, "the result of this Future was already taken by get()");
  }

  void wait_quietly() noexcept {
    if (taken_) return;  // get() has waited: the transfer has ended
    if (settle_) settle_->settle(true);
    if (event_() == nullptr) return;
    cl_event event = event_();
    CLBUF_CL(clWaitForEvents)(1, &event);
    host_.reset();
  }

  const char* operation_ = "wait";
  cl::Event event_;
  std::optional<Stored> value_;       // a download's vector is written in place by the device
  std::shared_ptr<const void> host_;  // host memory the transfer reads (an upload's data)
  std::shared_ptr<const detail::Outcome> outcome_;  // set when clbuf finishes the work on the host
  std::shared_ptr<detail::Settle> settle_;          // set for a Future joined over others
  bool taken_ = false;  // get() has waited and handed over the result (one wait is enough)
};

}  // namespace clbuf

#endif  // CLBUF_FUTURE_HPP
