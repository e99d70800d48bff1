// SPDX-License-Identifier: MIT
// clbuf::mpi's shared state: the Core every transfer of one Communicator uses (the manager's
// queue, the duplicated communicators, the agreed chunk size, stream numbers, the budget and
// cache of pinned chunks, the tracked transfers and their progress) and the Transfer interface
// the point-to-point streams (streams.hpp) implement. Progress runs in the caller's thread.
#ifndef CLBUF_DETAIL_MPI_CORE_HPP
#define CLBUF_DETAIL_MPI_CORE_HPP

#include <mpi.h>
#include <clbuf/detail/chunk_io.hpp>
#include <clbuf/detail/event.hpp>
#include <clbuf/detail/mpi/wire.hpp>
#include <clbuf/detail/transfer_engine.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {
namespace detail {

using clbuf::detail::ChunkIo;
using clbuf::detail::fail;
using clbuf::detail::HostChunk;

/// Bytes of one device buffer a transfer moves, with what the header says about them.
struct Span {
  cl_mem buffer = nullptr;  // the DeviceBuffer's (alive until the transfer completes)
  char* host = nullptr;     // the buffer's host block (CPU device), else null
  std::size_t offset = 0;
  std::size_t bytes = 0;
  std::uint64_t count = 0;
  std::uint32_t element_size = 1;
  std::uint32_t type = 0;
};

using Route = clbuf::detail::TransferEngine::Message;

/// A message's span on the trace, when the manager traces (Core::trace_post()): from its post
/// until it completed, with the stream number of its header once known, from which both ranks
/// derive the id of the flow arrow from the send to its receive (Core::flow_id()).
struct MessageTrace {
  double begin = 0;  // trace_now() at the post; 0: not traced
  int lane = -1;     // Core's lane track it is drawn on
  bool send = false;
  bool flow = false;  // `stream` is the header's: the arrow is drawn
  int peer = 0;
  int tag = 0;
  std::uint64_t bytes = 0;
  std::uint32_t stream = 0;
  const char* path = "";
  const char* operation = "";
};

inline bool mpi_finalized() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

/// True when the command of `event` has completed; throws when it failed on the device.
inline bool completed(const char* operation, const cl::Event& event, const char* what) {
  const cl_int status = clbuf::detail::checked_event_status(operation, event());
  if (status < 0) fail(operation, status, std::string(what) + " failed on the device");
  return status == CL_COMPLETE;
}

/// One step of a message (a Transfer, an Eager): `advance()` unless it is `done`; a failure is
/// kept in `error` (an exception_ptr, or an optional of one) and ends the message. Never throws.
template <class Error, class Advance>
void step_message(bool& done, Error& error, Advance&& advance) noexcept {
  if (done) return;
  try {
    done = advance();
  } catch (...) {
    error = std::current_exception();
    done = true;
  }
}

/// One message in flight. step() moves it on without blocking and records a failure rather than
/// throwing; the Request that owns it rethrows.
class Transfer {
 public:
  explicit Transfer(const char* operation) noexcept : operation_(operation) {}
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  virtual ~Transfer() = default;

  bool done() const noexcept { return done_; }
  void step() noexcept {
    if (done_) return;
    step_message(done_, error_, [this] { return advance(); });
    if (done_) finished();
  }
  void rethrow() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 protected:
  virtual bool advance() = 0;
  /// The message has completed (or failed): a stream ends its span on the trace.
  virtual void finished() noexcept {}
  const char* operation_;

 private:
  bool done_ = false;
  std::exception_ptr error_;
};

/// A small receive without a Transfer object (eager.hpp's Eager), kept in a Request or on a
/// blocking call's stack, which every progress() moves on as it does the tracked transfers: a
/// chunked message that such a receive matched (a mismatch) is drained only once the receive has
/// looked at its header, and the sender's blocking send waits for that, so a blocking call of
/// the receiving rank in between must poll it too.
class Polled {
 public:
  virtual void poll() noexcept = 0;

 protected:
  Polled() = default;
  Polled(const Polled&) = default;
  Polled& operator=(const Polled&) = default;
  ~Polled() = default;
};

/// A HaloExchange with sends not posted yet (boxes going straight wait for their reads, and the
/// later sends of its plan to the same rank and tag wait for them). MPI matches the messages of
/// one rank and tag in the order they are posted, so every later send of the Communicator first
/// has these posted (Core::post_deferred), in the order the exchanges started.
class Deferred {
 public:
  /// Posts every send not posted yet (waiting for the reads); records a failure, never throws.
  virtual void post_deferred() noexcept = 0;
  /// Posts the sends whose reads have completed (in order, not waiting); records a failure.
  virtual void poll_deferred() noexcept = 0;

 protected:
  Deferred() = default;
  Deferred(const Deferred&) = default;
  Deferred& operator=(const Deferred&) = default;
  ~Deferred() = default;
};

/// A non-blocking collective (collective.hpp): its agreement is under way when it is
/// queued; launch() completes the agreement and starts its MPI collective. Every rank starts
/// collectives in the order it called them (MPI's rule), so the Core launches them in order,
/// and every later collective launches the earlier ones first.
class Collective : public Transfer {
 public:
  using Transfer::Transfer;
  /// Completes the agreement (waiting for it when `block`) and starts the collective, or
  /// records why not; false while the agreement is still under way (only when !block).
  virtual bool launch(bool block) noexcept = 0;
};

/// What the ranks of a collective agree on: count, element size, element type, root, reduction
/// and which collective, as each field and its negation under one MPI_MAX (so both the highest
/// and the lowest value come back), plus the highest rank that rejected its own arguments.
struct Agreement {
  static constexpr int fields = 6;  // count, element size, type, root, reduction, collective
  long long mine[fields] = {};
  long long values[2 * fields + 1] = {};
  long long all[2 * fields + 1] = {};

  Agreement(const char* collective, std::size_t count, std::size_t element_size, std::uint32_t type,
            long long root, long long reduction, int rejected) noexcept {
    const long long fields_of_mine[fields] = {
        static_cast<long long>(std::min<std::size_t>(count, LLONG_MAX)),
        static_cast<long long>(element_size),
        static_cast<long long>(type),
        root,
        reduction,
        collective_code(collective)};
    for (int i = 0; i < fields; ++i) {
      mine[i] = fields_of_mine[i];
      values[i] = mine[i];
      values[fields + i] = -mine[i];
    }
    values[2 * fields] = rejected;
  }

  /// MPI_Iallreduce of the values on `comm`.
  void start(const char* operation, MPI_Comm comm, MPI_Request& request) {
    check_mpi(MPI_Iallreduce(values, all, 2 * fields + 1, MPI_LONG_LONG, MPI_MAX, comm, &request),
              operation, "MPI_Iallreduce");
  }

  /// After the reduction: the same Error on every rank when a rank rejected its arguments or a
  /// field differs between ranks.
  void check(const char* operation) const {
    if (all[2 * fields] >= 0) {
      fail(operation, CL_INVALID_VALUE,
           "rank " + std::to_string(all[2 * fields]) +
               " rejected its arguments (its own error says why)");
    }
    static const char* const names[fields] = {"element counts", "element sizes", "element types",
                                              "roots",          "operations",    "collectives"};
    for (int i : {5, 0, 1, 2, 3, 4}) {  // another collective first: the rest follows from it
      const long long high = all[i];
      const long long low = -all[fields + i];
      if (high == low) continue;
      std::string range = std::to_string(low) + " to " + std::to_string(high);
      if (i == 2) {
        range = std::string(type_name(static_cast<std::uint32_t>(low))) + " to " +
                type_name(static_cast<std::uint32_t>(high));
      } else if (i == 4) {
        range =
            std::string(op_name(static_cast<Op>(low))) + " to " + op_name(static_cast<Op>(high));
      } else if (i == 5) {
        range = std::string(collective_name(low)) + " to " + collective_name(high);
      }
      const std::string own = i == 2   ? type_name(static_cast<std::uint32_t>(mine[i]))
                              : i == 4 ? op_name(static_cast<Op>(mine[i]))
                              : i == 5 ? collective_name(mine[i])
                                       : std::to_string(mine[i]);
      fail(operation, CL_INVALID_VALUE,
           std::string(names[i]) + " differ between ranks (" + range + "); this rank's: " + own);
    }
  }

  static long long collective_code(const char* collective) noexcept {
    for (long long i = 0; i < 6; ++i) {
      if (std::strcmp(collective, collective_name(i)) == 0) return i;
    }
    return -1;
  }
  static const char* collective_name(long long code) noexcept {
    static const char* const names[] = {"broadcast", "allreduce",  "scatter",
                                        "gather",    "ibroadcast", "iallreduce"};
    return code >= 0 && code < 6 ? names[code] : "unknown";
  }
};

/// What every transfer of one Communicator shares: the manager, the duplicated communicators,
/// the agreed chunk size, the stream numbers and the cache of pinned chunks.
class Core {
 public:
  Core(BufferManager& manager, MPI_Comm comm, const Options& options)
      : manager_(manager), options_(options) {
    const char* op = "Communicator";
    check_communicator(op, comm);
    // What this rank alone can reject is only reported after the collective calls below, so
    // that the other ranks are never left waiting in them.
    std::exception_ptr local;
    whole_ = options.path == Path::whole;
    try {
      bind(op, manager);
    } catch (...) {
      local = std::current_exception();
    }
    if (whole_ && local) std::rethrow_exception(local);
    open_communicators(op, comm);
    if (whole_) return;
    agree_on_chunks(op, local);
    // Inline messages stay within shared memory's eager fragment (4 KiB in Open MPI's vader);
    // larger ones go zero copy or through pinned chunks rather than through a host envelope.
    inline_max_ = std::min<std::size_t>(options.chunk_bytes, 3968);
  }

  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  /// Queues a non-blocking collective whose agreement has started (see Collective).
  void queue_collective(std::shared_ptr<Collective> collective) {
    collectives_.push_back(std::move(collective));  // make_room() made room for it
  }

  /// Launches the queued collectives in order, as far as their agreements have completed
  /// (`block`: all of them, waiting for each agreement). Every collective call first launches
  /// every earlier one with `block`, so that each rank starts MPI collectives in call order.
  void launch_collectives(bool block) noexcept {
    while (!collectives_.empty() && collectives_.front()->launch(block)) {
      collectives_.erase(collectives_.begin());
    }
  }

  /// @name Tracing: when the manager traces (else each call is one branch). Messages are spans
  /// on lane tracks (a lane holds one message at a time, so that spans of one track never
  /// overlap: flow arrows bind to them); HaloExchange's phases on a track of their own.
  /// @{

  /// The manager's tracer; null when it does not trace.
  clbuf::detail::Tracer* tracer() const noexcept { return tracer_; }

  /// Starts `trace`: a message of `operation` to (`send`) or from `peer` with `tag`, of `bytes`,
  /// posted now. Nothing for MPI_PROC_NULL.
  void trace_post(MessageTrace& trace, const char* operation, bool send, int peer, int tag,
                  std::uint64_t bytes) noexcept {
    if (tracer_ == nullptr || peer == MPI_PROC_NULL) return;
    trace = MessageTrace();
    trace.lane = take_lane();
    if (trace.lane < 0) return;  // no memory for a track: not traced
    trace.begin = clbuf::detail::trace_now();
    trace.operation = operation;
    trace.send = send;
    trace.peer = peer;
    trace.tag = tag;
    trace.bytes = bytes;
    trace.path = whole_ ? "whole" : "inline";
  }

  /// `trace`'s header is known (made, or received from `peer` with `tag`): the arrow is drawn,
  /// and the path is the one `span`'s bytes take (inline in the envelope, else the route).
  void trace_header(MessageTrace& trace, int peer, int tag, const Header& header,
                    const Span& span) noexcept {
    if (trace.begin == 0) return;
    trace.peer = peer;
    trace.tag = tag;
    trace.stream = header.stream;
    trace.flow = true;
    trace.bytes = header.bytes;
    const Route path = route(span);
    trace.path = header.bytes <= inline_max_ ? "inline"
                 : path == Route::staged     ? "staged"
                 : path == Route::map        ? "map"
                                             : "zero_copy";
  }

  /// Ends `trace` now (once; nothing when it is not traced): its span on its lane, with its end
  /// of the arrow when the header was known.
  void trace_done(MessageTrace& trace) noexcept {
    if (trace.begin == 0) return;
    const double end = clbuf::detail::trace_now();
    std::pair<int, bool>& lane = lanes_[static_cast<std::size_t>(trace.lane)];
    tracer_->span(lane.first, trace.send ? "send" : "receive", trace.begin, end,
                  {{"peer", nullptr, static_cast<double>(trace.peer)},
                   {"tag", nullptr, static_cast<double>(trace.tag)},
                   {"bytes", nullptr, static_cast<double>(trace.bytes)},
                   {"path", trace.path},
                   {"call", trace.operation}});
    if (trace.flow) tracer_->flow(lane.first, trace.send, flow_id(trace), (trace.begin + end) / 2);
    lane.second = false;
    trace.begin = 0;
  }

  /// The id of the arrow of `trace`'s message, the same on both ranks: a hash of the
  /// communicator's number (agreed at construction), the sender's and the receiver's rank in
  /// MPI_COMM_WORLD and the header's stream number (the sender's count of messages to that rank,
  /// which the receiver reads in the header: right whatever order the receives complete in),
  /// below 2^53 so that JSON readers keep it exact.
  std::uint64_t flow_id(const MessageTrace& trace) const noexcept {
    const int from = trace.send ? rank_ : trace.peer;
    const int to = trace.send ? trace.peer : rank_;
    std::uint64_t hash = static_cast<std::uint64_t>(comm_number_);
    for (const std::uint64_t part :
         {world_rank(from), world_rank(to), std::uint64_t{trace.stream}}) {
      hash = mix(hash ^ part);
    }
    hash &= (std::uint64_t{1} << 53) - 1;
    return hash == 0 ? 1 : hash;
  }

  /// Now on the trace's clock when tracing, else 0 (a staged chunk's start, for trace_chunk()).
  double trace_clock() const noexcept {
    return tracer_ != nullptr ? clbuf::detail::trace_now() : 0;
  }

  /// When `trace`'s message is traced: a span `name` of its staged chunk `chunk` from `begin`
  /// until now on the track "MPI chunks" (chunks of messages in flight overlap: async pairs).
  /// Returns now (the next step's start), 0 when not tracing.
  double trace_chunk(const MessageTrace& trace, const char* name, double begin,
                     std::size_t chunk) noexcept {
    if (trace.begin == 0 || begin == 0) return trace_clock();
    const double now = clbuf::detail::trace_now();
    if (chunk_track_ < 0) {
      try {
        chunk_track_ = tracer_->track(comm_number_ == 0 ? std::string("MPI chunks")
                                                        : "MPI chunks of communicator " +
                                                              std::to_string(comm_number_));
      } catch (...) {
        return now;  // no memory for the track: not traced
      }
    }
    tracer_->overlapping(chunk_track_, name, begin, now,
                         {{"chunk", nullptr, static_cast<double>(chunk)},
                          {"peer", nullptr, static_cast<double>(trace.peer)},
                          {"tag", nullptr, static_cast<double>(trace.tag)}});
    return now;
  }

  /// A span `name` on the "halo exchange" track from `begin` until now (HaloPhases).
  void trace_phase(const char* name, double begin, double end) noexcept {
    if (tracer_ == nullptr) return;
    if (halo_track_ < 0) {
      try {
        halo_track_ = tracer_->track(comm_number_ == 0 ? std::string("halo exchange")
                                                       : "halo exchange of communicator " +
                                                             std::to_string(comm_number_));
      } catch (...) {
        return;  // no memory for the track: not traced
      }
    }
    tracer_->span(halo_track_, name, begin, end, {});
  }
  /// @}

  /// Completes every transfer still in flight (errors are dropped), then frees the
  /// communicators; after MPI_Finalize there is nothing left to do.
  ~Core() {
    if (mpi_finalized()) return;
    while (!active_.empty()) progress();
    free_comms();
  }

  BufferManager& manager() const noexcept { return manager_; }
  const Options& options() const noexcept { return options_; }
  MemoryModel model() const noexcept { return model_; }
  /// Path::whole: plain MPI messages and collectives on the user's own communicator.
  bool whole() const noexcept { return whole_; }
  /// The manager's context, for the buffer checks (each transfer takes the manager's queue,
  /// which throws after cleanup()).
  cl_context context() const noexcept { return raw_context_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int tag_ub() const noexcept { return tag_ub_; }
  MPI_Comm user() const noexcept { return user_; }
  MPI_Comm wire() const noexcept { return wire_; }
  MPI_Comm coll() const noexcept { return coll_; }
  std::size_t inline_max() const noexcept { return inline_max_; }
  std::size_t chunk_bytes() const noexcept { return options_.chunk_bytes; }

  /// Counts a message (sent: `direction` 0, received: 1) on `route`, for stats().
  void count(int direction, Route route) noexcept {
    MessagePaths& paths = direction == 0 ? stats_.sent : stats_.received;
    ++(route == Route::zero_copy ? paths.zero_copy
       : route == Route::map     ? paths.map
                                 : paths.staged);
  }
  /// Counts a message whose payload travels inside its envelope, for stats().
  void count_inline(int direction) noexcept {
    ++(direction == 0 ? stats_.sent : stats_.received).inline_payload;
  }
  const MessageStats& stats() const noexcept { return stats_; }

  /// How `span`'s bytes reach MPI: the engine's path rule (TransferEngine::route_message), with
  /// the route Options::path forces, if any.
  Route route(const Span& span) const noexcept {
    Route forced = Route::staged;
    switch (options_.path) {
      case Path::zero_copy:
      case Path::whole:
        forced = Route::zero_copy;
        break;
      case Path::map:
        forced = Route::map;
        break;
      case Path::staged:
        break;
      case Path::automatic:
        return engine_->route_message(span.host != nullptr, nullptr);
    }
    return engine_->route_message(span.host != nullptr, &forced);
  }

  /// The tag of the next stream of chunks to `dest`.
  std::uint32_t next_stream(int dest) noexcept {
    std::uint32_t& next = streams_[static_cast<std::size_t>(dest)];
    const std::uint32_t stream = next;
    next = next >= static_cast<std::uint32_t>(tag_ub_) ? 0 : next + 1;
    return stream;
  }

  /// The engine's chunk calls on the manager's queue (retained at construction: transfers
  /// enqueue on it without entering the manager's gate each time) and pinned pool.
  const ChunkIo& io() const noexcept { return io_; }

  /// A host buffer of header_bytes + inline_max() for a header and an inline payload (cached).
  std::unique_ptr<char[]> take_envelope() {
    if (!free_envelopes_.empty()) {
      std::unique_ptr<char[]> envelope = std::move(free_envelopes_.back());
      free_envelopes_.pop_back();
      return envelope;
    }
    return std::unique_ptr<char[]>(new char[header_bytes + inline_max_]);
  }

  void give_envelope(std::unique_ptr<char[]> envelope) noexcept {
    if (!envelope || free_envelopes_.size() >= 64) return;
    try {
      free_envelopes_.push_back(std::move(envelope));
    } catch (...) {  // NOLINT(bugprone-empty-catch): freed instead
    }
  }

  /// A chunk of chunk_bytes() for sending (0) or receiving (1): pinned memory of the manager's
  /// pool (host memory of clbuf's when its budget holds none: ChunkIo::chunk), or an empty one
  /// when that direction already uses its budget of 2 x depth chunks, unless `beyond_budget`.
  /// Chunks in use thus stay at 4 x depth per Communicator however many messages are in flight;
  /// a transfer without a chunk waits for one. A receive takes a chunk only for a chunk that has
  /// arrived, so it never waits on a remote rank while it holds one; a send holds its chunk until
  /// the peer has received it, so a send waiting for a chunk may wait for sends whose peer is
  /// receiving this one first (MPI allows any order): see send_stalled().
  HostChunk acquire_slot(int direction, const char* operation, bool beyond_budget = false) {
    if (slots_in_use_[direction] >= 2 * options_.depth && !beyond_budget) return {};
    HostChunk block = io_.chunk(operation, options_.chunk_bytes);
    if (direction == 0) note_send_moved();
    ++slots_in_use_[direction];
    note_in_use(options_.chunk_bytes);
    return block;
  }

  /// Back to the pool (or freed).
  void release_slot(int direction, HostChunk&& block) noexcept {
    if (!block) return;
    if (direction == 0) note_send_moved();
    --slots_in_use_[direction];
    in_use_bytes_ -= options_.chunk_bytes;
    block.reset();
  }

  /// A chunk left to MPI (a failed transfer's, whose MPI request is still pending): leaked, no
  /// longer counted as in use, so the budgets stay whole.
  void forget_slot(int direction, HostChunk&& block) noexcept {
    --slots_in_use_[direction];
    in_use_bytes_ -= options_.chunk_bytes;
    block.leak();
    if (direction == 0) note_send_moved();
  }

  /// A send's chunk was taken, handed back, or received by the peer.
  /// A count, not a time: the clock is read only by send_stalled(), off the chunks' path.
  void note_send_moved() noexcept { ++send_moves_; }

  /// True when the sends use their whole budget and none of their chunks has moved for
  /// send_stall: the peers may be receiving, first, sends that wait for a chunk (three sends
  /// received in reverse order hung both ranks while sends only waited). A send holding no chunk
  /// whose peer has matched its header then takes one beyond the budget, so that every order MPI
  /// allows completes; while chunks move, or the peers are late but receive in the order sent,
  /// the budget holds.
  /// The stall is timed from the first look after the last move.
  bool send_stalled() noexcept {
    if (slots_in_use_[0] < 2 * options_.depth) return false;
    const auto now = std::chrono::steady_clock::now();
    if (send_moves_ != stall_moves_) {
      stall_moves_ = send_moves_;
      stall_since_ = now;
      return false;
    }
    return now - stall_since_ > send_stall;
  }
  static constexpr std::chrono::milliseconds send_stall{20};

  /// Bytes of chunks held now, and the most ever held at once.
  std::size_t pinned_bytes() const noexcept { return in_use_bytes_; }
  std::size_t peak_pinned_in_use() const noexcept { return peak_in_use_bytes_; }

  /// Room for one more record of a transfer (track()) and of a collective
  /// (queue_collective()): every transfer and collective makes it before it posts anything, so
  /// that recording it afterwards cannot fail for want of memory and leave a message posted that
  /// nothing moves on. @throws std::bad_alloc
  void make_room() {
    if (active_.size() >= 64) prune();  // amortised: waits do not prune
    if (active_.size() == active_.capacity())
      active_.reserve(std::max<std::size_t>(16, 2 * active_.size()));
    if (collectives_.size() == collectives_.capacity()) {
      collectives_.reserve(std::max<std::size_t>(4, 2 * collectives_.size()));
    }
  }

  /// Starts tracking `transfer`; every wait progresses every tracked transfer, so that two
  /// requests that depend on each other's peer (a send and a receive) never deadlock. Does not
  /// allocate after the transfer's make_room(); should the room have been taken meanwhile and
  /// no memory be left, it is not tracked, and only its own Request's test() and wait() move
  /// it on.
  void track(std::shared_ptr<Transfer> transfer) noexcept {
    if (transfer->done()) return;
    if (active_.size() == active_.capacity()) prune();
    try {
      active_.push_back(std::move(transfer));
    } catch (...) {  // NOLINT(bugprone-empty-catch): see above
    }
  }

  void progress() noexcept {
    for (std::size_t i = 0; i < active_.size(); ++i) active_[i]->step();
    for (std::size_t i = 0; i < polled_.size(); ++i) polled_[i]->poll();
    // An exchange's sends waiting for their reads leave as the reads complete, whatever call
    // the rank waits in (a peer's finish() may be waiting for them).
    if (!posting_) {
      for (std::size_t i = 0; i < deferred_.size();) {
        Deferred* exchange = deferred_[i];
        exchange->poll_deferred();  // undefers itself once all are posted
        if (i < deferred_.size() && deferred_[i] == exchange) ++i;
      }
    }
    prune();
  }

  /// `exchange` has sends not posted yet: later sends post them first (post_deferred()).
  /// Kept in the order of the exchanges' starts; undefer() when all are posted, redefer() when
  /// the exchange moves.
  void defer(Deferred* exchange) {
    if (std::find(deferred_.begin(), deferred_.end(), exchange) == deferred_.end())
      deferred_.push_back(exchange);
  }
  void undefer(Deferred* exchange) noexcept {
    deferred_.erase(std::remove(deferred_.begin(), deferred_.end(), exchange), deferred_.end());
  }
  void redefer(Deferred* from, Deferred* to) noexcept {
    std::replace(deferred_.begin(), deferred_.end(), from, to);
  }

  /// Before a send is posted: the sends that exchanges deferred (but `except`'s) are posted
  /// first, so that no later message of the same rank and tag overtakes them. Nothing while an
  /// exchange posts its own sends (Posting).
  void post_deferred(const Deferred* except = nullptr) noexcept {
    if (posting_ || deferred_.empty()) return;
    Posting posting(*this);
    for (std::size_t i = 0; i < deferred_.size();) {
      Deferred* exchange = deferred_[i];
      if (exchange != except) exchange->post_deferred();  // undefers itself once all are posted
      if (i < deferred_.size() && deferred_[i] == exchange) ++i;
    }
  }

  /// While an exchange posts its sends in its own order, sends do not post deferred ones.
  class Posting {
   public:
    explicit Posting(Core& core) noexcept : core_(core), was_(core.posting_) {
      core.posting_ = true;
    }
    Posting(const Posting&) = delete;
    Posting& operator=(const Posting&) = delete;
    ~Posting() { core_.posting_ = was_; }

   private:
    Core& core_;
    const bool was_;
  };

  /// Polls `receive` in every progress() until unwatch(); rewatch() follows it when it moves.
  void watch(Polled* receive) { polled_.push_back(receive); }
  void unwatch(Polled* receive) noexcept {
    const auto it = std::find(polled_.begin(), polled_.end(), receive);
    if (it == polled_.end()) return;
    *it = polled_.back();
    polled_.pop_back();
  }
  void rewatch(Polled* from, Polled* to) noexcept {
    std::replace(polled_.begin(), polled_.end(), from, to);
  }

  /// Stops tracking the transfers that are done.
  void prune() noexcept {
    active_.erase(std::remove_if(active_.begin(), active_.end(),
                                 [](const std::shared_ptr<Transfer>& t) { return t->done(); }),
                  active_.end());
  }

  /// Waits for `request`, an MPI operation of clbuf's own (a barrier, a collective's agreement),
  /// moving every tracked transfer on meanwhile: a peer blocked on a transfer of this rank (a
  /// blocking send whose chunks this rank's posted receive must take) is never left waiting
  /// behind it, as it would be behind MPI's blocking call.
  void wait_request(MPI_Request& request, const char* operation, const char* call) {
    int done = 0;
    for (unsigned spins = 0;; ++spins) {
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), operation, call);
      if (done != 0) return;
      progress();
      if (spins > 4000) std::this_thread::yield();  // oversubscribed hosts
    }
  }

  /// Progresses until `transfer` (a Transfer, or an untracked Eager message) is done. The
  /// others move on every few spins (each MPI_Test runs MPI's progress engine: testing all of
  /// them every spin would make a window of n requests cost n^2 tests).
  template <class Message>
  void complete(Message& transfer) noexcept {
    for (unsigned spins = 0; !transfer.done(); ++spins) {
      transfer.step();
      if (transfer.done()) break;
      if (spins % 8 == 7) progress();
      if (spins > 4000) std::this_thread::yield();  // oversubscribed hosts
    }
  }

  /// complete(), then rethrows the transfer's failure, if any.
  template <class Message>
  void wait(Message& transfer) {
    complete(transfer);
    transfer.rethrow();
  }

  /// Waits for all, then rethrows the first failure.
  void wait_all(std::vector<std::shared_ptr<Transfer>>& transfers) {
    std::exception_ptr first;
    for (auto& transfer : transfers) {
      try {
        wait(*transfer);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

 private:
  /// MPI is running and `comm` an intracommunicator.
  static void check_communicator(const char* op, MPI_Comm comm) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized || mpi_finalized()) {
      fail(op, CL_INVALID_OPERATION, "MPI is not initialized (call MPI_Init first) or finalized");
    }
    if (comm == MPI_COMM_NULL) fail(op, CL_INVALID_VALUE, "the communicator is MPI_COMM_NULL");
    int inter = 0;
    check_mpi(MPI_Comm_test_inter(comm, &inter), op, "MPI_Comm_test_inter");
    if (inter) fail(op, CL_INVALID_VALUE, "an intercommunicator is not supported");
  }

  /// What the transfers take from the manager (its memory model, context and queue), and the
  /// Options checked: this rank's own to reject.
  void bind(const char* op, BufferManager& manager) {
    model_ = manager.memory_model();
    context_ = manager.context();  // throws after cleanup()
    raw_context_ = context_();
    clbuf::detail::TransferEngine& engine = clbuf::detail::ManagerAccess::engine(manager);
    engine_ = &engine;
    io_ = engine.chunk_io();
    tracer_ = engine.telemetry().tracer();
    if (options_.chunk_bytes < 4096 || options_.chunk_bytes > (std::size_t{1} << 30) ||
        options_.depth < 1 || options_.depth > 64) {
      fail(op, CL_INVALID_VALUE,
           "Options: chunk_bytes " + std::to_string(options_.chunk_bytes) +
               " must be in [4096, 1073741824] and depth " + std::to_string(options_.depth) +
               " in [1, 64]");
    }
  }

  /// The communicators, then this rank's place in them. Under Path::whole the user's own for
  /// every message (and its error handler): peers without clbuf take part in no MPI call of
  /// ours, no duplicate, no agreement. Else three duplicates (errors returned): headers of
  /// point-to-point messages, chunks, collectives.
  void open_communicators(const char* op, MPI_Comm comm) {
    if (whole_) {
      user_ = wire_ = coll_ = comm;
    } else {
      check_mpi(MPI_Comm_dup(comm, &user_), op, "MPI_Comm_dup");
      MPI_Comm_set_errhandler(user_, MPI_ERRORS_RETURN);
      MPI_Comm_dup(user_, &wire_);
      MPI_Comm_dup(user_, &coll_);
    }
    MPI_Comm_rank(user_, &rank_);
    MPI_Comm_size(user_, &size_);
    void* value = nullptr;
    int found = 0;
    MPI_Comm_get_attr(user_, MPI_TAG_UB, &value, &found);
    if (found && value != nullptr) tag_ub_ = *static_cast<int*>(value);
    streams_.assign(static_cast<std::size_t>(size_), 0);
  }

  /// Every rank must cut large messages the same way: the ranks agree on chunk_bytes (and learn
  /// of a rank's `local` rejection), or fail on every rank alike, the communicators freed.
  void agree_on_chunks(const char* op, const std::exception_ptr& local) {
    const long long chunk =
        static_cast<long long>(std::min<std::size_t>(options_.chunk_bytes, std::size_t{1} << 40));
    // The fourth: the communicator's number for the trace's arrows (the highest count of
    // Communicators made so far among its ranks), the same on every rank.
    const long long mine[4] = {chunk, -chunk, local ? rank_ : -1, communicators().load()};
    long long all[4] = {0, 0, 0, 0};
    const int err = MPI_Allreduce(mine, all, 4, MPI_LONG_LONG, MPI_MAX, coll_);
    if (err == MPI_SUCCESS && !local && all[2] < 0 && all[0] == -all[1]) {
      numbered(all[3]);
      return;
    }
    free_comms();
    if (err != MPI_SUCCESS) fail_mpi(op, err, "MPI_Allreduce");
    if (local) std::rethrow_exception(local);
    if (all[2] >= 0) {
      fail(op, CL_INVALID_VALUE,
           "rank " + std::to_string(all[2]) + " rejected its arguments (its own error says why)");
    }
    fail(op, CL_INVALID_VALUE,
         "Options::chunk_bytes differ between ranks (" + std::to_string(-all[1]) + " to " +
             std::to_string(all[0]) + "); every rank must cut messages alike");
  }

  /// Communicators made in this process, for their numbers (agree_on_chunks()).
  static std::atomic<long long>& communicators() noexcept {
    static std::atomic<long long> made{0};
    return made;
  }

  /// This communicator is number `number` on all its ranks; later ones get higher numbers. When
  /// tracing, the ranks of MPI_COMM_WORLD of its ranks, for the arrows' ids.
  void numbered(long long number) noexcept {
    comm_number_ = number;
    long long made = communicators().load();
    while (made <= number && !communicators().compare_exchange_weak(made, number + 1)) {
    }
    if (tracer_ == nullptr) return;
    try {
      std::vector<int> ranks(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_; ++r) ranks[static_cast<std::size_t>(r)] = r;
      world_.assign(ranks.size(), MPI_UNDEFINED);
      MPI_Group group = MPI_GROUP_NULL;
      MPI_Group world = MPI_GROUP_NULL;
      MPI_Comm_group(user_, &group);
      MPI_Comm_group(MPI_COMM_WORLD, &world);
      MPI_Group_translate_ranks(group, size_, ranks.data(), world, world_.data());
      MPI_Group_free(&group);
      MPI_Group_free(&world);
    } catch (...) {  // NOLINT(bugprone-empty-catch): ranks of the communicator stand in for them
      world_.clear();
    }
  }

  std::uint64_t world_rank(int rank) const noexcept {
    const std::size_t r = static_cast<std::size_t>(rank);
    return static_cast<std::uint64_t>(rank >= 0 && r < world_.size() ? world_[r] : rank);
  }

  /// splitmix64's finaliser: every bit of `x` stirs every bit of the result.
  static std::uint64_t mix(std::uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  /// A lane free for a message's span (a new track when all are busy); -1 when none can be had.
  int take_lane() noexcept {
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      if (!lanes_[i].second) {
        lanes_[i].second = true;
        return static_cast<int>(i);
      }
    }
    try {
      const std::string name =
          (comm_number_ == 0 ? std::string("MPI messages")
                             : "MPI messages of communicator " + std::to_string(comm_number_)) +
          ", lane " + std::to_string(lanes_.size());
      lanes_.emplace_back(tracer_->track(name), true);
      return static_cast<int>(lanes_.size() - 1);
    } catch (...) {
      return -1;
    }
  }

  void note_in_use(std::size_t bytes) noexcept {
    in_use_bytes_ += bytes;
    peak_in_use_bytes_ = std::max(peak_in_use_bytes_, in_use_bytes_);
  }

  void free_comms() noexcept {
    if (whole_) return;  // the user's
    for (MPI_Comm* comm : {&coll_, &wire_, &user_}) {
      if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
    }
  }

  BufferManager& manager_;
  Options options_;
  MemoryModel model_ = MemoryModel::host;
  bool whole_ = false;
  cl::Context context_;
  cl_context raw_context_ = nullptr;
  const clbuf::detail::TransferEngine* engine_ = nullptr;  // the manager's: its path rule
  ChunkIo io_;
  MPI_Comm user_ = MPI_COMM_NULL;  // headers of point-to-point messages (the user's tags)
  MPI_Comm wire_ = MPI_COMM_NULL;  // chunks, tagged by stream
  MPI_Comm coll_ = MPI_COMM_NULL;  // headers of collectives, and their agreement
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  std::size_t inline_max_ = 0;
  MessageStats stats_;
  std::vector<std::uint32_t> streams_;
  std::vector<std::unique_ptr<char[]>> free_envelopes_;
  std::size_t slots_in_use_[2] = {0, 0};  // sending, receiving
  std::uint64_t send_moves_ = 0;          // note_send_moved() calls
  std::uint64_t stall_moves_ = 0;         // send_moves_ when send_stalled() last saw a move
  std::chrono::steady_clock::time_point stall_since_;
  std::size_t in_use_bytes_ = 0;
  std::size_t peak_in_use_bytes_ = 0;
  std::vector<Polled*> polled_;      // the small receives in flight (their owners unwatch them)
  std::vector<Deferred*> deferred_;  // exchanges with sends not posted yet, in start order
  bool posting_ = false;             // an exchange is posting its sends (Posting)
  clbuf::detail::Tracer* tracer_ = nullptr;  // the manager's; null: not tracing
  long long comm_number_ = 0;                // agreed by the ranks (agree_on_chunks())
  std::vector<int> world_;                   // when tracing: the ranks in MPI_COMM_WORLD
  std::vector<std::pair<int, bool>> lanes_;  // the message lanes: track, busy
  int halo_track_ = -1;                      // HaloExchange's phases; -1: not made yet
  int chunk_track_ = -1;                     // staged messages' chunks; -1: not made yet
  std::vector<std::shared_ptr<Collective>> collectives_;  // not launched yet, in call order
  std::vector<std::shared_ptr<Transfer>> active_;         // last: destroyed first
};

/// One HaloExchange call's spans on its Core's "halo exchange" track, when the manager traces:
/// the call's own, and within it its phases, one after the other (next()). Off: one branch each.
class HaloPhases {
 public:
  HaloPhases(Core& core, const char* call) noexcept
      : core_(core), call_(call), begin_(core.tracer() != nullptr ? trace_now() : 0) {}
  HaloPhases(const HaloPhases&) = delete;
  HaloPhases& operator=(const HaloPhases&) = delete;
  ~HaloPhases() {
    next(nullptr);
    if (begin_ != 0) core_.trace_phase(call_, begin_, trace_now());
  }

  /// Ends the phase running, if any, and starts `phase` (null: none).
  void next(const char* phase) noexcept {
    if (begin_ == 0) return;
    const double now = trace_now();
    if (phase_ != nullptr) core_.trace_phase(phase_, phase_begin_, now);
    phase_ = phase;
    phase_begin_ = now;
  }

 private:
  static double trace_now() noexcept { return clbuf::detail::trace_now(); }

  Core& core_;
  const char* const call_;
  const double begin_;  // 0: not tracing
  const char* phase_ = nullptr;
  double phase_begin_ = 0;
};

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_CORE_HPP
