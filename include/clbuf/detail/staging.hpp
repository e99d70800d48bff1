// SPDX-License-Identifier: MIT
// Pinned staging for large transfers between pageable host memory and a discrete device.
// Drivers move pageable memory at a fraction of the bus speed (7-17 GB/s against 55 GB/s pinned
// on an H200), and one host thread copies only ~10 GB/s, so clbuf splits a transfer into chunks
// that several threads take in turn: each copies its chunk into a pinned slot of its own
// (CL_MEM_ALLOC_HOST_PTR, mapped once) and enqueues the DMA, so host copies of some chunks
// overlap the device transfer of others. Pinned memory is bounded: chunk bytes x slots.
#ifndef CLBUF_DETAIL_STAGING_HPP
#define CLBUF_DETAIL_STAGING_HPP

#include <clbuf/detail/pinned_block.hpp>
#include <clbuf/detail/worker_pool.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace clbuf {
namespace detail {

class Stager {
 public:
  /// `slots` pinned chunks of `chunk_bytes`, shared out among up to `threads` threads.
  Stager(cl::Context context, cl::CommandQueue queue, std::size_t chunk_bytes, std::size_t slots,
         unsigned threads)
      : context_(std::move(context)),
        queue_(std::move(queue)),
        chunk_bytes_(std::max<std::size_t>(chunk_bytes, 4096)),
        slot_count_(std::max<std::size_t>(slots, 2)),
        threads_(static_cast<unsigned>(
            std::clamp<std::size_t>(threads, 1, std::max<std::size_t>(slot_count_ / 2, 1)))) {}

  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  ~Stager() {
    slots_.clear();  // unmaps every slot
    if (queue_() != nullptr) CLBUF_CL(clFinish)(queue_());
  }

  /// Host `src` -> `dst` at `dst_offset`; returns when the device has the data.
  void write(cl_mem dst, std::size_t dst_offset, const void* src, std::size_t bytes,
             const char* operation) {
    run(true, dst, dst_offset, const_cast<void*>(src), bytes, operation);
  }

  /// `src` at `src_offset` -> host `dst`; returns when `dst` holds the data.
  void read(cl_mem src, std::size_t src_offset, void* dst, std::size_t bytes,
            const char* operation) {
    run(false, src, src_offset, dst, bytes, operation);
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
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    cl_int error = CL_SUCCESS;  // the first failure, under mutex_
    std::string call;
  };

  void run(bool to_device, cl_mem memory, std::size_t offset, void* host, std::size_t bytes,
           const char* operation) {
    std::lock_guard<std::mutex> serial(serial_);  // one staged transfer at a time
    ensure_slots(operation);
    Job job;
    job.to_device = to_device;
    job.memory = memory;
    job.memory_offset = offset;
    job.host = static_cast<char*>(host);
    job.bytes = bytes;
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
    std::size_t turn = 0;
    for (std::size_t k; !job.failed && (k = job.next.fetch_add(1)) < job.chunks;) {
      Slot& slot = slots[turn++ % per_worker];
      if (!settle(slot, job)) break;
      const std::size_t offset = k * job.chunk;
      const std::size_t length = std::min(job.chunk, job.bytes - offset);
      cl_event event = nullptr;
      if (job.to_device) {
        std::memcpy(slot.host, job.host + offset, length);
        if (!ok(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), job.memory, CL_FALSE,
                                               job.memory_offset + offset, length, slot.host, 0,
                                               nullptr, &event),
                "clEnqueueWriteBuffer", job)) {
          break;
        }
        slot.busy = cl::Event(event, false);
        if (!ok(CLBUF_CL(clFlush)(queue_()), "clFlush", job)) break;
      } else {
        if (!ok(CLBUF_CL(clEnqueueReadBuffer)(queue_(), job.memory, CL_FALSE,
                                              job.memory_offset + offset, length, slot.host, 0,
                                              nullptr, &event),
                "clEnqueueReadBuffer", job)) {
          break;
        }
        slot.busy = cl::Event(event, false);
        if (!settle(slot, job)) break;
        std::memcpy(job.host + offset, slot.host, length);
      }
    }
    // Every exit, a failure included, waits until none of this worker's slots is in flight.
    for (std::size_t s = 0; s < per_worker; ++s) settle(slots[s], job);
  }

  /// Waits for the slot's last DMA; false (and the job marked failed) if it failed.
  bool settle(Slot& slot, Job& job) noexcept {
    if (slot.busy() == nullptr) return true;
    cl_event event = slot.busy();
    cl_int err = CLBUF_CL(clWaitForEvents)(1, &event);
    cl_int status = CL_COMPLETE;
    if (CLBUF_CL(clGetEventInfo)(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status,
                                 nullptr) == CL_SUCCESS &&
        status < 0) {
      err = status;
    }
    slot.busy = cl::Event();
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

  void ensure_slots(const char* operation) {
    while (slots_.size() < slot_count_) {
      Slot slot;
      slot.block = PinnedBlock(context_, queue_, chunk_bytes_, operation);
      slot.host = slot.block.data();
      slots_.push_back(std::move(slot));
    }
  }

  std::mutex serial_;
  cl::Context context_;
  cl::CommandQueue queue_;
  const std::size_t chunk_bytes_;
  const std::size_t slot_count_;
  const unsigned threads_;  // at most slot_count_ / 2: each thread has two slots or more
  std::vector<Slot> slots_;

  std::mutex mutex_;  // guards a job's first error
  WorkerPool workers_{threads_};
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_STAGING_HPP
