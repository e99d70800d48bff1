// SPDX-License-Identifier: MIT
// A point-to-point message that fits one envelope (Core::inline_max(), 3968 bytes: header and
// payload within Open MPI's 4 KiB eager fragment), sent or received without a Transfer object.
// isend/irecv/send/recv and Persistent::start keep it inside the Request (or on the blocking
// call's stack) and take the envelope from the Core's cache, so a small message allocates
// nothing once the cache is warm and is not tracked by the Core as a Transfer: MPI's own request
// is all that moves it (a receive is polled, below). Its wire format is the Streams' inline message
// (streams.hpp), whose helpers it uses. A receive whose envelope holds the header of a chunked
// message (which never fits such a buffer) hands it to a RecvStream, which drains the chunks so
// that the sender completes; so that this happens while the rank waits in another call, the Core
// polls every receive in flight (Core::watch).
#ifndef CLBUF_DETAIL_MPI_EAGER_HPP
#define CLBUF_DETAIL_MPI_EAGER_HPP

#include <mpi.h>
#include <clbuf/detail/mpi/core.hpp>
#include <clbuf/detail/mpi/streams.hpp>
#include <clbuf/detail/mpi/wire.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <utility>

namespace clbuf {
namespace mpi {
namespace detail {

/// One message that fits the envelope, with Transfer's interface (step, done, rethrow) so that
/// Core::wait() takes it. Move-only; the envelope and MPI's request move with it (MPI holds the
/// envelope's address, which does not move).
class Eager final : public Polled {
 public:
  Eager() = default;
  Eager(const Eager&) = delete;
  Eager& operator=(const Eager&) = delete;
  Eager(Eager&& other) noexcept : Polled() { take(other); }
  Eager& operator=(Eager&& other) noexcept {
    if (this != &other) {
      clear();
      take(other);
    }
    return *this;
  }
  ~Eager() {
    if (core_ != nullptr) core_->trace_done(trace_);
    if (watched_) core_->unwatch(this);
    if (envelope_) drop_envelope();
  }

  /// Whether the message is small enough (and the Communicator speaks clbuf's wire format).
  static bool fits(const Core& core, const Span& span) noexcept {
    return !core.whole() && span.bytes <= core.inline_max();
  }

  /// Posts the message: the header and `span`'s bytes (read now, after the queue's earlier
  /// work) in one MPI_Isend to `peer`, or one MPI_Irecv of an envelope from `peer`; the payload
  /// is checked and written to `span` once it has arrived. MPI_PROC_NULL: done at once.
  void start(Core& core, const char* operation, const Span& span, int peer, int tag, bool send) {
    core_ = &core;
    operation_ = operation;
    span_ = span;
    receiving_ = !send;
    if (peer == MPI_PROC_NULL) {
      done_ = true;
      return;
    }
    if (send) {
      core.post_deferred();  // sends an exchange deferred go first (MPI's order)
      Header header = header_of(core, span, peer, Kind::point_to_point);
      core.trace_post(trace_, operation, true, peer, tag, span.bytes);
      core.trace_header(trace_, peer, tag, header, span);
      try {
        post_envelope(core, operation, span, header, nullptr, peer, tag, core.user(), envelope_,
                      request_);
      } catch (...) {
        // The read (or the envelope) failed before MPI had the message: the peer fails, never
        // waits.
        if (request_ == MPI_REQUEST_NULL) send_notice(core, peer, tag, core.user());
        throw;
      }
      return;
    }
    envelope_ = core.take_envelope();
    core.trace_post(trace_, operation, false, peer, tag, span.bytes);
    core.watch(this);
    watched_ = true;
    check_mpi(MPI_Irecv(envelope_.get(), static_cast<int>(header_bytes + core.inline_max()),
                        MPI_BYTE, peer, tag, core.user(), &request_),
              operation, "MPI_Irecv");
  }

  /// Core::progress(): moves a receive on while the rank waits in any call.
  void poll() noexcept override { step(); }

  /// Whether a message was started and not cleared since.
  bool active() const noexcept { return core_ != nullptr; }
  bool done() const noexcept { return done_; }

  /// Moves the message on without blocking; records a failure rather than throwing.
  void step() noexcept {
    if (done_) return;
    step_message(done_, error_, [this] { return advance(); });
    if (done_) core_->trace_done(trace_);  // its span ends (when tracing)
  }

  /// Throws the failure recorded by step(), once.
  void rethrow() {
    if (error_) {
      const std::exception_ptr error = *error_;
      error_.reset();
      std::rethrow_exception(error);
    }
  }

  /// Forgets the message, then throws the failure recorded by step(), if any.
  void finish() {
    std::optional<std::exception_ptr> error = std::move(error_);
    clear();
    if (error) std::rethrow_exception(*error);
  }

  /// Forgets the message (done, or abandoned by a failure).
  void clear() noexcept {
    if (core_ != nullptr) core_->trace_done(trace_);  // a message given up on
    if (watched_) core_->unwatch(this);
    watched_ = false;
    if (envelope_) drop_envelope();
    core_ = nullptr;
    handed_.reset();
    request_ = MPI_REQUEST_NULL;
    done_ = false;
    error_.reset();
  }

 private:
  /// The envelope back to the Core's cache, unless MPI still owns it (then it is left to MPI,
  /// never freed under it).
  void drop_envelope() noexcept {
    if (request_ != MPI_REQUEST_NULL && !mpi_finalized()) {
      static_cast<void>(envelope_.release());
    } else if (core_ != nullptr) {
      core_->give_envelope(std::move(envelope_));
    }
    envelope_.reset();
  }

  bool advance() {
    if (handed_) {
      handed_->step();
      if (!handed_->done()) return false;
      handed_->rethrow();
      return true;
    }
    MPI_Status status;
    int flag = 0;
    check_mpi(MPI_Test(&request_, &flag, receiving_ ? &status : MPI_STATUS_IGNORE), operation_,
              "MPI_Test");
    if (!flag) return false;
    std::unique_ptr<char[]> envelope = std::move(envelope_);
    if (!receiving_) {
      core_->give_envelope(std::move(envelope));
      return true;
    }
    Arrival arrival = inspect(operation_, envelope.get(), status, span_, Kind::point_to_point,
                              core_->chunk_bytes());
    core_->trace_header(trace_, arrival.peer, arrival.tag, arrival.header, span_);
    if (arrival.chunked) {
      core_->give_envelope(std::move(envelope));
      handed_ = std::make_shared<RecvStream>(*core_, operation_, span_, Kind::point_to_point,
                                             std::move(arrival));
      core_->track(handed_);  // progressed by every wait, like any chunked transfer
      return advance();
    }
    if (!arrival.problem.empty()) fail(operation_, arrival.code, arrival.problem);
    write_span(*core_, operation_, span_, envelope.get() + header_bytes, nullptr);
    core_->give_envelope(std::move(envelope));
    return true;
  }

  void take(Eager& other) noexcept {
    watched_ = std::exchange(other.watched_, false);
    if (watched_) other.core_->rewatch(&other, this);
    core_ = std::exchange(other.core_, nullptr);
    operation_ = other.operation_;
    span_ = other.span_;
    envelope_ = std::move(other.envelope_);
    request_ = std::exchange(other.request_, MPI_REQUEST_NULL);
    receiving_ = other.receiving_;
    done_ = std::exchange(other.done_, false);
    error_ = std::move(other.error_);
    other.error_.reset();
    handed_ = std::move(other.handed_);
    trace_ = std::exchange(other.trace_, MessageTrace());
  }

  Core* core_ = nullptr;  // the Request's (or the blocking call's Communicator's) Core
  const char* operation_ = "";
  Span span_;
  std::unique_ptr<char[]> envelope_;  // header + payload; MPI's while request_ is pending
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool receiving_ = false;
  bool watched_ = false;  // in the Core's polled receives
  bool done_ = false;
  std::optional<std::exception_ptr> error_;  // empty but after a failure: cheap to move
  std::shared_ptr<Transfer> handed_;         // the RecvStream draining a chunked message
  MessageTrace trace_;                       // its span, when the manager traces
};

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_EAGER_HPP
