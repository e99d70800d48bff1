// SPDX-License-Identifier: MIT
// clbuf::stream_tiles: the application's kernels over a host array of any size, tile by tile,
// with a fixed number of tiles in flight, so that the upload of one tile, the kernels of another
// and the download of a third overlap (docs/design.md "Tiles streamed through the device").
//
// A layer over one BufferManager: its device buffers come from the manager's pool
// (allocate()), its host chunks from the manager's pinned pool (ChunkIo::chunk()), and its
// bytes move by the chunk calls (detail/chunk_io.hpp) on three in-order queues of its own beside
// the manager's: uploads, the application's kernels, downloads. Per tile k (slot k % in_flight):
//   host: the slot's last tile finished (its download waited for, its output copied out) ->
//         tile k's input copied into the slot's pinned chunk -> upload enqueued -> the
//         function enqueues its kernels after the upload -> download enqueued after them,
//         into the same pinned chunk.
// The host waits only when it reuses a slot. Outputs reach the caller's array only from the
// pinned chunk and only in tile order, once the tile's download has succeeded: a tile that
// fails stops the stream with every earlier tile's output written and no later tile's byte.
#ifndef CLBUF_TILE_STREAM_HPP
#define CLBUF_TILE_STREAM_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/buffer_access.hpp>
#include <clbuf/detail/checks.hpp>
#include <clbuf/detail/chunk_io.hpp>
#include <clbuf/detail/event.hpp>
#include <clbuf/detail/host_memory.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/telemetry.hpp>
#include <clbuf/detail/tile_deal.hpp>
#include <clbuf/detail/trace.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/tile_plan.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace clbuf {

/// One tile, as the function of stream_tiles() gets it. The function enqueues its kernels on
/// `queue` (or on any queue of the manager's context) after the events of `after`, reading the
/// first `count` elements of `in` and writing the first `count` of `out`, and returns the event
/// of its last kernel (a null event: every command it enqueued on `queue`). It must not wait for
/// the device itself, and must not keep the buffers: the next tiles reuse them.
template <class T, class U>
struct Tile {
  std::size_t index;                    ///< k: the tile's number, from 0
  std::size_t tiles;                    ///< n: the stream's tiles
  std::size_t first;                    ///< the array's element the tile begins at
  std::size_t count;                    ///< the tile's elements (the last tile may hold fewer)
  const DeviceBuffer<T>& in;            ///< input; size() is the plan's tile_elements
  DeviceBuffer<U>& out;                 ///< output; the same buffer as `in` in place
  const cl::CommandQueue& queue;        ///< the stream's in-order queue for kernels
  const std::vector<cl::Event>& after;  ///< the wait list of the first kernel: the upload
  std::size_t device;                   ///< the device it runs on: 0, or a DeviceGroup's index
  BufferManager& manager;               ///< that device's manager (its context: the kernels')
};

/// What a stream did.
struct TileReport {
  TilePlan plan;               ///< how it cut the array
  std::size_t tiles_done = 0;  ///< tiles whose output is in the caller's array (in order)
  bool cancelled = false;      ///< TileOptions::cancel stopped it before the last tile
  /// Per device (a DeviceGroup's order; one entry for one manager): its tiles in the array.
  std::vector<std::size_t> device_tiles;
};

/// The options of one stream: the plan's (TileOptions) and a cancel flag.
struct TileStreamOptions : TileOptions {
  /// When it reads true (checked before each tile is started, from any thread), the stream
  /// starts no further tile, finishes those in flight (their outputs written) and returns
  /// with TileReport::cancelled set.
  const std::atomic<bool>* cancel = nullptr;
};

namespace detail {

/// One device's part of a stream: its three queues beside its manager's, a slot per tile in
/// flight on it (device buffers and a pinned chunk), the times of the tiles it finished, and
/// its trace. TileRun (below) deals the tiles to its lanes and finishes them in tile order.
/// The destructor waits for every command the lane enqueued (the slots' memory goes back only
/// then), whichever way the run ended.
template <class T, class U>
class TileLane {
 public:
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  static constexpr const char* op = "stream_tiles";

  struct Slot {
    DeviceBuffer<T> in;
    DeviceBuffer<U> out;  // unused in place
    HostChunk host;       // the tile's input, then its output
    cl::Event up, kernel, down;
    std::size_t tile = none;
  };

  TileLane(BufferManager& manager, std::size_t device, const T* in, U* out, std::size_t count,
           const TilePlan& plan)
      : manager_(manager),
        device_(device),
        in_(in),
        out_(out),
        count_(count),
        plan_(plan),
        in_place_(static_cast<const void*>(in) == static_cast<const void*>(out)),
        tracer_(ManagerAccess::engine(manager).telemetry().tracer()) {}
  TileLane(const TileLane&) = delete;
  TileLane& operator=(const TileLane&) = delete;
  ~TileLane() {
    drain();
    trace();
  }

  /// The queues (profiling when the manager traces), held after the manager's earlier work,
  /// and `slots` slots.
  void open(std::size_t slots) {
    TransferEngine& engine = ManagerAccess::engine(manager_);
    const cl_context context = manager_.context()();
    const Queue mine(manager_.queue());
    const cl_command_queue_properties properties =
        tracer_ != nullptr ? CL_QUEUE_PROFILING_ENABLE : 0;
    upload_ = ChunkIo(Queue::beside(op, context, mine, properties), engine.pinned());
    compute_ = Queue::beside(op, context, mine, properties);
    download_ = ChunkIo(Queue::beside(op, context, mine, properties), engine.pinned());
    // The pool's buffers were last used on the manager's queue: the uploads come after its work.
    const cl::Event before = engine.chunk_io().marker(op);
    start_ = upload_.barrier(op, {before()});
    slots_.resize(slots);
    const std::size_t chunk = plan_.tile_elements * std::max(sizeof(T), sizeof(U));
    for (Slot& slot : slots_) {
      slot.in = manager_.allocate<T>(plan_.tile_elements);
      if (!in_place_) slot.out = manager_.allocate<U>(plan_.tile_elements);
      slot.host = engine.chunk_io().chunk(op, chunk);
    }
  }

  /// The slot of the lane's next tile (its slots in turn); its `tile` is the one to finish
  /// first, or none.
  Slot& next_slot() noexcept { return slots_[next_++ % slots_.size()]; }

  /// Tile k in `slot`: input into the slot's chunk, upload, the function's kernels, download.
  template <class Fn>
  void start(Slot& slot, std::size_t k, Fn& fn) {
    const std::size_t first = first_of(k), count = count_of(k);
    Telemetry& telemetry = ManagerAccess::engine(manager_).telemetry();
    ManagerAccess::engine(manager_).copier().copy(slot.host.data(), in_ + first, count * sizeof(T));
    static_cast<void>(
        telemetry.count_async(Telemetry::upload, Telemetry::direct, count * sizeof(T), op));
    slot.up = upload_.write(op, BufferAccess::memory(slot.in).buffer(),
                            BufferAccess::memory(slot.in).at(0), count * sizeof(T),
                            slot.host.data(), false);
    const std::vector<cl::Event> after{slot.up};
    const Tile<T, U> tile{
        k,     plan_.tiles, first,   count, slot.in, out_of(slot), compute_.handle(),
        after, device_,     manager_};
    slot.kernel = fn(tile);
    compute_.flush(op);
    if (slot.kernel() == nullptr) slot.kernel = compute_.marker(op);
    if (event_status(slot.kernel()).failed())
      fail(op, event_status(slot.kernel()).status, cause(slot));
    static_cast<void>(
        telemetry.count_async(Telemetry::download, Telemetry::direct, count * sizeof(U), op));
    const Allocation& out = BufferAccess::memory(out_of(slot));
    slot.down = download_.read_after(op, out.buffer(), out.at(0), count * sizeof(U),
                                     slot.host.data(), {slot.up(), slot.kernel()});
    slot.tile = k;
  }

  /// Waits for the slot's download; on success copies the output out and returns CL_SUCCESS,
  /// else returns the failure's code, the output left as it was. The slot is free after.
  cl_int finish(Slot& slot) {
    const std::size_t k = slot.tile;
    slot.tile = none;
    const cl_int code = Queue::wait_code(slot.down());
    if (code != CL_SUCCESS) return code;
    if (tracer_ != nullptr) record(slot, k);
    ManagerAccess::engine(manager_).copier().copy(out_ + first_of(k), slot.host.data(),
                                                  count_of(k) * sizeof(U));
    ++finished_;
    return CL_SUCCESS;
  }

  /// Which of the tile's commands failed, in words.
  static std::string cause(const Slot& slot) {
    if (event_status(slot.up()).failed()) return "its upload failed";
    const EventStatus kernel = event_status(slot.kernel());
    if (kernel.failed()) {
      return std::string("the event the function returned failed with ") +
             error_name(kernel.status) + " (" + std::to_string(kernel.status) + ")";
    }
    return "its download failed";
  }

  /// The tiles whose output this lane copied out.
  std::size_t finished() const noexcept { return finished_; }

 private:
  struct Times {  // device nanoseconds (profiling), 0 where unknown
    std::size_t tile = 0;
    cl_ulong up[2] = {0, 0}, kernel[2] = {0, 0}, down[2] = {0, 0};
  };

  DeviceBuffer<U>& out_of(Slot& slot) noexcept {
    if constexpr (std::is_same<T, U>::value) {
      if (in_place_) return slot.in;
    }
    return slot.out;
  }
  std::size_t first_of(std::size_t k) const noexcept { return k * plan_.tile_elements; }
  std::size_t count_of(std::size_t k) const noexcept {
    return std::min(plan_.tile_elements, count_ - first_of(k));
  }

  /// Waits for every command of the lane, reporting nothing (its memory is let go next).
  void drain() noexcept {
    compute_.finish_code();
    if (upload_.queue().get() != nullptr) upload_.queue().finish_code();
    if (download_.queue().get() != nullptr) download_.queue().finish_code();
  }

  /// The device times of tile k's three commands (profiling), and the clock's offset to the
  /// trace's, from the host's first sight of the download's end (the smallest gap seen).
  void record(const Slot& slot, std::size_t k) noexcept {
    const double now = trace_now();
    try {
      times_.emplace_back();
    } catch (...) {  // NOLINT(bugprone-empty-catch): tracing never fails the caller
      return;
    }
    Times& t = times_.back();
    t.tile = k;
    detail::profiled_times(slot.up(), t.up);
    detail::profiled_times(slot.kernel(), t.kernel);
    detail::profiled_times(slot.down(), t.down);
    if (t.down[1] != 0) offset_ = std::min(offset_, now - static_cast<double>(t.down[1]) / 1e3);
  }

  /// The finished tiles' commands as spans of three tracks (the device's times on the trace's
  /// clock): the upload of tile k+1 beside the kernels of tile k shows the overlap.
  void trace() noexcept {
    if (tracer_ == nullptr || !(offset_ < std::numeric_limits<double>::max())) return;
    try {
      const int tracks[3] = {tracer_->track("tile stream: uploads"),
                             tracer_->track("tile stream: kernels"),
                             tracer_->track("tile stream: downloads")};
      const char* const names[3] = {"tile upload", "tile kernels", "tile download"};
      for (const Times& t : times_) {
        const cl_ulong* spans[3] = {t.up, t.kernel, t.down};
        for (int s = 0; s < 3; ++s) {
          if (spans[s][1] == 0) continue;
          tracer_->overlapping(tracks[s], names[s],
                               offset_ + static_cast<double>(spans[s][0]) / 1e3,
                               offset_ + static_cast<double>(spans[s][1]) / 1e3,
                               {{"tile", nullptr, static_cast<double>(t.tile)}});
        }
      }
    } catch (...) {  // NOLINT(bugprone-empty-catch): tracing never fails the caller
    }
  }

  BufferManager& manager_;
  std::size_t device_;
  const T* in_;
  U* out_;
  std::size_t count_;
  TilePlan plan_;
  bool in_place_;
  Tracer* tracer_;
  ChunkIo upload_, download_;
  Queue compute_;
  cl::Event start_;  // the uploads' barrier behind the manager's queue, kept until the end
  std::vector<Slot> slots_;
  std::size_t next_ = 0, finished_ = 0;
  std::vector<Times> times_;
  double offset_ = std::numeric_limits<double>::max();
};

/// One stream's run over one device or several (a lane each): tile k goes to the lane
/// deal.owner(k), into that lane's next slot, once the tile last in that slot is finished; the
/// tiles are started in order and finished in order, whichever lane holds them, so outputs
/// reach the caller's array in tile order only. The host waits only when a lane reuses a slot
/// (for the tiles up to the one in it); meanwhile every lane's queued tiles run.
template <class T, class U>
class TileRun {
 public:
  using Lane = TileLane<T, U>;

  /// `managers`: one per lane (the deal's devices, in order); `grouped`: errors name the device.
  TileRun(const std::vector<BufferManager*>& managers, const T* in, U* out, std::size_t count,
          const TilePlan& plan, TileDeal deal, const std::atomic<bool>* cancel, bool grouped)
      : count_(count), plan_(plan), deal_(std::move(deal)), cancel_(cancel), grouped_(grouped) {
    for (std::size_t d = 0; d < managers.size(); ++d) {
      lanes_.push_back(std::make_unique<Lane>(*managers[d], d, in, out, count, plan));
    }
  }

  /// Runs the stream; fn(const Tile<T, U>&) -> cl::Event per tile.
  template <class Fn>
  TileReport run(Fn& fn) {
    TileReport report;
    report.plan = plan_;
    report.device_tiles.assign(lanes_.size(), 0);
    if (plan_.tiles == 0) return report;
    for (std::size_t d = 0; d < lanes_.size(); ++d) {
      const std::size_t tiles = deal_.tiles_of(d, plan_.tiles);
      if (tiles != 0) lanes_[d]->open(std::min(plan_.in_flight, tiles));
    }
    for (std::size_t k = 0; k < plan_.tiles; ++k) {
      const std::size_t d = deal_.owner(k);
      typename Lane::Slot& slot = lanes_[d]->next_slot();
      if (slot.tile != Lane::none) finish_through(slot.tile);
      if (cancel_ != nullptr && cancel_->load()) {
        report.cancelled = true;
        break;
      }
      start_guarded(d, slot, k, fn);
    }
    finish_started();
    report.tiles_done = finished_;
    for (std::size_t d = 0; d < lanes_.size(); ++d) report.device_tiles[d] = lanes_[d]->finished();
    return report;
  }

 private:
  static constexpr const char* op = Lane::op;

  struct Started {
    std::size_t lane;
    typename Lane::Slot* slot;
  };

  /// start(), a failure of it named as tile k's; the tiles before k are finished first (their
  /// outputs written; an earlier tile's failure is the one reported).
  template <class Fn>
  void start_guarded(std::size_t d, typename Lane::Slot& slot, std::size_t k, Fn& fn) {
    try {
      lanes_[d]->start(slot, k, fn);
      started_.push_back({d, &slot});
    } catch (...) {
      const std::exception_ptr failure = std::current_exception();
      finish_started();
      fail_tile(k, d, failure);
    }
  }

  /// Finishes the oldest started tile: its output written, or its failure thrown.
  void finish_one() {
    const Started oldest = started_.front();
    started_.pop_front();
    const std::size_t k = oldest.slot->tile;
    const cl_int code = lanes_[oldest.lane]->finish(*oldest.slot);
    if (code != CL_SUCCESS) {
      fail(op, code, where(k, oldest.lane) + ": " + Lane::cause(*oldest.slot));
    }
    ++finished_;
  }

  /// Finishes the started tiles in order up to tile k.
  void finish_through(std::size_t k) {
    while (finished_ <= k) finish_one();
  }

  /// Finishes every started tile in order.
  void finish_started() {
    while (!started_.empty()) finish_one();
  }

  std::string where(std::size_t k, std::size_t d) const {
    const std::size_t first = k * plan_.tile_elements;
    const std::size_t last = first + std::min(plan_.tile_elements, count_ - first);
    return "tile " + std::to_string(k) + " of " + std::to_string(plan_.tiles) + " (elements " +
           std::to_string(first) + " to " + std::to_string(last) + " of " + std::to_string(count_) +
           ")" + (grouped_ ? " on device " + std::to_string(d) : std::string());
  }

  /// Throws tile k's failure: a clbuf::Error naming the tile (the function's own exception
  /// nested in it, std::rethrow_if_nested).
  [[noreturn]] void fail_tile(std::size_t k, std::size_t d, const std::exception_ptr& failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const Error& error) {  // the stream's own ("stream_tiles: ..."), or the function's
      std::string what = error.what();
      const std::string own = std::string(op) + ": ";
      if (what.compare(0, own.size(), own) == 0) what.erase(0, own.size());
      std::throw_with_nested(Error(error.code(), own + where(k, d) + ": " + what));
    } catch (const std::exception& error) {
      std::throw_with_nested(Error(CL_SUCCESS, std::string(op) + ": " + where(k, d) +
                                                   ": the function threw: " + error.what()));
    } catch (...) {
      std::throw_with_nested(
          Error(CL_SUCCESS, std::string(op) + ": " + where(k, d) + ": the function threw"));
    }
  }

  std::size_t count_;
  TilePlan plan_;
  TileDeal deal_;
  const std::atomic<bool>* cancel_;
  bool grouped_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::deque<Started> started_;  // tiles started and not finished, in tile order
  std::size_t finished_ = 0;
};

/// The stream's checks: pointers, sizes, and in and out either one array or apart.
template <class T, class U>
void check_tile_arrays(const T* in, const U* out, std::size_t count) {
  const char* op = "stream_tiles";
  check_host_pointer(op, in, count);
  check_host_pointer(op, out, count);
  const std::size_t in_bytes =
      checked_bytes(op, count, sizeof(T), std::numeric_limits<std::uint64_t>::max());
  const std::size_t out_bytes =
      checked_bytes(op, count, sizeof(U), std::numeric_limits<std::uint64_t>::max());
  const auto a = reinterpret_cast<std::uintptr_t>(in);
  const auto b = reinterpret_cast<std::uintptr_t>(out);
  const bool same = a == b && std::is_same<T, U>::value;
  if (!same && count != 0 && a < b + out_bytes && b < a + in_bytes) {
    fail(op, CL_MEM_COPY_OVERLAP,
         "the input (" + std::to_string(in_bytes) + " bytes) and the output (" +
             std::to_string(out_bytes) + " bytes) share bytes but are not one array");
  }
}

}  // namespace detail

/// Runs `fn` over `count` elements of `in`, tile by tile, writing `count` elements of `out`
/// (`in` and `out` are one array, or apart). Per tile: its input uploaded from a pinned chunk,
/// `fn(const Tile<T, U>&)` enqueues the kernels and returns the last one's event, the output
/// downloaded into the chunk and copied into `out` once every earlier tile's is. Up to
/// plan.in_flight tiles are in flight; the host waits only to reuse a tile's buffers. Returns
/// when every tile's output is in `out` (or the stream was cancelled).
/// @throws Error CL_INVALID_VALUE for null arrays with count > 0 or options out of range (see
///         TileOptions), CL_MEM_COPY_OVERLAP for arrays that overlap without being one,
///         CL_INVALID_BUFFER_SIZE for a tile over the device's max allocation; a failure at tile
///         k (the function threw, its event failed, a transfer failed) as an Error naming
///         "tile k of n" and its elements, the function's own exception nested: then tiles 0 to
///         k-1 are written to `out` and nothing of a later tile is.
template <class T, class U, class Fn>
TileReport stream_tiles(BufferManager& manager, const T* in, U* out, std::size_t count, Fn&& fn,
                        const TileStreamOptions& options = TileStreamOptions()) {
  return detail::guard_host_memory("stream_tiles", [&] {
    detail::check_tile_arrays(in, out, count);
    const bool in_place =
        static_cast<const void*>(in) == static_cast<const void*>(out) && std::is_same<T, U>::value;
    const TilePlan plan = detail::plan_tiles("stream_tiles", manager.device(), count, sizeof(T),
                                             in_place ? 0 : sizeof(U), options);
    detail::TileRun<T, U> run({&manager}, in, out, count, plan, detail::TileDeal({1}),
                              options.cancel, false);
    return run.run(fn);
  });
}

/// As stream_tiles(manager, data, data, count, fn, options): in place, one device buffer a tile.
template <class T, class Fn>
TileReport stream_tiles(BufferManager& manager, T* data, std::size_t count, Fn&& fn,
                        const TileStreamOptions& options = TileStreamOptions()) {
  return stream_tiles(manager, static_cast<const T*>(data), data, count, std::forward<Fn>(fn),
                      options);
}

/// The plan stream_tiles() would follow for `count` elements of T in and U out (`in_place`: one
/// array of T) on `manager`'s device; no OpenCL call. @throws Error as stream_tiles() for
/// options out of range.
template <class T, class U = T>
TilePlan plan_tiles(const BufferManager& manager, std::size_t count,
                    const TileOptions& options = TileOptions(), bool in_place = false) {
  return detail::plan_tiles("plan_tiles", manager.device(), count, sizeof(T),
                            in_place ? 0 : sizeof(U), options);
}

}  // namespace clbuf

#endif  // CLBUF_TILE_STREAM_HPP
