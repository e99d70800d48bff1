// SPDX-License-Identifier: MIT
// The transfer engine: moves bytes between host memory and device memory (a pool Allocation
// plus a byte offset) by the one path rule below, and counts what it moves. Everything under
// the typed BufferManager facade that is not a check ends here or in regions.hpp /
// cross_context.hpp, which build on it.
//
// THE path rule (route()), for a transfer of `bytes` between host memory and `memory`:
//   1. host_copy: `memory` is a host block clbuf allocated itself (a CPU device, PoCL): once the
//      queue has finished earlier work the host copies with memcpy (ParallelCopier), no command;
//   2. staged: a discrete device, pageable host memory and at least staging_threshold_bytes:
//      pinned chunks pipelined by several threads (Stager);
//   3. buffered: a blocking write to a discrete device of pageable host memory of at most
//      buffered_upload_max_bytes: a memcpy into a pinned ring and a non-blocking write from it
//      (buffered_writes.hpp); the call returns before the write has run, so a round trip waits
//      for the device once. Its errors surface at the next synchronising call (settle());
//   4. bounced: a blocking read from a discrete device into pageable host memory below the
//      staging threshold and of at most bounce_max_bytes: one DMA into a pinned block of the
//      engine's, then a memcpy into the caller's memory (NVIDIA's driver reads into pageable
//      memory far below the bus speed even for small transfers: a 4 B read waits 17 us, into
//      pinned memory 8; 1 MiB took 196 us against 80 through pinned memory on the H200). Writes
//      never bounce: the driver's pageable write was as fast as a bounce at every size measured;
//   5. direct: one clEnqueueWriteBuffer / clEnqueueReadBuffer.
// A message of clbuf::mpi (route_message()) goes zero copy out of a host block, through pinned
// chunks to or from a discrete device, else mapped around MPI; its chunks move by chunk_io().
//
// Each transfer is counted on the path it took (Telemetry, the public PathStats): tests assert
// the path at every threshold, so a route that moves by one byte shows (tests/paths_test.cpp).
// Every blocking operation ends with settle(), which reports a buffered write that failed.
#ifndef CLBUF_DETAIL_TRANSFER_ENGINE_HPP
#define CLBUF_DETAIL_TRANSFER_ENGINE_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/detail/buffered_writes.hpp>
#include <clbuf/detail/chunk_io.hpp>
#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/host_memory.hpp>
#include <clbuf/detail/pinned_pool.hpp>
#include <clbuf/detail/pool.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/staging.hpp>
#include <clbuf/detail/telemetry.hpp>
#include <clbuf/detail/trace.hpp>
#include <clbuf/options.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

namespace clbuf {
namespace detail {

/// How the host memory of a transfer is held: the caller's pageable memory, or pinned memory
/// (a PinnedBuffer) the device reaches by DMA.
enum class HostMemory { pageable, pinned };

class TransferEngine {
 public:
  enum class Path { host_copy, staged, buffered, bounced, direct };

  /// The engine of `device`; traces to Options::trace_path when it is set (resolved with
  /// CLBUF_TRACE). @throws Error CL_INVALID_VALUE when the trace file cannot be written.
  explicit TransferEngine(const DeviceContext& device)
      : device_(device),
        tracer_(device.options().trace_path.empty()
                    ? nullptr
                    : std::make_unique<Tracer>(device.options().trace_path,
                                               "clbuf: " + device.info().name, "BufferManager")),
        copier_(device.options().copy_threads),
        pinned_(device, device.options().pinned_budget_bytes) {
    const Options& options = device.options();
    pinned_.trace(tracer_.get());
    telemetry_.trace(tracer_.get());
    if (options.memory == MemoryModel::discrete &&
        options.staging_threshold_bytes != Options::never && device.opencl_1_2()) {
      stager_ =
          std::make_unique<Stager>(device, pinned_, options.staging_chunk_bytes,
                                   options.staging_chunks, options.copy_threads, tracer_.get());
    }
    if (options.memory == MemoryModel::discrete && options.buffered_upload_max_bytes != 0) {
      buffered_ = std::make_unique<BufferedWrites>(
          device, pinned_, options.buffered_upload_max_bytes, buffered_ring_slots, tracer_.get());
    }
  }

  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  /// What a transfer is, for route(): a blocking write, a blocking read, or one started
  /// asynchronously (either way).
  enum class Use { blocking_write, blocking_read, started };

  /// The path rule, the one place clbuf chooses how bytes move.
  Path route(const Allocation& memory, std::size_t bytes, HostMemory host, Use use) const noexcept {
    if (memory.host != nullptr) return Path::host_copy;
    // The size first: a small transfer asks no thread-local Redirect (issue 47).
    if (bytes >= device_.options().staging_threshold_bytes && stager_ &&
        host == HostMemory::pageable && !redirected()) {
      return Path::staged;
    }
    if (host == HostMemory::pageable && device_.options().memory == MemoryModel::discrete) {
      if (use == Use::blocking_write && buffered_ && bytes <= buffered_->max_bytes()) {
        return Path::buffered;
      }
      if (use == Use::blocking_read && bytes <= device_.options().bounce_max_bytes) {
        return Path::bounced;
      }
    }
    return Path::direct;
  }

  /// How a message's bytes (clbuf::mpi) reach MPI: straight out of a host block, mapped, or
  /// through pinned chunks (ChunkIo).
  enum class Message { zero_copy, map, staged };

  /// The path rule for a message of memory that is a host block clbuf allocated (`host_block`)
  /// or not: `forced` when the layer forces one (zero_copy turns into map where there is no host
  /// block), else zero copy out of a host block, pinned chunks for a discrete device, and mapped
  /// otherwise.
  Message route_message(bool host_block, const Message* forced) const noexcept {
    if (forced != nullptr) {
      return *forced == Message::zero_copy && !host_block ? Message::map : *forced;
    }
    if (host_block) return Message::zero_copy;
    return device_.options().memory == MemoryModel::discrete ? Message::staged : Message::map;
  }

  /// The chunk calls (chunk_io.hpp) on the manager's queue and pinned pool.
  ChunkIo chunk_io() noexcept { return ChunkIo(queue(), pinned_); }

  /// Host `data` -> `memory` at byte `offset`, blocking (`data` may be reused on return; a
  /// buffered write may still be on its way to the device, ahead of every later command).
  void write(const char* operation, const Allocation& memory, std::size_t offset, const void* data,
             std::size_t bytes, HostMemory host) {
    if (bytes == 0) return;
    const Path path = route(memory, bytes, host, Use::blocking_write);
    Telemetry::Timer timer(telemetry_, Telemetry::upload, counted(path), bytes, operation);
    switch (path) {
      case Path::host_copy:
        queue().finish(operation);
        copier_.copy(memory.host_at(offset), data, bytes);
        break;
      case Path::staged:
        stager_->write(memory.buffer(), memory.at(offset), data, bytes, operation);
        break;
      case Path::buffered:
        buffered_->write(operation, memory.buffer(), memory.at(offset), data, bytes);
        return;            // not a synchronising call: nothing to settle
      case Path::bounced:  // reads only
      case Path::direct:
        queue().write(operation, memory.buffer(), memory.at(offset), bytes, data, true);
        break;
    }
    settle(operation);
  }

  /// As write() into memory just taken from the pool: a fresh host block, which no command can
  /// be using yet, is written with no wait for the queue.
  void write_fresh(const char* operation, const Allocation& memory, const void* data,
                   std::size_t bytes, HostMemory host) {
    if (bytes == 0) return;
    if (memory.host != nullptr && memory.fresh) {
      Telemetry::Timer timer(telemetry_, Telemetry::upload, Telemetry::host_copy, bytes, operation);
      copier_.copy(memory.host_at(0), data, bytes);
      return;
    }
    write(operation, memory, 0, data, bytes, host);
  }

  /// `memory` at byte `offset` -> host `out`, blocking; the mirror of write().
  void read(const char* operation, const Allocation& memory, std::size_t offset, void* out,
            std::size_t bytes, HostMemory host) {
    if (bytes == 0) return;
    const Path path = route(memory, bytes, host, Use::blocking_read);
    Telemetry::Timer timer(telemetry_, Telemetry::download, counted(path), bytes, operation);
    switch (path) {
      case Path::host_copy:
        queue().finish(operation);
        copier_.copy(out, memory.host_at(offset), bytes);
        break;
      case Path::staged:
        stager_->read(memory.buffer(), memory.at(offset), out, bytes, operation);
        break;
      case Path::bounced:
        read_bounced(
            operation, memory, offset, bytes,
            [&](const void* block) { bounce_copy(out, block, bytes); },
            [&] { read_blocking(operation, memory.buffer(), memory.at(offset), bytes, out); });
        return;             // read_blocking() settled
      case Path::buffered:  // writes only
      case Path::direct:
        read_blocking(operation, memory.buffer(), memory.at(offset), bytes, out);
        return;
    }
    settle(operation);
  }

  /// Reads `bytes` at `offset` for a new vector: where the read bounces, the DMA lands in the
  /// pinned block and `make(block)` builds the vector from it in one pass (no zero-filled
  /// vector written twice: fresh host memory is slow to touch); elsewhere `make(nullptr)` makes
  /// the vector and read() fills it. Returns the vector.
  template <class Make>
  auto read_new(const char* operation, const Allocation& memory, std::size_t offset,
                std::size_t bytes, Make make) {
    if (bytes == 0 ||
        route(memory, bytes, HostMemory::pageable, Use::blocking_read) != Path::bounced) {
      auto out = make(nullptr);
      read(operation, memory, offset, out.data(), bytes, HostMemory::pageable);
      return out;
    }
    Telemetry::Timer timer(telemetry_, Telemetry::download, Telemetry::bounced, bytes, operation);
    return read_bounced(operation, memory, offset, bytes, make, [&] {  // read_blocking() settled
      auto out = make(nullptr);
      read_blocking(operation, memory.buffer(), memory.at(offset), bytes, out.data());
      return out;
    });
  }

  /// Starts writing `data` into `memory` at byte `offset` by the path rule; the Future waits for
  /// the returned event. `keep`, when set, owns `data` (else the caller keeps it alive and
  /// unchanged until the event completes). With `now_if_fresh`, a small fresh host block (which
  /// no command can be using) is filled by memcpy at once, cheaper than a command: then nothing
  /// is left to wait for.
  Started write_async(const char* operation, const Allocation& memory, std::size_t offset,
                      const void* data, std::size_t bytes, const std::shared_ptr<const void>& keep,
                      bool now_if_fresh) {
    if (bytes == 0) return Started();  // zero-sized work counts nothing
    const Path path = route(memory, bytes, HostMemory::pageable, Use::started);
    const bool at_once =
        path == Path::host_copy && now_if_fresh && memory.fresh && bytes < huge_page_bytes;
    const Telemetry::AsyncSpan span = telemetry_.count_async(
        Telemetry::upload, at_once ? Telemetry::host_copy : started(path), bytes, operation);
    Started start;
    if (at_once) {
      std::memcpy(memory.host_at(offset), data, bytes);
    } else if (path == Path::staged) {
      start = stager_->submit(true, memory.buffer, memory.at(offset), const_cast<void*>(data),
                              bytes, operation, keep, background_);
    } else {
      start.event =
          queue().write(operation, memory.buffer(), memory.at(offset), bytes, data, false);
    }
    Telemetry::traced(span, start.event());
    return start;
  }

  /// Starts reading `bytes` at `offset` into `out` by the path rule; nothing to wait for for
  /// zero bytes. `out` must stay alive until the event completes.
  Started read_async(const char* operation, const Allocation& memory, std::size_t offset, void* out,
                     std::size_t bytes) {
    if (bytes == 0) return Started();
    const Path path = route(memory, bytes, HostMemory::pageable, Use::started);
    const Telemetry::AsyncSpan span =
        telemetry_.count_async(Telemetry::download, started(path), bytes, operation);
    Started start;
    if (path == Path::staged) {
      start = stager_->submit(false, memory.buffer, memory.at(offset), out, bytes, operation,
                              nullptr, background_);
    } else {
      start.event = queue().read(operation, memory.buffer(), memory.at(offset), bytes, out, false);
    }
    Telemetry::traced(span, start.event());
    return start;
  }

  /// Device copy of checked, non-overlapping ranges; returns when done.
  void copy(const char* operation, const Allocation& src, std::size_t src_offset,
            const Allocation& dst, std::size_t dst_offset, std::size_t bytes) {
    if (bytes == 0) return;
    const bool host_blocks = src.host != nullptr && dst.host != nullptr;
    Telemetry::Timer timer(telemetry_, Telemetry::copy,
                           host_blocks ? Telemetry::host_copy : Telemetry::direct, bytes,
                           operation);
    if (host_blocks) {
      // Both live in host memory, which is this device's memory: one memcpy is the copy.
      queue().finish(operation);
      copier_.copy(dst.host_at(dst_offset), src.host_at(src_offset), bytes);
      return;
    }
    Queue::wait(operation, queue().copy(operation, src.buffer(), dst.buffer(), src.at(src_offset),
                                        dst.at(dst_offset), bytes));
    settle(operation);
  }

  /// Starts a device copy; a null event for zero bytes.
  cl::Event copy_async(const char* operation, const Allocation& src, std::size_t src_offset,
                       const Allocation& dst, std::size_t dst_offset, std::size_t bytes) {
    if (bytes == 0) return cl::Event();
    const Telemetry::AsyncSpan span =
        telemetry_.count_async(Telemetry::copy, Telemetry::direct, bytes, operation);
    cl::Event event = queue().copy(operation, src.buffer(), dst.buffer(), src.at(src_offset),
                                   dst.at(dst_offset), bytes);
    Telemetry::traced(span, event());
    return event;
  }

  /// Repeats the `size`-byte `pattern` `count` times from byte `offset` of `memory`.
  void fill(const char* operation, const Allocation& memory, std::size_t offset,
            const void* pattern, std::size_t size, std::size_t count) {
    const std::size_t bytes = count * size;
    Telemetry::Timer timer(telemetry_, Telemetry::upload,
                           memory.host != nullptr ? Telemetry::host_copy : Telemetry::direct, bytes,
                           operation);
    if (memory.host != nullptr) {
      queue().finish(operation);
      char* out = memory.host_at(offset);
      std::memcpy(out, pattern, size);
      for (std::size_t done = size; done < bytes; done += std::min(done, bytes - done)) {
        std::memcpy(out + done, out, std::min(done, bytes - done));
      }
      return;
    }
    Queue::wait(operation, fill_commands(operation, memory, offset, pattern, size, count));
    settle(operation);
  }

  /// Starts a fill on the device, whatever the memory (a CPU device's host block too); `pattern`
  /// may be reused at once. Nothing to wait for when count is 0.
  Started fill_async(const char* operation, const Allocation& memory, std::size_t offset,
                     const void* pattern, std::size_t size, std::size_t count) {
    if (count == 0) return Started();
    const Telemetry::AsyncSpan span =
        telemetry_.count_async(Telemetry::upload, Telemetry::direct, count * size, operation);
    Started start{fill_commands(operation, memory, offset, pattern, size, count), nullptr};
    Telemetry::traced(span, start.event());
    return start;
  }

  /// A Redirect: which engine's commands of this thread go to which queue.
  struct Target {
    const TransferEngine* engine = nullptr;
    const Queue* queue = nullptr;
  };

 private:
  static Target& current() noexcept {
    static thread_local Target target;
    return target;
  }
  bool redirected() const noexcept { return current().engine == this; }

 public:
  /// The queue this thread's commands of this engine go to: the manager's, or a Redirect's.
  const Queue& queue() const noexcept {
    const Target& target = current();
    return target.engine == this ? *target.queue : device_.queue();
  }

  /// While it lives, the commands this thread enqueues through `engine` go to `queue` (a gated
  /// queue: GatedCall), and nothing is staged: the stager's chunks go to the manager's queue.
  class Redirect {
   public:
    Redirect(const TransferEngine& engine, const Queue& queue) noexcept : saved_(current()) {
      current() = Target{&engine, &queue};
    }
    Redirect(const Redirect&) = delete;
    Redirect& operator=(const Redirect&) = delete;
    ~Redirect() { current() = saved_; }

   private:
    Target saved_;
  };
  ParallelCopier& copier() noexcept { return copier_; }
  Telemetry& telemetry() noexcept { return telemetry_; }
  const Telemetry& telemetry() const noexcept { return telemetry_; }
  const Options& options() const noexcept { return device_.options(); }

  /// Runs `job` on the background thread, after every job posted before it.
  Background& background() noexcept { return background_; }

  /// Reports a buffered write that failed since the last call, once: as an Error of
  /// `operation` (a synchronising call, after it has waited for the device), the upload named.
  void settle(const char* operation) {
    if (buffered_) buffered_->settle(operation);
  }

  /// settle() without throwing, for cleanup(): the code (CL_SUCCESS: none) and what failed.
  cl_int settle_code(std::string* what) noexcept {
    return buffered_ ? buffered_->settle_code(what) : CL_SUCCESS;
  }

  /// Buffered writes not yet known to have completed (tests).
  std::size_t buffered_pending() const { return buffered_ ? buffered_->pending() : 0; }

  /// clbuf's pinned memory of this context: every pinned block clbuf uses leases from it.
  PinnedPool& pinned() noexcept { return pinned_; }
  const PinnedPool& pinned() const noexcept { return pinned_; }

  /// Ends the background thread and frees the staging chunks and the cached pinned chunks
  /// (cleanup(), once the queue has finished: every background job has then ended).
  void close() noexcept {
    background_.stop();
    stager_.reset();
    if (buffered_) buffered_->close();
    pinned_.close();
    if (tracer_) tracer_->flush();  // the file is whole once cleanup() returns
  }

  /// The path of PathStats a blocking transfer routed to `path` is counted on.
  static Telemetry::Path counted(Path path) noexcept {
    switch (path) {
      case Path::host_copy:
        return Telemetry::host_copy;
      case Path::staged:
        return Telemetry::staged;
      case Path::buffered:
        return Telemetry::buffered;
      case Path::bounced:
        return Telemetry::bounced;
      case Path::direct:
        break;
    }
    return Telemetry::direct;
  }

 private:
  /// The path of PathStats a started transfer routed to `path` is counted on: staged, else one
  /// command (a host block too: the host cannot copy before the queue's earlier work is done).
  static Telemetry::Path started(Path path) noexcept {
    return path == Path::staged ? Telemetry::staged : Telemetry::direct;
  }

  /// Enqueues the commands of a fill; returns the last one's event (the queue is in order).
  cl::Event fill_commands(const char* operation, const Allocation& memory, std::size_t offset,
                          const void* pattern, std::size_t size, std::size_t count) {
    const std::size_t bytes = count * size;
    const bool power_of_two = size != 0 && (size & (size - 1)) == 0 && size <= 128;
    if (device_.opencl_1_2() && power_of_two) {
      return queue().fill(operation, memory.buffer(), pattern, size, memory.at(offset), bytes);
    }
    // No fill command for this pattern: a small run of it goes into a buffer of its own
    // (CL_MEM_COPY_HOST_PTR) and is copied on the device, then the filled part is doubled by
    // device copies. No host access to `memory` at all, so CL_MEM_HOST_NO_ACCESS buffers fill
    // too; source and destination ranges never overlap, and at most 64 KiB (one element at
    // least) crosses the bus. The run's buffer is released at once: OpenCL keeps it until the
    // copy that reads it has ended.
    const std::size_t run =
        std::max<std::size_t>(1, std::min(count, (std::size_t{64} << 10) / size));
    std::vector<char> head(run * size);
    for (std::size_t i = 0; i < run; ++i) std::memcpy(head.data() + i * size, pattern, size);
    cl_int err = CL_SUCCESS;
    const cl::Buffer source(
        CLBUF_CL(clCreateBuffer)(device_.context()(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                 head.size(), head.data(), &err),
        false);
    check(err, operation, "clCreateBuffer(CL_MEM_COPY_HOST_PTR)");
    cl::Event last =
        queue().copy(operation, source(), memory.buffer(), 0, memory.at(offset), head.size());
    for (std::size_t done = head.size(); done < bytes; done += std::min(done, bytes - done)) {
      last = queue().copy(operation, memory.buffer(), memory.buffer(), memory.at(offset),
                          memory.at(offset + done), std::min(done, bytes - done));
    }
    return last;
  }

  /// The bounced path of read() and read_new(): `bytes` at `offset` read into a pinned block of
  /// the pool (blocking), then `consume(block)`, whose result it returns, before the block goes
  /// back. When the pool's budget holds no block, `unbounced()` instead: the driver's pageable
  /// read straight into the caller's memory.
  template <class Consume, class Unbounced>
  auto read_bounced(const char* operation, const Allocation& memory, std::size_t offset,
                    std::size_t bytes, Consume consume, Unbounced unbounced)
      -> decltype(consume(static_cast<const void*>(nullptr))) {
    const PinnedPool::Lease block = pinned_.take(operation, options().bounce_max_bytes, queue());
    if (!block) return unbounced();
    read_blocking(operation, memory.buffer(), memory.at(offset), bytes, block.data());
    return consume(static_cast<const void*>(block.data()));
  }

  /// A blocking read on the manager's queue that waits for the buffered writes before it (its
  /// wait list), then settles (a synchronising call): once the read has succeeded, so have those
  /// writes, and settle() need not ask their status (buffered_writes.hpp). When one of them
  /// failed, the read fails and settle() names the upload; else the read's own error. With more
  /// writes pending than a wait list takes, it waits for the newest and settles first. Either way
  /// a failed write stops the read: the caller's memory is not written.
  void read_blocking(const char* operation, cl_mem buffer, std::size_t offset, std::size_t bytes,
                     void* out) {
    if (!buffered_ || buffered_->quiet()) {  // no buffered write to wait for or report
      queue().read(operation, buffer, offset, bytes, out, true);
      return;
    }
    const BufferedWrites::Fence fence = buffered_->fence();
    if (fence.newest() != nullptr) {
      cl_event newest = fence.newest();
      CLBUF_CL(clWaitForEvents)(1, &newest);  // all have ended (in order); settle() asks how
      settle(operation);
    }
    const cl_int err =
        queue().read_after(buffer, offset, bytes, out, fence.count, fence.list.data());
    const bool fenced = fence.count != 0;  // a fence with events: ended once, from here on
    if (err != CL_SUCCESS) {
      if (fenced) buffered_->end_fence();
      if (err == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST && fenced) settle(operation);
      check(err, operation, "clEnqueueReadBuffer");
    }
    buffered_->settle(operation, fence.last, fenced);
  }

  /// A bounced read's copy out of the pinned block: one memcpy up to 1 MiB, the copy threads
  /// in 512 KiB parts from 2 MiB. Measured on the H200 (bench/wait_latency, gpu_run.sh mid):
  /// waking the helpers costs 14-28 us and a small destination stays in the caller's cache
  /// with one thread (a 1 MiB download 92 us on one thread, 144 on four), while one thread
  /// copies only ~11 GB/s from 2 MiB on (2 MiB: 180 us alone, 31 on four threads).
  void bounce_copy(void* out, const void* block, std::size_t bytes) noexcept {
    if (bytes < (std::size_t{2} << 20)) {
      std::memcpy(out, block, bytes);
    } else {
      copier_.copy(out, block, bytes, std::size_t{512} << 10);
    }
  }

  // The ring of buffered writes holds this many writes of buffered_upload_max_bytes (1 MiB of
  // pinned memory at 64 KiB): a stream of small uploads waits for the device once per 16.
  static constexpr std::size_t buffered_ring_slots = 16;

  const DeviceContext& device_;
  std::unique_ptr<Tracer> tracer_;  // null: not tracing; before everything that records into it
  ParallelCopier copier_;
  PinnedPool pinned_;  // before the stager and the ring: they lease from it, so it ends last
  std::unique_ptr<Stager> stager_;            // discrete devices only
  std::unique_ptr<BufferedWrites> buffered_;  // discrete devices only
  Telemetry telemetry_;
  Background background_;  // after stager_: its jobs use the stager, so it ends first
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TRANSFER_ENGINE_HPP
