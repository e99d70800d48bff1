// SPDX-License-Identifier: MIT
// clbuf::mpi: device buffers as MPI messages, on a plain host-memory MPI (Open MPI 4.1 as
// Debian ships it). Optional: include it and link the CMake target clbuf::mpi (clbuf + MPI).
//
// No MPI recognises a cl_mem, so clbuf moves the bytes itself, by the path the manager's
// memory_model() calls for: a CPU device hands MPI the buffer's own host memory (zero copy);
// unified memory is mapped around MPI; a discrete GPU pipelines through pinned chunks (4 MiB,
// two per direction), the DMA of one chunk overlapping MPI's transfer of the other. Both ends
// must use clbuf::mpi: a message is a header, then its payload inline or in chunks
// (docs/mpi.md); Path::whole instead speaks plain MPI (one message of the raw bytes, MPI's own
// collectives) to peers without clbuf.
#ifndef CLBUF_MPI_HPP
#define CLBUF_MPI_HPP

#include <mpi.h>
#include <clbuf/buffer.hpp>
#include <clbuf/detail/buffer_access.hpp>
#include <clbuf/detail/checks.hpp>
#include <clbuf/detail/event.hpp>
#include <clbuf/detail/mpi_collective.hpp>
#include <clbuf/detail/mpi_core.hpp>
#include <clbuf/detail/mpi_eager.hpp>
#include <clbuf/detail/mpi_halo.hpp>
#include <clbuf/detail/mpi_pack.hpp>
#include <clbuf/detail/mpi_reduce.hpp>
#include <clbuf/detail/mpi_transfer.hpp>
#include <clbuf/detail/mpi_wire.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/rect.hpp>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {

/// The device for this rank: "P:D" (BufferManager's selector grammar) of GPU number
/// local_rank % GPUs, where local_rank is the rank among the ranks of `comm` on this node
/// (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED); CPU devices when there is no GPU. Collective
/// over `comm`. Prints a warning on stderr when more ranks than GPUs share a node (each small
/// transfer then waits for the GPU to switch processes: ~155 us instead of ~7 us on an H200).
/// @throws Error CL_DEVICE_NOT_FOUND when there is no device, or an MPI call's failure.
inline std::string local_device_selector(MPI_Comm comm = MPI_COMM_WORLD) {
  const char* op = "local_device_selector";
  MPI_Comm local = MPI_COMM_NULL;
  detail::check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), op,
                    "MPI_Comm_split_type");
  int local_rank = 0;
  int local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  const std::vector<DeviceInfo> devices = list_devices();
  std::vector<const DeviceInfo*> pick;
  for (DeviceType type : {DeviceType::gpu, DeviceType::cpu}) {
    for (const DeviceInfo& device : devices) {
      if (device.type == type) pick.push_back(&device);
    }
    if (!pick.empty()) break;
  }
  if (pick.empty()) {
    for (const DeviceInfo& device : devices) pick.push_back(&device);
  }
  if (pick.empty()) clbuf::detail::fail(op, CL_DEVICE_NOT_FOUND, "no OpenCL device on this node");
  const DeviceInfo& chosen = *pick[static_cast<std::size_t>(local_rank) % pick.size()];
  if (chosen.type == DeviceType::gpu && static_cast<std::size_t>(local_size) > pick.size() &&
      static_cast<std::size_t>(local_rank) == pick.size()) {
    std::cerr << "clbuf::mpi: " << local_size << " ranks on this node share " << pick.size()
              << " GPU(s); ranks sharing a GPU wait for it to switch processes at every transfer "
                 "(run one rank per GPU)\n";
  }
  return std::to_string(chosen.platform_index) + ":" + std::to_string(chosen.device_index);
}

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

/// One BufferManager bound to a duplicated MPI communicator: typed sends, receives and
/// collectives of DeviceBuffers. Construction and the collectives are collective over the
/// communicator. Counts must match exactly between sender and receiver. Not thread-safe: use a
/// Communicator from one thread at a time (MPI_THREAD_FUNNELED is enough). It must not outlive
/// its BufferManager.
class Communicator {
 public:
  /// Duplicates `comm` (errors returned, not fatal) and checks that every rank's
  /// Options::chunk_bytes agree. Collective. Wraps MPI_Comm_dup, MPI_Allreduce.
  /// @throws Error CL_INVALID_OPERATION before MPI_Init, CL_INVALID_VALUE for MPI_COMM_NULL,
  ///         invalid Options or chunk sizes that differ between ranks (on every rank).
  explicit Communicator(BufferManager& manager, MPI_Comm comm = MPI_COMM_WORLD,
                        const Options& options = Options()) try
      : core_(std::make_shared<detail::Core>(manager, comm, options)),
        reducer_(std::make_unique<detail::Reducer>()),
        packer_(std::make_shared<detail::Packer>()) {
  } catch (...) {
    clbuf::detail::rethrow_host_memory("Communicator");
  }

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  /// Takes over `other`'s communicator and manager binding.
  Communicator(Communicator&&) noexcept = default;
  /// Takes over `other`'s communicator and manager binding.
  Communicator& operator=(Communicator&&) noexcept = default;

  /// This process's rank in the communicator.
  int rank() const noexcept { return core_->rank(); }
  /// The number of ranks in the communicator.
  int size() const noexcept { return core_->size(); }
  /// The duplicated communicator clbuf's point-to-point headers use (for MPI calls of your own
  /// that must not match clbuf's, use your communicator, not this one).
  MPI_Comm native() const noexcept { return core_->user(); }
  /// The manager whose buffers this communicator moves.
  BufferManager& manager() const noexcept { return core_->manager(); }
  /// The options it was made with (chunk size, pipeline depth, path, device-reduce threshold).
  const Options& options() const noexcept { return core_->options(); }
  /// Pinned staging memory allocated now (in use and cached for reuse), and the most that was
  /// ever in use at once: chunk_bytes x depth per message in flight on the staged path.
  std::size_t pinned_bytes() const noexcept { return core_->pinned_bytes(); }
  /// The most pinned staging memory that was ever in use at once (see pinned_bytes()).
  std::size_t peak_pinned_bytes() const noexcept { return core_->peak_pinned_in_use(); }
  /// The messages sent and received so far by the path each took (MessageStats): inline in the
  /// envelope, zero copy, mapped or staged.
  MessageStats stats() const noexcept { return core_->stats(); }

  /// @name Point to point
  /// @{

  /// Sends all of `buffer` to rank `dest` (MPI_PROC_NULL: nothing) with `tag`; returns when the
  /// buffer may be changed again.
  /// @throws Error CL_INVALID_VALUE for a rank or tag out of range; as Request::wait().
  template <class T>
  void send(const DeviceBuffer<T>& buffer, int dest, int tag = 0) {
    point_to_point("send", buffer, dest, tag, true, &Communicator::blocking);
  }

  /// Receives into all of `buffer` from `source` (or MPI_ANY_SOURCE) with `tag` (or
  /// MPI_ANY_TAG). The message must hold exactly buffer.size() elements of T. A small message
  /// on a discrete device is written as a small upload is (buffered: README "Errors").
  /// @throws Error CL_INVALID_VALUE when the message does not (naming both sides); nothing is
  ///         written.
  template <class T>
  void recv(DeviceBuffer<T>& buffer, int source, int tag = 0) {
    point_to_point("recv", buffer, source, tag, false, &Communicator::blocking);
  }

  /// Sends `out` to `dest` and receives `in` from `source` at once (no deadlock in rings).
  /// Checks every argument before it starts anything.
  /// @throws Error CL_MEM_COPY_OVERLAP when `out` and `in` share bytes; as send() and recv().
  template <class T>
  void sendrecv(const DeviceBuffer<T>& out, int dest, DeviceBuffer<T>& in, int source,
                int tag = 0) {
    clbuf::detail::guard_host_memory("sendrecv", [&] {
      const char* op = "sendrecv";
      check_buffer(op, out, true, false);
      check_buffer(op, in, false, true);
      check_apart(op, out, in);
      check_rank(op, "destination", dest, false);
      check_rank(op, "source", source, true);
      check_tag(op, tag, false);
      // A receive that cannot start sends no notice in its send's place: the peer's own message
      // to this rank would then wait, or stay to be taken by a later receive (docs/mpi.md).
      std::vector<Request> both;
      both.reserve(2);  // before anything is posted
      both.push_back(irecv(in, source, tag));
      both.push_back(isend(out, dest, tag));
      wait_all(both);
    });
  }

  /// Starts sending `buffer`; the Request completes when it may be changed again.
  template <class T>
  Request isend(const DeviceBuffer<T>& buffer, int dest, int tag = 0) {
    return point_to_point("isend", buffer, dest, tag, true, &Communicator::start_request);
  }

  /// Starts receiving into `buffer`; the Request completes when the data is in it (on a
  /// discrete device a message of at most 3968 bytes may still be on its way from the manager's
  /// pinned ring then, ahead of every later command on the manager's queue: docs/mpi.md).
  template <class T>
  Request irecv(DeviceBuffer<T>& buffer, int source, int tag = 0) {
    return point_to_point("irecv", buffer, source, tag, false, &Communicator::start_request);
  }

  /// A send of all of `buffer` to `dest` with `tag`, checked now and started by
  /// Persistent::start() as often as needed (a fixed exchange: one set-up, many messages).
  /// Wraps what isend() does; the peer receives with recv(), irecv() or a recv_init().
  /// @throws Error as isend() for a bad buffer, rank or tag.
  template <class T>
  Persistent send_init(const DeviceBuffer<T>& buffer, int dest, int tag = 0) {
    return point_to_point("send_init", buffer, dest, tag, true, &Communicator::persistent);
  }

  /// A receive into all of `buffer` from `source` (or MPI_ANY_SOURCE) with `tag` (or
  /// MPI_ANY_TAG), checked now and started by Persistent::start() as often as needed.
  /// @throws Error as irecv() for a bad buffer, rank or tag.
  template <class T>
  Persistent recv_init(DeviceBuffer<T>& buffer, int source, int tag = 0) {
    return point_to_point("recv_init", buffer, source, tag, false, &Communicator::persistent);
  }
  /// @}

  /// @name Collectives (every rank calls them in the same order)
  /// Each first agrees on the arguments (one small MPI_Allreduce; MPI_Iallreduce for the
  /// non-blocking ones): a count, type, root, operation or collective that differs between
  /// ranks, or bad input on any rank, is a clbuf::Error on every rank before any data moves.
  /// Under Path::whole they are MPI's own collectives, without agreement.
  /// @{

  /// Copies `buffer` of rank `root` into `buffer` of every rank (binomial tree).
  template <class T>
  void broadcast(DeviceBuffer<T>& buffer, int root) {
    clbuf::detail::guard_host_memory("broadcast", [&] {
      const char* op = "broadcast";
      std::exception_ptr local;
      try {
        check_buffer(op, buffer, rank() == root, rank() != root);
        check_rank(op, "root", root, false, false);
      } catch (...) {
        local = std::current_exception();
      }
      agree<T>(op, local, buffer.size(), root, -1);
      if (core_->whole()) {
        on_host(
            op, buffer, rank() == root, rank() != root, [&](T* data, int count, MPI_Datatype type) {
              detail::check_mpi(MPI_Bcast(data, count, type, root, core_->coll()), op, "MPI_Bcast");
            });
        return;
      }
      const int p = size();
      const int relative = (rank() - root + p) % p;
      int mask = 1;
      while (mask < p) {
        if (relative & mask) {
          wait_one(std::make_shared<detail::RecvStream>(*core_, op, span_of(buffer),
                                                        (relative - mask + root) % p, 0,
                                                        core_->coll(), detail::Kind::collective));
          break;
        }
        mask <<= 1;
      }
      std::vector<std::shared_ptr<detail::Transfer>> sends;
      sends.reserve(32);  // a rank of a binomial tree sends at most log2(p) < 32 times
      for (mask >>= 1; mask > 0; mask >>= 1) {
        if (relative + mask < p) {
          sends.push_back(
              track(detail::make_send(*core_, op, span_of(buffer), (relative + mask + root) % p, 0,
                                      core_->coll(), detail::Kind::collective)));
        }
      }
      core_->wait_all(sends);
    });
  }

  /// Reduces `buffer` element-wise over all ranks (sum, min or max), the result on every rank.
  /// From Options::device_reduce_bytes the reduction runs on the device (a ring of
  /// reduce-scatter then allgather, an OpenCL kernel per step); below, MPI_Allreduce on host
  /// memory (the buffer's own on a CPU device). Floating-point sums may differ in the last bits
  /// from a sum in another order, but every rank gets the same bits.
  template <class T>
  void allreduce(DeviceBuffer<T>& buffer, Op reduction = Op::sum) {
    clbuf::detail::guard_host_memory("allreduce", [&] {
      static_assert(
          detail::type_code<T>() >= detail::int8 && detail::type_code<T>() <= detail::float64,
          "clbuf::mpi::allreduce needs an arithmetic T of 8 to 64 bits (not bool)");
      const char* op = "allreduce";
      std::exception_ptr local;
      DeviceBuffer<T> incoming;  // the device ring's receiving buffer (below)
      try {
        check_buffer(op, buffer, true, true);
        // Had before the agreement: a rank that cannot get it rejects the call there, on every
        // rank, instead of leaving the ring (its neighbours would wait for it for ever).
        if (!core_->whole() && size() > 1 && !buffer.empty() &&
            buffer.size_bytes() >= options().device_reduce_bytes) {
          incoming = manager().allocate<T>(buffer.size() / static_cast<std::size_t>(size()) + 1);
        }
      } catch (...) {
        local = std::current_exception();
      }
      agree<T>(op, local, buffer.size(), -1, static_cast<long long>(reduction));
      const std::uint32_t type = detail::type_code<T>();
      if (core_->whole()) {  // MPI_Allreduce as a plain peer calls it, even of no element
        on_host(op, buffer, true, true, [&](T* data, int count, MPI_Datatype mpi_type) {
          detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, count, mpi_type,
                                          detail::mpi_op(reduction), core_->coll()),
                            op, "MPI_Allreduce");
        });
        return;
      }
      if (size() == 1 || buffer.empty()) return;
      if (buffer.size_bytes() < options().device_reduce_bytes) {
        reduce_on_host(op, buffer, type, reduction);
        return;
      }
      const std::size_t p = static_cast<std::size_t>(size());
      const std::size_t n = buffer.size();
      const auto start_of = [&](std::size_t i) { return i * (n / p) + std::min(i, n % p); };
      const auto length_of = [&](std::size_t i) { return n / p + (i < n % p ? 1 : 0); };
      const clbuf::detail::Queue queue(manager().queue());
      const std::size_t r = static_cast<std::size_t>(rank());
      const int right = static_cast<int>((r + 1) % p);
      const int left = static_cast<int>((r + p - 1) % p);
      for (std::size_t step = 0; step + 1 < p; ++step) {  // reduce-scatter
        const std::size_t out = (r + p - step) % p;
        const std::size_t in = (r + 2 * p - step - 1) % p;
        exchange(op, span_of(buffer, start_of(out), length_of(out)), right,
                 span_of(incoming, 0, length_of(in)), left);
        reducer_->reduce(op, queue, type, reduction, buffer.native_root()(),
                         buffer.native_offset_bytes() / sizeof(T) + start_of(in),
                         incoming.native_root()(), length_of(in));
      }
      for (std::size_t step = 0; step + 1 < p; ++step) {  // allgather
        const std::size_t out = (r + 1 + p - step) % p;
        const std::size_t in = (r + p - step) % p;
        exchange(op, span_of(buffer, start_of(out), length_of(out)), right,
                 span_of(buffer, start_of(in), length_of(in)), left);
      }
      queue.finish(op);
    });
  }

  /// Starts broadcast(): `buffer` of rank `root` into `buffer` of every rank, by MPI_Ibcast on
  /// host memory (the buffer's own on a CPU device, else a copy read when the broadcast starts
  /// and written back when it completes). The Request completes when `buffer` holds the data;
  /// until then it must stay alive and untouched. Every rank calls it (with the blocking
  /// collectives, in the same order); several may be in flight, and point-to-point calls mix.
  /// Progress happens in test(), wait() and the Communicator's other calls.
  /// @throws Error at the call for this rank's own bad arguments (a rank out of range, an
  ///         invalid buffer, more than INT_MAX elements); from the Request's wait() or test()
  ///         when the ranks' counts, types or roots differ, or another rank rejected its own
  ///         (the agreement, unless verify_collectives is false or the path is Path::whole),
  ///         or when MPI or OpenCL fails.
  template <class T>
  Request ibroadcast(DeviceBuffer<T>& buffer, int root) {
    return clbuf::detail::guard_host_memory(
        "ibroadcast", [&] { return start_collective("ibroadcast", buffer, false, root, Op::sum); });
  }

  /// Starts allreduce(): `buffer` reduced element-wise over all ranks, by MPI_Iallreduce
  /// (MPI_IN_PLACE) on host memory as ibroadcast() (no device reduction at any size). The
  /// Request completes when `buffer` holds the result on this rank.
  /// @throws Error as ibroadcast().
  template <class T>
  Request iallreduce(DeviceBuffer<T>& buffer, Op reduction = Op::sum) {
    return clbuf::detail::guard_host_memory("iallreduce", [&] {
      static_assert(
          detail::type_code<T>() >= detail::int8 && detail::type_code<T>() <= detail::float64,
          "clbuf::mpi::iallreduce needs an arithmetic T of 8 to 64 bits (not bool)");
      return start_collective("iallreduce", buffer, true, -1, reduction);
    });
  }

  /// Rank i receives elements [i * mine.size(), (i + 1) * mine.size()) of the root's `all`;
  /// `all` is read on the root only and must hold mine.size() * size() elements there.
  template <class T>
  void scatter(const DeviceBuffer<T>& all, DeviceBuffer<T>& mine, int root) {
    clbuf::detail::guard_host_memory("scatter", [&] {
      const char* op = "scatter";
      std::exception_ptr local;
      try {
        check_buffer(op, mine, false, rank() != root);
        check_rank(op, "root", root, false, false);
        if (rank() == root) {
          check_whole(op, all, mine.size(), true, false);
          check_own_slot(op, all, mine, root);
        }
      } catch (...) {
        local = std::current_exception();
      }
      agree<T>(op, local, mine.size(), root, -1);
      const std::size_t n = mine.size();
      if (core_->whole()) {
        plain_scatter_gather(op, mine, all, root, true);
        return;
      }
      if (rank() != root) {
        wait_one(std::make_shared<detail::RecvStream>(*core_, op, span_of(mine), root, 0,
                                                      core_->coll(), detail::Kind::collective));
        return;
      }
      std::vector<std::shared_ptr<detail::Transfer>> sends;
      sends.reserve(static_cast<std::size_t>(size()));
      for (int i = 0; i < size(); ++i) {
        if (i == root) continue;
        sends.push_back(
            track(detail::make_send(*core_, op, span_of(all, static_cast<std::size_t>(i) * n, n), i,
                                    0, core_->coll(), detail::Kind::collective)));
      }
      copy_own(op, all, static_cast<std::size_t>(root) * n, mine, 0,
               in_own_slot(all, mine, root) ? 0 : n, sends);
    });
  }

  /// The reverse of scatter(): `all` on the root receives every rank's `mine` in rank order.
  template <class T>
  void gather(const DeviceBuffer<T>& mine, DeviceBuffer<T>& all, int root) {
    clbuf::detail::guard_host_memory("gather", [&] {
      const char* op = "gather";
      std::exception_ptr local;
      try {
        check_buffer(op, mine, rank() != root, false);
        check_rank(op, "root", root, false, false);
        if (rank() == root) {
          check_whole(op, all, mine.size(), false, true);
          check_own_slot(op, all, mine, root);
        }
      } catch (...) {
        local = std::current_exception();
      }
      agree<T>(op, local, mine.size(), root, -1);
      const std::size_t n = mine.size();
      if (core_->whole()) {
        plain_scatter_gather(op, mine, all, root, false);
        return;
      }
      if (rank() != root) {
        wait_one(detail::make_send(*core_, op, span_of(mine), root, 0, core_->coll(),
                                   detail::Kind::collective));
        return;
      }
      std::vector<std::shared_ptr<detail::Transfer>> receives;
      receives.reserve(static_cast<std::size_t>(size()));
      for (int i = 0; i < size(); ++i) {
        if (i == root) continue;
        receives.push_back(track(std::make_shared<detail::RecvStream>(
            *core_, op, span_of(all, static_cast<std::size_t>(i) * n, n), i, 0, core_->coll(),
            detail::Kind::collective)));
      }
      copy_own(op, mine, 0, all, static_cast<std::size_t>(root) * n,
               in_own_slot(all, mine, root) ? 0 : n, receives);
    });
  }

  /// MPI_Barrier on the duplicated communicator.
  void barrier() {
    clbuf::detail::guard_host_memory("barrier", [&] {
      core_->launch_collectives(true);
      if (core_->whole()) {  // a plain peer calls MPI_Barrier
        detail::check_mpi(MPI_Barrier(core_->coll()), "barrier", "MPI_Barrier");
        return;
      }
      // Non-blocking, so that transfers in flight move on while it waits (docs/mpi.md).
      MPI_Request request = MPI_REQUEST_NULL;
      detail::check_mpi(MPI_Ibarrier(core_->coll(), &request), "barrier", "MPI_Ibarrier");
      core_->wait_request(request, "barrier", "MPI_Ibarrier");
    });
  }
  /// @}

 private:
  template <class U>
  friend class HaloExchange;

  template <class T>
  static detail::Span span_of(const DeviceBuffer<T>& buffer, std::size_t first, std::size_t count) {
    const clbuf::detail::Allocation& memory = clbuf::detail::BufferAccess::memory(buffer);
    detail::Span span;
    span.buffer = memory.buffer();
    span.host = static_cast<char*>(memory.host);
    span.offset = memory.at(first * sizeof(T));
    span.bytes = count * sizeof(T);
    span.count = count;
    span.element_size = static_cast<std::uint32_t>(sizeof(T));
    span.type = detail::type_code<T>();
    return span;
  }
  template <class T>
  static detail::Span span_of(const DeviceBuffer<T>& buffer) {
    return span_of(buffer, 0, buffer.size());
  }
  /// `buffer` is of this communicator's context, and the host may read it (`read`, to send
  /// it) and write it (`write`, to receive into it): MPI reaches device memory through the host.
  template <class T>
  void check_buffer(const char* op, const DeviceBuffer<T>& buffer, bool read, bool write) const {
    clbuf::detail::check_buffer(op, buffer.valid(), buffer.context(), core_->context());
    clbuf::detail::check_host_access(op, clbuf::detail::BufferAccess::access(buffer), read, write);
  }

  /// `all` (the root's) holds count * size() elements.
  template <class T>
  void check_whole(const char* op, const DeviceBuffer<T>& all, std::size_t count, bool read,
                   bool write) const {
    check_buffer(op, all, read, write);
    const std::size_t p = static_cast<std::size_t>(size());
    if (count > SIZE_MAX / p || all.size() != count * p) {
      clbuf::detail::fail(op, CL_INVALID_VALUE,
                          "the root's buffer holds " + std::to_string(all.size()) + " elements; " +
                              std::to_string(size()) + " ranks of " + std::to_string(count) +
                              " need " +
                              (count > SIZE_MAX / p ? std::string("more than SIZE_MAX")
                                                    : std::to_string(count * p)));
    }
  }

  void check_rank(const char* op, const char* role, int rank, bool any_allowed,
                  bool null_allowed = true) const {
    if (rank >= 0 && rank < size()) return;
    if (null_allowed && rank == MPI_PROC_NULL) return;
    if (any_allowed && rank == MPI_ANY_SOURCE) return;
    clbuf::detail::fail(op, CL_INVALID_VALUE,
                        std::string(role) + " rank " + std::to_string(rank) + " is not in [0, " +
                            std::to_string(size()) + ")" +
                            (null_allowed ? " or MPI_PROC_NULL" : "") +
                            (any_allowed ? " or MPI_ANY_SOURCE" : ""));
  }

  void check_tag(const char* op, int tag, bool any_allowed) const {
    if (tag >= 0 && tag <= core_->tag_ub()) return;
    if (any_allowed && tag == MPI_ANY_TAG) return;
    clbuf::detail::fail(op, CL_INVALID_VALUE,
                        "tag " + std::to_string(tag) + " is not in [0, " +
                            std::to_string(core_->tag_ub()) + "] (MPI_TAG_UB)" +
                            (any_allowed ? " or MPI_ANY_TAG" : ""));
  }

  /// The root's `mine` is its own slot of `all` exactly (in place, as MPI_IN_PLACE: nothing to
  /// copy) or shares no byte with `all`; else CL_MEM_COPY_OVERLAP, before any data moves.
  template <class T>
  static void check_own_slot(const char* op, const DeviceBuffer<T>& all,
                             const DeviceBuffer<T>& mine, int root) {
    if (in_own_slot(all, mine, root)) return;
    const cl_mem a = clbuf::detail::BufferAccess::root(all);
    const std::size_t a0 = all.root_offset_bytes();
    const std::size_t m0 = mine.root_offset_bytes();
    if (a != nullptr && a == clbuf::detail::BufferAccess::root(mine) &&
        a0 < m0 + mine.size_bytes() && m0 < a0 + all.size_bytes()) {
      clbuf::detail::fail(op, CL_MEM_COPY_OVERLAP,
                          "the root's own buffer shares bytes with the whole ([" +
                              std::to_string(m0) + ", " + std::to_string(m0 + mine.size_bytes()) +
                              ") and [" + std::to_string(a0) + ", " +
                              std::to_string(a0 + all.size_bytes()) +
                              ") of one buffer) but is not the root's own slot of it");
    }
  }

  /// `mine` is exactly rank `root`'s slot of `all` (the same bytes).
  template <class T>
  static bool in_own_slot(const DeviceBuffer<T>& all, const DeviceBuffer<T>& mine,
                          int root) noexcept {
    const cl_mem a = clbuf::detail::BufferAccess::root(all);
    return a != nullptr && a == clbuf::detail::BufferAccess::root(mine) &&
           mine.root_offset_bytes() ==
               all.root_offset_bytes() + static_cast<std::size_t>(root) * mine.size_bytes();
  }

  template <class T>
  static void check_apart(const char* op, const DeviceBuffer<T>& out, const DeviceBuffer<T>& in) {
    const cl_mem a = clbuf::detail::BufferAccess::root(out);
    const cl_mem b = clbuf::detail::BufferAccess::root(in);
    const std::size_t a0 = out.root_offset_bytes();
    const std::size_t b0 = in.root_offset_bytes();
    if (a != nullptr && a == b && a0 < b0 + in.size_bytes() && b0 < a0 + out.size_bytes()) {
      clbuf::detail::fail(op, CL_MEM_COPY_OVERLAP,
                          "the buffer sent and the buffer received into share bytes ([" +
                              std::to_string(a0) + ", " + std::to_string(a0 + out.size_bytes()) +
                              ") and [" + std::to_string(b0) + ", " +
                              std::to_string(b0 + in.size_bytes()) + ") of one buffer)");
    }
  }

  /// Every rank's count, element size, type, root and operation agree, and no rank rejected
  /// its arguments; else the same kind of Error on every rank (the rank with bad input throws
  /// its own).
  template <class T>
  void agree(const char* op, std::exception_ptr local, std::size_t count, long long root,
             long long reduction) {
    core_->launch_collectives(true);  // earlier non-blocking collectives start first
    if (!options().verify_collectives || core_->whole()) {
      if (local) std::rethrow_exception(local);
      return;
    }
    // Non-blocking, waited for while the transfers in flight move on: a blocking MPI_Allreduce
    // would leave a peer blocked on one of them (its send into a receive of this rank's that was
    // posted before this collective) waiting forever. Costs 2-4 us over MPI_Allreduce (Open MPI
    // 4.1, 2 ranks). The agreement of the non-blocking collectives is the same MPI_Iallreduce,
    // so a blocking collective on one rank against a non-blocking one on another matches it and
    // is told apart by the collective's code in the values.
    detail::Agreement agreement(op, count, sizeof(T), detail::type_code<T>(), root, reduction,
                                local ? rank() : -1);
    MPI_Request request = MPI_REQUEST_NULL;
    agreement.start(op, core_->coll(), request);
    core_->wait_request(request, op, "MPI_Iallreduce");
    if (local) std::rethrow_exception(local);
    agreement.check(op);
  }

  /// ibroadcast() and iallreduce(): checks this rank's arguments, starts the agreement and
  /// queues the collective (see detail::HostCollective).
  template <class T>
  Request start_collective(const char* op, DeviceBuffer<T>& buffer, bool reduce, int root,
                           Op reduction) {
    core_->launch_collectives(true);
    std::exception_ptr local;
    try {
      check_buffer(op, buffer, reduce || rank() == root, reduce || rank() != root);
      if (!reduce) check_rank(op, "root", root, false, false);
      int count = 0;
      static_cast<void>(detail::whole_count(op, span_of(buffer), count));
    } catch (...) {
      local = std::current_exception();
    }
    std::unique_ptr<detail::Agreement> agreement;
    if (options().verify_collectives && !core_->whole()) {
      agreement = std::make_unique<detail::Agreement>(
          op, buffer.size(), sizeof(T), detail::type_code<T>(), reduce ? -1 : root,
          reduce ? static_cast<long long>(reduction) : -1, local ? rank() : -1);
    } else if (local) {
      std::rethrow_exception(local);
    }
    auto collective = std::make_shared<detail::HostCollective>(
        *core_, op, local ? detail::Span() : span_of(buffer), reduce, root, reduction,
        std::move(agreement), local);
    core_->queue_collective(collective);
    core_->track(collective);
    // The agreement is under way: the other ranks learn of this rank's rejection from it.
    if (local) std::rethrow_exception(local);
    return Request(core_, std::move(collective));
  }

  /// The opening of send, recv, isend, irecv, send_init and recv_init, under
  /// guard_host_memory(op): `buffer` is of this communicator and the host may read it (`send`)
  /// or write it (a receive), `peer` a rank (or MPI_PROC_NULL; MPI_ANY_SOURCE for a receive),
  /// `tag` in range (MPI_ANY_TAG for a receive); then `begin`, a member that takes (op, span of
  /// the whole buffer, peer, tag, send), begins the message.
  template <class T, class Begin>
  auto point_to_point(const char* op, const DeviceBuffer<T>& buffer, int peer, int tag, bool send,
                      Begin begin) {
    return clbuf::detail::guard_host_memory(op, [&] {
      check_buffer(op, buffer, send, !send);
      check_rank(op, send ? "destination" : "source", peer, !send);
      check_tag(op, tag, !send);
      return (this->*begin)(op, span_of(buffer), peer, tag, send);
    });
  }

  /// isend() and irecv().
  Request start_request(const char* op, const detail::Span& span, int peer, int tag, bool send) {
    return Request::start(core_, op, span, peer, tag, send);
  }

  /// send_init() and recv_init(): the buffer's OpenCL object is retained, so that span.buffer
  /// stays valid while the Persistent exists.
  Persistent persistent(const char* op, const detail::Span& span, int peer, int tag, bool send) {
    cl::Buffer root = span.buffer == nullptr ? cl::Buffer() : cl::Buffer(span.buffer, true);
    return Persistent(core_, op, span, std::move(root), peer, tag, send);
  }

  /// send() and recv(): the message on the stack and untracked (no allocation, no Request);
  /// the wait still moves every tracked transfer on.
  void blocking(const char* op, const detail::Span& span, int peer, int tag, bool send) {
    if (detail::Eager::fits(*core_, span)) {
      detail::Eager eager;
      eager.start(*core_, op, span, peer, tag, send);
      core_->wait(eager);
    } else if (send) {
      detail::SendStream stream(*core_, op, span, peer, tag, core_->user(),
                                detail::Kind::point_to_point);
      core_->wait(stream);
    } else {
      detail::RecvStream stream(*core_, op, span, peer, tag, core_->user(),
                                detail::Kind::point_to_point);
      core_->wait(stream);
    }
  }

  Request start(std::shared_ptr<detail::Transfer> transfer) {
    return start_on(core_, std::move(transfer));
  }

  static Request start_on(const std::shared_ptr<detail::Core>& core,
                          std::shared_ptr<detail::Transfer> transfer) {
    core->track(transfer);
    return Request(core, std::move(transfer));
  }

  std::shared_ptr<detail::Transfer> track(std::shared_ptr<detail::Transfer> transfer) {
    core_->track(transfer);
    return transfer;
  }

  void wait_one(std::shared_ptr<detail::Transfer> transfer) {
    core_->track(transfer);
    core_->wait(*transfer);
  }

  /// Sends `out` right and receives `in` from the left, both complete on return.
  void exchange(const char* op, detail::Span out, int right, detail::Span in, int left) {
    std::vector<std::shared_ptr<detail::Transfer>> both;
    both.reserve(2);
    both.push_back(track(std::make_shared<detail::RecvStream>(
        *core_, op, std::move(in), left, 0, core_->coll(), detail::Kind::collective)));
    both.push_back(track(detail::make_send(*core_, op, std::move(out), right, 0, core_->coll(),
                                           detail::Kind::collective)));
    core_->wait_all(both);
  }

  /// The root's own share of scatter/gather: a device copy while the messages move; then waits
  /// for them, so that no peer is left waiting if the copy fails.
  template <class T>
  void copy_own(const char* op, const DeviceBuffer<T>& src, std::size_t src_first,
                DeviceBuffer<T>& dst, std::size_t dst_first, std::size_t count,
                std::vector<std::shared_ptr<detail::Transfer>>& transfers) {
    std::exception_ptr failed;
    try {
      if (count != 0) {
        manager().copy_bytes(src, dst, count * sizeof(T), src_first * sizeof(T),
                             dst_first * sizeof(T));
      }
    } catch (...) {
      failed = std::current_exception();
    }
    (void)op;
    core_->wait_all(transfers);
    if (failed) std::rethrow_exception(failed);
  }

  /// Calls `call(data, count, type)` with `buffer`'s elements on the host: its host block
  /// (after the queue has finished), else a copy (downloaded when `read`, uploaded afterwards
  /// when `write`); `count` of MPI datatype `type` (MPI_BYTE for types MPI has no name for).
  /// @throws Error CL_INVALID_VALUE past INT_MAX MPI elements (one MPI call counts in int).
  template <class T, class F>
  void on_host(const char* op, DeviceBuffer<T>& buffer, bool read, bool write, F&& call) {
    detail::Span span = span_of(buffer);
    int count = 0;
    const MPI_Datatype type = detail::whole_count(op, span, count);
    const clbuf::detail::Allocation& memory = clbuf::detail::BufferAccess::memory(buffer);
    if (memory.host != nullptr || buffer.empty()) {
      manager().finish();
      call(buffer.empty() ? nullptr : reinterpret_cast<T*>(memory.host_at(0)), count, type);
      return;
    }
    std::vector<T> copy = read ? manager().download(buffer) : std::vector<T>(buffer.size());
    call(copy.data(), count, type);
    if (write) manager().upload(buffer, copy);
  }

  /// Path::whole's scatter (or gather): MPI_Scatter (MPI_Gather) on host memory. Only the
  /// buffer the caller passed as non-const is written (`mine` of scatter, `all` of gather).
  template <class T>
  void plain_scatter_gather(const char* op, const DeviceBuffer<T>& mine_in,
                            const DeviceBuffer<T>& all_in, int root, bool scatter) {
    auto& mine = const_cast<DeviceBuffer<T>&>(mine_in);  // NOLINT: written only by scatter
    auto& all = const_cast<DeviceBuffer<T>&>(all_in);    // NOLINT: written only by gather
    const auto run = [&](T* whole, T* part, int count, MPI_Datatype type) {
      // The root's part its own slot of the whole in host memory (in place): MPI_IN_PLACE, as
      // MPI requires for that.
      void* own = whole != nullptr && part == whole + static_cast<std::ptrdiff_t>(root) * count
                      ? MPI_IN_PLACE
                      : static_cast<void*>(part);
      const int err = scatter
                          ? MPI_Scatter(whole, count, type, own, count, type, root, core_->coll())
                          : MPI_Gather(own, count, type, whole, count, type, root, core_->coll());
      detail::check_mpi(err, op, scatter ? "MPI_Scatter" : "MPI_Gather");
    };
    on_host(op, mine, !scatter, scatter, [&](T* part, int count, MPI_Datatype type) {
      if (rank() != root) {
        run(nullptr, part, count, type);
        return;
      }
      on_host(op, all, scatter, !scatter,
              [&](T* whole, int, MPI_Datatype) { run(whole, part, count, type); });
    });
  }

  template <class T>
  void reduce_on_host(const char* op, DeviceBuffer<T>& buffer, std::uint32_t type, Op reduction) {
    const clbuf::detail::Allocation& memory = clbuf::detail::BufferAccess::memory(buffer);
    std::vector<T> copy;
    T* data = memory.host != nullptr ? reinterpret_cast<T*>(memory.host_at(0)) : nullptr;
    if (data != nullptr) {
      manager().finish();
    } else {
      copy = manager().download(buffer);
      data = copy.data();
    }
    // Non-blocking, waited for while the transfers in flight move on, as agree() does: without
    // the agreement (Options::verify_collectives off) a blocking MPI_Allreduce left a peer whose
    // blocking send needs this rank's posted receive waiting forever, and this rank with it.
    for (std::size_t done = 0; done < buffer.size();) {
      const int count = static_cast<int>(std::min<std::size_t>(buffer.size() - done, INT_MAX));
      MPI_Request request = MPI_REQUEST_NULL;
      detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data + done, count, detail::mpi_type(type),
                                       detail::mpi_op(reduction), core_->coll(), &request),
                        op, "MPI_Iallreduce");
      core_->wait_request(request, op, "MPI_Iallreduce");
      done += static_cast<std::size_t>(count);
    }
    if (memory.host == nullptr) manager().upload(buffer, copy);
  }

  std::shared_ptr<detail::Core> core_;
  std::unique_ptr<detail::Reducer> reducer_;
  std::shared_ptr<detail::Packer> packer_;  // HaloExchange's pack kernel (shared with each)
};

/// A box of a field (a face, edge or corner of the local block): `size` elements (x per row,
/// y rows, z slices) from `origin` of a field laid out as `field`, x fastest: row pitch field.x
/// elements, slice pitch field.x * field.y. A 2-D field has field.z = 1 (and size.z = 1), a
/// padded field a field.x past its last used column. The field must hold at least
/// field.x * field.y * field.z elements.
struct Box {
  Offset origin;  ///< The box's first element (column, row, slice of the field).
  Extents size;   ///< The box's extents in elements.
  Extents field;  ///< The field's layout (its pitches in elements).
};

/// One neighbour of a HaloExchange: `count` elements at `send_offset` of the field go to `rank`
/// with `send_tag`; `count` elements from it, sent with `recv_tag`, land at `recv_offset`.
/// Either direction may be a strided Box of the field instead (`send_box`, `recv_box`): then it
/// is packed into (or unpacked from) a contiguous buffer on the device, and `count` and that
/// direction's offset are not used. `rank` may be MPI_PROC_NULL (a boundary: nothing moves).
struct Neighbour {
  int rank = MPI_PROC_NULL;     ///< The neighbour's rank, or MPI_PROC_NULL.
  std::size_t send_offset = 0;  ///< First element (of the field) sent to it.
  std::size_t recv_offset = 0;  ///< First element (of the field) its data lands at.
  std::size_t count = 0;        ///< Elements each way.
  int send_tag = 0;             ///< Tag of the message sent to it.
  int recv_tag = 0;             ///< Tag of the message expected from it.
  /// When set, the box of the field sent to it (packed on the device) instead of `count`
  /// elements at `send_offset`.
  std::optional<Box> send_box = std::nullopt;
  /// When set, the box of the field its data lands in (unpacked on the device) instead of
  /// `count` elements at `recv_offset`; its message must hold exactly the box's elements.
  std::optional<Box> recv_box = std::nullopt;
};

/// The HaloExchange plan of the local block of a grid decomposed over `cart`, a Cartesian
/// communicator of 1, 2 or 3 dimensions (MPI_Cart_create): dimension 0 of the communicator is
/// x, 1 is y, 2 is z. The local field holds the block's `interior` (nx, ny, nz; 1 along the axes
/// the communicator lacks) with `halo` ghost cells on both sides of every decomposed axis: a
/// 3-D field of (nx + 2h) * (ny + 2h) * (nz + 2h) elements, x fastest, the interior at
/// (h, h, h); in 2-D (nx + 2h) * (ny + 2h), interior at (h, h). One Neighbour per face (2 per
/// dimension), and with `edges_and_corners` one per edge and corner too (8 in 2-D, 26 in 3-D),
/// so that the ghost cells of a stencil with diagonal terms are filled; without it the ghost
/// cells beyond edges and corners are not touched. Each sends its interior cells next to that
/// face (a Box) and receives into the ghost cells on it. Neighbours follow the communicator's
/// periods: across a periodic boundary the grid wraps (with 1 or 2 ranks along a dimension both
/// neighbours may be the same rank, or this rank itself); across a closed one the neighbour is
/// MPI_PROC_NULL and its ghost cells are left as they are. The message sent toward direction
/// (dx, dy, dz) carries tag `first_tag` + (dx + 1) + 3 (dy + 1) + 9 (dz + 1), so the messages
/// between two ranks are never confused. The HaloExchange's Communicator must be made on `cart`
/// (or a communicator with the same ranks). Not collective; wraps MPI_Topo_test,
/// MPI_Cart_get, MPI_Cart_rank.
/// @throws Error CL_INVALID_VALUE for a communicator without a Cartesian topology or of more
///         than 3 dimensions, a halo of 0, an interior narrower than the halo along a
///         decomposed axis or wider than 1 along another, a negative `first_tag`; an MPI call's
///         failure.
inline std::vector<Neighbour> cartesian_faces(MPI_Comm cart, const Extents& interior,
                                              std::size_t halo, bool edges_and_corners = false,
                                              int first_tag = 0) {
  return clbuf::detail::guard_host_memory("cartesian_faces", [&] {
    const char* op = "cartesian_faces";
    const detail::CartesianGrid grid = detail::cartesian_grid(op, cart);
    const std::size_t n[3] = {interior.x, interior.y, interior.z};
    if (halo == 0) clbuf::detail::fail(op, CL_INVALID_VALUE, "the halo width is 0");
    if (first_tag < 0) {
      clbuf::detail::fail(op, CL_INVALID_VALUE,
                          "first_tag " + std::to_string(first_tag) + " is negative");
    }
    for (int d = 0; d < 3; ++d) {
      const char axis = "xyz"[d];
      if (d < grid.ndims && n[d] < halo) {
        clbuf::detail::fail(op, CL_INVALID_VALUE,
                            std::string("interior of ") + clbuf::detail::describe(interior) +
                                " elements is narrower than the halo of " + std::to_string(halo) +
                                " along " + axis);
      }
      if (d >= grid.ndims && n[d] != 1) {
        clbuf::detail::fail(op, CL_INVALID_VALUE,
                            std::string("interior of ") + clbuf::detail::describe(interior) +
                                " elements on a communicator of " + std::to_string(grid.ndims) +
                                " dimensions: its extent along " + axis + " must be 1");
      }
    }
    std::size_t whole[3] = {1, 1, 1};
    for (int d = 0; d < grid.ndims; ++d) {
      if (halo > SIZE_MAX / 4 || n[d] > SIZE_MAX - 2 * halo) {
        clbuf::detail::fail(op, CL_INVALID_VALUE, "the field's extents overflow size_t");
      }
      whole[d] = n[d] + 2 * halo;
    }
    const Extents field{whole[0], whole[1], whole[2]};
    std::vector<Neighbour> plan;
    const int last[3] = {1, grid.ndims > 1 ? 1 : 0, grid.ndims > 2 ? 1 : 0};
    for (int z = -last[2]; z <= last[2]; ++z) {
      for (int y = -last[1]; y <= last[1]; ++y) {
        for (int x = -last[0]; x <= last[0]; ++x) {
          const int step[3] = {x, y, z};
          const int moves = (x != 0) + (y != 0) + (z != 0);
          if (moves == 0 || (moves > 1 && !edges_and_corners)) continue;
          const int back[3] = {-x, -y, -z};
          Neighbour neighbour;
          neighbour.rank = detail::cartesian_neighbour(op, cart, grid, step);
          neighbour.send_tag = first_tag + detail::direction_code(step);
          neighbour.recv_tag = first_tag + detail::direction_code(back);
          Box send{Offset{}, Extents{}, field};
          Box recv{Offset{}, Extents{}, field};
          std::size_t* send_origin[3] = {&send.origin.x, &send.origin.y, &send.origin.z};
          std::size_t* send_size[3] = {&send.size.x, &send.size.y, &send.size.z};
          std::size_t* recv_origin[3] = {&recv.origin.x, &recv.origin.y, &recv.origin.z};
          std::size_t* recv_size[3] = {&recv.size.x, &recv.size.y, &recv.size.z};
          for (int d = 0; d < grid.ndims; ++d) {
            detail::halo_span(step[d], n[d], halo, true, *send_origin[d], *send_size[d]);
            detail::halo_span(step[d], n[d], halo, false, *recv_origin[d], *recv_size[d]);
          }
          neighbour.send_box = send;
          neighbour.recv_box = recv;
          plan.push_back(neighbour);
        }
      }
    }
    return plan;
  });
}

/// A persistent halo exchange of one field, by a plan of Neighbours (or cartesian_faces()).
/// start() enqueues on the manager's queue a rect copy (clEnqueueCopyBufferRect) of every box
/// sent into a contiguous pack buffer, then posts every receive and every send; a box received
/// lands in a contiguous unpack buffer and is copied into the field on the device as soon as
/// finish() or test() sees its message complete. Pack and unpack buffers are allocated once,
/// by the constructor, and reused by every exchange. Contiguous ranges (no box) are sent from
/// and received into the field itself, as before. On a discrete device a box of at most
/// Options::halo_direct_max_bytes goes straight instead: start() enqueues its rect read into
/// pinned memory of the exchange's own (sent from there once the read has completed, by
/// start(), test() or finish()), and a box received into such memory is written into the field
/// by one rect write: two device commands a box instead of four.
///
/// Overlap: between start() and finish() the application may enqueue kernels on
/// manager.queue() that read and write the interior: the queue is in order, so the boxes sent
/// were packed before those kernels run (they may even change the cells sent), and the unpacks
/// run after them. The ghost cells (the boxes and ranges received) must not be used, and the
/// contiguous ranges sent not changed, until finish(). finish() returns when every message has
/// completed and the field holds every ghost cell.
template <class T>
class HaloExchange final : private detail::Deferred {
 public:
  /// Checks the plan and allocates a pack buffer for every box sent and an unpack buffer for
  /// every box received (none for MPI_PROC_NULL).
  /// @throws Error CL_INVALID_VALUE for a rank or tag out of range, or a box that leaves its
  ///         field's extents along an axis (naming the neighbour, the box and the field); as
  ///         BufferManager::allocate().
  HaloExchange(Communicator& communicator, std::vector<Neighbour> plan) try
      : core_(communicator.core_), packer_(communicator.packer_), plan_(std::move(plan)) {
    const char* op = "HaloExchange";
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      const Neighbour& n = plan_[i];
      communicator.check_rank(op, "neighbour", n.rank, false);
      communicator.check_tag(op, n.send_tag, false);
      communicator.check_tag(op, n.recv_tag, false);
      check_boxes(op, i, SIZE_MAX);
    }
    packs_.resize(plan_.size());
    unpacks_.resize(plan_.size());
    straight_sends_.resize(plan_.size());
    straight_recvs_.resize(plan_.size());
    packed_.resize(plan_.size());
    // Each start() sizes these within this capacity, so that it allocates none of them: a
    // start() that fails still completes its messages (see there), which needs them.
    reads_.reserve(plan_.size());
    sends_.reserve(plan_.size());
    receives_.reserve(plan_.size());
    landed_.reserve(plan_.size());
    unposted_.reserve(plan_.size());
    BufferManager& manager = core_->manager();
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      const Neighbour& n = plan_[i];
      if (n.rank == MPI_PROC_NULL) continue;
      if (n.send_box) {
        packs_[i] = manager.allocate<T>(elements(*n.send_box));
        if (may_go_straight(*n.send_box)) {
          straight_sends_[i] = manager.allocate_pinned<T>(elements(*n.send_box));
        }
      }
      if (n.recv_box) {
        unpacks_[i] = manager.allocate<T>(elements(*n.recv_box));
        if (may_go_straight(*n.recv_box)) {
          straight_recvs_[i] = manager.allocate_pinned<T>(elements(*n.recv_box));
        }
      }
    }
  } catch (...) {
    clbuf::detail::rethrow_host_memory("HaloExchange");
  }

  HaloExchange(const HaloExchange&) = delete;
  HaloExchange& operator=(const HaloExchange&) = delete;
  /// Takes over `other`'s plan, buffers and any exchange in flight; `other` may then only be
  /// destroyed (its start() is CL_INVALID_OPERATION).
  HaloExchange(HaloExchange&& other) noexcept
      : core_(std::move(other.core_)),
        packer_(std::move(other.packer_)),
        plan_(std::move(other.plan_)),
        packs_(std::move(other.packs_)),
        unpacks_(std::move(other.unpacks_)),
        straight_sends_(std::move(other.straight_sends_)),
        straight_recvs_(std::move(other.straight_recvs_)),
        field_(std::move(other.field_)),
        copies_(std::move(other.copies_)),
        kernels_(std::move(other.kernels_)),
        reads_(std::move(other.reads_)),
        packed_(std::move(other.packed_)),
        receives_(std::move(other.receives_)),
        sends_(std::move(other.sends_)),
        landed_(std::move(other.landed_)),
        unposted_(std::move(other.unposted_)),
        straight_(other.straight_),
        kernel_may_(other.kernel_may_),
        running_(std::exchange(other.running_, false)),
        unpack_(other.unpack_),
        deferred_failure_(std::move(other.deferred_failure_)) {
    if (core_) core_->redefer(&other, this);
  }

  /// Waits for an exchange still in flight (errors ignored).
  ~HaloExchange() {
    try {
      finish();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }

  /// Starts the exchange on `field`: packs every box sent (device copies on the manager's
  /// queue), then posts every receive and every send, and returns. `field` must stay alive
  /// until finish(); see the class comment for what may run meanwhile.
  /// @throws Error CL_INVALID_VALUE for ranges past the end of `field` or a box whose field
  ///         holds more elements than `field` (naming the neighbour and both sizes; nothing is
  ///         enqueued or sent), CL_INVALID_OPERATION when the last exchange has not finished.
  void start(DeviceBuffer<T>& field) {
    clbuf::detail::guard_host_memory("HaloExchange::start", [&] {
      const char* op = "HaloExchange::start";
      if (running_) {
        clbuf::detail::fail(op, CL_INVALID_OPERATION, "the last exchange has not finished");
      }
      bool host_reads = false;  // only contiguous ranges reach the field through the host
      bool host_writes = false;
      for (const Neighbour& n : plan_) {
        host_reads = host_reads || !n.send_box;
        host_writes = host_writes || !n.recv_box;
      }
      if (!core_) {
        clbuf::detail::fail(op, CL_INVALID_OPERATION, "this HaloExchange was moved from");
      }
      clbuf::detail::check_buffer(op, field.valid(), field.context(), core_->context());
      clbuf::detail::check_host_access(op, clbuf::detail::BufferAccess::access(field), host_reads,
                                       host_writes);
      for (std::size_t i = 0; i < plan_.size(); ++i) {
        const Neighbour& n = plan_[i];
        if (!n.send_box) {
          clbuf::detail::check_range(op, "read", n.count, n.send_offset, field.size(), sizeof(T));
        }
        if (!n.recv_box) {
          clbuf::detail::check_range(op, "write", n.count, n.recv_offset, field.size(), sizeof(T));
        }
        check_boxes(op, i, field.size());
      }
      BufferManager& manager = core_->manager();
      running_ = true;
      unpack_ = true;
      // A box goes straight (read into the exchange's pinned memory, written from it) where the
      // host may read and write the field; else through the pack and unpack buffers.
      const cl_mem_flags access = clbuf::detail::BufferAccess::access(field);
      straight_ = clbuf::detail::host_access_bits(access) == 0;
      // A kernel may only read and write a field made CL_MEM_READ_WRITE (copies may do both to
      // any buffer): a field made read-only or write-only for kernels is packed by rect copies.
      kernel_may_ = clbuf::detail::kernel_access_bits(access) == 0;
      // Within the capacity the constructor reserved: no allocation (see the catch below).
      reads_.clear();
      reads_.resize(plan_.size());
      sends_.clear();
      sends_.resize(plan_.size());
      unposted_.assign(plan_.size(), 0);
      for (std::size_t i = 0; i < plan_.size(); ++i) {
        if (plan_[i].rank != MPI_PROC_NULL) unposted_[i] = 1;  // posted by post_sends()
        packed_[i] = cl::Event();
      }
      try {
        field_ = manager.view(field, 0, field.size());
        // Packed (or read) before the sends are posted: a send reads its pack buffer through the
        // host (the queue finished, mapped, or read into pinned chunks), behind these copies on the
        // queue; a box read straight is sent once its read has completed (post_sends()).
        for (std::size_t i = 0; i < plan_.size(); ++i) {
          const Neighbour& n = plan_[i];
          if (n.rank == MPI_PROC_NULL || !n.send_box) continue;
          const Box& box = *n.send_box;
          const Region region = detail::pack_region(box.origin, box.size, box.field);
          if (straight_ && !straight_sends_[i].empty()) {
            reads_[i] = manager.download_rect_async(field_, straight_sends_[i].data(),
                                                    straight_sends_[i].size(), region);
          } else if (by_kernel(box)) {
            kernels_.push_back(packer_->copy(op, core_->queue(), field_.native_root()(),
                                             field_.native_offset_bytes(),
                                             packs_[i].native_root()(), 0, region, sizeof(T)));
            packed_[i] = kernels_.back();
          } else {
            copies_.push_back(manager.copy_rect_async(field_, packs_[i], region));
            packed_[i] = copies_.back().event();
          }
        }
        detail::Core& core = *core_;
        // A receive into the field waits for the work queued before start() (one marker), not for
        // the interior kernels queued after it, as clFinish would on a CPU device; a receive into
        // an unpack buffer waits for nothing (the last finish() waited for its unpack copy).
        cl::Event before;
        const cl::Event nothing;
        const bool host_block = Communicator::span_of(field_, 0, 0).host != nullptr;
        for (const Neighbour& n : plan_) {
          if (host_block && n.rank != MPI_PROC_NULL && !n.recv_box && before() == nullptr) {
            before = core.queue().marker(op);
            core.queue().flush(op);
          }
        }
        while (receives_.size() < plan_.size()) post_receive(receives_.size(), &before, field_);
        post_sends(false);
      } catch (...) {
        // The plan is still completed, so that no neighbour waits for this rank: the receives not
        // posted yet are posted (each as it can be; into the field after clFinish), every send not
        // posted goes as a notice that this rank failed (the neighbour's exchange then fails
        // too); then all is waited for.
        const std::exception_ptr failure = std::current_exception();
        unpack_ =
            false;  // the boxes that arrive are not unpacked: a failed start() leaves the field
        while (receives_.size() < plan_.size()) {
          try {
            post_receive(receives_.size(), nullptr, field);  // field_ may not have been made
          } catch (...) {
            receives_.emplace_back();  // reserved: given up on, this receive is never posted
            landed_.push_back(true);
          }
        }
        // Earlier exchanges' sends held back for their reads go first: a notice with their tags
        // must not overtake them (the neighbour would take it for their box, and this exchange's
        // message for the earlier one's).
        core_->post_deferred(this);
        for (std::size_t i = 0; i < plan_.size(); ++i) {
          if (unposted_[i]) send_notice(i);  // post_sends() clears each as it posts it
        }
        try {
          finish();
        } catch (...) {  // NOLINT(bugprone-empty-catch): the first failure is the one reported
        }
        std::rethrow_exception(failure);
      }
    });
  }

  /// Moves the exchange on, unpacking every box whose message has arrived; true once it has
  /// completed (the field holds the ghost cells), or when none is in flight.
  /// @throws Error as finish() (call finish() afterwards to wait for the rest).
  bool test() {
    return clbuf::detail::guard_host_memory("HaloExchange::test", [&] {
      if (!running_) return true;
      post_sends(false);
      bool all = true;
      for (std::size_t i = 0; i < receives_.size(); ++i) all = arrived(i, false) && all;
      for (Request& request : sends_) all = request.test() && all;
      for (const char unposted : unposted_) all = all && !unposted;
      if (!all) return false;
      for (const Future<void>& copy : copies_) {
        if (!copy.ready()) return false;
      }
      // A kernel still queued or running; a failed query or command counts as ended (finish()
      // reports it).
      const auto running = [](const cl::Event& kernel) {
        return clbuf::detail::event_status(kernel()).running();
      };
      if (std::any_of(kernels_.begin(), kernels_.end(), running)) return false;
      finish();
      return true;
    });
  }

  /// Waits for every message of the exchange and for the unpacks: on return the field holds
  /// the ghost cells.
  /// @throws Error as Request::wait(), or an OpenCL failure of a pack or unpack (the first
  ///         failure; all are waited for).
  void finish() {
    clbuf::detail::guard_host_memory("HaloExchange::finish", [&] {
      if (!running_) return;
      std::exception_ptr first;
      const auto attempt = [&first](auto&& step) {
        try {
          step();
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      };
      // The boxes read straight are sent first (a neighbour's finish() may be waiting for them),
      // then whatever has arrived is unpacked, so that those copies run while the rest arrive.
      attempt([&] { post_sends(true); });
      if (deferred_failure_)
        attempt([&] { std::rethrow_exception(std::exchange(deferred_failure_, nullptr)); });
      for (std::size_t i = 0; i < receives_.size(); ++i) attempt([&] { arrived(i, false); });
      for (std::size_t i = 0; i < receives_.size(); ++i) attempt([&] { arrived(i, true); });
      for (Request& request : sends_) attempt([&] { request.wait(); });
      for (const Future<void>& copy : copies_) attempt([&] { copy.wait(); });
      for (const cl::Event& kernel : kernels_) attempt([&] { wait_for_kernel(kernel); });
      receives_.clear();
      sends_.clear();
      copies_.clear();
      kernels_.clear();
      reads_.clear();
      landed_.clear();
      unposted_.clear();
      field_ = DeviceBuffer<T>();
      running_ = false;
      if (first) std::rethrow_exception(first);
    });
  }

 private:
  static std::size_t elements(const Box& box) noexcept {
    return box.size.x * box.size.y * box.size.z;  // within the checked field
  }

  /// Whether `box` is packed (or unpacked) by the Communicator's kernel rather than a rect copy:
  /// rows of at most Options::halo_kernel_max_row_bytes, at least halo_kernel_min_rows of them
  /// and two, a field kernels may read and write, and a device that builds the kernel (asked on
  /// first use).
  bool by_kernel(const Box& box) const {
    const Options& options = core_->options();
    const std::size_t rows = box.size.y * box.size.z;
    return kernel_may_ && box.size.x * sizeof(T) <= options.halo_kernel_max_row_bytes &&
           rows >= std::max<std::size_t>(options.halo_kernel_min_rows, 2) &&
           packer_->ready(core_->queue());
  }

  /// Waits for a pack or unpack by the kernel; throws its failure.
  static void wait_for_kernel(const cl::Event& kernel) {
    // The command's own failure first, else the wait's or the query's.
    clbuf::detail::check(clbuf::detail::wait_for_event(kernel()).error(), "HaloExchange::finish",
                         "the pack kernel of a halo box (clEnqueueNDRangeKernel)");
  }

  /// Neighbour i's box received in this exchange lands in the exchange's pinned memory.
  bool received_straight(std::size_t i) const noexcept {
    return straight_ && !straight_recvs_[i].empty();
  }

  /// Posts neighbour i's receive (into `field`, its unpack buffer or its pinned memory); one
  /// into the field waits for `before` (see start(); nullptr: clFinish).
  void post_receive(std::size_t i, const cl::Event* before, const DeviceBuffer<T>& field) {
    const Neighbour& n = plan_[i];
    detail::Core& core = *core_;
    const cl::Event nothing;
    detail::Span span = !n.recv_box ? Communicator::span_of(field, n.recv_offset, n.count)
                        : n.rank == MPI_PROC_NULL ? detail::Span()
                        : received_straight(i)    ? host_span(straight_recvs_[i])
                                                  : Communicator::span_of(unpacks_[i]);
    receives_.push_back(Communicator::start_on(
        core_, std::make_shared<detail::RecvStream>(
                   core, "HaloExchange::start", std::move(span), n.rank, n.recv_tag, core.user(),
                   detail::Kind::point_to_point, n.recv_box ? &nothing : before)));
    landed_.push_back(false);
  }

  /// In place of neighbour i's send, which could not be started: detail::send_notice(), which
  /// tells the neighbour's receive that this rank failed (it fails instead of waiting).
  void send_notice(std::size_t i) noexcept {
    unposted_[i] = 0;
    detail::send_notice(*core_, plan_[i].rank, plan_[i].send_tag, core_->user());
  }

  /// Whether `box` may go straight between the field and pinned memory of the exchange's own:
  /// the staged path (a discrete device), up to Options::halo_direct_max_bytes.
  bool may_go_straight(const Box& box) const {
    detail::Core& core = *core_;
    const std::size_t bytes = elements(box) * sizeof(T);
    if (bytes == 0 || bytes > core.options().halo_direct_max_bytes) return false;
    detail::Span device;  // a buffer of the manager's, and host memory: their routes
    device.bytes = bytes;
    detail::Span host = device;
    host.host = reinterpret_cast<char*>(&host);  // any host pointer: only the route is asked
    return core.route(device) == detail::Route::staged &&
           core.route(host) == detail::Route::zero_copy;
  }

  /// A message of the pinned memory `box`, sent or received by MPI on the host (zero copy).
  static detail::Span host_span(PinnedBuffer<T>& box) {
    detail::Span span;
    span.host = reinterpret_cast<char*>(box.data());
    span.bytes = box.size() * sizeof(T);
    span.count = box.size();
    span.element_size = static_cast<std::uint32_t>(sizeof(T));
    span.type = detail::type_code<T>();
    return span;
  }

  /// Posts the sends not posted yet, in plan order: a box read straight once its read has
  /// completed (`block`: waits for each read), from the pinned memory with no further device
  /// command; the others at once (they follow their packs on the queue). MPI matches the
  /// messages of one rank and tag in the order sent, so a send waits for the earlier sends of
  /// the plan to its rank with its tag. A send that cannot go (its read failed, or the send
  /// failed before it posted) goes as a notice (the neighbour's exchange fails instead of
  /// waiting, or of taking a box never read), and the first failure is rethrown afterwards.
  void post_sends(bool block) {
    detail::Core& core = *core_;
    core.post_deferred(this);  // earlier exchanges' deferred sends first
    const detail::Core::Posting posting(core);
    const cl::Event nothing;
    std::exception_ptr first;
    bool deferred = false;
    for (std::size_t i = 0; i < unposted_.size(); ++i) {
      if (!unposted_[i]) continue;
      const Neighbour& n = plan_[i];
      const auto same_message = [&n](const Neighbour& earlier) {
        return earlier.rank == n.rank && earlier.send_tag == n.send_tag;
      };
      bool behind = false;
      for (std::size_t j = 0; j < i && !behind; ++j) {
        behind = unposted_[j] && same_message(plan_[j]);
      }
      deferred = deferred || behind;
      if (behind) continue;
      const bool straight = straight_ && !straight_sends_[i].empty();
      if (straight) {
        try {
          if (!block && !reads_[i].ready()) {
            deferred = true;
            continue;
          }
          reads_[i].wait();
        } catch (...) {
          if (!first) first = std::current_exception();
          send_notice(i);
          continue;
        }
      }
      unposted_[i] = 0;
      try {
        detail::Span span = straight     ? host_span(straight_sends_[i])
                            : n.send_box ? Communicator::span_of(packs_[i])
                                         : Communicator::span_of(field_, n.send_offset, n.count);
        sends_[i] = Communicator::start_on(
            core_, detail::make_send(core, "HaloExchange::start", std::move(span), n.rank,
                                     n.send_tag, core.user(), detail::Kind::point_to_point,
                                     straight ? &nothing : nullptr,
                                     packed_[i]() != nullptr ? &packed_[i] : nullptr));
      } catch (...) {  // make_send() has sent the notice where nothing was posted
        if (!first) first = std::current_exception();
      }
    }
    if (!deferred) {
      core.undefer(this);
    } else {
      try {
        core.defer(this);
      } catch (...) {  // no room to keep the record: post them now instead
        post_deferred();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  /// Core::post_deferred(): another send is about to be posted; this exchange's come first.
  void post_deferred() noexcept override { post_recording(true); }
  /// Core::progress(): the rank waits in some call; the sends whose reads are done leave.
  void poll_deferred() noexcept override { post_recording(false); }

  /// post_sends(), its failure kept for finish() (the caller is another call).
  void post_recording(bool block) noexcept {
    try {
      post_sends(block);
    } catch (...) {
      if (!deferred_failure_) deferred_failure_ = std::current_exception();
    }
  }

  /// Neighbour i's boxes lie inside their fields' extents, and those fields within `capacity`
  /// elements (SIZE_MAX at construction, when the field is not known yet).
  void check_boxes(const char* op, std::size_t i, std::size_t capacity) const {
    const Neighbour& n = plan_[i];
    if (n.send_box) {
      clbuf::detail::rect_side(op, detail::halo_part(i, n.rank, "send box").c_str(),
                               n.send_box->size, n.send_box->origin, n.send_box->field, capacity,
                               sizeof(T));
    }
    if (n.recv_box) {
      clbuf::detail::rect_side(op, detail::halo_part(i, n.rank, "receive box").c_str(),
                               n.recv_box->size, n.recv_box->origin, n.recv_box->field, capacity,
                               sizeof(T));
    }
  }

  /// Moves receive i on (or, `block`, waits for it); once it has completed, enqueues the
  /// unpack of its box into the field. True once it has completed.
  bool arrived(std::size_t i, bool block) {
    if (landed_[i]) return true;
    bool done = true;
    try {
      if (block) {
        receives_[i].wait();
      } else {
        done = receives_[i].test();
      }
    } catch (...) {
      landed_[i] = true;  // failed: nothing to unpack
      throw;
    }
    if (!done) return false;
    landed_[i] = true;
    const Neighbour& n = plan_[i];
    if (unpack_ && n.rank != MPI_PROC_NULL && n.recv_box) {
      const Box& box = *n.recv_box;
      const Region region = detail::unpack_region(box.origin, box.size, box.field);
      BufferManager& manager = core_->manager();
      if (received_straight(i)) {
        copies_.push_back(manager.upload_rect_async(field_, straight_recvs_[i].data(),
                                                    straight_recvs_[i].size(), region));
      } else if (by_kernel(box)) {
        kernels_.push_back(packer_->copy("HaloExchange::finish", core_->queue(),
                                         unpacks_[i].native_root()(), 0, field_.native_root()(),
                                         field_.native_offset_bytes(), region, sizeof(T)));
      } else {
        copies_.push_back(manager.copy_rect_async(unpacks_[i], field_, region));
      }
    }
    return true;
  }

  // Shared with the Communicator (as a Request shares its core): an exchange in flight may
  // outlive the Communicator, or see it moved.
  std::shared_ptr<detail::Core> core_;
  std::shared_ptr<detail::Packer> packer_;
  std::vector<Neighbour> plan_;
  std::vector<DeviceBuffer<T>> packs_;    // per neighbour: its send box, contiguous
  std::vector<DeviceBuffer<T>> unpacks_;  // per neighbour: its receive box, contiguous
  // Per neighbour, boxes that may go straight (may_go_straight()): pinned host memory the box is
  // read into at start() and sent from, or received into and written from; else empty.
  std::vector<PinnedBuffer<T>> straight_sends_;
  std::vector<PinnedBuffer<T>> straight_recvs_;
  DeviceBuffer<T> field_;  // a view of the field of the exchange in flight
  // Destroyed before the buffers above: each waits for its transfer or copy.
  std::vector<Future<void>> copies_;  // packs, then unpacks (device copies or straight writes)
  std::vector<cl::Event> kernels_;    // packs, then unpacks, by the pack kernel (by_kernel())
  std::vector<Future<void>> reads_;   // per neighbour: its box read straight, if it is
  std::vector<cl::Event> packed_;     // per neighbour: its box's pack (kernel or copy), if any
  std::vector<Request> receives_;     // per neighbour
  std::vector<Request> sends_;        // per neighbour (empty until posted)
  std::vector<bool> landed_;          // receive i has completed (and its unpack is enqueued)
  std::vector<char> unposted_;        // per neighbour: read straight, its send not yet posted
  bool straight_ = false;    // the field in flight lets boxes go straight (the host may access it)
  bool kernel_may_ = false;  // kernels may read and write the field in flight (CL_MEM_READ_WRITE)
  bool running_ = false;
  bool unpack_ = true;  // false while a failed start() completes the plan (nothing unpacked)
  std::exception_ptr deferred_failure_;  // of sends another send had posted (post_deferred())
};

}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_MPI_HPP
