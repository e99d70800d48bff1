// SPDX-License-Identifier: MIT
// Buffered uploads: a blocking upload of a few pageable bytes to a discrete device copies them
// into a pinned ring of clbuf's, enqueues a non-blocking write from there and returns. The
// caller's memory is free at once and the in-order queue shows the data to every later command,
// so a round trip (upload, then download) waits for the device once instead of twice, as CUDA's
// cudaMemcpy from pageable memory does (it returns once the bytes are in its staging memory).
//
// The writes complete in queue order, so the ring is a FIFO: a write's bytes are reused only
// after its event has completed. A write that fails on the device cannot reach the call that made
// it: the first synchronising call of the manager after it (settle()) reports it, once, as an
// Error naming the upload; nothing is lost silently. settle() asks each write's status
// (clGetEventInfo, 1.2 us a call on the H200: bench/seed_profile), except for the writes a blocking
// read waited for (fence(), then settle() with the fence's last write): a blocking read whose wait
// list holds a failed event fails with CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
// (OpenCL 1.2, 5.2.2), so one that succeeded proves those writes did, at no cost (a wait list costs
// nothing measurable there). With more writes pending than a wait list takes, the read waits for
// the newest first and settles (asks each its status) before it reads: either way a failed write
// stops the read.
#ifndef CLBUF_DETAIL_BUFFERED_WRITES_HPP
#define CLBUF_DETAIL_BUFFERED_WRITES_HPP

#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/event.hpp>
#include <clbuf/detail/pinned_pool.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/trace.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

class BufferedWrites {
 public:
  /// Writes of at most `max_bytes` (> 0) through a ring of `slots` x max_bytes pinned bytes,
  /// leased from `pinned` at the first write, for `device`; both must outlive this, as must
  /// `tracer` (null: not tracing), which gets each write (copy and enqueue) as a span.
  BufferedWrites(const DeviceContext& device, PinnedPool& pinned, std::size_t max_bytes,
                 std::size_t slots, Tracer* tracer = nullptr)
      : device_(device),
        pinned_(pinned),
        tracer_(tracer),
        track_(tracer != nullptr ? tracer->track("buffered writes") : 0),
        max_bytes_(max_bytes),
        ring_bytes_(round_up(max_bytes) * slots) {}

  BufferedWrites(const BufferedWrites&) = delete;
  BufferedWrites& operator=(const BufferedWrites&) = delete;

  std::size_t max_bytes() const noexcept { return max_bytes_; }

  /// Copies `bytes` (1 to max_bytes()) of `data` into the ring and enqueues their write into
  /// `buffer` at byte `offset`; returns before the write has run. `operation` must be a string
  /// literal (kept to name the upload if it fails). Wraps clEnqueueWriteBuffer, non-blocking.
  /// While the pinned pool's budget holds no ring, the write blocks instead.
  /// @throws Error when the ring cannot be made or the write cannot be enqueued (nothing written).
  void write(const char* operation, cl_mem buffer, std::size_t offset, const void* data,
             std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!ring_) {
      // Mapped on the side queue: the manager's queue may be held (by the application's events,
      // by an asynchronous transfer's barrier), and a buffered upload must not wait for it.
      ring_ = pinned_.take(operation, ring_bytes_, device_.side_queue(operation));
    }
    if (!ring_) {
      device_.queue().write(operation, buffer, offset, bytes, data, true);
      return;
    }
    const std::size_t at = place(round_up(bytes));
    const double begin = tracer_ != nullptr ? trace_now() : 0;  // after any wait for room
    char* slot = static_cast<char*>(ring_.data()) + at;
    std::memcpy(slot, data, bytes);
    // One write per call, with its event: the ring's bytes are held until it has completed.
    cl::Event event = device_.queue().write(operation, buffer, offset, bytes, slot, false);
    pending_.push_back(
        Pending{std::move(event), at, at + round_up(bytes), operation, bytes, offset, ++written_});
    update_quiet();
    if (tracer_ != nullptr) {  // under mutex_: the track's spans follow one another
      tracer_->span(track_, "buffered write", begin, trace_now(),
                    {{"bytes", nullptr, static_cast<double>(bytes)},
                     {"operation", operation},
                     {"ring offset", nullptr, static_cast<double>(at)}});
    }
  }

  // Most writes a read waits for in its wait list: a longer list is not free (the ring may hold
  // thousands of tiny writes), and a stream of uploads is settled once per ring anyway.
  static constexpr std::size_t fence_max = 8;

  /// The writes not yet known to have completed, for a blocking read's wait list (no heap: the
  /// round trip's hot path): all of them, or, when there are more than fence_max, none listed and
  /// `newest` set (the read's caller waits for it and settles before reading). The listed events
  /// are not retained (issue 47: a retain and a release, ~200 instructions of a round trip on
  /// PoCL): while a fence with events is out, an event the ring lets go of is kept in `retired_`
  /// instead of released, until the last such fence has ended (settle() with `ends_fence`, or
  /// end_fence()). A fence with count != 0 must be ended exactly once, after the read returned.
  struct Fence {
    std::array<cl_event, fence_max> list{};  // the wait list: events the ring keeps alive
    cl_uint count = 0;
    std::uint64_t last = 0;  // the newest write listed
    cl::Event newest;        // set instead when there are more than fence_max (retained)
  };
  Fence fence() {
    Fence fence;
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.size() > fence_max) {
      fence.newest = pending_.back().event;
      return fence;
    }
    if (pending_.empty()) return fence;
    // Room for every event this fence lists to be retired while it is out: no allocation (and
    // no failure) where the ring lets go of one (reap() is noexcept). Without the room, the read
    // waits for the newest write instead, which needs none.
    try {
      retired_.reserve(retired_.size() + pending_.size());
    } catch (const std::bad_alloc&) {
      fence.newest = pending_.back().event;
      return fence;
    }
    for (std::size_t i = 0; i < pending_.size(); ++i)
      fence.list[fence.count++] = pending_[i].event();
    fence.last = pending_.back().number;
    ++fences_out_;
    fenced_through_ = std::max(fenced_through_, fence.last);
    return fence;
  }

  /// Ends a fence with events (its read has returned) without settling.
  void end_fence() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    end_fence_locked();
  }

  /// Forgets every write that has completed, and first, without asking their status, the writes
  /// up to `confirmed` (a Fence's `last`: a blocking read that waited for them succeeded); throws
  /// the first that failed since the last call (its code, the upload named in the message) as an
  /// Error of `operation`. With `ends_fence`, also ends that fence. One lock for all: the round
  /// trip's download takes this path.
  void settle(const char* operation, std::uint64_t confirmed = 0, bool ends_fence = false) {
    if (!ends_fence && quiet()) return;  // nothing pending, nothing failed: no lock
    std::string what;
    cl_int code = CL_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (ends_fence) end_fence_locked();
      while (!pending_.empty() && pending_.front().number <= confirmed) drop_front();
      reap();
      if (failure_ == CL_SUCCESS) {
        update_quiet();
        return;
      }
      code = take_failure(&what);
      update_quiet();
    }
    fail(operation, code, what);
  }

  /// True when no write is pending and no failure waits to be reported, as of the last change
  /// under the lock (a write of this thread, or a settle, is seen; another thread's write that
  /// is under way may not be, which no order between the two threads' calls promises anyway).
  bool quiet() const noexcept { return quiet_.load(std::memory_order_acquire); }

  /// settle() without throwing: the failure's code (CL_SUCCESS for none) and, in `what`, its
  /// description.
  cl_int settle_code(std::string* what) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    reap();
    const cl_int code = take_failure(what);
    update_quiet();
    return code;
  }

  /// How many writes the ring holds (not yet known to have completed).
  std::size_t pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pending_.size();
  }

  /// Frees the ring; call once the queue has finished (cleanup()).
  void close() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!pending_.empty()) drop_front();
    ring_.reset();
    update_quiet();
  }

 private:
  struct Pending {
    cl::Event event;
    std::size_t begin = 0;  // bytes [begin, end) of the ring
    std::size_t end = 0;
    const char* operation = nullptr;
    std::size_t bytes = 0;
    std::size_t offset = 0;
    std::uint64_t number = 0;  // the write's place in the order of writes, from 1
  };

  /// The writes not yet known to have completed, oldest first: a ring of slots that doubles when
  /// full and never shrinks, so that a steady stream of small writes allocates nothing (a deque
  /// allocates and frees a node every few writes).
  class Fifo {
   public:
    bool empty() const noexcept { return count_ == 0; }
    std::size_t size() const noexcept { return count_; }
    Pending& front() noexcept { return slots_[head_]; }
    Pending& back() noexcept { return (*this)[count_ - 1]; }
    Pending& operator[](std::size_t i) noexcept {
      const std::size_t at = head_ + i;
      return slots_[at < slots_.size() ? at : at - slots_.size()];
    }
    void push_back(Pending&& write) {
      if (count_ == slots_.size()) grow();
      ++count_;
      back() = std::move(write);
    }
    /// The front write's event, moved out (pop_front() then releases nothing).
    cl::Event take_front_event() noexcept { return std::move(slots_[head_].event); }
    void pop_front() noexcept {
      slots_[head_] = Pending();  // releases the event now
      head_ = head_ + 1 == slots_.size() ? 0 : head_ + 1;
      --count_;
    }

   private:
    void grow() {
      std::vector<Pending> bigger(std::max<std::size_t>(16, 2 * slots_.size()));
      for (std::size_t i = 0; i < count_; ++i) bigger[i] = std::move((*this)[i]);
      slots_.swap(bigger);
      head_ = 0;
    }
    std::vector<Pending> slots_;
    std::size_t head_ = 0;
    std::size_t count_ = 0;
  };

  // 64-byte pieces: each write's bytes start on a cache line of their own.
  static std::size_t round_up(std::size_t bytes) noexcept {
    return (bytes + 63) & ~std::size_t{63};
  }

  /// The ring offset of `bytes` free bytes, waiting for the oldest writes while there are none.
  std::size_t place(std::size_t bytes) {
    for (bool reaped = false;;) {
      if (pending_.empty()) return 0;
      const std::size_t head = pending_.back().end;
      const std::size_t tail = pending_.front().begin;
      if (head > tail) {  // in use: [tail, head); free: [head, end) and [0, tail)
        if (ring_bytes_ - head >= bytes) return head;
        if (tail >= bytes) return 0;
      } else if (tail - head >= bytes) {  // wrapped, in use: [tail, end) and [0, head)
        return head;
      }
      if (!reaped) {
        reap();
        reaped = true;
        continue;
      }
      // Full: wait for the oldest write (the ring's first bytes to be freed).
      const cl_int err = Queue::wait_code(pending_.front().event());
      // The oldest write failed (or the wait did): recorded for settle() with the write's own
      // code, as reap() records it, the bytes freed.
      if (err != CL_SUCCESS) record(pending_.front(), err);
      drop_front();
    }
  }

  /// Forgets the oldest pending write, releasing its event, or, while a fence that may list it
  /// is out, keeping it in retired_ (whose room that fence reserved). Under mutex_.
  void drop_front() noexcept {
    if (fences_out_ != 0 && pending_.front().number <= fenced_through_) {
      retired_.push_back(pending_.take_front_event());  // reserved by fence(): does not throw
    }
    pending_.pop_front();
  }

  /// One fence fewer out; with none left, the events kept for them are released. Under mutex_.
  void end_fence_locked() noexcept {
    if (fences_out_ == 0 || --fences_out_ != 0) return;
    fenced_through_ = 0;
    retired_.clear();
  }

  /// quiet() as the ring stands now. Under mutex_, after each change to pending_ or failure_
  /// that a call can leave behind.
  void update_quiet() noexcept {
    quiet_.store(pending_.empty() && failure_ == CL_SUCCESS, std::memory_order_release);
  }

  /// The failure recorded (CL_SUCCESS for none), forgotten; its description moved into `what`.
  /// Under mutex_.
  cl_int take_failure(std::string* what) noexcept {
    const cl_int code = failure_;
    if (what != nullptr) {
      what->swap(failure_what_);
      if (later_failures_ != 0) {
        try {
          *what += "; " + std::to_string(later_failures_) + " later buffered uploads failed too";
        } catch (...) {  // NOLINT(bugprone-empty-catch): the first failure is still reported
        }
      }
    }
    failure_ = CL_SUCCESS;
    later_failures_ = 0;
    failure_what_.clear();
    return code;
  }

  /// Drops the completed writes from the front (they complete in order), recording the first
  /// failure.
  void reap() noexcept {
    while (!pending_.empty()) {
      Pending& front = pending_.front();
      const EventStatus asked = event_status(front.event());
      // Its fate unknown (the query refused): reported as failed, with the query's code.
      const cl_int status = asked.known() ? asked.status : asked.query;
      if (status > CL_COMPLETE) return;
      if (status < 0) record(front, status);
      drop_front();
    }
  }

  void record(const Pending& write, cl_int code) noexcept {
    quiet_.store(false, std::memory_order_release);  // a failure waits to be reported
    if (failure_ != CL_SUCCESS) {  // most likely a consequence of the first: counted
      ++later_failures_;
      return;
    }
    failure_ = code;
    try {
      failure_what_ = "a buffered upload failed on the device: " + std::string(write.operation) +
                      " of " + std::to_string(write.bytes) + " bytes at byte " +
                      std::to_string(write.offset) +
                      " of its buffer (it returned before the write ran; its data is not there)";
    } catch (...) {  // NOLINT(bugprone-empty-catch): the code alone still reaches the caller
      failure_what_.clear();
    }
  }

  const DeviceContext& device_;
  PinnedPool& pinned_;
  Tracer* const tracer_;  // null: not tracing
  const int track_;       // its "buffered writes" track
  const std::size_t max_bytes_;
  const std::size_t ring_bytes_;
  mutable std::mutex mutex_;  // the ring, pending_ and the failure; held across each write
  PinnedPool::Lease ring_;    // leased at the first write
  Fifo pending_;
  std::uint64_t written_ = 0;    // writes enqueued so far
  cl_int failure_ = CL_SUCCESS;  // the first failed write not yet reported
  std::string failure_what_;
  std::size_t later_failures_ = 0;    // failed writes after the first, before it was reported
  std::atomic<bool> quiet_{true};     // pending_ empty and failure_ CL_SUCCESS (update_quiet())
  std::size_t fences_out_ = 0;        // fences with events whose reads may still wait for them
  std::uint64_t fenced_through_ = 0;  // the newest write any of them lists
  std::vector<cl::Event> retired_;    // events let go of while those fences are out
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_BUFFERED_WRITES_HPP
