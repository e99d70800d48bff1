// SPDX-License-Identifier: MIT
// clbuf::mpi::Communicator: one BufferManager bound to a duplicated MPI communicator, with typed
// point-to-point messages (blocking, non-blocking, persistent) and collectives of DeviceBuffers.
// It checks the typed arguments and hands the buffers' bytes (detail::Span) to the protocol in
// detail/mpi/.
#ifndef CLBUF_MPI_COMMUNICATOR_HPP
#define CLBUF_MPI_COMMUNICATOR_HPP

#include <mpi.h>
#include <clbuf/buffer.hpp>
#include <clbuf/detail/buffer_access.hpp>
#include <clbuf/detail/checks.hpp>
#include <clbuf/detail/mpi/collective.hpp>
#include <clbuf/detail/mpi/core.hpp>
#include <clbuf/detail/mpi/eager.hpp>
#include <clbuf/detail/mpi/pack.hpp>
#include <clbuf/detail/mpi/reduce.hpp>
#include <clbuf/detail/mpi/streams.hpp>
#include <clbuf/detail/mpi/wire.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/mpi/options.hpp>
#include <clbuf/mpi/requests.hpp>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {

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
  /// Staging chunks held now (chunk_bytes each, at most 2 x depth a direction, leased from the
  /// manager's pinned pool, which keeps them for reuse when they come back: its
  /// TransferStats::pinned, within Options::pinned_budget_bytes; host memory of clbuf's when
  /// that budget holds no more).
  std::size_t pinned_bytes() const noexcept { return core_->pinned_bytes(); }
  /// The most bytes of staging chunks ever held at once (see pinned_bytes()).
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
      agree_after<T>(
          op,
          [&] {
            check_buffer(op, buffer, rank() == root, rank() != root);
            check_rank(op, "root", root, false, false);
          },
          buffer.size(), root, -1);
      if (core_->whole()) {
        on_host(
            op, buffer, rank() == root, rank() != root, [&](T* data, int count, MPI_Datatype type) {
              detail::check_mpi(MPI_Bcast(data, count, type, root, core_->coll()), op, "MPI_Bcast");
            });
        return;
      }
      broadcast_tree(op, span_of(buffer), root);
    });
  }

  /// Reduces `buffer` element-wise over all ranks (sum, min or max), the result on every rank.
  /// From Options::device_reduce_bytes the reduction runs on the device (a ring of
  /// reduce-scatter then allgather, an OpenCL kernel per step); below, MPI_Allreduce on host
  /// memory (the buffer's own on a CPU device). Floating-point sums may differ in the last bits
  /// from a sum in another order, but every rank gets the same bits.
  template <class T>
  void allreduce(DeviceBuffer<T>& buffer, Op reduction = Op::sum) {
    static_assert(
        detail::type_code<T>() >= detail::int8 && detail::type_code<T>() <= detail::float64,
        "clbuf::mpi::allreduce needs an arithmetic T of 8 to 64 bits (not bool)");
    clbuf::detail::guard_host_memory("allreduce", [&] {
      const char* op = "allreduce";
      DeviceBuffer<T> incoming;  // the device ring's receiving buffer (reduce_on_device())
      const bool on_device = !core_->whole() && size() > 1 && !buffer.empty() &&
                             buffer.size_bytes() >= options().device_reduce_bytes;
      agree_after<T>(
          op,
          [&] {
            check_buffer(op, buffer, true, true);
            // Had before the agreement: a rank that cannot get it rejects the call there, on
            // every rank, instead of leaving the ring (its neighbours would wait for it for ever).
            if (on_device) {
              incoming =
                  manager().allocate<T>(buffer.size() / static_cast<std::size_t>(size()) + 1);
            }
          },
          buffer.size(), -1, static_cast<long long>(reduction));
      if (core_->whole()) {  // MPI_Allreduce as a plain peer calls it, even of no element
        on_host(op, buffer, true, true, [&](T* data, int count, MPI_Datatype mpi_type) {
          detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, count, mpi_type,
                                          detail::mpi_op(reduction), core_->coll()),
                            op, "MPI_Allreduce");
        });
      } else if (on_device) {
        reduce_on_device(op, buffer, incoming, reduction);
      } else if (size() > 1 && !buffer.empty()) {
        reduce_on_host(op, buffer, detail::type_code<T>(), reduction);
      }
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
    static_assert(
        detail::type_code<T>() >= detail::int8 && detail::type_code<T>() <= detail::float64,
        "clbuf::mpi::iallreduce needs an arithmetic T of 8 to 64 bits (not bool)");
    return clbuf::detail::guard_host_memory(
        "iallreduce", [&] { return start_collective("iallreduce", buffer, true, -1, reduction); });
  }

  /// Rank i receives elements [i * mine.size(), (i + 1) * mine.size()) of the root's `all`;
  /// `all` is read on the root only and must hold mine.size() * size() elements there.
  template <class T>
  void scatter(const DeviceBuffer<T>& all, DeviceBuffer<T>& mine, int root) {
    clbuf::detail::guard_host_memory("scatter",
                                     [&] { scatter_gather<true, T>("scatter", all, mine, root); });
  }

  /// The reverse of scatter(): `all` on the root receives every rank's `mine` in rank order.
  template <class T>
  void gather(const DeviceBuffer<T>& mine, DeviceBuffer<T>& all, int root) {
    clbuf::detail::guard_host_memory("gather",
                                     [&] { scatter_gather<false, T>("gather", all, mine, root); });
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

  /// Runs this rank's `checks` of its arguments, then agree(): a rank whose checks throw rejects
  /// the call on every rank.
  template <class T, class Checks>
  void agree_after(const char* op, Checks&& checks, std::size_t count, long long root,
                   long long reduction) {
    std::exception_ptr local;
    try {
      checks();
    } catch (...) {
      local = std::current_exception();
    }
    agree<T>(op, local, count, root, reduction);
  }

  /// A message of a collective, sent to (`send`) or received from `peer` on the collectives'
  /// communicator; tracked, so that every wait moves it on.
  std::shared_ptr<detail::Transfer> collective_message(const char* op, detail::Span span, int peer,
                                                       bool send) {
    std::shared_ptr<detail::Transfer> message;
    if (send) {
      message = detail::make_send(*core_, op, std::move(span), peer, 0, core_->coll(),
                                  detail::Kind::collective);
    } else {
      message = std::make_shared<detail::RecvStream>(*core_, op, std::move(span), peer, 0,
                                                     core_->coll(), detail::Kind::collective);
    }
    return track(std::move(message));
  }

  /// broadcast()'s binomial tree: this rank's part of the buffer arrives from its parent (the
  /// root has none), then goes to each of its children.
  void broadcast_tree(const char* op, const detail::Span& span, int root) {
    const int p = size();
    const int relative = (rank() - root + p) % p;
    int mask = 1;
    while (mask < p) {
      if (relative & mask) {
        const std::shared_ptr<detail::Transfer> from_parent =
            collective_message(op, span, (relative - mask + root) % p, false);
        core_->wait(*from_parent);
        break;
      }
      mask <<= 1;
    }
    std::vector<std::shared_ptr<detail::Transfer>> sends;
    sends.reserve(32);  // a rank of a binomial tree sends at most log2(p) < 32 times
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (relative + mask < p) {
        sends.push_back(collective_message(op, span, (relative + mask + root) % p, true));
      }
    }
    core_->wait_all(sends);
  }

  /// allreduce() on the device: a ring of reduce-scatter (each step receives a part into
  /// `incoming` and reduces it into `buffer` with the Communicator's kernel), then allgather.
  template <class T>
  void reduce_on_device(const char* op, DeviceBuffer<T>& buffer, DeviceBuffer<T>& incoming,
                        Op reduction) {
    const std::size_t p = static_cast<std::size_t>(size());
    const std::size_t n = buffer.size();
    const auto start_of = [&](std::size_t i) { return i * (n / p) + std::min(i, n % p); };
    const auto length_of = [&](std::size_t i) { return n / p + (i < n % p ? 1 : 0); };
    const clbuf::detail::ChunkIo& io = core_->io();
    const std::size_t r = static_cast<std::size_t>(rank());
    const int right = static_cast<int>((r + 1) % p);
    const int left = static_cast<int>((r + p - 1) % p);
    for (std::size_t step = 0; step + 1 < p; ++step) {  // reduce-scatter
      const std::size_t out = (r + p - step) % p;
      const std::size_t in = (r + 2 * p - step - 1) % p;
      exchange(op, span_of(buffer, start_of(out), length_of(out)), right,
               span_of(incoming, 0, length_of(in)), left);
      reducer_->reduce(op, io, detail::type_code<T>(), reduction, buffer.native_root()(),
                       buffer.native_offset_bytes() / sizeof(T) + start_of(in),
                       incoming.native_root()(), length_of(in));
    }
    for (std::size_t step = 0; step + 1 < p; ++step) {  // allgather
      const std::size_t out = (r + 1 + p - step) % p;
      const std::size_t in = (r + p - step) % p;
      exchange(op, span_of(buffer, start_of(out), length_of(out)), right,
               span_of(buffer, start_of(in), length_of(in)), left);
    }
    io.finish(op);
  }

  /// The root's messages of a scatter (`send`) or gather: every other rank's part of `all`, `n`
  /// elements from the rank's number times `n`.
  template <class T>
  std::vector<std::shared_ptr<detail::Transfer>> root_messages(const char* op,
                                                               const DeviceBuffer<T>& all,
                                                               std::size_t n, int root, bool send) {
    std::vector<std::shared_ptr<detail::Transfer>> parts;
    parts.reserve(static_cast<std::size_t>(size()));
    for (int i = 0; i < size(); ++i) {
      if (i == root) continue;
      parts.push_back(
          collective_message(op, span_of(all, static_cast<std::size_t>(i) * n, n), i, send));
    }
    return parts;
  }

  /// scatter() (`Scatter`) and gather(), each the other's mirror: the root's `all` holds every
  /// rank's part in rank order, `mine` is this rank's. The root's own part is a device copy
  /// while the messages move (none where `mine` is its slot of `all`).
  template <bool Scatter, class T>
  void scatter_gather(const char* op,
                      std::conditional_t<Scatter, const DeviceBuffer<T>, DeviceBuffer<T>>& all,
                      std::conditional_t<Scatter, DeviceBuffer<T>, const DeviceBuffer<T>>& mine,
                      int root) {
    const bool is_root = rank() == root;
    agree_after<T>(
        op,
        [&] {
          check_buffer(op, mine, !Scatter && !is_root, Scatter && !is_root);
          check_rank(op, "root", root, false, false);
          if (is_root) {
            check_whole(op, all, mine.size(), Scatter, !Scatter);
            check_own_slot(op, all, mine, root);
          }
        },
        mine.size(), root, -1);
    if (core_->whole()) {
      plain_scatter_gather(op, mine, all, root, Scatter);
      return;
    }
    if (!is_root) {  // a scatter receives its part from the root, a gather sends it there
      const std::shared_ptr<detail::Transfer> part =
          collective_message(op, span_of(mine), root, !Scatter);
      core_->wait(*part);
      return;
    }
    const std::size_t n = mine.size();
    std::vector<std::shared_ptr<detail::Transfer>> parts = root_messages(op, all, n, root, Scatter);
    const std::size_t own = in_own_slot(all, mine, root) ? 0 : n;
    const std::size_t slot = static_cast<std::size_t>(root) * n;
    if constexpr (Scatter) {
      copy_own(op, all, slot, mine, 0, own, parts);
    } else {
      copy_own(op, mine, 0, all, slot, own, parts);
    }
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

  static Request start_on(const std::shared_ptr<detail::Core>& core,
                          std::shared_ptr<detail::Transfer> transfer) {
    core->track(transfer);
    return Request(core, std::move(transfer));
  }

  std::shared_ptr<detail::Transfer> track(std::shared_ptr<detail::Transfer> transfer) {
    core_->track(transfer);
    return transfer;
  }

  /// Sends `out` right and receives `in` from the left, both complete on return.
  void exchange(const char* op, detail::Span out, int right, detail::Span in, int left) {
    std::vector<std::shared_ptr<detail::Transfer>> both;
    both.reserve(2);
    both.push_back(collective_message(op, std::move(in), left, false));
    both.push_back(collective_message(op, std::move(out), right, true));
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

}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_MPI_COMMUNICATOR_HPP
