// The engine under clbuf::mpi::Communicator: point-to-point transfers of byte ranges of device
// memory, progressed in the caller's thread (no hidden threads; MPI_THREAD_FUNNELED suffices).
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
// drains the sender's chunks (so the sender never hangs) and is a clbuf::Error.
#ifndef CLBUF_DETAIL_MPI_TRANSFER_HPP
#define CLBUF_DETAIL_MPI_TRANSFER_HPP

#include <mpi.h>
#include <clbuf/detail/mpi_wire.hpp>
#include <clbuf/detail/pinned_block.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>

#include <algorithm>
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

using clbuf::detail::fail;
using clbuf::detail::PinnedBlock;
using clbuf::detail::Queue;

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

enum class Route { zero_copy, map, staged };

inline bool mpi_finalized() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

/// True when the command of `event` has completed; throws when it failed on the device.
inline bool completed(const char* operation, const cl::Event& event, const char* what) {
  cl_int status = CL_COMPLETE;
  clbuf::detail::check(CLBUF_CL(clGetEventInfo)(event(), CL_EVENT_COMMAND_EXECUTION_STATUS,
                                                sizeof(status), &status, nullptr),
                       operation, "clGetEventInfo");
  if (status < 0) fail(operation, status, std::string(what) + " failed on the device");
  return status == CL_COMPLETE;
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
    try {
      done_ = advance();
    } catch (...) {
      error_ = std::current_exception();
      done_ = true;
    }
  }
  void rethrow() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 protected:
  virtual bool advance() = 0;
  const char* operation_;

 private:
  bool done_ = false;
  std::exception_ptr error_;
};

/// What every transfer of one Communicator shares: the manager, the duplicated communicators,
/// the agreed chunk size, the stream numbers and the cache of pinned chunks.
class Core {
 public:
  Core(BufferManager& manager, MPI_Comm comm, const Options& options)
      : manager_(manager), options_(options) {
    const char* op = "Communicator";
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized || mpi_finalized()) {
      fail(op, CL_INVALID_OPERATION, "MPI is not initialized (call MPI_Init first) or finalized");
    }
    if (comm == MPI_COMM_NULL) fail(op, CL_INVALID_VALUE, "the communicator is MPI_COMM_NULL");
    int inter = 0;
    check_mpi(MPI_Comm_test_inter(comm, &inter), op, "MPI_Comm_test_inter");
    if (inter) fail(op, CL_INVALID_VALUE, "an intercommunicator is not supported");
    // What this rank alone can reject is only reported after the collective calls below, so
    // that the other ranks are never left waiting in them.
    std::exception_ptr local;
    try {
      model_ = manager.memory_model();
      context_ = manager.context();  // throws after cleanup()
      raw_context_ = context_();
      queue_ = Queue(manager.queue());
      if (options.chunk_bytes < 4096 || options.chunk_bytes > (std::size_t{1} << 30) ||
          options.depth < 1 || options.depth > 64) {
        fail(op, CL_INVALID_VALUE,
             "Options: chunk_bytes " + std::to_string(options.chunk_bytes) +
                 " must be in [4096, 1073741824] and depth " + std::to_string(options.depth) +
                 " in [1, 64]");
      }
    } catch (...) {
      local = std::current_exception();
    }
    check_mpi(MPI_Comm_dup(comm, &user_), op, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(user_, MPI_ERRORS_RETURN);
    MPI_Comm_dup(user_, &wire_);
    MPI_Comm_dup(user_, &coll_);
    MPI_Comm_rank(user_, &rank_);
    MPI_Comm_size(user_, &size_);
    void* value = nullptr;
    int found = 0;
    MPI_Comm_get_attr(user_, MPI_TAG_UB, &value, &found);
    if (found && value != nullptr) tag_ub_ = *static_cast<int*>(value);
    streams_.assign(static_cast<std::size_t>(size_), 0);
    // Every rank must cut large messages the same way: agree, or fail on every rank alike.
    const long long chunk =
        static_cast<long long>(std::min<std::size_t>(options.chunk_bytes, std::size_t{1} << 40));
    const long long mine[3] = {chunk, -chunk, local ? rank_ : -1};
    long long all[3] = {0, 0, 0};
    const int err = MPI_Allreduce(mine, all, 3, MPI_LONG_LONG, MPI_MAX, coll_);
    if (err != MPI_SUCCESS || local || all[2] >= 0 || all[0] != -all[1]) {
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
    // Inline messages stay within shared memory's eager fragment (4 KiB in Open MPI's vader);
    // larger ones go zero copy or through pinned chunks rather than through a host envelope.
    inline_max_ = std::min<std::size_t>(options.chunk_bytes, 3968);
  }

  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

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

  Route route(const Span& span) const noexcept {
    switch (options_.path) {
      case Path::zero_copy:
        return span.host != nullptr ? Route::zero_copy : Route::map;
      case Path::map:
        return Route::map;
      case Path::staged:
        return Route::staged;
      case Path::automatic:
        break;
    }
    if (span.host != nullptr) return Route::zero_copy;
    return model_ == MemoryModel::discrete ? Route::staged : Route::map;
  }

  /// The tag of the next stream of chunks to `dest`.
  std::uint32_t next_stream(int dest) noexcept {
    std::uint32_t& next = streams_[static_cast<std::size_t>(dest)];
    const std::uint32_t stream = next;
    next = next >= static_cast<std::uint32_t>(tag_ub_) ? 0 : next + 1;
    return stream;
  }

  /// The manager's queue, retained at construction: transfers enqueue on it without entering
  /// the manager's gate each time.
  const Queue& queue() const noexcept { return queue_; }

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

  /// A pinned chunk of chunk_bytes() for sending (0) or receiving (1), cached or new; an empty
  /// block when that direction already uses its budget of 2 x depth chunks. Pinned memory in use
  /// thus stays at 4 x depth chunks per Communicator however many messages are in flight; a
  /// transfer without a chunk waits for one (a receive takes one only for a chunk that has
  /// arrived, so a chunk never waits on a remote rank while it is held by a receive).
  PinnedBlock acquire_slot(int direction, const char* operation) {
    if (slots_in_use_[direction] >= 2 * options_.depth) return PinnedBlock();
    PinnedBlock block;
    if (!free_slots_.empty()) {
      block = std::move(free_slots_.back());
      free_slots_.pop_back();
    } else {
      block = PinnedBlock(context_, queue_.handle(), options_.chunk_bytes, operation);
      pinned_bytes_ += block.size();
    }
    ++slots_in_use_[direction];
    note_in_use(block.size());
    return block;
  }

  /// Back to the cache, which keeps every chunk both directions may use at once.
  void release_slot(int direction, PinnedBlock&& block) noexcept {
    if (block.data() == nullptr) return;
    --slots_in_use_[direction];
    in_use_bytes_ -= block.size();
    if (free_slots_.size() < 4 * options_.depth) {
      try {
        free_slots_.push_back(std::move(block));
        return;
      } catch (...) {  // NOLINT(bugprone-empty-catch): freed below instead
      }
    }
    pinned_bytes_ -= block.size();
    PinnedBlock dropped(std::move(block));
  }

  /// Pinned bytes allocated now (in use and cached), and the most ever in use at once.
  std::size_t pinned_bytes() const noexcept { return pinned_bytes_; }
  std::size_t peak_pinned_in_use() const noexcept { return peak_in_use_bytes_; }

  /// Starts tracking `transfer`; every wait progresses every tracked transfer, so that two
  /// requests that depend on each other's peer (a send and a receive) never deadlock.
  void track(std::shared_ptr<Transfer> transfer) {
    if (transfer->done()) return;
    if (active_.size() >= 64) prune();  // amortised: waits do not prune
    active_.push_back(std::move(transfer));
  }

  void progress() noexcept {
    for (std::size_t i = 0; i < active_.size(); ++i) active_[i]->step();
    prune();
  }

  /// Stops tracking the transfers that are done.
  void prune() noexcept {
    active_.erase(std::remove_if(active_.begin(), active_.end(),
                                 [](const std::shared_ptr<Transfer>& t) { return t->done(); }),
                  active_.end());
  }

  /// Progresses until `transfer` is done; then rethrows its failure, if any. The others move on
  /// every few spins (each MPI_Test runs MPI's progress engine: testing all of them every spin
  /// would make a window of n requests cost n^2 tests).
  void wait(Transfer& transfer) {
    for (unsigned spins = 0; !transfer.done(); ++spins) {
      transfer.step();
      if (transfer.done()) break;
      if (spins % 8 == 7) progress();
      if (spins > 4000) std::this_thread::yield();  // oversubscribed hosts
    }
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
  void note_in_use(std::size_t bytes) noexcept {
    in_use_bytes_ += bytes;
    peak_in_use_bytes_ = std::max(peak_in_use_bytes_, in_use_bytes_);
  }

  void free_comms() noexcept {
    for (MPI_Comm* comm : {&coll_, &wire_, &user_}) {
      if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
    }
  }

  BufferManager& manager_;
  Options options_;
  MemoryModel model_ = MemoryModel::host;
  cl::Context context_;
  cl_context raw_context_ = nullptr;
  Queue queue_;
  MPI_Comm user_ = MPI_COMM_NULL;  // headers of point-to-point messages (the user's tags)
  MPI_Comm wire_ = MPI_COMM_NULL;  // chunks, tagged by stream
  MPI_Comm coll_ = MPI_COMM_NULL;  // headers of collectives, and their agreement
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  std::size_t inline_max_ = 0;
  std::vector<std::uint32_t> streams_;
  std::vector<PinnedBlock> free_slots_;
  std::vector<std::unique_ptr<char[]>> free_envelopes_;
  std::size_t pinned_bytes_ = 0;
  std::size_t slots_in_use_[2] = {0, 0};  // sending, receiving
  std::size_t in_use_bytes_ = 0;
  std::size_t peak_in_use_bytes_ = 0;
  std::vector<std::shared_ptr<Transfer>> active_;  // last: destroyed first
};

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

/// A pinned chunk and what it is doing.
struct Slot {
  enum State { idle, copying, messaging };
  PinnedBlock block;
  State state = idle;
  std::size_t chunk = 0;
  cl::Event copy;  // the DMA into or out of the block
  MPI_Request request = MPI_REQUEST_NULL;
};

/// The parts a send and a receive share: the queue, the chunk bookkeeping, the mapped pointer,
/// and what happens to MPI requests still pending when a failed transfer is destroyed.
class Stream : public Transfer {
 protected:
  Stream(Core& core, const char* operation, Span span, int direction)
      : Transfer(operation),
        core_(core),
        span_(std::move(span)),
        queue_(core.queue()),
        direction_(direction) {}

  ~Stream() override {
    // Only a failed transfer gets here with MPI still owning memory: that memory is left to MPI
    // (leaked), never freed under it.
    bool pending = header_request_ != MPI_REQUEST_NULL;
    for (MPI_Request& request : requests_) pending = pending || request != MPI_REQUEST_NULL;
    for (Slot& slot : slots_) pending = pending || slot.request != MPI_REQUEST_NULL;
    if (pending && !mpi_finalized()) {
      static_cast<void>(envelope_.release());
      static_cast<void>(scratch_.release());
      for (Slot& slot : slots_) {
        if (slot.request != MPI_REQUEST_NULL)
          static_cast<void>(new PinnedBlock(std::move(slot.block)));
      }
      if (mapped_ != nullptr) mapped_ = nullptr;  // stays mapped
    }
    core_.give_envelope(std::move(envelope_));
    for (Slot& slot : slots_) {
      if (slot.copy() != nullptr) {
        cl_event event = slot.copy();
        CLBUF_CL(clWaitForEvents)(1, &event);
      }
      core_.release_slot(direction_, std::move(slot.block));
    }
    if (mapped_ != nullptr)
      clbuf::detail::unmap_with_retry(queue_.get(), span_.buffer, mapped_, nullptr);
  }

  /// The buffer's bytes for the host: its host block, or mapped (`flags`) around MPI.
  char* host_bytes(cl_map_flags flags) {
    if (route_ == Route::zero_copy) {
      queue_.finish(operation_);
      return span_.host + span_.offset;
    }
    mapped_ = queue_.map(operation_, span_.buffer, flags, span_.offset, span_.bytes);
    return static_cast<char*>(mapped_);
  }

  /// After MPI is done with mapped memory: unmap and wait for the unmap.
  void unmap() {
    if (mapped_ == nullptr) return;
    cl_event event = nullptr;
    const cl_int err = clbuf::detail::unmap_with_retry(queue_.get(), span_.buffer, mapped_, &event);
    mapped_ = nullptr;
    clbuf::detail::check(err, operation_, "clEnqueueUnmapMemObject");
    const cl::Event owned(event, false);
    Queue::wait(operation_, owned);
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
  const Queue& queue_;   // the Core's, which outlives every transfer
  const int direction_;  // 0: sending, 1: receiving (the slot budgets)
  Route route_ = Route::zero_copy;
  Chunking chunks_;
  std::size_t next_ = 0;  // the next chunk to start
  Header header_;
  std::unique_ptr<char[]> envelope_;  // header + inline payload
  std::unique_ptr<char[]> scratch_;   // the chunks of a rejected message land here
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> requests_;  // zero-copy and mapped chunks
  std::vector<Slot> slots_;            // staged chunks
  void* mapped_ = nullptr;
  int peer_ = MPI_PROC_NULL;
};

class SendStream final : public Stream {
 public:
  /// Posts the header (with the payload when it fits the envelope) and starts the chunks.
  SendStream(Core& core, const char* operation, Span span, int dest, int tag, MPI_Comm comm,
             Kind kind)
      : Stream(core, operation, std::move(span), 0) {
    peer_ = dest;
    if (dest == MPI_PROC_NULL) return;
    header_.kind = static_cast<std::uint32_t>(kind);
    header_.count = span_.count;
    header_.bytes = span_.bytes;
    header_.element_size = span_.element_size;
    header_.type = span_.type;
    header_.stream = core.next_stream(dest);
    if (span_.bytes <= core.inline_max()) {
      header_.inline_bytes = static_cast<std::uint32_t>(span_.bytes);
      envelope_ = core.take_envelope();
      std::memcpy(envelope_.get(), &header_, header_bytes);
      read_into(envelope_.get() + header_bytes);
      check_mpi(MPI_Isend(envelope_.get(), static_cast<int>(header_bytes + span_.bytes), MPI_BYTE,
                          dest, tag, comm, &header_request_),
                operation, "MPI_Isend");
      return;
    }
    chunks_ = chunking(span_.bytes, chunk_for(span_.bytes, core.chunk_bytes()));
    header_.chunk_bytes = chunks_.chunk;
    route_ = core.route(span_);
    char* base = nullptr;
    if (route_ == Route::staged) {
      slots_.reserve(core.options().depth);
      fill_slots();
    } else {
      base = host_bytes(CL_MAP_READ);
    }
    check_mpi(MPI_Isend(&header_, static_cast<int>(header_bytes), MPI_BYTE, dest, tag, comm,
                        &header_request_),
              operation, "MPI_Isend");
    if (base == nullptr) return;
    requests_.assign(chunks_.count, MPI_REQUEST_NULL);
    for (std::size_t k = 0; k < chunks_.count; ++k) {
      check_mpi(MPI_Isend(base + chunks_.offset(k), chunks_.length(k), MPI_BYTE, dest,
                          static_cast<int>(header_.stream), core.wire(), &requests_[k]),
                operation, "MPI_Isend");
    }
  }

 private:
  void read_into(char* out) {
    if (span_.bytes == 0) return;
    if (span_.host != nullptr) {
      queue_.finish(operation_);
      std::memcpy(out, span_.host + span_.offset, span_.bytes);
    } else {
      queue_.read(operation_, span_.buffer, span_.offset, span_.bytes, out, true);
    }
  }

  void start_read(Slot& slot) {
    slot.chunk = next_++;
    slot.copy =
        queue_.read(operation_, span_.buffer, span_.offset + chunks_.offset(slot.chunk),
                    static_cast<std::size_t>(chunks_.length(slot.chunk)), slot.block.data(), false);
    slot.state = Slot::copying;
    queue_.flush(operation_);
  }

  std::size_t sent_ = 0;  // chunks handed to MPI

  /// Starts reading the next chunks into as many slots as depth and the budget allow.
  void fill_slots() {
    while (slots_.size() < core_.options().depth && next_ < chunks_.count) {
      PinnedBlock block = core_.acquire_slot(direction_, operation_);
      if (block.data() == nullptr) return;
      slots_.emplace_back();
      slots_.back().block = std::move(block);
      start_read(slots_.back());
    }
  }

  bool advance() override {
    if (peer_ == MPI_PROC_NULL) return true;
    const bool header_sent = test(header_request_);
    if (route_ != Route::staged || chunks_.count == 0) {
      if (!header_sent || !requests_done()) return false;
      unmap();
      return true;
    }
    // Chunks go out in order (they all carry the stream's tag, and MPI matches in order), even
    // when the reads are seen complete out of order.
    for (bool sent = true; sent;) {
      sent = false;
      for (Slot& slot : slots_) {
        if (slot.state == Slot::copying && slot.chunk == sent_ &&
            completed(operation_, slot.copy, "a chunk's clEnqueueReadBuffer")) {
          slot.copy = cl::Event();
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
        if (next_ < chunks_.count) start_read(slot);
      }
    }
    release_idle_slots();
    fill_slots();
    return header_sent && slots_.empty() && next_ == chunks_.count;
  }
};

class RecvStream final : public Stream {
 public:
  /// Posts the receive of the header (and of an inline payload).
  RecvStream(Core& core, const char* operation, Span span, int source, int tag, MPI_Comm comm,
             Kind kind)
      : Stream(core, operation, std::move(span), 1), kind_(kind) {
    if (source == MPI_PROC_NULL) {
      received_ = true;
      return;
    }
    const std::size_t capacity = header_bytes + core.inline_max();
    envelope_ = core.take_envelope();
    check_mpi(MPI_Irecv(envelope_.get(), static_cast<int>(capacity), MPI_BYTE, source, tag, comm,
                        &header_request_),
              operation, "MPI_Irecv");
  }

  /// The sender and tag of the message (after completion; MPI_PROC_NULL before).
  int source() const noexcept { return peer_; }
  int tag() const noexcept { return tag_; }

 private:
  bool advance() override {
    if (!received_) {
      MPI_Status status;
      if (!test(header_request_, &status)) return false;
      received_ = true;
      if (!accept(status)) return true;  // inline payload, already written
    }
    if (peer_ == MPI_PROC_NULL) return true;
    if (draining()) return false;
    if (route_ != Route::staged) {
      if (!requests_done()) return false;
      unmap();
      return true;
    }
    // A chunk takes a slot only once it has arrived (MPI_Improbe), then MPI_Imrecv.
    while (slots_.size() < core_.options().depth && next_ < chunks_.count) {
      if (held_ == MPI_MESSAGE_NULL) {
        int arrived = 0;
        check_mpi(MPI_Improbe(peer_, static_cast<int>(header_.stream), core_.wire(), &arrived,
                              &held_, MPI_STATUS_IGNORE),
                  operation_, "MPI_Improbe");
        if (!arrived) break;
      }
      PinnedBlock block = core_.acquire_slot(direction_, operation_);
      if (block.data() == nullptr) break;
      slots_.emplace_back();
      Slot& slot = slots_.back();
      slot.block = std::move(block);
      slot.chunk = next_++;
      slot.state = Slot::messaging;
      check_mpi(MPI_Imrecv(slot.block.data(), chunks_.length(slot.chunk), MPI_BYTE, &held_,
                           &slot.request),
                operation_, "MPI_Imrecv");
    }
    for (Slot& slot : slots_) {
      if (slot.state == Slot::messaging && test(slot.request)) {
        slot.copy = queue_.write(
            operation_, span_.buffer, span_.offset + chunks_.offset(slot.chunk),
            static_cast<std::size_t>(chunks_.length(slot.chunk)), slot.block.data(), false);
        slot.state = Slot::copying;
        queue_.flush(operation_);
      }
      if (slot.state == Slot::copying &&
          completed(operation_, slot.copy, "a chunk's clEnqueueWriteBuffer")) {
        slot.copy = cl::Event();
        slot.state = Slot::idle;
      }
    }
    release_idle_slots();
    return slots_.empty() && next_ == chunks_.count;
  }

  /// Checks the header against the buffer; writes an inline payload (returns false: done) or
  /// posts the chunks' receives (returns true: more to come).
  bool accept(const MPI_Status& status) {
    int received = 0;
    MPI_Get_count(&status, MPI_BYTE, &received);
    peer_ = status.MPI_SOURCE;
    tag_ = status.MPI_TAG;
    const auto from = [this] {
      return "rank " + std::to_string(peer_) + " (tag " + std::to_string(tag_) + ")";
    };
    if (received < static_cast<int>(header_bytes)) {
      fail(operation_, CL_INVALID_VALUE,
           "the message from " + from() + " is " + std::to_string(received) +
               " bytes, no clbuf::mpi header; both ends must use clbuf::mpi");
    }
    std::memcpy(&header_, envelope_.get(), header_bytes);
    if (header_.magic != magic) {
      fail(operation_, CL_INVALID_VALUE,
           "the message from " + from() +
               " has no clbuf::mpi header; both ends must use clbuf::mpi");
    }
    const bool chunked = header_.inline_bytes < header_.bytes;
    if (chunked && (header_.chunk_bytes == 0 || header_.chunk_bytes > core_.chunk_bytes())) {
      fail(operation_, CL_INVALID_VALUE,
           "the message from " + from() + " is cut in chunks of " +
               std::to_string(header_.chunk_bytes) + " bytes, this rank's are " +
               std::to_string(core_.chunk_bytes()));
    }
    if (!chunked && received != static_cast<int>(header_bytes + header_.inline_bytes)) {
      fail(operation_, CL_INVALID_VALUE,
           "the message from " + from() + " is " + std::to_string(received) +
               " bytes but its header says " + std::to_string(header_bytes + header_.inline_bytes));
    }
    std::string problem;
    if (header_.kind != static_cast<std::uint32_t>(kind_)) {
      problem =
          header_.kind == static_cast<std::uint32_t>(Kind::collective)
              ? from() + " sent part of a collective where a point-to-point message was expected"
              : from() + " sent a point-to-point message where a collective was expected";
    } else if (header_.bytes != span_.bytes || header_.element_size != span_.element_size ||
               (header_.type != any_type && span_.type != any_type && header_.type != span_.type)) {
      problem = std::string(header_.bytes > span_.bytes ? "MPI_ERR_TRUNCATE: " : "") + from() +
                " sent " + describe(header_.count, header_.element_size, header_.type) +
                " but the receiving buffer holds " +
                describe(span_.count, span_.element_size, span_.type);
    }
    if (!problem.empty()) {
      if (!chunked) fail(operation_, CL_INVALID_VALUE, problem);
      start_drain(std::move(problem));
      return true;
    }
    if (!chunked) {
      write_from(envelope_.get() + header_bytes);
      return false;
    }
    chunks_ = chunking(span_.bytes, header_.chunk_bytes);
    route_ = core_.route(span_);
    if (route_ == Route::staged) {
      slots_.reserve(core_.options().depth);
      return true;
    }
    char* base = host_bytes(CL_MAP_WRITE_INVALIDATE_REGION);
    requests_.assign(chunks_.count, MPI_REQUEST_NULL);
    for (std::size_t k = 0; k < chunks_.count; ++k) {
      check_mpi(MPI_Irecv(base + chunks_.offset(k), chunks_.length(k), MPI_BYTE, peer_,
                          static_cast<int>(header_.stream), core_.wire(), &requests_[k]),
                operation_, "MPI_Irecv");
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
    requests_.assign(1, MPI_REQUEST_NULL);
    next_ = 0;
    drain_next();
  }

  void drain_next() {
    check_mpi(MPI_Irecv(scratch_.get(), chunks_.length(next_), MPI_BYTE, peer_,
                        static_cast<int>(header_.stream), core_.wire(), &requests_[0]),
              operation_, "MPI_Irecv");
    ++next_;
  }

  /// True while draining; fails once the last chunk is in.
  bool draining() {
    if (problem_.empty()) return false;
    while (test(requests_[0])) {
      if (next_ == chunks_.count) fail(operation_, CL_INVALID_VALUE, problem_);
      drain_next();
    }
    return true;
  }

  void write_from(const char* data) {
    if (span_.bytes == 0) return;
    if (span_.host != nullptr) {
      queue_.finish(operation_);
      std::memcpy(span_.host + span_.offset, data, span_.bytes);
    } else {
      queue_.write(operation_, span_.buffer, span_.offset, span_.bytes, data, true);
    }
  }

  Kind kind_;
  bool received_ = false;
  MPI_Message held_ = MPI_MESSAGE_NULL;  // an arrived chunk waiting for a slot
  std::string problem_;                  // a rejected message being drained into scratch_
  int tag_ = MPI_ANY_TAG;
};

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_TRANSFER_HPP
