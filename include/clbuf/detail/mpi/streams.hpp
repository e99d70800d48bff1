// SPDX-License-Identifier: MIT
// The streams under clbuf::mpi::Communicator: point-to-point transfers of byte ranges of device
// memory (on the Core of core.hpp), progressed in the caller's thread (no hidden threads;
// MPI_THREAD_FUNNELED suffices).
//
// A message is a Header on the user's communicator, matched by MPI's own rules (source, tag,
// posting order), followed, when it is larger than an envelope, by chunks on the data
// communicator tagged with the header's stream number. The path of the bytes (route()):
//   zero_copy  a CPU device's host block: the queue is finished and MPI reads or writes the
//              buffer's own memory, every chunk posted at once;
//   map        the buffer is mapped for the host around MPI (unified memory);
//   staged     up to `depth` pinned chunks per message (discrete GPUs): the DMA of chunk k+1
//              overlaps MPI's transfer of chunk k; a Communicator uses at most 2 x depth chunks
//              per direction, however many messages are in flight.
// The receiver checks the header against its buffer before any byte lands there; a mismatch
// drains the sender's chunks (so the sender never hangs) and is a clbuf::Error. A staged
// transfer that fails part-way still finishes the message, so the peer never hangs either: a
// receive drains the rest, a send sends the rest empty (the receive then fails too). A send that
// fails before it posted anything sends a notice in its place (send_notice()), which the
// receive takes as the message and fails on.
#ifndef CLBUF_DETAIL_MPI_STREAMS_HPP
#define CLBUF_DETAIL_MPI_STREAMS_HPP

#include <mpi.h>
#include <clbuf/detail/event.hpp>
#include <clbuf/detail/mpi/core.hpp>
#include <clbuf/detail/mpi/wire.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {
namespace detail {

/// Pieces of a chunked message: chunk k covers [k * chunk, min((k + 1) * chunk, bytes)).
struct Chunking {
  std::size_t bytes = 0;
  std::size_t chunk = 0;
  std::size_t count = 0;
  std::size_t offset(std::size_t k) const noexcept { return k * chunk; }
  int length(std::size_t k) const noexcept {
    return static_cast<int>(std::min(chunk, bytes - k * chunk));
  }
};

inline Chunking chunking(std::size_t bytes, std::size_t chunk) noexcept {
  return Chunking{bytes, chunk, chunk == 0 ? 0 : (bytes + chunk - 1) / chunk};
}

/// Path::whole's MPI datatype and count for `span`: its elements in their MPI datatype, else
/// its bytes; more than INT_MAX of them is an Error (one MPI message counts in int).
inline MPI_Datatype whole_count(const char* operation, const Span& span, int& count) {
  const MPI_Datatype type = plain_type(span.type);
  const std::uint64_t n = type == MPI_BYTE ? span.bytes : span.count;
  if (n > static_cast<std::uint64_t>(INT_MAX)) {
    fail(operation, CL_INVALID_VALUE,
         describe(span.count, span.element_size, span.type) +
             " exceed one MPI message of Path::whole (at most INT_MAX = " +
             std::to_string(INT_MAX) + " MPI elements)");
  }
  count = static_cast<int>(n);
  return type;
}

/// Before the host touches a host block: the work queued before the transfer has finished
/// (clFinish), or, when the caller knows better (`before`), that event (a null one: nothing).
inline void wait_before(const ChunkIo& io, const char* operation, const cl::Event* before) {
  if (before == nullptr) {
    io.finish(operation);
  } else if ((*before)() != nullptr) {
    ChunkIo::wait(operation, *before);
  }
}

/// The header of a message of `span` to `dest`, with the next stream number for its chunks.
inline Header header_of(Core& core, const Span& span, int dest, Kind kind) noexcept {
  Header header;
  header.kind = static_cast<std::uint32_t>(kind);
  header.count = span.count;
  header.bytes = span.bytes;
  header.element_size = span.element_size;
  header.type = span.type;
  header.stream = core.next_stream(dest);
  return header;
}

/// A message that fits the envelope (span.bytes <= core.inline_max()): `header` and the payload
/// copied into an envelope from the Core's cache (a host block's bytes after wait_before(), else
/// the manager's blocking read: bounced through pinned memory on a discrete device), posted as
/// one MPI_Isend; `envelope` and `request` are MPI's until it completes.
inline void post_envelope(Core& core, const char* operation, const Span& span, Header& header,
                          const cl::Event* before, int dest, int tag, MPI_Comm comm,
                          std::unique_ptr<char[]>& envelope, MPI_Request& request) {
  header.inline_bytes = static_cast<std::uint32_t>(span.bytes);
  core.count_inline(0);
  envelope = core.take_envelope();
  std::memcpy(envelope.get(), &header, header_bytes);
  char* payload = envelope.get() + header_bytes;
  if (span.bytes != 0) {
    if (span.host != nullptr) {
      wait_before(core.io(), operation, before);
      std::memcpy(payload, span.host + span.offset, span.bytes);
    } else {
      clbuf::detail::ManagerAccess::read(core.manager(), operation, span.buffer, span.offset,
                                         payload, span.bytes);
    }
  }
  check_mpi(MPI_Isend(envelope.get(), static_cast<int>(header_bytes + span.bytes), MPI_BYTE, dest,
                      tag, comm, &request),
            operation, "MPI_Isend");
}

/// After a send failed before it posted anything (its read or map refused or failing, no
/// memory): tells `dest`, in the message's place, that this rank gave up, so that the receive
/// fails (inspect(): "failed before it could send") instead of waiting for ever. The notice is
/// a header of kind abort; under Path::whole, whose messages are raw bytes, an empty message
/// (a non-empty receive then fails on its size). Allocates nothing: the notice is one constant,
/// and its request is freed at once (MPI completes it in the background). A notice MPI refuses
/// is not sent.
inline void send_notice(const Core& core, int dest, int tag, MPI_Comm comm) noexcept {
  static const Header notice = [] {
    Header header;
    header.kind = static_cast<std::uint32_t>(Kind::abort);
    return header;
  }();
  if (dest == MPI_PROC_NULL || mpi_finalized()) return;
  MPI_Request request = MPI_REQUEST_NULL;
  const bool whole = core.whole();
  if (MPI_Isend(whole ? nullptr : &notice, whole ? 0 : static_cast<int>(header_bytes), MPI_BYTE,
                dest, tag, comm, &request) == MPI_SUCCESS) {
    MPI_Request_free(&request);
  }
}

/// What arrived in an envelope, checked against the receiving span.
struct Arrival {
  Header header;
  int peer = MPI_PROC_NULL;
  int tag = MPI_ANY_TAG;
  bool chunked = false;  // the header of a message whose chunks follow
  std::string problem;   // why a well-formed message does not fit the buffer (empty: it fits)
  cl_int code = CL_INVALID_VALUE;  // the problem's: CL_SUCCESS where the sender gave up
};

/// "rank 1 (tag 5)": who sent `arrival`.
inline std::string sender_of(const Arrival& arrival) {
  return "rank " + std::to_string(arrival.peer) + " (tag " + std::to_string(arrival.tag) + ")";
}

/// The header of an envelope of `received` bytes is clbuf::mpi's and its sizes add up (else an
/// Error: not a message of ours); marks a header whose chunks follow.
inline void check_header(const char* operation, Arrival& arrival, int received,
                         std::size_t chunk_bytes) {
  const Header& header = arrival.header;
  if (header.magic != magic) {
    fail(operation, CL_INVALID_VALUE,
         "the message from " + sender_of(arrival) +
             " has no clbuf::mpi header; both ends must use clbuf::mpi");
  }
  arrival.chunked = header.inline_bytes < header.bytes;
  if (arrival.chunked && (header.chunk_bytes == 0 || header.chunk_bytes > chunk_bytes)) {
    fail(operation, CL_INVALID_VALUE,
         "the message from " + sender_of(arrival) + " is cut in chunks of " +
             std::to_string(header.chunk_bytes) + " bytes, this rank's are " +
             std::to_string(chunk_bytes));
  }
  if (!arrival.chunked && received != static_cast<int>(header_bytes + header.inline_bytes)) {
    fail(operation, CL_INVALID_VALUE,
         "the message from " + sender_of(arrival) + " is " + std::to_string(received) +
             " bytes but its header says " + std::to_string(header_bytes + header.inline_bytes));
  }
}

/// Why a well-formed message (`arrival`) does not fit `span` of a transfer of `kind`, in
/// arrival.problem (empty: it fits): its sender gave up (a notice), the other kind of message,
/// or another count, size or type.
inline void judge(Arrival& arrival, const Span& span, Kind kind) {
  const Header& header = arrival.header;
  if (header.kind == static_cast<std::uint32_t>(Kind::abort)) {
    // Not a failure of OpenCL here (CL_SUCCESS, as for MPI's failures): the sender's error says
    // what failed.
    arrival.code = CL_SUCCESS;
    arrival.problem = sender_of(arrival) +
                      " failed before it could send this message, and sent this notice "
                      "instead (its error says why); the receiving buffer is unchanged";
  } else if (header.kind != static_cast<std::uint32_t>(kind)) {
    arrival.problem =
        header.kind == static_cast<std::uint32_t>(Kind::collective)
            ? sender_of(arrival) +
                  " sent part of a collective where a point-to-point message was expected"
            : sender_of(arrival) + " sent a point-to-point message where a collective was expected";
  } else if (header.bytes != span.bytes || header.element_size != span.element_size ||
             (header.type != any_type && span.type != any_type && header.type != span.type)) {
    arrival.problem =
        std::string(header.bytes > span.bytes ? "MPI_ERR_TRUNCATE: " : "") + sender_of(arrival) +
        " sent " + describe(header.count, header.element_size, header.type) +
        " but the receiving buffer holds " + describe(span.count, span.element_size, span.type);
  }
}

/// Reads the header of an envelope that has arrived (`status`) and checks it against `span`
/// before a byte lands there: throws for a message that is not clbuf::mpi's or whose sizes do
/// not add up; returns a well-formed one that does not fit the buffer with its problem (its
/// chunks, if any, must then be drained so that the sender completes).
inline Arrival inspect(const char* operation, const char* envelope, const MPI_Status& status,
                       const Span& span, Kind kind, std::size_t chunk_bytes) {
  Arrival arrival;
  int received = 0;
  MPI_Get_count(&status, MPI_BYTE, &received);
  arrival.peer = status.MPI_SOURCE;
  arrival.tag = status.MPI_TAG;
  if (received < static_cast<int>(header_bytes)) {
    fail(operation, CL_INVALID_VALUE,
         "the message from " + sender_of(arrival) + " is " + std::to_string(received) +
             " bytes, no clbuf::mpi header; both ends must use clbuf::mpi");
  }
  std::memcpy(&arrival.header, envelope, header_bytes);
  check_header(operation, arrival, received, chunk_bytes);
  judge(arrival, span, kind);
  return arrival;
}

/// An envelope's payload into `span`: a host block's memcpy after wait_before(), else the
/// manager's blocking write. On a discrete device that write is buffered, as a small upload is:
/// the bytes go into the manager's pinned ring and the write follows in queue order, so every
/// later command on the manager's queue sees them, and a write that fails on the device is
/// reported by the manager's next synchronising call (README "Errors").
inline void write_span(Core& core, const char* operation, const Span& span, const char* payload,
                       const cl::Event* before) {
  core.count_inline(1);
  if (span.bytes == 0) return;
  if (span.host != nullptr) {
    wait_before(core.io(), operation, before);
    std::memcpy(span.host + span.offset, payload, span.bytes);
  } else {
    clbuf::detail::ManagerAccess::write(core.manager(), operation, span.buffer, span.offset,
                                        payload, span.bytes);
  }
}

/// A pinned chunk and what it is doing.
struct Slot {
  enum State { idle, copying, messaging };
  HostChunk block;
  State state = idle;
  std::size_t chunk = 0;
  cl::Event copy;  // the DMA into or out of the block
  MPI_Request request = MPI_REQUEST_NULL;
  double since = 0;  // when tracing: when its DMA or message began (Core::trace_clock())
};

/// The parts a send and a receive share: the queue, the chunk bookkeeping, the mapped pointer,
/// and what happens to MPI requests still pending when a failed transfer is destroyed.
class Stream : public Transfer {
 protected:
  /// With `before`, the host touches a host block once that event (a null one: nothing) has
  /// completed instead of after clFinish (wait_before()).
  Stream(Core& core, const char* operation, Span span, int direction, const cl::Event* before)
      : Transfer(operation),
        core_(core),
        span_(std::move(span)),
        io_(core.io()),
        direction_(direction),
        given_before_(before != nullptr),
        before_(before != nullptr ? *before : cl::Event()) {}

  ~Stream() override {
    core_.trace_done(trace_);  // a message given up on ends its span here
    // Only a failed transfer gets here with MPI still owning memory: that memory is left to MPI
    // (leaked), never freed under it.
    bool pending = header_request_ != MPI_REQUEST_NULL || drain_request_ != MPI_REQUEST_NULL;
    for (MPI_Request& request : requests_) pending = pending || request != MPI_REQUEST_NULL;
    for (Slot& slot : slots_) pending = pending || slot.request != MPI_REQUEST_NULL;
    if (pending && !mpi_finalized()) {
      static_cast<void>(envelope_.release());
      static_cast<void>(scratch_.release());
      for (Slot& slot : slots_) {
        if (slot.request == MPI_REQUEST_NULL || slot.block.data() == nullptr) continue;
        core_.forget_slot(direction_, std::move(slot.block));
      }
      if (mapped_ != nullptr) mapped_ = nullptr;  // stays mapped
    }
    core_.give_envelope(std::move(envelope_));
    for (Slot& slot : slots_) {
      ChunkIo::wait_quietly(slot.copy);
      core_.release_slot(direction_, std::move(slot.block));
    }
    if (mapped_ != nullptr) io_.unmap_quietly(span_.buffer, mapped_);
  }

  /// The message has completed or failed: its span ends (when tracing).
  void finished() noexcept override { core_.trace_done(trace_); }

  /// The buffer's bytes for the host: its host block, or mapped (`flags`) around MPI.
  char* host_bytes(cl_map_flags flags) {
    if (route_ == Route::zero_copy) {
      wait_before();
      return span_.host + span_.offset;
    }
    mapped_ = io_.map(operation_, span_.buffer, flags, span_.offset, span_.bytes);
    return static_cast<char*>(mapped_);
  }

  /// Before the host touches a host block: the work queued before the transfer has finished
  /// (clFinish, unless the transfer was given what to wait for).
  void wait_before() { detail::wait_before(io_, operation_, before()); }
  const cl::Event* before() const noexcept { return given_before_ ? &before_ : nullptr; }

  /// After MPI is done with mapped memory: unmap and wait for the unmap.
  void unmap() {
    if (mapped_ == nullptr) return;
    io_.unmap(operation_, span_.buffer, std::exchange(mapped_, nullptr));
  }

  /// Every MPI request of the chunks has completed.
  bool requests_done() {
    if (requests_.empty()) return true;
    int flag = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                          MPI_STATUSES_IGNORE),
              operation_, "MPI_Testall");
    return flag != 0;
  }

  bool test(MPI_Request& request, MPI_Status* status = MPI_STATUS_IGNORE) {
    if (request == MPI_REQUEST_NULL) return true;
    int flag = 0;
    check_mpi(MPI_Test(&request, &flag, status), operation_, "MPI_Test");
    return flag != 0;
  }

  /// After a failure: each slot goes idle once MPI is done with its chunk and its DMA has
  /// ended (completed or failed), and is given back; true when none is left.
  bool settle_slots() {
    for (Slot& slot : slots_) {
      if (slot.state == Slot::messaging && test(slot.request)) slot.state = Slot::idle;
      // A DMA whose status cannot be asked counts as ended.
      if (slot.state == Slot::copying && !clbuf::detail::event_status(slot.copy()).running()) {
        slot.copy = cl::Event();
        slot.state = Slot::idle;
      }
    }
    release_idle_slots();
    return slots_.empty();
  }

  /// Gives the idle slots back, so that other transfers may use them.
  void release_idle_slots() noexcept {
    for (Slot& slot : slots_) {
      if (slot.state == Slot::idle) core_.release_slot(direction_, std::move(slot.block));
    }
    slots_.erase(std::remove_if(slots_.begin(), slots_.end(),
                                [](const Slot& slot) { return slot.block.data() == nullptr; }),
                 slots_.end());
  }

  Core& core_;
  Span span_;
  const ChunkIo& io_;    // the Core's, which outlives every transfer
  const int direction_;  // 0: sending, 1: receiving (the slot budgets)
  Route route_ = Route::zero_copy;
  Chunking chunks_;
  std::size_t next_ = 0;  // the next chunk to start
  Header header_;
  // What the host waits for before it touches a host block, when the caller knows better than
  // clFinish (HaloExchange: a marker at start(), so the interior kernels queued after it run
  // while MPI writes the ghosts; nothing at all for its own unpack buffers).
  bool given_before_ = false;
  cl::Event before_;
  std::unique_ptr<char[]> envelope_;  // header + inline payload
  std::unique_ptr<char[]> scratch_;   // the chunks of a rejected message land here
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  MPI_Request drain_request_ = MPI_REQUEST_NULL;  // a receive's chunk drained into scratch_
  std::vector<MPI_Request> requests_;             // zero-copy and mapped chunks
  std::vector<Slot> slots_;                       // staged chunks
  void* mapped_ = nullptr;
  int peer_ = MPI_PROC_NULL;
  MessageTrace trace_;  // its span, when the manager traces
  // A staged transfer that failed part-way and finishes the message before it rethrows this: a
  // receive drains the rest into scratch_, a send sends the rest empty.
  std::exception_ptr failure_;
};

class SendStream final : public Stream {
 public:
  /// Posts the header (with the payload when it fits the envelope) and starts the chunks. With
  /// `before`, the host reads a host block once that event (a null one: nothing) has completed
  /// instead of after clFinish. `source` is the command that filled the bytes (a
  /// HaloExchange's pack): should it fail on the device, nothing of it is sent (check_source()).
  SendStream(Core& core, const char* operation, Span span, int dest, int tag, MPI_Comm comm,
             Kind kind, const cl::Event* before = nullptr, const cl::Event* source = nullptr)
      : Stream(core, operation, std::move(span), 0, before),
        source_(source != nullptr ? *source : cl::Event()) {
    peer_ = dest;
    if (dest == MPI_PROC_NULL) return;
    core.post_deferred();  // sends an exchange deferred go first (MPI's order)
    core.trace_post(trace_, operation, true, dest, tag, span_.bytes);
    try {
      core.make_room();  // after post_deferred(), whose sends take room
      if (core.whole()) {
        send_whole(dest, tag, comm);
      } else {
        post(dest, tag, comm, kind, before);
      }
    } catch (...) {
      if (nothing_posted()) send_notice(core, dest, tag, comm);  // the peer fails, never waits
      throw;
    }
  }

 private:
  /// Posts the header (with the payload when it fits the envelope) and starts the chunks.
  void post(int dest, int tag, MPI_Comm comm, Kind kind, const cl::Event* before) {
    // The host reads the bytes behind the source's command on the queue (a blocking read or
    // map): waiting for it first costs nothing, and a failed one is reported before anything
    // goes. A staged send checks it once its first chunk is read (advance_staged()).
    if (core_.route(span_) != Route::staged || span_.bytes <= core_.inline_max()) check_source();
    header_ = header_of(core_, span_, dest, kind);
    core_.trace_header(trace_, dest, tag, header_, span_);
    if (span_.bytes <= core_.inline_max()) {
      post_envelope(core_, operation_, span_, header_, before, dest, tag, comm, envelope_,
                    header_request_);
      return;
    }
    chunks_ = chunking(span_.bytes, chunk_for(span_.bytes, core_.chunk_bytes()));
    header_.chunk_bytes = chunks_.chunk;
    route_ = core_.route(span_);
    core_.count(direction_, route_);
    // What finishing the message needs from the heap is had before the header goes: from then
    // on the peer waits for every chunk, sent whole or (send_rest_empty) empty.
    requests_.reserve(chunks_.count);
    char* base = nullptr;
    std::exception_ptr failure;  // a staged chunk's first read: the header still goes
    if (route_ == Route::staged) {
      failure = start_reads();
    } else {
      base = host_bytes(CL_MAP_READ);
    }
    post_header(dest, tag, comm);
    if (failure && !send_rest_empty(failure)) std::rethrow_exception(failure);
    if (base != nullptr) post_chunks(base, dest);
  }

  /// The staged path's first reads into pinned chunks; their failure, if any (the header still
  /// goes, then the rest of the chunks empty).
  std::exception_ptr start_reads() {
    slots_.reserve(core_.options().depth);
    try {
      fill_slots();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  /// Posts the header of a chunked message. A staged stream's is a synchronous send: it
  /// completes once the peer has matched it, which tells fill_slots() that the peer is receiving
  /// this message (not a later one).
  void post_header(int dest, int tag, MPI_Comm comm) {
    const bool staged = route_ == Route::staged;
    check_mpi((staged ? MPI_Issend : MPI_Isend)(&header_, static_cast<int>(header_bytes), MPI_BYTE,
                                                dest, tag, comm, &header_request_),
              operation_, staged ? "MPI_Issend" : "MPI_Isend");
  }

  /// Every chunk of the message at once, from `base` (the host block, or the buffer mapped).
  void post_chunks(char* base, int dest) {
    requests_.assign(chunks_.count, MPI_REQUEST_NULL);
    for (std::size_t k = 0; k < chunks_.count; ++k) {
      check_mpi(MPI_Isend(base + chunks_.offset(k), chunks_.length(k), MPI_BYTE, dest,
                          static_cast<int>(header_.stream), core_.wire(), &requests_[k]),
                operation_, "MPI_Isend");
    }
  }

  /// True while no message of this send is with MPI: a failure then sends a notice instead.
  bool nothing_posted() const noexcept {
    return header_request_ == MPI_REQUEST_NULL &&
           std::all_of(requests_.begin(), requests_.end(),
                       [](MPI_Request request) { return request == MPI_REQUEST_NULL; });
  }

  /// The command that filled the bytes (`source`, if any) has ended, and did not fail.
  /// @throws Error with the command's status when it failed on the device.
  void check_source() {
    if (source_() == nullptr) return;
    const cl_int err = clbuf::detail::wait_for_event(source_()).error();
    if (err == CL_SUCCESS) {
      source_ = cl::Event();
      return;
    }
    fail(operation_, err,
         "the command that filled this message (a box's pack) failed on the device; its bytes "
         "are not sent");
  }

  /// Path::whole: one MPI message of the raw bytes, in the element's MPI datatype.
  void send_whole(int dest, int tag, MPI_Comm comm) {
    check_source();
    int count = 0;
    const MPI_Datatype type = whole_count(operation_, span_, count);
    route_ = core_.route(span_);
    core_.count(direction_, route_);
    char* base = span_.bytes == 0 ? nullptr : host_bytes(CL_MAP_READ);
    requests_.assign(1, MPI_REQUEST_NULL);
    check_mpi(MPI_Isend(base, count, type, dest, tag, comm, &requests_[0]), operation_,
              "MPI_Isend");
  }

  void start_read(Slot& slot) {
    slot.chunk = next_++;
    slot.copy =
        io_.read(operation_, span_.buffer, span_.offset + chunks_.offset(slot.chunk),
                 static_cast<std::size_t>(chunks_.length(slot.chunk)), slot.block.data(), false);
    slot.state = Slot::copying;
    slot.since = core_.trace_clock();
  }

  std::size_t sent_ = 0;  // chunks handed to MPI
  cl::Event source_;      // the command that filled the bytes, until checked (check_source())

  /// Starts reading the next chunks into as many slots as depth and the budget allow. A send
  /// holding no slot whose peer has matched its header (so the peer waits for its chunks) takes
  /// one beyond the budget when the sends have stalled (Core::send_stalled): a peer that posts
  /// its receives late, in the order sent, costs no pinned memory beyond the budget.
  void fill_slots(bool matched = false) {
    while (slots_.size() < core_.options().depth && next_ < chunks_.count) {
      HostChunk block = core_.acquire_slot(direction_, operation_,
                                           slots_.empty() && matched && core_.send_stalled());
      if (!block) return;
      slots_.emplace_back();
      slots_.back().block = std::move(block);
      start_read(slots_.back());
    }
  }

  /// After `failure` on the staged path (a chunk's read refused or failing on the device, a
  /// chunk's send refused): the chunks not yet sent go as empty messages, which tell the
  /// receiver that the send failed (it then fails too, instead of waiting for them); the
  /// transfer ends, rethrowing `failure`, once MPI and the DMA are done with every slot. False
  /// when the empty sends cannot be posted (the failure is reported at once).
  bool send_rest_empty(std::exception_ptr failure) noexcept {
    if (failure_) return false;
    requests_.assign(chunks_.count - sent_, MPI_REQUEST_NULL);  // reserved: no allocation
    for (MPI_Request& request : requests_) {
      if (MPI_Isend(nullptr, 0, MPI_BYTE, peer_, static_cast<int>(header_.stream), core_.wire(),
                    &request) != MPI_SUCCESS) {
        return false;
      }
    }
    sent_ = next_ = chunks_.count;
    failure_ = std::move(failure);
    return true;
  }

  bool advance() override {
    if (peer_ == MPI_PROC_NULL) return true;
    const bool header_sent = test(header_request_);
    if (failure_) {
      if (!settle_slots() || !header_sent || !requests_done()) return false;
      std::rethrow_exception(std::exchange(failure_, nullptr));
    }
    if (route_ != Route::staged || chunks_.count == 0) {
      if (!header_sent || !requests_done()) return false;
      unmap();
      return true;
    }
    try {
      return advance_staged(header_sent);
    } catch (...) {
      if (!send_rest_empty(std::current_exception())) throw;
      return false;
    }
  }

  bool advance_staged(bool header_sent) {
    // Chunks go out in order (they all carry the stream's tag, and MPI matches in order), even
    // when the reads are seen complete out of order.
    for (bool sent = true; sent;) {
      sent = false;
      for (Slot& slot : slots_) {
        if (slot.state == Slot::copying && slot.chunk == sent_ &&
            completed(operation_, slot.copy, "a chunk's clEnqueueReadBuffer")) {
          check_source();  // ended before the read (queue order): no wait
          slot.copy = cl::Event();
          slot.since = core_.trace_chunk(trace_, "chunk read (DMA)", slot.since, slot.chunk);
          check_mpi(MPI_Isend(slot.block.data(), chunks_.length(slot.chunk), MPI_BYTE, peer_,
                              static_cast<int>(header_.stream), core_.wire(), &slot.request),
                    operation_, "MPI_Isend");
          slot.state = Slot::messaging;
          ++sent_;
          sent = true;
        }
      }
    }
    for (Slot& slot : slots_) {
      if (slot.state == Slot::messaging && test(slot.request)) {
        slot.state = Slot::idle;
        core_.trace_chunk(trace_, "chunk MPI send", slot.since, slot.chunk);
        core_.note_send_moved();
        if (next_ < chunks_.count) start_read(slot);
      }
    }
    release_idle_slots();
    fill_slots(header_sent);
    return header_sent && slots_.empty() && next_ == chunks_.count;
  }
};

/// A SendStream made on the heap (to be tracked). Its memory is had before it is made, so that
/// a failure to get it is told to `dest` (send_notice()) as the stream tells its own failures
/// before it posted anything: whatever this throws, the peer does not wait for the message.
inline std::shared_ptr<SendStream> make_send(Core& core, const char* operation, Span span, int dest,
                                             int tag, MPI_Comm comm, Kind kind,
                                             const cl::Event* before = nullptr,
                                             const cl::Event* source = nullptr) {
  std::shared_ptr<std::optional<SendStream>> room;
  try {
    room = std::make_shared<std::optional<SendStream>>();
  } catch (...) {
    core.post_deferred();  // as the stream would have: an exchange's deferred sends go first
    send_notice(core, dest, tag, comm);
    throw;
  }
  room->emplace(core, operation, std::move(span), dest, tag, comm, kind, before, source);
  return std::shared_ptr<SendStream>(room, &**room);  // shares room's ownership
}

class RecvStream final : public Stream {
 public:
  /// Posts the receive of the header (and of an inline payload). With `before`, the host writes
  /// a host block once that event (a null one: nothing) has completed instead of after clFinish.
  RecvStream(Core& core, const char* operation, Span span, int source, int tag, MPI_Comm comm,
             Kind kind, const cl::Event* before = nullptr)
      : Stream(core, operation, std::move(span), 1, before), kind_(kind) {
    core.make_room();  // before anything is posted
    if (source == MPI_PROC_NULL) {
      received_ = true;
      return;
    }
    core.trace_post(trace_, operation, false, source, tag, span_.bytes);
    if (core.whole()) {
      source_ = source;
      tag_ = tag;
      comm_ = comm;
      return;  // probed in advance(): the size is checked before anything is received
    }
    const std::size_t capacity = header_bytes + core.inline_max();
    envelope_ = core.take_envelope();
    check_mpi(MPI_Irecv(envelope_.get(), static_cast<int>(capacity), MPI_BYTE, source, tag, comm,
                        &header_request_),
              operation, "MPI_Irecv");
  }

  /// Takes over a receive whose envelope held the header of a chunked message (`arrival`, from
  /// an Eager receive): receives its chunks or, when the buffer cannot take them, drains them.
  RecvStream(Core& core, const char* operation, Span span, Kind kind, Arrival arrival)
      : Stream(core, operation, std::move(span), 1, nullptr), kind_(kind), received_(true) {
    core.make_room();            // before anything is posted
    accept(std::move(arrival));  // arrival.chunked: nothing is read from envelope_
  }

  /// The sender and tag of the message (after completion; MPI_PROC_NULL before).
  int source() const noexcept { return peer_; }
  int tag() const noexcept { return tag_; }

 private:
  bool advance() override {
    if (!received_ && core_.whole()) {
      if (!probe_whole()) return false;
      received_ = true;
      trace_.peer = peer_;  // a plain MPI message: no header, no arrow
      trace_.tag = tag_;
    }
    if (!received_) {
      MPI_Status status;
      if (!test(header_request_, &status)) return false;
      received_ = true;
      if (!accept(status)) return true;  // inline payload, already written
    }
    if (peer_ == MPI_PROC_NULL) return true;
    if (draining()) return false;
    if (route_ != Route::staged) {
      if (!chunks_done()) return false;
      unmap();
      return true;
    }
    try {
      return advance_staged();
    } catch (...) {
      // A chunk's write (or an MPI call) failed part-way: the rest of the message is still
      // received, and dropped, so that the sender completes; then the failure is reported.
      if (!drain_after(std::current_exception())) throw;
      return false;
    }
  }

  /// The staged path's receive: a chunk takes a slot only once it has arrived (MPI_Improbe),
  /// then MPI_Imrecv; once in, its write to the device.
  bool advance_staged() {
    while (slots_.size() < core_.options().depth && next_ < chunks_.count) {
      if (held_ == MPI_MESSAGE_NULL) {
        int arrived = 0;
        MPI_Status status;
        check_mpi(MPI_Improbe(peer_, static_cast<int>(header_.stream), core_.wire(), &arrived,
                              &held_, &status),
                  operation_, "MPI_Improbe");
        if (!arrived) break;
        check_chunk(status, next_);
      }
      HostChunk block = core_.acquire_slot(direction_, operation_);
      if (!block) break;
      Slot& slot = slots_.emplace_back();
      slot.block = std::move(block);
      slot.chunk = next_++;
      slot.state = Slot::messaging;
      slot.since = core_.trace_clock();
      check_mpi(MPI_Imrecv(slot.block.data(), chunks_.length(slot.chunk), MPI_BYTE, &held_,
                           &slot.request),
                operation_, "MPI_Imrecv");
    }
    for (Slot& slot : slots_) {
      if (slot.state == Slot::messaging && test(slot.request)) {
        slot.copy = io_.write(operation_, span_.buffer, span_.offset + chunks_.offset(slot.chunk),
                              static_cast<std::size_t>(chunks_.length(slot.chunk)),
                              slot.block.data(), false);
        slot.state = Slot::copying;
        slot.since = core_.trace_chunk(trace_, "chunk MPI receive", slot.since, slot.chunk);
      }
      if (slot.state == Slot::copying &&
          completed(operation_, slot.copy, "a chunk's clEnqueueWriteBuffer")) {
        slot.copy = cl::Event();
        slot.state = Slot::idle;
        core_.trace_chunk(trace_, "chunk write (DMA)", slot.since, slot.chunk);
      }
    }
    release_idle_slots();
    return slots_.empty() && next_ == chunks_.count;
  }

  /// Checks the header against the buffer; writes an inline payload (returns false: done) or
  /// posts the chunks' receives (returns true: more to come).
  bool accept(const MPI_Status& status) {
    return accept(inspect(operation_, envelope_.get(), status, span_, kind_, core_.chunk_bytes()));
  }

  /// As above, for a header already read: a rejected chunked message is drained.
  bool accept(Arrival arrival) {
    peer_ = arrival.peer;
    tag_ = arrival.tag;
    header_ = arrival.header;
    core_.trace_header(trace_, peer_, tag_, header_, span_);
    if (!arrival.problem.empty()) {
      if (!arrival.chunked) fail(operation_, arrival.code, arrival.problem);
      start_drain(std::move(arrival.problem));
      return true;
    }
    if (!arrival.chunked) {
      write_span(core_, operation_, span_, envelope_.get() + header_bytes, before());
      return false;
    }
    chunks_ = chunking(span_.bytes, header_.chunk_bytes);
    route_ = core_.route(span_);
    core_.count(direction_, route_);
    // The header is taken: the sender now waits for every chunk to be received. Whatever fails
    // from here on (memory, the map) still receives them, into scratch memory, and is reported
    // once they are in.
    try {
      if (route_ == Route::staged) {
        slots_.reserve(core_.options().depth);
        return true;
      }
      requests_.assign(chunks_.count, MPI_REQUEST_NULL);
      statuses_.resize(chunks_.count);
      char* base = host_bytes(CL_MAP_WRITE_INVALIDATE_REGION);
      for (; next_ < chunks_.count; ++next_) {
        check_mpi(MPI_Irecv(base + chunks_.offset(next_), chunks_.length(next_), MPI_BYTE, peer_,
                            static_cast<int>(header_.stream), core_.wire(), &requests_[next_]),
                  operation_, "MPI_Irecv");
      }
    } catch (...) {
      if (!drain_after(std::current_exception())) throw;
    }
    return true;
  }

  /// Every chunk posted straight into the buffer has arrived, each whole (check_chunk).
  bool chunks_done() {
    if (requests_.empty()) return true;
    int flag = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                          statuses_.empty() ? MPI_STATUSES_IGNORE : statuses_.data()),
              operation_, "MPI_Testall");
    if (flag == 0) return false;
    try {
      for (std::size_t k = 0; k < statuses_.size(); ++k) check_chunk(statuses_[k], k);
    } catch (...) {
      // The buffer goes back to the device before the failure is reported (the Stream may live
      // on in the Core after the caller has seen the error and reused or dropped the buffer).
      try {
        unmap();
      } catch (...) {  // NOLINT(bugprone-empty-catch): the sender's failure is the one reported
      }
      throw;
    }
    return true;
  }

  /// A chunk that arrives empty means that the sender failed part-way and sent the rest of its
  /// chunks empty (SendStream::send_rest_empty): the receive fails too (code CL_SUCCESS, as for
  /// MPI's failures: nothing failed in OpenCL here). The chunks before it have landed; the
  /// rest of the buffer is unchanged (undefined where it was mapped to be overwritten).
  void check_chunk(const MPI_Status& status, std::size_t chunk) {
    int bytes = 0;
    check_mpi(MPI_Get_count(&status, MPI_BYTE, &bytes), operation_, "MPI_Get_count");
    if (bytes == chunks_.length(chunk)) return;
    fail(operation_, CL_SUCCESS,
         "rank " + std::to_string(peer_) + " (tag " + std::to_string(tag_) +
             ") failed part-way through sending " + std::to_string(chunks_.bytes) +
             " bytes: chunk " + std::to_string(chunk) + " of " + std::to_string(chunks_.count) +
             " (bytes " + std::to_string(chunks_.offset(chunk)) +
             " on) came empty, so the receiving buffer does not hold the message (the sender's "
             "error says why)");
  }

  /// Path::whole: once a message has arrived (MPI_Improbe), its size is checked against the
  /// buffer before MPI_Imrecv: a message of another size is received into scratch memory (so
  /// that its sender completes) and dropped, and the transfer fails naming both sizes.
  bool probe_whole() {
    requests_.reserve(1);  // before a message is taken: its sender waits from then on
    int arrived = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    check_mpi(MPI_Improbe(source_, tag_, comm_, &arrived, &message, &status), operation_,
              "MPI_Improbe");
    if (!arrived) return false;
    peer_ = status.MPI_SOURCE;
    tag_ = status.MPI_TAG;
    MPI_Count bytes = 0;
    check_mpi(MPI_Get_elements_x(&status, MPI_BYTE, &bytes), operation_, "MPI_Get_elements_x");
    if (bytes < 0 || static_cast<std::uint64_t>(bytes) != span_.bytes) {
      const std::string problem =
          std::string(static_cast<std::uint64_t>(bytes) > span_.bytes ? "MPI_ERR_TRUNCATE: " : "") +
          "rank " + std::to_string(peer_) + " (tag " + std::to_string(tag_) + ") sent " +
          std::to_string(bytes) + " bytes but the receiving buffer holds " +
          describe(span_.count, span_.element_size, span_.type) + ", " +
          std::to_string(span_.bytes) + " bytes" +
          (bytes == 0 ? " (under Path::whole a clbuf send that failed before it could send "
                        "sends an empty message in its place: its error says why)"
                      : "");
      drop(message, static_cast<std::size_t>(std::max<MPI_Count>(bytes, 0)));
      fail(operation_, CL_INVALID_VALUE, problem);
    }
    int count = 0;
    const MPI_Datatype type = whole_count(operation_, span_, count);
    route_ = core_.route(span_);
    core_.count(direction_, route_);
    char* base = nullptr;
    try {
      if (span_.bytes != 0) base = host_bytes(CL_MAP_WRITE_INVALIDATE_REGION);
    } catch (...) {
      drop(message, span_.bytes);
      throw;
    }
    requests_.assign(1, MPI_REQUEST_NULL);
    check_mpi(MPI_Imrecv(base, count, type, &message, &requests_[0]), operation_, "MPI_Imrecv");
    return true;
  }

  /// Path::whole: receives a probed message of `size` bytes into scratch memory and drops it, so
  /// that its sender completes (when scratch memory can be had: else the sender may wait).
  void drop(MPI_Message& message, std::size_t size) {
    scratch_.reset(new (std::nothrow) char[std::max<std::size_t>(size, 1)]);
    if (scratch_ && size <= static_cast<std::size_t>(INT_MAX)) {
      check_mpi(
          MPI_Mrecv(scratch_.get(), static_cast<int>(size), MPI_BYTE, &message, MPI_STATUS_IGNORE),
          operation_, "MPI_Mrecv");
    }
    scratch_.reset();
  }

  /// After `failure` once the header was taken: the chunks already posted land where they were
  /// posted (in their slots, or straight into the buffer; they go no further), the one that has
  /// arrived (staged) and those still to come are received into scratch memory, as a rejected
  /// message's are, and then the transfer rethrows `failure`. Allocates nothing but the scratch
  /// chunk; false when that cannot be had (the failure is reported at once, and the sender may
  /// then wait).
  bool drain_after(std::exception_ptr failure) noexcept {
    if (failure_ || !problem_.empty()) return false;
    scratch_.reset(new (std::nothrow) char[std::max<std::size_t>(chunks_.chunk, 1)]);
    if (!scratch_) return false;
    failure_ = std::move(failure);
    if (held_ != MPI_MESSAGE_NULL) {
      if (MPI_Imrecv(scratch_.get(), chunks_.length(next_), MPI_BYTE, &held_, &drain_request_) !=
          MPI_SUCCESS) {
        return false;
      }
      ++next_;
    }
    return true;
  }

  /// Receives and drops the chunks of a rejected message, one at a time into one chunk of
  /// scratch memory, so that its sender completes; then the transfer fails with `problem`.
  void start_drain(std::string problem) {
    problem_ = std::move(problem);
    chunks_ = chunking(header_.bytes, header_.chunk_bytes);
    scratch_.reset(new (std::nothrow) char[chunks_.chunk]);
    if (!scratch_) fail(operation_, CL_INVALID_VALUE, problem_);  // the sender may then wait
    next_ = 0;
    drain_next();
  }

  void drain_next() {
    check_mpi(MPI_Irecv(scratch_.get(), chunks_.length(next_), MPI_BYTE, peer_,
                        static_cast<int>(header_.stream), core_.wire(), &drain_request_),
              operation_, "MPI_Irecv");
    ++next_;
  }

  /// True while draining; fails once the last chunk is in (and, after a failure, every slot's
  /// chunk has landed and its write ended, every chunk posted straight has landed and the
  /// buffer is unmapped).
  bool draining() {
    if (problem_.empty() && !failure_) return false;
    if (failure_) settle_slots();
    while (test(drain_request_)) {
      if (next_ == chunks_.count) {
        if (!failure_) fail(operation_, CL_INVALID_VALUE, problem_);
        if (!slots_.empty() || !requests_done()) return true;
        try {
          unmap();
        } catch (...) {  // NOLINT(bugprone-empty-catch): the first failure is the one reported
        }
        std::rethrow_exception(std::exchange(failure_, nullptr));
      }
      drain_next();
    }
    return true;
  }

  Kind kind_;
  int source_ = MPI_ANY_SOURCE;    // Path::whole: what the probe matches
  MPI_Comm comm_ = MPI_COMM_NULL;  // Path::whole
  bool received_ = false;
  MPI_Message held_ = MPI_MESSAGE_NULL;  // an arrived chunk waiting for a slot
  std::vector<MPI_Status> statuses_;     // of requests_, the chunks received straight
  std::string problem_;                  // a rejected message being drained into scratch_
  int tag_ = MPI_ANY_TAG;
};

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_STREAMS_HPP
