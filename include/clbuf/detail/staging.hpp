// SPDX-License-Identifier: MIT
// Pinned staging for large transfers between pageable host memory and a discrete device.
// Drivers move pageable memory at a fraction of the bus speed (7-17 GB/s against 55 GB/s pinned
// on an H200), and one host thread copies only ~10 GB/s, so clbuf splits a transfer into chunks
// that several threads take in turn: each copies its chunk into a pinned slot of its own
// (CL_MEM_ALLOC_HOST_PTR, mapped once) and enqueues the DMA, so host copies of some chunks
// overlap the device transfer of others. Pinned memory is bounded: chunk bytes x slots.
//
// Staged transfers, blocking and asynchronous, run one at a time in the order of their calls
// (tickets), on a side queue of their own: each takes a marker of the manager's queue at the call
// and waits on the host for it before its first chunk's DMA, so the chunks see everything queued
// before them. An asynchronous one also holds the manager's queue behind a barrier until its last
// chunk has landed (async.hpp); a blocking one returns only then. Neither can wait for the other
// out of order, so no mix of them deadlocks. Nothing on the side queue ever waits for an event:
// a copy between contexts (cross_context.hpp) that reads or writes on the same side queue is
// only ever behind DMAs that can run, never behind a chunk held up by that copy's own barrier.
#ifndef CLBUF_DETAIL_STAGING_HPP
#define CLBUF_DETAIL_STAGING_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/host_memory.hpp>
#include <clbuf/detail/pinned_block.hpp>
#include <clbuf/detail/worker_pool.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
  /// `slots` pinned chunks of `chunk_bytes`, shared out among up to `threads` threads, for
  /// `device` (OpenCL 1.2: markers and barriers), which must outlive the Stager.
  Stager(const DeviceContext& device, std::size_t chunk_bytes, std::size_t slots, unsigned threads)
      : device_(device),
        chunk_bytes_(std::max<std::size_t>(chunk_bytes, 4096)),
        slot_count_(std::max<std::size_t>(slots, 2)),
        threads_(static_cast<unsigned>(
            std::clamp<std::size_t>(threads, 1, std::max<std::size_t>(slot_count_ / 2, 1)))) {}

  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  /// Call only once no staged transfer is in flight (the engine drains its Background first).
  ~Stager() {
    slots_.clear();  // unmaps every slot
    if (side_ != nullptr) CLBUF_CL(clFinish)(side_);
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
    std::function<void()> task = [this, job]() noexcept { finish_async(*job); };
    Started started{cl::Event(), job->outcome};
    // The turn and the place on the background thread are taken together (async.hpp).
    std::lock_guard<std::mutex> submitting(submission_mutex());
    {
      std::lock_guard<std::mutex> order(order_);
      if (side_ == nullptr) side_ = device_.side_queue(operation).get();
      job->before = main().marker(operation);
      started.event = main().barrier(operation, {job->landed.get()});
      job->ticket = next_ticket_++;
    }
    background.post(std::move(task));
    return started;
  }

 private:
  struct Slot {
    PinnedBlock block;
    void* host = nullptr;  // block.data()
    cl::Event busy;        // the DMA that last used this slot
  };

  struct Job {
    bool to_device = true;
    cl_mem memory = nullptr;
    std::size_t memory_offset = 0;
    char* host = nullptr;
    std::size_t bytes = 0;
    std::size_t chunk = 0;  // bytes per chunk for this job, at most a slot
    std::size_t chunks = 0;
    cl_event after = nullptr;  // the main queue's marker, waited for before any DMA
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
    std::uint64_t ticket = 0;
  };

  /// The background half of submit(): waits for its turn, moves the bytes, reports, and lets
  /// the main queue go on.
  void finish_async(AsyncJob& job) noexcept {
    Turn turn(*this, job.ticket);
    const cl_int err = CLBUF_CL(clFlush)(main().get());  // the marker must reach the device
    if (err != CL_SUCCESS) {
      job.outcome->failed(job.operation, err, "clFlush failed before a staged transfer");
    } else {
      try {
        turn.wait();
        run(job.to_device, job.memory(), job.offset, job.host, job.bytes, job.before(),
            job.operation);
      } catch (const Error& e) {
        job.outcome->failed(e);
      } catch (...) {
        job.outcome->failed(job.operation, CL_OUT_OF_HOST_MEMORY,
                            "a staged transfer ran out of host memory");
      }
    }
    turn.release();
    job.keep.reset();
    job.landed.complete();
    CLBUF_CL(clFlush)(main().get());  // lets the barrier, and what follows it, run
  }

  /// A place in the order of staged transfers; waits for its turn, and gives it up on every way
  /// out so that later transfers are never left waiting.
  class Turn {
   public:
    Turn(Stager& stager, std::uint64_t ticket) noexcept : stager_(stager), ticket_(ticket) {}
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn() { release(); }

    void wait() noexcept {
      if (waited_) return;
      std::unique_lock<std::mutex> lock(stager_.turn_mutex_);
      stager_.turn_.wait(lock, [&] { return stager_.serving_ == ticket_; });
      waited_ = true;
    }

    void release() noexcept {
      if (released_) return;
      wait();
      {
        std::lock_guard<std::mutex> lock(stager_.turn_mutex_);
        ++stager_.serving_;
      }
      stager_.turn_.notify_all();
      released_ = true;
    }

   private:
    Stager& stager_;
    const std::uint64_t ticket_;
    bool waited_ = false, released_ = false;
  };

  void blocking(bool to_device, cl_mem memory, std::size_t offset, void* host, std::size_t bytes,
                const char* operation) {
    std::unique_lock<std::mutex> order(order_);
    if (side_ == nullptr) side_ = device_.side_queue(operation).get();
    const cl::Event before = main().marker(operation);
    Turn turn(*this, next_ticket_++);
    order.unlock();
    main().flush(operation);
    turn.wait();
    run(to_device, memory, offset, host, bytes, before(), operation);
  }

  const Queue& main() const noexcept { return device_.queue(); }

  /// The pipeline, on the side queue, once it is this transfer's turn.
  void run(bool to_device, cl_mem memory, std::size_t offset, void* host, std::size_t bytes,
           cl_event after, const char* operation) {
    ensure_slots(operation);
    Job job;
    job.to_device = to_device;
    job.memory = memory;
    job.memory_offset = offset;
    job.host = static_cast<char*>(host);
    job.bytes = bytes;
    job.after = after;
    // Mid-sized transfers are cut finer so that every thread gets a share, but not below
    // 256 KiB: smaller DMAs cost more than they save.
    const std::size_t min_chunk = std::min<std::size_t>(std::size_t{256} << 10, chunk_bytes_);
    job.chunk =
        std::clamp<std::size_t>((bytes / threads_ + 4095) / 4096 * 4096, min_chunk, chunk_bytes_);
    job.chunks = (bytes + job.chunk - 1) / job.chunk;
    auto task = [this, &job](unsigned index) noexcept { work(index, job); };
    workers_.run(static_cast<unsigned>(std::min<std::size_t>(threads_, job.chunks)), task);
    if (job.failed) fail(operation, job.error, job.call + " failed in a staged transfer");
  }

  /// Worker `index` takes chunks until none is left, using its own slots in turn.
  void work(unsigned index, Job& job) noexcept {
    const std::size_t per_worker = slot_count_ / threads_;
    Slot* slots = &slots_[index * per_worker];
    bool ready = job.after == nullptr;  // whether the work queued before the call has finished
    std::size_t turn = 0;
    for (std::size_t k; !job.failed && (k = job.next.fetch_add(1)) < job.chunks;) {
      Slot& slot = slots[turn++ % per_worker];
      if (!settle(slot, job)) break;
      const std::size_t offset = k * job.chunk;
      const std::size_t length = std::min(job.chunk, job.bytes - offset);
      cl_event event = nullptr;
      if (job.to_device) {
        copy_streaming(slot.host, job.host + offset, length);
        if (!ready && !(ready = ok(wait_for(job.after), "the work queued before", job))) break;
        if (!ok(CLBUF_CL(clEnqueueWriteBuffer)(side_, job.memory, CL_FALSE,
                                               job.memory_offset + offset, length, slot.host, 0,
                                               nullptr, &event),
                "clEnqueueWriteBuffer", job)) {
          break;
        }
        slot.busy = cl::Event(event, false);
        if (!ok(CLBUF_CL(clFlush)(side_), "clFlush", job)) break;
      } else {
        if (!ready && !(ready = ok(wait_for(job.after), "the work queued before", job))) break;
        if (!ok(CLBUF_CL(clEnqueueReadBuffer)(side_, job.memory, CL_FALSE,
                                              job.memory_offset + offset, length, slot.host, 0,
                                              nullptr, &event),
                "clEnqueueReadBuffer", job)) {
          break;
        }
        slot.busy = cl::Event(event, false);
        if (!settle(slot, job)) break;
        copy_streaming(job.host + offset, slot.host, length);
      }
    }
    // Every exit, a failure included, waits until none of this worker's slots is in flight.
    for (std::size_t s = 0; s < per_worker; ++s) settle(slots[s], job);
  }

  /// Waits for the slot's last DMA; false (and the job marked failed) if it failed.
  bool settle(Slot& slot, Job& job) noexcept {
    if (slot.busy() == nullptr) return true;
    const cl_int err = wait_for(slot.busy());
    slot.busy = cl::Event();
    return ok(err, "a chunk's DMA", job);
  }

  /// Waits for `event`; its error if it (or the wait) failed, else CL_SUCCESS.
  static cl_int wait_for(cl_event event) noexcept {
    cl_int err = CLBUF_CL(clWaitForEvents)(1, &event);
    cl_int status = CL_COMPLETE;
    if (CLBUF_CL(clGetEventInfo)(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status,
                                 nullptr) == CL_SUCCESS &&
        status < 0) {
      err = status;
    }
    return err;
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

  /// The pinned slots, mapped on the side queue (the main queue may be held by a barrier that
  /// waits for this very transfer). On its turn only.
  void ensure_slots(const char* operation) {
    while (slots_.size() < slot_count_) {
      Slot slot;
      slot.block = PinnedBlock(device_.context(), device_.side_queue(operation).handle(),
                               chunk_bytes_, operation);
      slot.host = slot.block.data();
      slots_.push_back(std::move(slot));
    }
  }

  const DeviceContext& device_;
  cl_command_queue side_ = nullptr;  // device_.side_queue(): the chunks' queue; under order_
  const std::size_t chunk_bytes_;
  const std::size_t slot_count_;
  const unsigned threads_;  // at most slot_count_ / 2: each thread has two slots or more
  std::vector<Slot> slots_;

  std::mutex order_;  // a ticket and the markers (and barrier) of one transfer, together
  std::uint64_t next_ticket_ = 0;
  std::mutex turn_mutex_;
  std::condition_variable turn_;
  std::uint64_t serving_ = 0;

  std::mutex mutex_;  // guards a job's first error
  WorkerPool workers_{threads_};
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_STAGING_HPP
