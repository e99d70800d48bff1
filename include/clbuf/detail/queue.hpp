// SPDX-License-Identifier: MIT
// Checked queue operations: each wraps one OpenCL call behind CLBUF_CL and turns a failure into
// an Error naming the operation and the call (the shape of Boost.Compute's command_queue). The
// queue is in order; `blocking` calls return when the command has completed.
#ifndef CLBUF_DETAIL_QUEUE_HPP
#define CLBUF_DETAIL_QUEUE_HPP

#include <clbuf/detail/event.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

class Queue {
 public:
  Queue() = default;
  explicit Queue(cl::CommandQueue queue) noexcept : queue_(std::move(queue)) {}

  /// A new in-order queue of `context` on `device`. Wraps clCreateCommandQueue: the entry point
  /// every driver has (1.2 ones lack the 2.0 clCreateCommandQueueWithProperties); the C headers
  /// mark it deprecated from 2.0 on unless CL_USE_DEPRECATED_OPENCL_1_2_APIS, which is the
  /// application's to choose, so the warning is silenced here, for this call alone.
  /// `properties`: 0 (in order, no profiling) or CL_QUEUE_PROFILING_ENABLE.
  static Queue create(const char* operation, cl_context context, cl_device_id device,
                      cl_command_queue_properties properties = 0) {
    cl_int err = CL_SUCCESS;
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#elif defined(_MSC_VER)
#pragma warning(push)
#pragma warning(disable : 4996)
#endif
    Queue queue(
        cl::CommandQueue(CLBUF_CL(clCreateCommandQueue)(context, device, properties, &err), false));
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#elif defined(_MSC_VER)
#pragma warning(pop)
#endif
    check(err, operation, "clCreateCommandQueue");
    return queue;
  }

  /// A new in-order queue of `context` on the device of `other` (`properties` as create()).
  static Queue beside(const char* operation, cl_context context, const Queue& other,
                      cl_command_queue_properties properties = 0) {
    cl_device_id device = nullptr;
    check(CLBUF_CL(clGetCommandQueueInfo)(other.get(), CL_QUEUE_DEVICE, sizeof(device), &device,
                                          nullptr),
          operation, "clGetCommandQueueInfo");
    return create(operation, context, device, properties);
  }

  const cl::CommandQueue& handle() const noexcept { return queue_; }
  cl_command_queue get() const noexcept { return queue_(); }

  /// Host -> buffer. Non-blocking calls return the command's event; the host memory must
  /// stay alive until it completes.
  cl::Event write(const char* operation, cl_mem buffer, std::size_t offset, std::size_t bytes,
                  const void* host, bool blocking) const {
    cl_event event = nullptr;
    check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), buffer, blocking ? CL_TRUE : CL_FALSE, offset,
                                         bytes, host, 0, nullptr, blocking ? nullptr : &event),
          operation, "clEnqueueWriteBuffer");
    return cl::Event(event, false);
  }

  /// Buffer -> host; as write().
  cl::Event read(const char* operation, cl_mem buffer, std::size_t offset, std::size_t bytes,
                 void* host, bool blocking) const {
    cl_event event = nullptr;
    check(CLBUF_CL(clEnqueueReadBuffer)(queue_(), buffer, blocking ? CL_TRUE : CL_FALSE, offset,
                                        bytes, host, 0, nullptr, blocking ? nullptr : &event),
          operation, "clEnqueueReadBuffer");
    return cl::Event(event, false);
  }

  /// Buffer -> host, non-blocking, once the commands of `wait` have completed; returns the
  /// command's event. A failed one of them fails the read (its event's status, or at once with
  /// CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST when it had failed before the call).
  cl::Event read_after_events(const char* operation, cl_mem buffer, std::size_t offset,
                              std::size_t bytes, void* host,
                              const std::vector<cl_event>& wait) const {
    cl_event event = nullptr;
    check(CLBUF_CL(clEnqueueReadBuffer)(queue_(), buffer, CL_FALSE, offset, bytes, host,
                                        static_cast<cl_uint>(wait.size()),
                                        wait.empty() ? nullptr : wait.data(), &event),
          operation, "clEnqueueReadBuffer");
    return cl::Event(event, false);
  }

  /// Buffer -> host, blocking, once the `count` commands of `wait` have completed; the driver's
  /// code (CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST when one of them failed), unchecked.
  cl_int read_after(cl_mem buffer, std::size_t offset, std::size_t bytes, void* host, cl_uint count,
                    const cl_event* wait) const noexcept {
    return CLBUF_CL(clEnqueueReadBuffer)(queue_(), buffer, CL_TRUE, offset, bytes, host, count,
                                         count == 0 ? nullptr : wait, nullptr);
  }

  /// Buffer -> buffer on the device; returns the command's event.
  cl::Event copy(const char* operation, cl_mem src, cl_mem dst, std::size_t src_offset,
                 std::size_t dst_offset, std::size_t bytes,
                 const cl::Event* after = nullptr) const {
    cl_event event = nullptr;
    const cl_event wait = after != nullptr ? (*after)() : nullptr;
    check(CLBUF_CL(clEnqueueCopyBuffer)(queue_(), src, dst, src_offset, dst_offset, bytes,
                                        wait != nullptr ? 1 : 0, wait != nullptr ? &wait : nullptr,
                                        &event),
          operation, "clEnqueueCopyBuffer");
    return cl::Event(event, false);
  }

  /// Repeats `pattern` (`size` bytes, a power of two up to 128) over `bytes` bytes.
  cl::Event fill(const char* operation, cl_mem buffer, const void* pattern, std::size_t size,
                 std::size_t offset, std::size_t bytes) const {
    cl_event event = nullptr;
    check(CLBUF_CL(clEnqueueFillBuffer)(queue_(), buffer, pattern, size, offset, bytes, 0, nullptr,
                                        &event),
          operation, "clEnqueueFillBuffer");
    return cl::Event(event, false);
  }

  /// A rectangular write (`to_device`) or read between `buffer` and `host`; origins, region and
  /// pitches in bytes as OpenCL takes them. Non-blocking calls return the command's event.
  cl::Event transfer_rect(const char* operation, bool to_device, cl_mem buffer,
                          const std::size_t buffer_origin[3], const std::size_t host_origin[3],
                          const std::size_t region[3], std::size_t buffer_row_pitch,
                          std::size_t buffer_slice_pitch, std::size_t host_row_pitch,
                          std::size_t host_slice_pitch, void* host, bool blocking) const {
    cl_event event = nullptr;
    const auto enqueue = [&](auto call, const char* name) {
      check(call(queue_(), buffer, blocking ? CL_TRUE : CL_FALSE, buffer_origin, host_origin,
                 region, buffer_row_pitch, buffer_slice_pitch, host_row_pitch, host_slice_pitch,
                 host, 0, nullptr, blocking ? nullptr : &event),
            operation, name);
    };
    if (to_device) {
      enqueue(CLBUF_CL(clEnqueueWriteBufferRect), "clEnqueueWriteBufferRect");
    } else {
      enqueue(CLBUF_CL(clEnqueueReadBufferRect), "clEnqueueReadBufferRect");
    }
    return cl::Event(event, false);
  }

  /// A rectangular copy on the device; returns the command's event.
  cl::Event copy_rect(const char* operation, cl_mem src, cl_mem dst,
                      const std::size_t src_origin[3], const std::size_t dst_origin[3],
                      const std::size_t region[3], std::size_t src_row_pitch,
                      std::size_t src_slice_pitch, std::size_t dst_row_pitch,
                      std::size_t dst_slice_pitch) const {
    cl_event event = nullptr;
    check(CLBUF_CL(clEnqueueCopyBufferRect)(queue_(), src, dst, src_origin, dst_origin, region,
                                            src_row_pitch, src_slice_pitch, dst_row_pitch,
                                            dst_slice_pitch, 0, nullptr, &event),
          operation, "clEnqueueCopyBufferRect");
    return cl::Event(event, false);
  }

  /// Gives the queue a 4-byte buffer of its own for marker() (DeviceContext does, on OpenCL
  /// 1.2 devices); only this queue may write it.
  void set_fence(cl::Buffer fence) noexcept { fence_ = std::move(fence); }

  /// A marker: its event completes when every command queued before it has. With a fence
  /// buffer, a 4-byte write into it; without, clEnqueueMarkerWithWaitList (OpenCL 1.2). NVIDIA's
  /// driver completes a marker only once the device's other queues are idle too (on the H200 a
  /// marker on an idle queue of its own completed when a 40 ms kernel on another queue did,
  /// bench/async_overlap), which held every staged transfer behind the application's kernels; a
  /// write completes in its own queue's order.
  cl::Event marker(const char* operation) const {
    cl_event event = nullptr;
    if (fence_() != nullptr) {
      static const cl_uint zero = 0;  // read by the driver until the write completes: static
      check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), fence_(), CL_FALSE, 0, sizeof(zero), &zero, 0,
                                           nullptr, &event),
            operation, "clEnqueueWriteBuffer (a marker)");
    } else {
      check(CLBUF_CL(clEnqueueMarkerWithWaitList)(queue_(), 0, nullptr, &event), operation,
            "clEnqueueMarkerWithWaitList");
    }
    return cl::Event(event, false);
  }

  /// Holds every later command of the queue until each of `events` has completed; returns the
  /// barrier's event. Wraps clEnqueueBarrierWithWaitList (OpenCL 1.2).
  cl::Event barrier(const char* operation, const std::vector<cl_event>& events) const {
    cl_event event = nullptr;
    check(CLBUF_CL(clEnqueueBarrierWithWaitList)(queue_(), static_cast<cl_uint>(events.size()),
                                                 events.empty() ? nullptr : events.data(), &event),
          operation, "clEnqueueBarrierWithWaitList");
    return cl::Event(event, false);
  }

  /// Maps `bytes` at `offset` for the host (blocking).
  void* map(const char* operation, cl_mem buffer, cl_map_flags flags, std::size_t offset,
            std::size_t bytes) const {
    cl_int err = CL_SUCCESS;
    void* mapped = CLBUF_CL(clEnqueueMapBuffer)(queue_(), buffer, CL_TRUE, flags, offset, bytes, 0,
                                                nullptr, nullptr, &err);
    check(err, operation, "clEnqueueMapBuffer");
    return mapped;
  }

  /// Unmaps `data` of `buffer`. A mapping holds a reference to its buffer, so a lost unmap would
  /// leak the buffer, its context and its queue: a failed unmap is retried once after the queue
  /// has drained. Returns the last code; `event` (may be null) receives the unmap's event.
  cl_int unmap(cl_mem buffer, void* data, cl_event* event) const noexcept {
    cl_int err = CLBUF_CL(clEnqueueUnmapMemObject)(queue_(), buffer, data, 0, nullptr, event);
    if (err != CL_SUCCESS) {
      CLBUF_CL(clFinish)(queue_());
      err = CLBUF_CL(clEnqueueUnmapMemObject)(queue_(), buffer, data, 0, nullptr, event);
    }
    return err;
  }

  /// clFinish's code, for cleanup(), which must release everything before it reports.
  cl_int finish_code() const noexcept {
    return queue_() != nullptr ? CLBUF_CL(clFinish)(queue_()) : CL_SUCCESS;
  }

  void finish(const char* operation) const {
    check(CLBUF_CL(clFinish)(queue_()), operation, "clFinish");
  }

  /// Without a flush an asynchronous transfer may never start, and ready() would poll forever.
  void flush(const char* operation) const {
    check(CLBUF_CL(clFlush)(queue_()), operation, "clFlush");
  }

  /// Blocks until `event`'s command has completed.
  static void wait(const char* operation, const cl::Event& event) {
    cl_event handle = event();
    check(CLBUF_CL(clWaitForEvents)(1, &handle), operation, "clWaitForEvents");
  }

  /// Blocks until `event`'s command has ended; its own error (a negative execution status) when
  /// it failed, else the wait's code (clWaitForEvents says only that some event failed).
  /// A status that cannot be asked leaves the wait's code.
  static cl_int wait_code(cl_event event) noexcept {
    const EventEnd end = wait_for_event(event);
    return end.asked.failed() ? end.asked.status : end.waited;
  }

  /// Blocks until every one of `events` (of one context) has completed.
  static void wait(const char* operation, const std::vector<cl_event>& events) {
    if (events.empty()) return;
    check(CLBUF_CL(clWaitForEvents)(static_cast<cl_uint>(events.size()), events.data()), operation,
          "clWaitForEvents");
  }

 private:
  cl::CommandQueue queue_;
  cl::Buffer fence_;  // marker()'s, if set
};

/// Events kept until their commands have ended: the barriers that hold a queue for events clbuf
/// does not own (an application's `after`). PoCL 3.1 aborts the process in clSetUserEventStatus
/// (pocl_update_event_failed) when an event fails while a barrier waiting for it has already
/// been released by its owner; a barrier still referenced fails like any command. Each keep()
/// first releases those that have ended. Thread-safe.
class KeptEvents {
 public:
  void keep(cl::Event event) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.erase(std::remove_if(events_.begin(), events_.end(), ended), events_.end());
    events_.push_back(std::move(event));  // std::bad_alloc: released, as before this class
  }
  /// Releases every event (call once the queue has finished).
  void clear() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.clear();
  }

 private:
  /// Completed or failed; one that cannot be asked is kept.
  static bool ended(const cl::Event& event) noexcept { return event_status(event()).ended(); }

  std::mutex mutex_;
  std::vector<cl::Event> events_;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_QUEUE_HPP
