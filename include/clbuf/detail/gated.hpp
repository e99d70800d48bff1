// SPDX-License-Identifier: MIT
// Calls with `after`: no command of the manager's queue ever waits for an event that may fail.
// A command waiting for an event that fails fails, and so, on PoCL and on NVIDIA, does every
// command queued behind it on its in-order queue before it has ended; NVIDIA's driver (580, H100)
// now and then also fails commands queued just after, with the failed event's status
// (docs/repro/nvidia_failed_events.cpp). So the commands of a call with `after` go to a gated
// queue leased to the call, behind a barrier on the manager's queue's earlier work and a barrier
// on a user event `go` of clbuf's; a relay thread waits on the host for `after`, then sets `go`
// to CL_COMPLETE, or, when one of them failed, to its code once the gated queue's earlier
// commands have ended (PoCL 3.1 asserts when a failure reaches a command whose predecessor is
// still running). The manager's queue waits for a user event `hold` that the relay completes once
// the call's commands have ended, however they ended; a gated queue on which anything failed is
// released, never leased again.
#ifndef CLBUF_DETAIL_GATED_HPP
#define CLBUF_DETAIL_GATED_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/detail/event.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/transfer_engine.hpp>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// A manager's gated queues: in-order queues of its context, each leased to one call at a time,
/// and the relay thread. The relay takes the calls in the order of their `hold` barriers on the
/// manager's queue (a call's commands wait for that queue's earlier work, so for every call
/// whose barrier is before theirs). Thread-safe.
class GatedQueues {
 public:
  GatedQueues() = default;
  GatedQueues(const GatedQueues&) = delete;
  GatedQueues& operator=(const GatedQueues&) = delete;
  ~GatedQueues() { close(); }

  /// One call, from its barrier on the manager's queue to the end of its commands.
  struct Ticket {
    std::vector<cl::Event> after;     // the application's events
    std::shared_ptr<UserEvent> hold;  // the manager's queue waits for it
    cl::Event go;                     // a user event: the call's commands wait for it
    cl::Event before;                 // a marker of the manager's queue
    cl::Event earlier;                // the barrier on `before`
    cl::Event gate;                   // the barrier on `go`, kept until it has ended (KeptEvents)
    bool ready = false;               // set by handed()
    Queue queue;
    cl::Event last;  // the call's last command on `queue`
  };

  /// A queue for one call: one handed back, else a new one beside `main`.
  Queue lease(const char* operation, cl_context context, const Queue& main) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        Queue queue = std::move(free_.back());
        free_.pop_back();
        return queue;
      }
    }
    return Queue::beside(operation, context, main);
  }

  /// Whether the relay thread runs (started here if need be): false when the host refuses one.
  bool running() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (thread_.joinable()) return true;
    if (closed_) return false;
    try {
      thread_ = std::thread([this] { loop(); });
      return true;
    } catch (...) {  // std::system_error: no thread to be had
      return false;
    }
  }

  /// Holds `main` with a barrier on `ticket->hold` and queues the ticket for the relay, in one
  /// step, so that the relay takes tickets in the order of their barriers.
  void hold(const char* operation, const Queue& main, const std::shared_ptr<Ticket>& ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    tickets_.push_back(ticket);  // may throw: nothing held yet
    try {
      ticket->hold->barrier(operation, main);
    } catch (...) {
      tickets_.pop_back();
      throw;
    }
  }

  /// The call of `ticket` has enqueued its commands on `queue`, the last one `last`.
  void handed(const std::shared_ptr<Ticket>& ticket, Queue queue, cl::Event last) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ticket->queue = std::move(queue);
      ticket->last = std::move(last);
      ticket->ready = true;
    }
    wake_.notify_all();
  }

  /// Runs the relay's remaining tickets and releases every queue (cleanup(): no call is in
  /// flight, so each ticket has been handed).
  void close() noexcept {
    std::thread thread;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
      thread = std::move(thread_);
    }
    wake_.notify_all();
    if (thread.joinable()) thread.join();
    std::lock_guard<std::mutex> lock(mutex_);
    free_.clear();
  }

  /// Lets a call's commands run (CL_COMPLETE) or fail (a negative code): sets `go`.
  static void release(const cl::Event& go, cl_int status) noexcept {
    CLBUF_CL(clSetUserEventStatus)(go(), status);
  }

 private:
  /// The first of `events` to have failed, its code; CL_SUCCESS when none did. Waits for each.
  static cl_int failure_of(const std::vector<cl::Event>& events) noexcept {
    cl_int code = CL_SUCCESS;
    for (const cl::Event& event : events) {
      const cl_int own = Queue::wait_code(event());
      if (code == CL_SUCCESS) code = own;
    }
    return code;
  }

  /// Per ticket, in order, once handed: waits for `after` and the marker; sets `go` (so the
  /// call's commands start once the relay has seen both end); once the call's last
  /// command has ended, completes `hold` and keeps the queue for another call if nothing on it
  /// failed.
  void loop() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] {
        return (!tickets_.empty() && tickets_.front()->ready) || (closed_ && tickets_.empty());
      });
      if (tickets_.empty()) return;
      std::shared_ptr<Ticket> ticket = std::move(tickets_.front());
      tickets_.pop_front();
      lock.unlock();
      cl_int failed = failure_of(ticket->after);
      const cl_int ahead = Queue::wait_code(ticket->before());  // a failed marker fails the call
      if (failed == CL_SUCCESS) failed = ahead;
      if (failed != CL_SUCCESS) {
        Queue::wait_code(ticket->earlier());  // nothing before `go`'s barrier still running
        release(ticket->go, failed);
      } else {
        release(ticket->go, CL_COMPLETE);
      }
      const cl_int code = Queue::wait_code(ticket->last());
      const bool reusable = failed == CL_SUCCESS && code == CL_SUCCESS;
      if (!reusable) ticket->queue.finish_code();
      ticket->hold->complete();
      lock.lock();
      try {
        if (reusable && !closed_) free_.push_back(std::move(ticket->queue));
      } catch (...) {  // NOLINT(bugprone-empty-catch): no memory to keep it: released
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Ticket>> tickets_;  // in the order of their barriers
  std::vector<Queue> free_;
  std::thread thread_;
  bool closed_ = false;
};

/// One call with `after`: while it lives, the commands the calling thread enqueues through the
/// manager's engine go to a leased gated queue, behind the manager's queue's earlier work and a
/// user event the relay sets once `after` has ended; the manager's queue holds its later
/// commands until they have ended. done() hands the queue to the relay once the call's commands
/// are enqueued; a call that throws before hands it over from the destructor.
class GatedCall {
 public:
  GatedCall() = default;
  GatedCall(const char* operation, GatedQueues& gates, const TransferEngine& engine,
            cl_context context, const Queue& main, const std::vector<cl_event>& after) {
    if (after.empty()) return;
    auto ticket = std::make_shared<GatedQueues::Ticket>();
    for (cl_event event : after) ticket->after.emplace_back(event, true);
    ticket->hold = std::make_shared<UserEvent>(operation, context);
    cl_int err = CL_SUCCESS;
    ticket->go = cl::Event(CLBUF_CL(clCreateUserEvent)(context, &err), false);
    check(err, operation, "clCreateUserEvent");
    Queue queue = gates.lease(operation, context, main);
    try {
      ticket->before = main.marker(operation);
      ticket->earlier = queue.barrier(operation, {ticket->before()});
      ticket->gate = queue.barrier(operation, {ticket->go()});
      gates.hold(operation, main, ticket);
    } catch (...) {  // nothing of the call's on the queue yet: let it go, then release it
      GatedQueues::release(ticket->go, CL_COMPLETE);
      throw;
    }
    queue_ = std::move(queue);
    gates_ = &gates;
    ticket_ = std::move(ticket);
    redirect_.emplace(engine, queue_);
  }
  GatedCall(const GatedCall&) = delete;
  GatedCall& operator=(const GatedCall&) = delete;
  ~GatedCall() {
    if (gates_ == nullptr) return;
    redirect_.reset();
    cl::Event last = ticket_->earlier;
    try {
      last = queue_.marker("a call with `after`");  // after whatever the call enqueued
    } catch (...) {  // NOLINT(bugprone-empty-catch): the barriers, at least, have been queued
    }
    CLBUF_CL(clFlush)(queue_.get());
    gates_->handed(ticket_, queue_, last);
  }

  /// The call's commands are enqueued; `last` is the last one's event (null when it enqueued
  /// none). Never throws: the call's Future must own its host memory before anything can (a
  /// failed flush is left to the waits, which flush).
  void done(const cl::Event& last) noexcept {
    if (gates_ == nullptr) return;
    redirect_.reset();
    CLBUF_CL(clFlush)(queue_.get());
    gates_->handed(ticket_, queue_, last() != nullptr ? last : ticket_->gate);
    gates_ = nullptr;
  }

 private:
  GatedQueues* gates_ = nullptr;  // null: nothing to hand over
  Queue queue_;
  std::shared_ptr<GatedQueues::Ticket> ticket_;
  std::optional<TransferEngine::Redirect> redirect_;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_GATED_HPP
