// SPDX-License-Identifier: MIT
// clbuf::mpi's handles of messages in flight: Request (a non-blocking send, receive or
// collective), Persistent (a send or receive set up once and started many times) and wait_all().
// Progress happens in the calling thread, in their test() and wait() and in every blocking call
// of the Communicator that started them.
#ifndef CLBUF_MPI_REQUESTS_HPP
#define CLBUF_MPI_REQUESTS_HPP

#include <mpi.h>
#include <clbuf/detail/mpi/core.hpp>
#include <clbuf/detail/mpi/eager.hpp>
#include <clbuf/detail/mpi/streams.hpp>
#include <clbuf/error.hpp>

#include <exception>
#include <memory>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {

class Communicator;

/// A non-blocking send, receive or collective started by isend(), irecv(), ibroadcast() or
/// iallreduce(). Progress happens in the calling thread, inside test(), wait() and every
/// blocking call of the same Communicator. Move-only; destroying a Request that has not
/// completed waits for it (errors are then dropped: call wait() to see them). The buffer must
/// stay alive until the Request has completed.
class [[nodiscard]] Request {
  friend class Persistent;

 public:
  Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  /// Takes over `other`'s message; `other` becomes empty.
  Request(Request&& other) noexcept = default;
  /// Waits for this Request's own message (errors ignored, as the destructor does), then takes
  /// over `other`'s.
  Request& operator=(Request&& other) noexcept {
    if (this != &other) {
      wait_quietly();
      core_ = std::move(other.core_);
      transfer_ = std::move(other.transfer_);
      eager_ = std::move(other.eager_);
    }
    return *this;
  }
  ~Request() { wait_quietly(); }

  /// Moves every transfer of the Communicator on; true once this one has completed (also for
  /// an empty Request).
  /// @throws Error when the transfer failed (once; afterwards the Request is empty).
  bool test() {
    return clbuf::detail::guard_host_memory("Request::test", [&] {
      if (!active()) return true;
      core_->progress();
      if (transfer_) {
        if (!transfer_->done()) return false;
      } else {
        eager_.step();
        if (!eager_.done()) return false;
      }
      finish();
      return true;
    });
  }

  /// Blocks until the transfer has completed.
  /// @throws Error when it failed: a mismatch of count, size or type with the peer's buffer
  ///         (CL_INVALID_VALUE, naming both), an OpenCL failure, or an MPI call's failure.
  void wait() {
    clbuf::detail::guard_host_memory("Request::wait", [&] {
      if (!active()) return;
      if (transfer_) {
        core_->complete(*transfer_);
      } else {
        core_->complete(eager_);
      }
      finish();
    });
  }

 private:
  friend class Communicator;
  Request(std::shared_ptr<detail::Core> core, std::shared_ptr<detail::Transfer> transfer)
      : core_(std::move(core)), transfer_(std::move(transfer)) {}

  /// Starts a point-to-point message of `span` to or from `peer`: one that fits the envelope
  /// (detail::Eager::fits) without a Transfer object, any other as a tracked stream.
  static Request start(const std::shared_ptr<detail::Core>& core, const char* operation,
                       const detail::Span& span, int peer, int tag, bool send) {
    if (detail::Eager::fits(*core, span)) {
      Request request(core, nullptr);
      request.eager_.start(*core, operation, span, peer, tag, send);
      return request;
    }
    std::shared_ptr<detail::Transfer> transfer;
    if (send) {
      transfer = detail::make_send(*core, operation, span, peer, tag, core->user(),
                                   detail::Kind::point_to_point);
    } else {
      transfer = std::make_shared<detail::RecvStream>(*core, operation, span, peer, tag,
                                                      core->user(), detail::Kind::point_to_point);
    }
    core->track(transfer);
    return Request(core, std::move(transfer));
  }

  bool active() const noexcept { return transfer_ != nullptr || eager_.active(); }

  void finish() {
    const std::shared_ptr<detail::Core> core = std::move(core_);  // outlives the message
    if (transfer_) {
      const std::shared_ptr<detail::Transfer> transfer = std::move(transfer_);
      transfer->rethrow();
    } else {
      eager_.finish();
    }
  }

  void wait_quietly() noexcept {
    try {
      wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }

  std::shared_ptr<detail::Core> core_;  // first: destroyed after the message
  std::shared_ptr<detail::Transfer> transfer_;
  detail::Eager eager_;  // instead of transfer_, for a message that fits the envelope
};

/// A send or receive set up once and started many times, as MPI_Send_init / MPI_Recv_init: the
/// buffer, peer and tag are checked once, by Communicator::send_init() / recv_init(); start()
/// begins one transfer with them, wait() or test() completes it, and start() may follow again.
/// The buffer and the Communicator must stay alive, and the buffer keep its size, while the
/// Persistent exists. Move-only; destroying an active one waits for it (errors dropped).
class [[nodiscard]] Persistent {
 public:
  Persistent() = default;

  /// Begins a transfer (a message of the buffer's whole contents).
  /// @throws Error CL_INVALID_OPERATION while the last start() has not completed, or for a
  ///         Persistent that was default-constructed or moved from.
  void start() {
    clbuf::detail::guard_host_memory("Persistent::start", [&] {
      if (!core_) {
        clbuf::detail::fail("Persistent::start", CL_INVALID_OPERATION,
                            "an empty Persistent (default-constructed or moved from)");
      }
      if (current_.active()) {
        clbuf::detail::fail(operation_, CL_INVALID_OPERATION,
                            "started again before the last transfer completed (call wait() or "
                            "test() first)");
      }
      current_ = Request::start(core_, operation_, span_, peer_, tag_, send_);
    });
  }

  /// As Request::test() for the transfer started last; true when none is active.
  bool test() { return current_.test(); }
  /// As Request::wait() for the transfer started last; returns at once when none is active.
  void wait() { current_.wait(); }
  /// Whether a transfer has been started and not yet completed by wait() or test().
  bool active() const noexcept { return current_.active(); }

 private:
  friend class Communicator;
  Persistent(std::shared_ptr<detail::Core> core, const char* operation, detail::Span span,
             cl::Buffer root, int peer, int tag, bool send)
      : core_(std::move(core)),
        operation_(operation),
        span_(span),
        root_(std::move(root)),
        peer_(peer),
        tag_(tag),
        send_(send) {}

  std::shared_ptr<detail::Core> core_;
  const char* operation_ = "Persistent::start";
  detail::Span span_;
  cl::Buffer root_;  // retained: span_.buffer stays a valid OpenCL object
  int peer_ = MPI_PROC_NULL;
  int tag_ = 0;
  bool send_ = true;
  Request current_;  // declared last: destroyed (waited for) first
};

/// Waits for every request (all of them, even after a failure); rethrows the first failure.
inline void wait_all(std::vector<Request>& requests) {
  std::exception_ptr first;
  for (Request& request : requests) {
    try {
      request.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_MPI_REQUESTS_HPP
