// SPDX-License-Identifier: MIT
// clbuf::mpi's halo exchange: the boxes of a field (Box) each neighbour sends and receives
// (Neighbour), the plan of a Cartesian grid (cartesian_faces()), and HaloExchange, which packs,
// sends, receives and unpacks them, persistently, overlapping the application's kernels.
#ifndef CLBUF_MPI_HALO_HPP
#define CLBUF_MPI_HALO_HPP

#include <mpi.h>
#include <clbuf/buffer.hpp>
#include <clbuf/detail/buffer_access.hpp>
#include <clbuf/detail/checks.hpp>
#include <clbuf/detail/event.hpp>
#include <clbuf/detail/mpi/core.hpp>
#include <clbuf/detail/mpi/halo.hpp>
#include <clbuf/detail/mpi/pack.hpp>
#include <clbuf/detail/mpi/streams.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/mpi/communicator.hpp>
#include <clbuf/mpi/options.hpp>
#include <clbuf/mpi/requests.hpp>
#include <clbuf/rect.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {

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
    if (halo == 0) clbuf::detail::fail(op, CL_INVALID_VALUE, "the halo width is 0");
    if (first_tag < 0) {
      clbuf::detail::fail(op, CL_INVALID_VALUE,
                          "first_tag " + std::to_string(first_tag) + " is negative");
    }
    const Extents field = detail::halo_field(op, grid.ndims, interior, halo);
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
          detail::halo_box(step, interior, halo, grid.ndims, true, send.origin, send.size);
          detail::halo_box(step, interior, halo, grid.ndims, false, recv.origin, recv.size);
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
    reserve_state();
    allocate_boxes();
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
      check_start(op, field);                 // a moved-from exchange has no core_
      detail::HaloPhases phases(*core_, op);  // spans of the trace, when the manager traces
      prepare(field);
      try {
        field_ = core_->manager().view(field, 0, field.size());
        phases.next("pack");
        pack_sends(op);
        const cl::Event before = receive_marker(op);
        phases.next("post receives");
        while (receives_.size() < plan_.size()) post_receive(receives_.size(), &before, field_);
        phases.next("post sends");
        post_sends(false);
      } catch (...) {
        complete_failed_start(field);
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
      detail::HaloPhases phases(*core_, "HaloExchange::finish");
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
      phases.next("post sends");
      attempt([&] { post_sends(true); });
      if (deferred_failure_)
        attempt([&] { std::rethrow_exception(std::exchange(deferred_failure_, nullptr)); });
      phases.next("wait for receives");  // and the unpacks enqueued as they arrive
      for (std::size_t i = 0; i < receives_.size(); ++i) attempt([&] { arrived(i, false); });
      for (std::size_t i = 0; i < receives_.size(); ++i) attempt([&] { arrived(i, true); });
      phases.next("wait for sends");
      for (Request& request : sends_) attempt([&] { request.wait(); });
      phases.next("unpack");
      for (const Future<void>& copy : copies_) attempt([&] { copy.wait(); });
      for (const cl::Event& kernel : kernels_) attempt([&] { wait_for_kernel(kernel); });
      phases.next(nullptr);
      finished();
      if (first) std::rethrow_exception(first);
    });
  }

 private:
  /// finish()'s end: no exchange in flight.
  void finished() noexcept {
    receives_.clear();
    sends_.clear();
    copies_.clear();
    kernels_.clear();
    reads_.clear();
    landed_.clear();
    unposted_.clear();
    field_ = DeviceBuffer<T>();
    running_ = false;
  }

  static std::size_t elements(const Box& box) noexcept {
    return box.size.x * box.size.y * box.size.z;  // within the checked field
  }

  /// The per-neighbour state, sized once. Each start() sizes reads_, sends_, receives_,
  /// landed_ and unposted_ within this capacity, so that it allocates none of them: a start()
  /// that fails still completes its messages (see there), which needs them.
  void reserve_state() {
    packs_.resize(plan_.size());
    unpacks_.resize(plan_.size());
    straight_sends_.resize(plan_.size());
    straight_recvs_.resize(plan_.size());
    packed_.resize(plan_.size());
    reads_.reserve(plan_.size());
    sends_.reserve(plan_.size());
    receives_.reserve(plan_.size());
    landed_.reserve(plan_.size());
    unposted_.reserve(plan_.size());
  }

  /// A pack buffer for every box sent and an unpack buffer for every box received, each with
  /// pinned memory of its own where it may go straight; none for MPI_PROC_NULL.
  void allocate_boxes() {
    BufferManager& manager = core_->manager();
    const auto allocate = [&](const Box& box, DeviceBuffer<T>& buffer, HostBox& straight) {
      buffer = manager.allocate<T>(elements(box));
      if (may_go_straight(box) && elements(box) != 0) {
        straight.memory = core_->io().chunk("HaloExchange", elements(box) * sizeof(T));
        straight.count = elements(box);
      }
    };
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      const Neighbour& n = plan_[i];
      if (n.rank == MPI_PROC_NULL) continue;
      if (n.send_box) allocate(*n.send_box, packs_[i], straight_sends_[i]);
      if (n.recv_box) allocate(*n.recv_box, unpacks_[i], straight_recvs_[i]);
    }
  }

  /// start()'s checks, before anything is enqueued or sent: no exchange in flight, not moved
  /// from, `field` of the Communicator's context, open to the host where contiguous ranges
  /// reach it through the host, and holding every range and box of the plan.
  void check_start(const char* op, const DeviceBuffer<T>& field) const {
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
  }

  /// Marks the exchange on `field` running and resets the state of each neighbour, within the
  /// capacity reserve_state() reserved: no allocation (a failed start() needs this state).
  void prepare(const DeviceBuffer<T>& field) {
    running_ = true;
    unpack_ = true;
    // A box goes straight (read into the exchange's pinned memory, written from it) where the
    // host may read and write the field; else through the pack and unpack buffers.
    const cl_mem_flags access = clbuf::detail::BufferAccess::access(field);
    straight_ = clbuf::detail::host_access_bits(access) == 0;
    // A kernel may only read and write a field made CL_MEM_READ_WRITE (copies may do both to
    // any buffer): a field made read-only or write-only for kernels is packed by rect copies.
    kernel_may_ = clbuf::detail::kernel_access_bits(access) == 0;
    reads_.clear();
    reads_.resize(plan_.size());
    sends_.clear();
    sends_.resize(plan_.size());
    unposted_.assign(plan_.size(), 0);
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      if (plan_[i].rank != MPI_PROC_NULL) unposted_[i] = 1;  // posted by post_sends()
      packed_[i] = cl::Event();
    }
  }

  /// Packs (or reads straight) every box sent, before the sends are posted: a send reads its
  /// pack buffer through the host (the queue finished, mapped, or read into pinned chunks),
  /// behind these copies on the queue; a box read straight is sent once its read has completed
  /// (post_sends()).
  void pack_sends(const char* op) {
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      const Neighbour& n = plan_[i];
      if (n.rank == MPI_PROC_NULL || !n.send_box) continue;
      const Box& box = *n.send_box;
      const Region region = detail::pack_region(box.origin, box.size, box.field);
      if (straight_ && !straight_sends_[i].empty()) {
        reads_[i] = core_->manager().download_rect_async(field_, straight_sends_[i].data(),
                                                         straight_sends_[i].size(), region);
      } else {
        packed_[i] = copy_box(op, box, field_, packs_[i], region);
      }
    }
  }

  /// `region` of `box` copied from `src` to `dst` on the manager's queue, by the pack kernel
  /// (by_kernel()) or a rect copy; kept (kernels_, copies_) until finish(). Returns its event.
  cl::Event copy_box(const char* op, const Box& box, const DeviceBuffer<T>& src,
                     DeviceBuffer<T>& dst, const Region& region) {
    if (by_kernel(box)) {
      kernels_.push_back(packer_->copy(op, core_->io(), src.native_root()(),
                                       src.native_offset_bytes(), dst.native_root()(),
                                       dst.native_offset_bytes(), region, sizeof(T)));
      return kernels_.back();
    }
    copies_.push_back(core_->manager().copy_rect_async(src, dst, region));
    return copies_.back().event();
  }

  /// What a receive into the field waits for: the work queued before start() (one marker, made
  /// where the field is a host block and a range lands in it), not the interior kernels queued
  /// after it, as clFinish would on a CPU device. Else nothing: a receive into an unpack buffer
  /// waits for nothing (the last finish() waited for its unpack copy).
  cl::Event receive_marker(const char* op) const {
    const bool host_block = Communicator::span_of(field_, 0, 0).host != nullptr;
    const bool into_field = std::any_of(plan_.begin(), plan_.end(), [](const Neighbour& n) {
      return n.rank != MPI_PROC_NULL && !n.recv_box;
    });
    if (!host_block || !into_field) return cl::Event();
    return core_->io().marker(op);
  }

  /// After a start() that failed part-way, the plan is still completed, so that no neighbour
  /// waits for this rank: the receives not posted yet are posted (each as it can be; into the
  /// field after clFinish), every send not posted goes as a notice that this rank failed (the
  /// neighbour's exchange then fails too); then all is waited for, and the failure rethrown.
  /// Call it from start()'s catch handler.
  [[noreturn]] void complete_failed_start(DeviceBuffer<T>& field) {
    const std::exception_ptr failure = std::current_exception();
    unpack_ = false;  // the boxes that arrive are not unpacked: a failed start() leaves the field
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

  /// Whether `box` is packed (or unpacked) by the Communicator's kernel rather than a rect copy:
  /// rows of at most Options::halo_kernel_max_row_bytes, at least halo_kernel_min_rows of them
  /// and two, a field kernels may read and write, and a device that builds the kernel (asked on
  /// first use).
  bool by_kernel(const Box& box) const {
    const Options& options = core_->options();
    const std::size_t rows = box.size.y * box.size.z;
    return kernel_may_ && box.size.x * sizeof(T) <= options.halo_kernel_max_row_bytes &&
           rows >= std::max<std::size_t>(options.halo_kernel_min_rows, 2) &&
           packer_->ready(core_->io());
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

  /// A box's host memory on the straight path: a chunk of the manager's pinned pool (host
  /// memory of clbuf's where its budget holds none), `count` elements.
  struct HostBox {
    detail::HostChunk memory;
    std::size_t count = 0;
    T* data() const noexcept { return static_cast<T*>(memory.data()); }
    std::size_t size() const noexcept { return count; }
    bool empty() const noexcept { return count == 0; }
  };

  /// A message of the host memory `box`, sent or received by MPI on the host (zero copy).
  static detail::Span host_span(HostBox& box) {
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
    std::exception_ptr first;
    bool deferred = false;
    for (std::size_t i = 0; i < unposted_.size(); ++i) {
      if (!unposted_[i]) continue;
      if (behind(i)) {
        deferred = true;
        continue;
      }
      const bool straight = straight_ && !straight_sends_[i].empty();
      const Read read = straight ? read_of(i, block, first) : Read::done;
      deferred = deferred || read == Read::pending;
      if (read != Read::done) continue;
      unposted_[i] = 0;
      try {
        post_send(i, straight);
      } catch (...) {  // make_send() has sent the notice where nothing was posted
        if (!first) first = std::current_exception();
      }
    }
    keep_deferred(deferred);
    if (first) std::rethrow_exception(first);
  }

  /// An earlier send of the plan to the same rank with the same tag is not posted yet: MPI
  /// matches the messages of one rank and tag in the order sent, so send i waits for it.
  bool behind(std::size_t i) const noexcept {
    for (std::size_t j = 0; j < i; ++j) {
      if (unposted_[j] && plan_[j].rank == plan_[i].rank && plan_[j].send_tag == plan_[i].send_tag)
        return true;
    }
    return false;
  }

  /// Where the straight read of box i stands for its send.
  enum class Read { done, pending, failed };

  /// Box i's straight read: done (`block`: waited for), still pending, or failed; a failed one
  /// is kept in `first` (unless an earlier failure is) and its send goes as a notice.
  Read read_of(std::size_t i, bool block, std::exception_ptr& first) noexcept {
    try {
      if (!block && !reads_[i].ready()) return Read::pending;
      reads_[i].wait();
      return Read::done;
    } catch (...) {
      if (!first) first = std::current_exception();
      send_notice(i);
      return Read::failed;
    }
  }

  /// Posts neighbour i's send: from the exchange's pinned memory (read straight: no further
  /// device command), from its pack buffer, or from the field; a packed box's send first checks
  /// its pack (make_send's `source`).
  void post_send(std::size_t i, bool straight) {
    const Neighbour& n = plan_[i];
    detail::Core& core = *core_;
    const cl::Event nothing;
    detail::Span span = straight     ? host_span(straight_sends_[i])
                        : n.send_box ? Communicator::span_of(packs_[i])
                                     : Communicator::span_of(field_, n.send_offset, n.count);
    sends_[i] = Communicator::start_on(
        core_,
        detail::make_send(core, "HaloExchange::start", std::move(span), n.rank, n.send_tag,
                          core.user(), detail::Kind::point_to_point, straight ? &nothing : nullptr,
                          packed_[i]() != nullptr ? &packed_[i] : nullptr));
  }

  /// Keeps this exchange among the Core's deferred ones while it holds sends back (`deferred`),
  /// else takes it out.
  void keep_deferred(bool deferred) noexcept {
    if (!deferred) {
      core_->undefer(this);
      return;
    }
    try {
      core_->defer(this);
    } catch (...) {  // no room to keep the record: post them now instead
      post_deferred();
    }
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
      if (received_straight(i)) {
        copies_.push_back(core_->manager().upload_rect_async(field_, straight_recvs_[i].data(),
                                                             straight_recvs_[i].size(), region));
      } else {
        copy_box("HaloExchange::finish", box, unpacks_[i], field_, region);
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
  std::vector<HostBox> straight_sends_;
  std::vector<HostBox> straight_recvs_;
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

#endif  // CLBUF_MPI_HALO_HPP
