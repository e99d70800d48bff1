// SPDX-License-Identifier: MIT
// The one place clbuf makes pinned host memory for its own use: a CL_MEM_ALLOC_HOST_PTR buffer
// mapped once (PinnedBlock), the memory a driver moves by DMA at full bus speed, and the
// manager's pool of them (PinnedPool): budgeted, binned by size class, cached between leases and
// trimmed when a lease would pass the budget (as cub's CachingDeviceAllocator does for device
// memory). The staging slots, the buffered uploads' ring, the bounced reads, copy_from's chunks
// between contexts and every clbuf::mpi chunk lease from it. The user's PinnedBuffer holds a
// PinnedBlock of its own, outside the budget.
#ifndef CLBUF_DETAIL_PINNED_POOL_HPP
#define CLBUF_DETAIL_PINNED_POOL_HPP

#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/trace.hpp>
#include <clbuf/error.hpp>
#include <clbuf/telemetry.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// `bytes` of pinned memory of a context, mapped for reading and writing on a queue, which
/// unmaps it on destruction.
class PinnedBlock {
 public:
  PinnedBlock() = default;

  /// `bytes` (> 0) of pinned memory of `context`, mapped on `queue`. Wraps
  /// clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) and a blocking clEnqueueMapBuffer.
  PinnedBlock(const cl::Context& context, const Queue& queue, std::size_t bytes,
              const char* operation)
      : queue_(queue), bytes_(bytes) {
    cl_int err = CL_SUCCESS;
    buffer_ =
        cl::Buffer(CLBUF_CL(clCreateBuffer)(context(), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                                            bytes, nullptr, &err),
                   false);
    check(err, operation, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)");
    data_ = queue_.map(operation, buffer_(), CL_MAP_READ | CL_MAP_WRITE, 0, bytes);
  }

  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  PinnedBlock(PinnedBlock&& other) noexcept { swap(other); }
  PinnedBlock& operator=(PinnedBlock&& other) noexcept {
    PinnedBlock(std::move(other)).swap(*this);
    return *this;
  }

  /// Unmaps (the unmap is enqueued and flushed, not waited for).
  ~PinnedBlock() {
    if (data_ != nullptr) {
      queue_.unmap(buffer_(), data_, nullptr);
      CLBUF_CL(clFlush)(queue_.get());
    }
  }

  /// Leaves the memory mapped and allocated for good (one more reference on the buffer, no
  /// unmap), for memory that something outside clbuf may still write (an MPI request of a failed
  /// transfer); the block is empty afterwards. Allocates nothing, so it cannot fail.
  void leak() noexcept {
    if (buffer_() != nullptr) CLBUF_CL(clRetainMemObject)(buffer_());
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }
  /// The queue it was mapped on.
  cl_command_queue queue() const noexcept { return queue_.get(); }

 private:
  void swap(PinnedBlock& other) noexcept {
    std::swap(buffer_, other.buffer_);
    std::swap(queue_, other.queue_);
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }

  cl::Buffer buffer_;
  Queue queue_;  // the queue it was mapped on, which unmaps it
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A manager's pinned memory. take() leases a block of the size class of the bytes asked for
/// (a power of two from 4 KiB; whole MiB above 64 MiB): a cached block of that class, else a new
/// one if the bytes made (leased plus cached) stay within the budget once cached blocks of other
/// classes have been freed; else nothing, and the caller takes its path without pinned memory
/// (or waits for a lease to come back). A block is mapped on the queue its user names (the queue
/// of the commands that read and write it, never one held behind a barrier that the user's own
/// transfer waits for) and cached for users of that queue. Thread-safe; outlives its leases.
class PinnedPool {
 public:
  /// A block held for one use; given back on destruction. The pool keeps each block on the heap
  /// from its making to its freeing and a lease holds it by pointer: taking and giving back a
  /// lease moves one pointer (a bounced read takes and gives back one per call; moving the
  /// block's handles by value cost ~500 instructions of a 4-byte download, issue 47).
  class Lease {
   public:
    Lease() = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease(Lease&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)), block_(std::move(other.block_)) {}
    Lease& operator=(Lease&& other) noexcept {
      if (this != &other) {
        reset();
        pool_ = std::exchange(other.pool_, nullptr);
        block_ = std::move(other.block_);
      }
      return *this;
    }
    ~Lease() { reset(); }

    explicit operator bool() const noexcept { return data() != nullptr; }
    /// The block's first byte; null for an empty lease.
    void* data() const noexcept { return block_ ? block_->data() : nullptr; }
    /// The block's bytes (its size class, at least the bytes asked for); 0 when empty.
    std::size_t size() const noexcept { return block_ ? block_->size() : 0; }

    /// Gives the block back now; the lease is empty afterwards.
    CLBUF_DETAIL_INLINE void reset() noexcept {
      if (pool_ != nullptr && block_ && !pool_->give_hot(block_)) pool_->give(std::move(block_));
      block_.reset();
      pool_ = nullptr;
    }

    /// Leaves the block to something outside clbuf that may still write it (an MPI request of a
    /// failed transfer): mapped and allocated for good, no longer counted against the budget.
    void leak() noexcept {
      if (block_) {
        if (pool_ != nullptr && block_->data() != nullptr) pool_->forget(block_->size());
        block_->leak();
      }
      block_.reset();
      pool_ = nullptr;
    }

   private:
    friend class PinnedPool;
    Lease(PinnedPool* pool, std::unique_ptr<PinnedBlock> block) noexcept
        : pool_(pool), block_(std::move(block)) {}
    PinnedPool* pool_ = nullptr;
    std::unique_ptr<PinnedBlock> block_;  // null: an empty lease
  };

  PinnedPool(const DeviceContext& device, std::size_t budget) : device_(device) {
    stats_.budget_bytes = budget;
  }
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool() { delete hot_.exchange(nullptr); }

  /// The size class of a lease of `bytes`.
  static std::size_t size_class(std::size_t bytes) noexcept {
    constexpr std::size_t large = std::size_t{64} << 20;
    if (bytes > large) return (bytes + (std::size_t{1} << 20) - 1) & ~((std::size_t{1} << 20) - 1);
    if (bytes <= 4096) return 4096;
    std::size_t size = bytes - 1;  // the next power of two, with no loop
    size |= size >> 1;
    size |= size >> 2;
    size |= size >> 4;
    size |= size >> 8;
    size |= size >> 16;
    size |= (size >> 16) >> 16;  // 64-bit sizes (two shifts: no warning where size_t is 32-bit)
    return size + 1;
  }

  /// A block of at least `bytes` (> 0) mapped on `map_on`, or an empty lease when the budget
  /// cannot hold one.
  /// @throws Error when OpenCL cannot allocate or map it (nothing is counted then).
  /// Inline up to the hot slot, the rest out of line (issue 47: a bounced read's call).
  CLBUF_DETAIL_INLINE Lease take(const char* operation, std::size_t bytes, const Queue& map_on) {
    const std::size_t size = size_class(bytes);
    if (PinnedBlock* hot = take_hot(size, map_on.get())) {
      return Lease(this, std::unique_ptr<PinnedBlock>(hot));
    }
    return take_listed(operation, size, map_on);
  }

  /// take() past the hot slot: a cached block of the lists, else a new one.
  Lease take_listed(const char* operation, std::size_t size, const Queue& map_on) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cool();
      ++stats_.leases;
      std::unique_ptr<PinnedBlock> cached = take_cached(size, map_on.get());
      if (cached) {
        traced();
        return Lease(this, std::move(cached));
      }
      if (!make_room(size)) {
        ++stats_.refusals;
        return Lease();
      }
      reserve(size);  // counted before it is made, so that threads at once keep to the budget
      traced();
    }
    return Lease(this, make(operation, size, map_on));
  }

  /// A snapshot of the counters.
  PinnedStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    PinnedStats stats = stats_;
    // The hot slot's block counts as cached while it is there, and its leases as reuses.
    const std::size_t hot = hot_bytes_.load(std::memory_order_relaxed);
    stats.in_use_bytes -= hot;
    stats.cached_bytes += hot;
    const std::uint64_t hot_leases = hot_leases_.load(std::memory_order_relaxed);
    stats.leases += hot_leases;
    stats.reuses += hot_leases;
    return stats;
  }

  /// Records the bytes in use and cached as the counter "pinned bytes" of `tracer` at each lease
  /// and give-back (null: not tracing); set before the first lease.
  void trace(Tracer* tracer) noexcept { tracer_ = tracer; }

  /// Frees every cached block and caches none from now on (cleanup(): the queues go next;
  /// leases still out free their blocks when given back).
  void close() noexcept {
    std::vector<std::unique_ptr<PinnedBlock>> blocks;  // unmapped outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    closed_.store(true);
    cool();
    blocks.swap(free_);
    for (const std::unique_ptr<PinnedBlock>& block : blocks) release_bytes(block->size(), false);
  }

 private:
  /// The hot slot: one cached block that a lease takes and gives back with one atomic exchange
  /// each, no lock (a bounced read does both on every call: the lock, the list and the stats
  /// cost ~300 instructions of a 4-byte download, issue 47). Under the lock the block counts as
  /// in use (stats_) and hot_bytes_ says it is cached; the lists of the lock (trims, close())
  /// see it once cool() has moved it back. Not used while tracing (each lease is a counter then).
  CLBUF_DETAIL_INLINE PinnedBlock* take_hot(std::size_t size, cl_command_queue queue) noexcept {
    if (tracer_ != nullptr || hot_.load(std::memory_order_relaxed) == nullptr) return nullptr;
    PinnedBlock* block = hot_.exchange(nullptr, std::memory_order_acquire);
    if (block == nullptr) return nullptr;
    if (block->size() != size || block->queue() != queue) {  // not this lease's: back to the lists
      cool_other(block);
      return nullptr;
    }
    hot_bytes_.fetch_sub(size, std::memory_order_relaxed);
    // Written only by the block's taker, each take ordered after the last by hot_'s exchange
    // and give-back: a plain store, no locked instruction (issue 47).
    hot_leases_.store(hot_leases_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return block;
  }

  /// Puts `block` (a lease's, counted in use) into the empty hot slot; false when the slot is
  /// taken, or the pool closed or tracing.
  CLBUF_DETAIL_INLINE bool give_hot(std::unique_ptr<PinnedBlock>& block) noexcept {
    if (tracer_ != nullptr || closed_.load(std::memory_order_acquire)) return false;
    PinnedBlock* expected = nullptr;
    hot_bytes_.fetch_add(block->size(), std::memory_order_relaxed);
    if (!hot_.compare_exchange_strong(expected, block.get(), std::memory_order_release,
                                      std::memory_order_relaxed)) {
      hot_bytes_.fetch_sub(block->size(), std::memory_order_relaxed);
      return false;
    }
    block.release();
    if (closed_.load(std::memory_order_acquire)) cool_closed();  // close() ran meanwhile
    return true;
  }
  CLBUF_DETAIL_COLD void cool_closed() noexcept {  // the hot slot's block is not kept
    std::lock_guard<std::mutex> lock(mutex_);
    cool();
  }

  /// Moves `block`, taken from the hot slot for a lease of another size or queue, to the lists.
  CLBUF_DETAIL_COLD void cool_other(PinnedBlock* block) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    hot_bytes_.fetch_sub(block->size(), std::memory_order_relaxed);
    cache_locked(std::unique_ptr<PinnedBlock>(block));
  }

  /// Moves the hot slot's block (if any) to the lists. Under mutex_.
  void cool() noexcept {
    PinnedBlock* block = hot_.exchange(nullptr, std::memory_order_acquire);
    if (block == nullptr) return;
    hot_bytes_.fetch_sub(block->size(), std::memory_order_relaxed);
    cache_locked(std::unique_ptr<PinnedBlock>(block));
  }

  /// Caches a block counted in use (freed once closed, or when the cache cannot grow). Under
  /// mutex_.
  void cache_locked(std::unique_ptr<PinnedBlock> block) noexcept {
    const std::size_t size = block->size();
    stats_.in_use_bytes -= size;
    if (!closed_.load(std::memory_order_relaxed)) {
      try {
        free_.push_back(std::move(block));
        stats_.cached_bytes += size;
        return;
      } catch (...) {  // NOLINT(bugprone-empty-catch): no room to keep it: freed below
      }
    }
    stats_.allocated_bytes -= size;
  }

  /// A cached block of `size` bytes mapped on `queue`, or an empty one. Under mutex_.
  std::unique_ptr<PinnedBlock> take_cached(std::size_t size, cl_command_queue queue) noexcept {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if ((*it)->size() != size || (*it)->queue() != queue) continue;
      std::unique_ptr<PinnedBlock> block = std::move(*it);
      free_.erase(it);
      stats_.cached_bytes -= size;
      stats_.in_use_bytes += size;
      ++stats_.reuses;
      return block;
    }
    return nullptr;
  }

  /// The counter "pinned bytes" now, when tracing. Under mutex_ (its values are the counts').
  void traced() noexcept {
    if (tracer_ == nullptr) return;
    tracer_->counter("pinned bytes",
                     {{"in use", nullptr, static_cast<double>(stats_.in_use_bytes)},
                      {"cached", nullptr, static_cast<double>(stats_.cached_bytes)}});
  }

  /// Frees cached blocks (oldest first) until `size` more bytes fit the budget; false if they
  /// cannot. Under mutex_ (a freed block's unmap is enqueued, not waited for).
  bool make_room(std::size_t size) noexcept {
    if (size > stats_.budget_bytes) return false;
    if (stats_.in_use_bytes + size > stats_.budget_bytes) return false;  // trimming won't help
    while (stats_.allocated_bytes + size > stats_.budget_bytes && !free_.empty()) {
      release_bytes(free_.front()->size(), false);
      ++stats_.trims;
      free_.erase(free_.begin());
    }
    return true;
  }

  void reserve(std::size_t size) noexcept {
    stats_.allocated_bytes += size;
    stats_.in_use_bytes += size;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.allocated_bytes);
    ++stats_.allocations;
  }

  /// A new block of `size` bytes, reserved by take(); the reservation undone if it fails. Null
  /// when there is no host memory for the block's record (a lease holds it by pointer): the use
  /// goes without, as when the budget cannot hold the block (a refusal).
  std::unique_ptr<PinnedBlock> make(const char* operation, std::size_t size, const Queue& map_on) {
    std::unique_ptr<PinnedBlock> block;
    try {
      block.reset(new (std::nothrow) PinnedBlock(device_.context(), map_on, size, operation));
    } catch (...) {
      unreserve(size);
      throw;
    }
    if (!block) unreserve(size, true);
    return block;
  }

  /// Undoes reserve(size); counts a refusal when `refused`.
  void unreserve(std::size_t size, bool refused = false) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    release_bytes(size, true);
    --stats_.allocations;
    if (refused) ++stats_.refusals;
  }

  /// Takes `size` bytes off the counts (leased ones when `in_use`, else cached ones).
  void release_bytes(std::size_t size, bool in_use) noexcept {
    stats_.allocated_bytes -= size;
    (in_use ? stats_.in_use_bytes : stats_.cached_bytes) -= size;
  }

  /// Caches a block given back that the hot slot did not take (frees it once closed, or when
  /// the cache cannot grow).
  void give(std::unique_ptr<PinnedBlock>&& block) noexcept {
    std::unique_ptr<PinnedBlock> dropped;  // unmapped outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t size = block->size();
    stats_.in_use_bytes -= size;
    if (!closed_.load(std::memory_order_relaxed)) {
      try {
        free_.push_back(std::move(block));
        stats_.cached_bytes += size;
        traced();
        return;
      } catch (...) {  // NOLINT(bugprone-empty-catch): no room to keep it: freed below
      }
    }
    stats_.allocated_bytes -= size;
    traced();
    dropped = std::move(block);
  }

  void forget(std::size_t size) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    release_bytes(size, true);
    ++stats_.leaked;
  }

  const DeviceContext& device_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<PinnedBlock>> free_;  // cached, oldest first
  PinnedStats stats_;
  std::atomic<bool> closed_{false};           // written under mutex_
  Tracer* tracer_ = nullptr;                  // the manager's, when it traces
  std::atomic<PinnedBlock*> hot_{nullptr};    // the hot slot's block, owned (take_hot())
  std::atomic<std::size_t> hot_bytes_{0};     // its bytes while there (counted in use)
  std::atomic<std::uint64_t> hot_leases_{0};  // leases it served
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_PINNED_POOL_HPP
