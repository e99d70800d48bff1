// SPDX-License-Identifier: MIT
// The transfer engine's chunk calls, for a layer that pipelines chunks of its own (clbuf::mpi's
// streams, collectives and halo exchanges): byte ranges of a buffer read into or written out of
// host memory the layer holds (a lease of the manager's pinned pool), mapped, packed or reduced
// by a kernel, each one command on the manager's queue in order after the work before it.
// TransferEngine::chunk_io() makes one; it retains the queue, so it keeps working (and failing
// with OpenCL's own errors) after the manager's cleanup(). The layer makes no OpenCL call itself.
#ifndef CLBUF_DETAIL_CHUNK_IO_HPP
#define CLBUF_DETAIL_CHUNK_IO_HPP

#include <clbuf/detail/event.hpp>
#include <clbuf/detail/kernel_cache.hpp>
#include <clbuf/detail/pinned_pool.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace clbuf {
namespace detail {

/// Host memory for one chunk: a lease of the manager's pinned pool, or, when its budget holds
/// none, host memory of clbuf's (the driver then moves it at pageable speed), so that a
/// pipeline never waits on the budget: its own bounds (chunks in flight) keep it in check.
class HostChunk {
 public:
  HostChunk() = default;
  /// A chunk of `bytes` for commands on `queue`.
  HostChunk(PinnedPool& pool, const char* operation, std::size_t bytes, const Queue& queue)
      : pinned_(pool.take(operation, bytes, queue)) {
    if (!pinned_) {
      pageable_ = guard_host_memory(operation, bytes, "a chunk of host memory",
                                    [&] { return std::unique_ptr<char[]>(new char[bytes]); });
    }
  }

  explicit operator bool() const noexcept { return pinned_ || pageable_; }
  void* data() const noexcept { return pinned_ ? pinned_.data() : pageable_.get(); }
  bool pinned() const noexcept { return static_cast<bool>(pinned_); }

  /// Gives the memory back now (to the pool, or frees it).
  void reset() noexcept {
    pinned_.reset();
    pageable_.reset();
  }

  /// Leaves the memory to something outside clbuf that may still write it (an MPI request of a
  /// failed transfer): never freed, no longer counted.
  void leak() noexcept {
    pinned_.leak();
    static_cast<void>(pageable_.release());
  }

 private:
  PinnedPool::Lease pinned_;
  std::unique_ptr<char[]> pageable_;
};

class ChunkIo {
 public:
  ChunkIo() = default;
  ChunkIo(Queue queue, PinnedPool& pinned) noexcept : queue_(std::move(queue)), pinned_(&pinned) {}

  /// Host memory for a chunk of `bytes`: pinned from the manager's pool where its budget allows.
  HostChunk chunk(const char* operation, std::size_t bytes) const {
    return HostChunk(*pinned_, operation, bytes, queue_);
  }

  /// `bytes` at byte `offset` of `buffer` -> host `into`. Blocking, or started (flushed) with
  /// its event returned; `into` stays alive and untouched until the event completes.
  cl::Event read(const char* operation, cl_mem buffer, std::size_t offset, std::size_t bytes,
                 void* into, bool blocking) const {
    cl::Event event = queue_.read(operation, buffer, offset, bytes, into, blocking);
    if (!blocking) queue_.flush(operation);
    return event;
  }

  /// As read(), started once the commands of `after` have completed (events of other queues,
  /// which may fail: the read then fails with them and `into` is left as it was).
  cl::Event read_after(const char* operation, cl_mem buffer, std::size_t offset, std::size_t bytes,
                       void* into, const std::vector<cl_event>& after) const {
    cl::Event event = queue_.read_after_events(operation, buffer, offset, bytes, into, after);
    queue_.flush(operation);
    return event;
  }

  /// Holds the queue's later commands until each of `events` has completed; returns the
  /// barrier's event, which the caller keeps until it has ended (KeptEvents: PoCL 3.1).
  cl::Event barrier(const char* operation, const std::vector<cl_event>& events) const {
    return queue_.barrier(operation, events);
  }

  /// The queue the calls go to.
  const Queue& queue() const noexcept { return queue_; }

  /// Host `from` -> `bytes` at byte `offset` of `buffer`; as read().
  cl::Event write(const char* operation, cl_mem buffer, std::size_t offset, std::size_t bytes,
                  const void* from, bool blocking) const {
    cl::Event event = queue_.write(operation, buffer, offset, bytes, from, blocking);
    if (!blocking) queue_.flush(operation);
    return event;
  }

  /// Maps `bytes` at `offset` of `buffer` for the host (`flags`), blocking.
  void* map(const char* operation, cl_mem buffer, cl_map_flags flags, std::size_t offset,
            std::size_t bytes) const {
    return queue_.map(operation, buffer, flags, offset, bytes);
  }

  /// Unmaps `mapped` and waits for the unmap.
  void unmap(const char* operation, cl_mem buffer, void* mapped) const {
    cl_event event = nullptr;
    const cl_int err = queue_.unmap(buffer, mapped, &event);
    check(err, operation, "clEnqueueUnmapMemObject");
    Queue::wait(operation, cl::Event(event, false));
  }

  /// Unmaps `mapped` without waiting or reporting (a destructor's way out).
  void unmap_quietly(cl_mem buffer, void* mapped) const noexcept {
    queue_.unmap(buffer, mapped, nullptr);
  }

  /// A marker of the work queued so far, flushed.
  cl::Event marker(const char* operation) const {
    cl::Event marker = queue_.marker(operation);
    queue_.flush(operation);
    return marker;
  }
  void flush(const char* operation) const { queue_.flush(operation); }
  void finish(const char* operation) const { queue_.finish(operation); }

  /// Blocks until `event` has completed; throws when it failed.
  static void wait(const char* operation, const cl::Event& event) { Queue::wait(operation, event); }
  /// Blocks until `event` has ended, reporting nothing (a destructor's way out).
  static void wait_quietly(const cl::Event& event) noexcept {
    if (event() != nullptr) static_cast<void>(wait_for_event(event()));
  }

  /// The kernels `names` of `source`, built for the queue's device once and kept in `cache`.
  template <class Key>
  const std::vector<cl::Kernel>& build(KernelCache<Key>& cache, const char* operation,
                                       const Key& key, const std::string& source,
                                       std::initializer_list<const char*> names,
                                       const std::string& what) const {
    return cache.build(operation, queue_, key, source, names, what);
  }

  /// Enqueues `kernel` over `global` (`dimensions` of them), flushed; returns its event.
  cl::Event run(const char* operation, cl_kernel kernel, cl_uint dimensions,
                const std::size_t* global) const {
    cl::Event event = run_kernel(operation, queue_, kernel, dimensions, global);
    queue_.flush(operation);
    return event;
  }

 private:
  Queue queue_;
  PinnedPool* pinned_ = nullptr;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_CHUNK_IO_HPP
