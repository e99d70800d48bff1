// Pinned staging for large transfers between pageable host memory and a discrete device.
// Drivers move pageable memory at a fraction of the bus speed (7-17 GB/s against 55 GB/s pinned
// on an H200), so clbuf copies through a few pinned chunks (CL_MEM_ALLOC_HOST_PTR, mapped once),
// pipelined: the host copies chunk k+1 while the device transfers chunk k.
#ifndef CLBUF_STAGING_HPP
#define CLBUF_STAGING_HPP

#include <clbuf/detail/host_memory.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace clbuf {
namespace detail {

class Stager {
 public:
  /// `chunk_bytes` per chunk, `chunks` of them (at least 2), `copy_threads` for the host copies.
  Stager(cl::Context context, cl::CommandQueue queue, std::size_t chunk_bytes, std::size_t chunks,
         ParallelCopier& copier)
      : context_(std::move(context)),
        queue_(std::move(queue)),
        chunk_bytes_(std::max<std::size_t>(chunk_bytes, 4096)),
        chunk_count_(std::max<std::size_t>(chunks, 2)),
        copier_(copier) {}

  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  ~Stager() {
    for (Slot& slot : slots_) {
      if (slot.host != nullptr) {
        CLBUF_CL(clEnqueueUnmapMemObject)(queue_(), slot.buffer(), slot.host, 0, nullptr, nullptr);
      }
    }
    if (queue_() != nullptr) CLBUF_CL(clFinish)(queue_());
  }

  std::size_t pinned_bytes() const noexcept { return slots_.size() * chunk_bytes_; }

  /// Host `src` -> `dst` at `dst_offset`; returns when the device has the data.
  void write(cl_mem dst, std::size_t dst_offset, const void* src, std::size_t bytes,
             const char* operation) {
    std::lock_guard<std::mutex> lock(mutex_);
    ensure_slots(operation);
    const char* from = static_cast<const char*>(src);
    Drain drain{slots_};
    for (std::size_t done = 0, k = 0; done < bytes; done += chunk_bytes_, ++k) {
      Slot& slot = slots_[k % slots_.size()];
      wait_for(slot, operation);
      const std::size_t length = std::min(chunk_bytes_, bytes - done);
      copier_.copy(slot.host, from + done, length);
      cl_event event = nullptr;
      check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), dst, CL_FALSE, dst_offset + done, length,
                                           slot.host, 0, nullptr, &event),
            operation, "clEnqueueWriteBuffer");
      slot.busy = cl::Event(event, false);
      check(CLBUF_CL(clFlush)(queue_()), operation, "clFlush");
    }
    for (Slot& slot : slots_) wait_for(slot, operation);
  }

  /// `src` at `src_offset` -> host `dst`; returns when `dst` holds the data.
  void read(cl_mem src, std::size_t src_offset, void* dst, std::size_t bytes,
            const char* operation) {
    std::lock_guard<std::mutex> lock(mutex_);
    ensure_slots(operation);
    char* to = static_cast<char*>(dst);
    Drain drain{slots_};
    const std::size_t chunks = (bytes + chunk_bytes_ - 1) / chunk_bytes_;
    auto enqueue = [&](std::size_t k) {
      Slot& slot = slots_[k % slots_.size()];
      const std::size_t offset = k * chunk_bytes_;
      cl_event event = nullptr;
      check(CLBUF_CL(clEnqueueReadBuffer)(queue_(), src, CL_FALSE, src_offset + offset,
                                          std::min(chunk_bytes_, bytes - offset), slot.host, 0,
                                          nullptr, &event),
            operation, "clEnqueueReadBuffer");
      slot.busy = cl::Event(event, false);
    };
    for (std::size_t k = 0; k < std::min(chunks, slots_.size()); ++k) enqueue(k);
    check(CLBUF_CL(clFlush)(queue_()), operation, "clFlush");
    for (std::size_t k = 0; k < chunks; ++k) {
      Slot& slot = slots_[k % slots_.size()];
      wait_for(slot, operation);
      const std::size_t offset = k * chunk_bytes_;
      copier_.copy(to + offset, slot.host, std::min(chunk_bytes_, bytes - offset));
      if (k + slots_.size() < chunks) {
        enqueue(k + slots_.size());
        check(CLBUF_CL(clFlush)(queue_()), operation, "clFlush");
      }
    }
  }

 private:
  struct Slot {
    cl::Buffer buffer;
    void* host = nullptr;
    cl::Event busy;
  };

  /// On every exit, an exception included, waits until no chunk is in flight: a slot is never
  /// reused or freed while the device may still touch it.
  struct Drain {
    std::vector<Slot>& slots;
    ~Drain() {
      for (Slot& slot : slots) {
        if (slot.busy() != nullptr) {
          cl_event event = slot.busy();
          CLBUF_CL(clWaitForEvents)(1, &event);
          slot.busy = cl::Event();
        }
      }
    }
  };

  void wait_for(Slot& slot, const char* operation) {
    if (slot.busy() == nullptr) return;
    cl_event event = slot.busy();
    const cl_int err = CLBUF_CL(clWaitForEvents)(1, &event);
    cl_int status = CL_COMPLETE;
    CLBUF_CL(clGetEventInfo)
    (event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, nullptr);
    slot.busy = cl::Event();
    if (status < 0) fail(operation, status, "a staged chunk failed on the device");
    check(err, operation, "clWaitForEvents");
  }

  void ensure_slots(const char* operation) {
    while (slots_.size() < chunk_count_) {
      cl_int err = CL_SUCCESS;
      Slot slot;
      slot.buffer =
          cl::Buffer(CLBUF_CL(clCreateBuffer)(context_(), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                                              chunk_bytes_, nullptr, &err),
                     false);
      check(err, operation, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)");
      slot.host =
          CLBUF_CL(clEnqueueMapBuffer)(queue_(), slot.buffer(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                       0, chunk_bytes_, 0, nullptr, nullptr, &err);
      check(err, operation, "clEnqueueMapBuffer");
      slots_.push_back(std::move(slot));
    }
  }

  std::mutex mutex_;  // one staged transfer at a time: the chunks are shared
  cl::Context context_;
  cl::CommandQueue queue_;
  const std::size_t chunk_bytes_;
  const std::size_t chunk_count_;
  ParallelCopier& copier_;  // the manager's, which outlives this
  std::vector<Slot> slots_;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_STAGING_HPP
