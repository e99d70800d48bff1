// SPDX-License-Identifier: MIT
// Pinned staging for large transfers between pageable host memory and a discrete device.
// Drivers move pageable memory at a fraction of the bus speed (7-17 GB/s against 55 GB/s pinned
// on an H200), and one host thread copies only ~10 GB/s, so clbuf splits a transfer into chunks
// that several threads take in turn: each copies its chunk into a pinned slot of its own
// (CL_MEM_ALLOC_HOST_PTR, mapped once) and enqueues the DMA, so host copies of some chunks
// overlap the device transfer of others. Pinned memory is bounded: chunk bytes x slots, leased
// from the manager's pinned pool (fewer when its budget holds fewer; none: the driver's own
// pageable transfer).
//
// Staged transfers run in two lanes, one per direction, so that an upload and a download at once
// (two threads) use the bus's two directions together: each lane has its own queue, pinned
// slots (made on the lane's first transfer) and threads. Within a lane, transfers run one at a
// time in the order of their calls (tickets). Across lanes, a transfer waits only for the
// earlier transfers of the other lane whose device bytes overlap its own (same memory object,
// sub-buffers resolved to their parent), so a download never overtakes an upload it must see.
// Each takes a marker of the manager's queue at the call and waits on the host for it before its
// first chunk's DMA, so the chunks see everything queued before them. An asynchronous one also
// holds the manager's queue behind a barrier until its last chunk has landed (async.hpp); a
// blocking one returns only then. Every wait points at an earlier call (tickets, overlaps and
// markers are taken together, in call order), so no mix of them deadlocks. Nothing on a lane's
// queue ever waits for an event: a copy between contexts (cross_context.hpp) that reads or
// writes on the uploads' lane queue (the device's side queue) is only ever behind DMAs that can
// run, never behind a chunk held up by that copy's own barrier.
#ifndef CLBUF_DETAIL_STAGING_HPP
#define CLBUF_DETAIL_STAGING_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/event.hpp>
#include <clbuf/detail/host_memory.hpp>
#include <clbuf/detail/pinned_pool.hpp>
#include <clbuf/detail/trace.hpp>
#include <clbuf/detail/worker_pool.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

class Stager {
 public:
  /// `slots` pinned chunks of `chunk_bytes` from `pinned`, shared out among up to `threads`
  /// threads, for `device` (OpenCL 1.2: markers and barriers); both must outlive the Stager, as
  /// must `tracer` (null: not tracing), which gets each chunk's host copy and DMA as spans.
  Stager(const DeviceContext& device, PinnedPool& pinned, std::size_t chunk_bytes,
         std::size_t slots, unsigned threads, Tracer* tracer = nullptr)
      : device_(device),
        pinned_(pinned),
        tracer_(tracer),
        chunk_bytes_(std::max<std::size_t>(chunk_bytes, 4096)),
        slot_count_(std::max<std::size_t>(slots, 2)),
        threads_(static_cast<unsigned>(
            std::clamp<std::size_t>(threads, 1, std::max<std::size_t>(slot_count_ / 2, 1)))) {}

  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  /// Call only once no staged transfer is in flight (the engine drains its Background first).
  ~Stager() {
    for (Lane& lane : lanes_) {
      if (lane.queue != nullptr) CLBUF_CL(clFinish)(lane.queue);
      lane.slots.clear();  // back to the pool
    }
  }

  /// Host `src` -> `dst` at `dst_offset`; returns when the device has the data.
  void write(cl_mem dst, std::size_t dst_offset, const void* src, std::size_t bytes,
             const char* operation) {
    blocking(true, dst, dst_offset, const_cast<void*>(src), bytes, operation);
  }

  /// `src` at `src_offset` -> host `dst`; returns when `dst` holds the data.
  void read(cl_mem src, std::size_t src_offset, void* dst, std::size_t bytes,
            const char* operation) {
    blocking(false, src, src_offset, dst, bytes, operation);
  }

  /// Starts a staged transfer on `background` and returns at once. `memory` is retained until
  /// the job ends; `host` (the caller's memory) must stay alive until `done` has completed, as
  /// `keep` (may be null) sees to for memory the Future owns. Returns the barrier the main queue
  /// holds until the job ends.
  Started submit(bool to_device, cl::Buffer memory, std::size_t offset, void* host,
                 std::size_t bytes, const char* operation, std::shared_ptr<const void> keep,
                 Background& background) {
    // Everything that may throw comes before the ticket: once a transfer holds a ticket, its
    // job must run, or every later staged transfer would wait for it forever.
    auto job = std::make_shared<AsyncJob>();
    job->to_device = to_device;
    job->memory = std::move(memory);
    job->offset = offset;
    job->host = host;
    job->bytes = bytes;
    job->operation = operation;
    job->keep = std::move(keep);
    job->landed = UserEvent(operation, device_.context()());
    const Extent extent = extent_of(job->memory(), offset, bytes);
    std::function<void()> task = [this, job]() noexcept { finish_async(*job); };
    Started started{cl::Event(), job->outcome};
    // The turn and the place on the background thread are taken together (async.hpp).
    std::lock_guard<std::mutex> submitting(submission_mutex());
    {
      std::lock_guard<std::mutex> order(order_);
      ensure_queue(lane(to_device), operation);
      job->before = main().marker(operation);
      started.event = job->landed.barrier(operation, main());
      job->place = take_place(to_device, extent);
    }
    background.post(std::move(task));
    return started;
  }

 private:
  struct Slot {
    PinnedPool::Lease block;
    void* host = nullptr;  // block.data()
    cl::Event busy;        // the DMA that last used this slot
    // When tracing: that DMA's chunk, bytes, copy thread and when it was enqueued (trace_now()).
    std::size_t chunk = 0, length = 0;
    unsigned worker = 0;
    double enqueued = 0;
  };

  /// Where a transfer waits: its lane, its ticket there, and how far the other lane must have
  /// got first (one past the last earlier transfer there whose device bytes overlap; 0: none).
  struct Place {
    std::size_t lane = 0;
    std::uint64_t ticket = 0;
    std::uint64_t other_done = 0;
  };

  struct Lane;

  struct Job {
    Lane* lane = nullptr;
    bool to_device = true;
    cl_mem memory = nullptr;
    std::size_t memory_offset = 0;
    char* host = nullptr;
    std::size_t bytes = 0;
    std::size_t chunk = 0;  // bytes per chunk for this job, at most a slot
    std::size_t chunks = 0;
    std::size_t per_worker = 0;  // slots each worker uses
    cl_event after = nullptr;    // the main queue's marker, waited for before any DMA
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    cl_int error = CL_SUCCESS;  // the first failure, under mutex_
    std::string call;
  };

  /// An asynchronous staged transfer, shared by submit() and the background job.
  struct AsyncJob {
    bool to_device = true;
    cl::Buffer memory;  // retained until the job ends
    std::size_t offset = 0;
    void* host = nullptr;
    std::size_t bytes = 0;
    const char* operation = "";
    std::shared_ptr<const void> keep;  // host memory the Future owns, if any
    cl::Event before;                  // the main queue's marker at the call
    UserEvent landed;                  // completed when the job ends; holds the barrier
    std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();
    Place place;
  };

  /// The background half of submit(): waits for its turn, moves the bytes, reports, and lets
  /// the main queue go on.
  void finish_async(AsyncJob& job) noexcept {
    Turn turn(*this, job.place);
    finish_background_job(
        main().get(), job.operation, "a staged transfer", *job.outcome, job.landed,
        [&] {
          turn.wait();
          run(job.to_device, job.memory(), job.offset, job.host, job.bytes, job.before(),
              job.operation);
        },
        [&]() noexcept {
          turn.release();
          job.keep.reset();
        });
  }

  /// A transfer's turn; waits for it, and gives it up on every way out so that later transfers
  /// are never left waiting.
  class Turn {
   public:
    Turn(Stager& stager, Place place) noexcept : stager_(stager), place_(place) {}
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn() { release(); }

    void wait() noexcept {
      if (waited_) return;
      const Lane& own = stager_.lanes_[place_.lane];
      const Lane& other = stager_.lanes_[1 - place_.lane];
      std::unique_lock<std::mutex> lock(stager_.turn_mutex_);
      stager_.turn_.wait(
          lock, [&] { return own.serving == place_.ticket && other.serving >= place_.other_done; });
      waited_ = true;
    }

    void release() noexcept {
      if (released_) return;
      wait();
      {
        std::lock_guard<std::mutex> order(stager_.order_);
        auto& pending = stager_.lanes_[place_.lane].pending;
        pending.erase(pending.begin());  // this one: the lane's oldest
      }
      {
        std::lock_guard<std::mutex> lock(stager_.turn_mutex_);
        ++stager_.lanes_[place_.lane].serving;
      }
      stager_.turn_.notify_all();
      released_ = true;
    }

   private:
    Stager& stager_;
    const Place place_;
    bool waited_ = false, released_ = false;
  };

  /// The device bytes a transfer touches: its memory object (a sub-buffer's parent) and range.
  /// A null memory (its parent could not be asked for) overlaps everything.
  struct Extent {
    cl_mem memory = nullptr;
    std::size_t begin = 0, end = 0;
    std::uint64_t ticket = 0;  // in its lane, once it has one
    bool overlaps(const Extent& other) const noexcept {
      return memory == nullptr || other.memory == nullptr ||
             (memory == other.memory && begin < other.end && other.begin < end);
    }
  };

  static Extent extent_of(cl_mem memory, std::size_t offset, std::size_t bytes) noexcept {
    Extent extent{memory, offset, offset + bytes};
    cl_mem parent = nullptr;
    std::size_t origin = 0;
    if (CLBUF_CL(clGetMemObjectInfo)(memory, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof(parent), &parent,
                                     nullptr) != CL_SUCCESS) {
      extent.memory = nullptr;
    } else if (parent != nullptr) {
      if (CLBUF_CL(clGetMemObjectInfo)(memory, CL_MEM_OFFSET, sizeof(origin), &origin, nullptr) !=
          CL_SUCCESS) {
        extent.memory = nullptr;
      } else {
        extent = Extent{parent, origin + offset, origin + offset + bytes};
      }
    }
    return extent;
  }

  /// The next place in the lane of `to_device`, after the other lane's overlapping transfers;
  /// under order_ (with the transfer's marker, so places follow the order of calls).
  Place take_place(bool to_device, Extent extent) {
    Place place;
    place.lane = to_device ? 0 : 1;
    Lane& own = lanes_[place.lane];
    for (const Extent& earlier : lanes_[1 - place.lane].pending) {
      if (earlier.overlaps(extent)) place.other_done = earlier.ticket + 1;
    }
    extent.ticket = own.next_ticket;
    own.pending.push_back(extent);  // may throw: before the ticket is taken, so none is lost
    place.ticket = own.next_ticket++;
    return place;
  }

  void blocking(bool to_device, cl_mem memory, std::size_t offset, void* host, std::size_t bytes,
                const char* operation) {
    const Extent extent = extent_of(memory, offset, bytes);
    std::unique_lock<std::mutex> order(order_);
    ensure_queue(lane(to_device), operation);
    const cl::Event before = main().marker(operation);
    Turn turn(*this, take_place(to_device, extent));
    order.unlock();
    main().flush(operation);
    turn.wait();
    run(to_device, memory, offset, host, bytes, before(), operation);
  }

  struct Lane {
    Queue own;                         // the downloads' lane: a queue of its own
    cl_command_queue queue = nullptr;  // the lane's queue, set under order_ before its first ticket
    std::vector<Slot> slots;           // made on the lane's first transfer, on its turn
    std::unique_ptr<WorkerPool> workers;
    std::uint64_t next_ticket = 0;  // under order_
    std::deque<Extent> pending;     // under order_: tickets taken and not yet released, in order
    std::uint64_t serving = 0;      // under turn_mutex_
    std::vector<int> copy_tracks;   // when tracing: each worker's track, made with the slots
    int dma_track = 0;
  };

  Lane& lane(bool to_device) noexcept { return lanes_[to_device ? 0 : 1]; }

  /// The lane's queue: uploads use the device's side queue, downloads a queue of their own.
  /// Under order_.
  void ensure_queue(Lane& lane, const char* operation) {
    if (lane.queue != nullptr) return;
    if (&lane == &lanes_[0]) {
      lane.queue = device_.side_queue(operation).get();
    } else {
      lane.own = Queue::beside(operation, device_.context()(), main());
      lane.queue = lane.own.get();
    }
  }

  const Queue& main() const noexcept { return device_.queue(); }

  /// The pipeline, on the side queue, once it is this transfer's turn.
  void run(bool to_device, cl_mem memory, std::size_t offset, void* host, std::size_t bytes,
           cl_event after, const char* operation) {
    Lane& lane = this->lane(to_device);
    ensure_slots(lane, operation);
    if (lane.slots.empty()) {  // the pool's budget holds no slot: the driver's pageable transfer
      unstaged(lane, to_device, memory, offset, host, bytes, after, operation);
      return;
    }
    Job job;
    job.lane = &lane;
    job.to_device = to_device;
    job.memory = memory;
    job.memory_offset = offset;
    job.host = static_cast<char*>(host);
    job.bytes = bytes;
    job.after = after;
    // Every chunk is a whole slot (the last one shorter), and a transfer wakes only as many
    // threads as it has chunks. Cutting a mid-sized transfer finer so that every thread gets a
    // share costs more in thread wake-ups (14-31 us) and DMA commands than it gains: on the H200
    // (gpu_run.sh sweep) a 4 MiB upload took 315 us in four 1 MiB chunks, 390-455 in 256 KiB ones.
    job.chunk = chunk_bytes_;
    job.chunks = (bytes + job.chunk - 1) / job.chunk;
    // Two slots a thread or more, as many threads as the slots the lane holds allow.
    const std::size_t threads = std::clamp<std::size_t>(
        lane.slots.size() / 2, 1, std::min<std::size_t>(threads_, job.chunks));
    job.per_worker = lane.slots.size() / threads;
    auto task = [this, &job](unsigned index) noexcept { work(index, job); };
    lane.workers->run(static_cast<unsigned>(threads), task);
    if (job.failed) fail(operation, job.error, job.call + " failed in a staged transfer");
  }

  /// A transfer of a lane without slots: one blocking command on the lane's queue, after the
  /// work queued before the call.
  void unstaged(Lane& lane, bool to_device, cl_mem memory, std::size_t offset, void* host,
                std::size_t bytes, cl_event after, const char* operation) {
    if (after != nullptr) check(Queue::wait_code(after), operation, "the work queued before");
    const Queue queue(cl::CommandQueue(lane.queue, true));
    if (to_device) {
      queue.write(operation, memory, offset, bytes, host, true);
    } else {
      queue.read(operation, memory, offset, bytes, host, true);
    }
  }

  /// Worker `index` takes chunks until none is left, using its own slots in turn.
  void work(unsigned index, Job& job) noexcept {
    const std::size_t per_worker = job.per_worker;
    Slot* slots = &job.lane->slots[index * per_worker];
    bool ready = job.after == nullptr;  // whether the work queued before the call has finished
    std::size_t turn = 0;
    for (std::size_t k; !job.failed && (k = job.next.fetch_add(1)) < job.chunks;) {
      Slot& slot = slots[turn++ % per_worker];
      if (!settle(slot, job)) break;
      if (!(job.to_device ? upload_chunk(index, slot, k, ready, job)
                          : download_chunk(index, slot, k, ready, job))) {
        break;
      }
    }
    // Every exit, a failure included, waits until none of this worker's slots is in flight.
    for (std::size_t s = 0; s < per_worker; ++s) settle(slots[s], job);
  }

  /// Chunk `k` of an upload: copied into `slot`, then its DMA enqueued (not waited for); false
  /// (and the job marked failed) on a failure.
  bool upload_chunk(unsigned index, Slot& slot, std::size_t k, bool& ready, Job& job) noexcept {
    const std::size_t offset = k * job.chunk;
    const std::size_t length = std::min(job.chunk, job.bytes - offset);
    host_copy(index, job, k, length, [&] { copy_streaming(slot.host, job.host + offset, length); });
    if (!waited_before(ready, job)) return false;
    const double begin = tracer_ != nullptr ? trace_now() : 0;
    cl_event event = nullptr;
    if (!ok(CLBUF_CL(clEnqueueWriteBuffer)(job.lane->queue, job.memory, CL_FALSE,
                                           job.memory_offset + offset, length, slot.host, 0,
                                           nullptr, &event),
            "clEnqueueWriteBuffer", job)) {
      return false;
    }
    enqueued(slot, event, k, length, index, begin);
    return ok(CLBUF_CL(clFlush)(job.lane->queue), "clFlush", job);
  }

  /// Chunk `k` of a download: its DMA into `slot`, waited for, then copied out.
  bool download_chunk(unsigned index, Slot& slot, std::size_t k, bool& ready, Job& job) noexcept {
    const std::size_t offset = k * job.chunk;
    const std::size_t length = std::min(job.chunk, job.bytes - offset);
    if (!waited_before(ready, job)) return false;
    const double begin = tracer_ != nullptr ? trace_now() : 0;
    cl_event event = nullptr;
    if (!ok(CLBUF_CL(clEnqueueReadBuffer)(job.lane->queue, job.memory, CL_FALSE,
                                          job.memory_offset + offset, length, slot.host, 0, nullptr,
                                          &event),
            "clEnqueueReadBuffer", job)) {
      return false;
    }
    enqueued(slot, event, k, length, index, begin);
    if (!settle(slot, job)) return false;
    host_copy(index, job, k, length, [&] { copy_streaming(job.host + offset, slot.host, length); });
    return true;
  }

  /// `slot` is busy with the DMA `event` of chunk `k` (`length` bytes), enqueued by worker
  /// `index` at `begin`.
  void enqueued(Slot& slot, cl_event event, std::size_t k, std::size_t length, unsigned index,
                double begin) noexcept {
    slot.busy = cl::Event(event, false);
    slot.chunk = k;
    slot.length = length;
    slot.worker = index;
    slot.enqueued = begin;
    if (tracer_ != nullptr) count_in_flight(1);
  }

  /// The counter "in-flight chunks" (DMAs enqueued and not yet waited for, both lanes) moved by
  /// `change`; when tracing only. Counted and stamped under one lock, so the values follow the
  /// timestamps (the last is the count left).
  void count_in_flight(int change) noexcept {
    std::lock_guard<std::mutex> lock(in_flight_mutex_);
    in_flight_ += change;
    tracer_->counter("in-flight chunks", {{"chunks", nullptr, static_cast<double>(in_flight_)}});
  }

  /// Runs `copy`, chunk `k`'s host copy of `length` bytes by worker `index`; when tracing, a span
  /// on the worker's track.
  template <class Copy>
  void host_copy(unsigned index, const Job& job, std::size_t k, std::size_t length,
                 Copy copy) noexcept {
    if (tracer_ == nullptr) {
      copy();
      return;
    }
    const double begin = trace_now();
    copy();
    tracer_->span(job.lane->copy_tracks[index], "chunk host copy", begin, trace_now(),
                  {{"chunk", nullptr, static_cast<double>(k)},
                   {"bytes", nullptr, static_cast<double>(length)}});
  }

  /// Waits, once (`ready` remembers it), for the work queued before the call; false (and the job
  /// marked failed) if it failed.
  bool waited_before(bool& ready, Job& job) noexcept {
    return ready || (ready = ok(Queue::wait_code(job.after), "the work queued before", job));
  }

  /// Waits for the slot's last DMA; false (and the job marked failed) if it failed.
  /// When tracing, the DMA's span from its enqueue until this wait returned: the host's view of
  /// the device (it may overlap the other slots' DMAs).
  bool settle(Slot& slot, Job& job) noexcept {
    if (slot.busy() == nullptr) return true;
    const cl_int err = Queue::wait_code(slot.busy());
    slot.busy = cl::Event();
    if (tracer_ != nullptr) {
      count_in_flight(-1);
      tracer_->overlapping(job.lane->dma_track, "chunk DMA (host view)", slot.enqueued, trace_now(),
                           {{"chunk", nullptr, static_cast<double>(slot.chunk)},
                            {"bytes", nullptr, static_cast<double>(slot.length)},
                            {"copy thread", nullptr, static_cast<double>(slot.worker)}});
    }
    return ok(err, "a chunk's DMA", job);
  }

  bool ok(cl_int err, const char* call, Job& job) noexcept {
    if (err == CL_SUCCESS) return true;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!job.failed.exchange(true)) {
      job.error = err;
      job.call = call;
    }
    return false;
  }

  /// The lane's pinned slots (as many of slot_count_ as the pool's budget holds, asked for again
  /// at each transfer until the lane has them all) and threads. On its turn only.
  void ensure_slots(Lane& lane, const char* operation) {
    // Mapped on the lane's queue: the main queue may be held by a barrier that waits for this
    // very transfer.
    const Queue queue(cl::CommandQueue(lane.queue, true));
    lane.slots.reserve(slot_count_);
    while (lane.slots.size() < slot_count_) {
      Slot slot;
      slot.block = pinned_.take(operation, chunk_bytes_, queue);
      if (!slot.block) break;
      slot.host = slot.block.data();
      lane.slots.push_back(std::move(slot));
    }
    if (!lane.workers) lane.workers = std::make_unique<WorkerPool>(threads_);
    if (tracer_ != nullptr && lane.copy_tracks.empty()) trace_lane(lane);
  }

  /// The lane's tracks: each worker's host copies, and its DMAs as the host sees them.
  void trace_lane(Lane& lane) {
    const std::string direction = &lane == &lanes_[0] ? "uploads" : "downloads";
    std::vector<int> tracks;  // set whole, or not at all
    for (unsigned i = 0; i < threads_; ++i) {
      tracks.push_back(
          tracer_->track("staging copy thread " + std::to_string(i) + ", " + direction));
    }
    lane.dma_track = tracer_->track("device (host's view), " + direction);
    lane.copy_tracks.swap(tracks);
  }

  const DeviceContext& device_;
  PinnedPool& pinned_;
  Tracer* const tracer_;  // null: not tracing
  std::mutex in_flight_mutex_;
  int in_flight_ = 0;  // when tracing, under in_flight_mutex_: DMAs enqueued, not waited for
  const std::size_t chunk_bytes_;
  const std::size_t slot_count_;
  const unsigned threads_;  // at most slot_count_ / 2: each thread has two slots or more
  Lane lanes_[2];           // uploads, downloads

  std::mutex order_;  // a place and the markers (and barrier) of one transfer, together
  std::mutex turn_mutex_;
  std::condition_variable turn_;

  std::mutex mutex_;  // guards a job's first error
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_STAGING_HPP
