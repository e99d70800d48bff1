// SPDX-License-Identifier: MIT
// The device-memory pool behind allocate() and upload(): size-binned, bounded, thread-safe.
// Repeated uploads skip allocation and the slow first touch of fresh memory. On devices that
// share host memory the pool's buffers are host blocks clbuf allocates (CL_MEM_USE_HOST_PTR),
// which the host can fill directly, with no queue command, while the block is idle. Memory is
// handed out again only once no queue may still use it (Fences), and never while views or
// mappings of it are alive (Lease).
#ifndef CLBUF_DETAIL_POOL_HPP
#define CLBUF_DETAIL_POOL_HPP

#include <clbuf/detail/event.hpp>
#include <clbuf/detail/host_memory.hpp>
#include <clbuf/error.hpp>
#include <clbuf/pool.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// Commands on queues other than the owning manager's that may still use a pooled buffer
/// (another manager of the same context transferring it asynchronously). The owner's own queue
/// is in order, so its commands need no record; these do: the pool hands the buffer out again
/// only once every one of them has completed.
class Fences {
 public:
  void add(const cl::Event& event) {
    std::lock_guard<std::mutex> lock(mutex_);
    prune();
    events_.push_back(event);
    recorded_.store(true, std::memory_order_relaxed);
  }

  /// True while a recorded command has not completed. With none recorded (the common case: a
  /// buffer only its own manager used) no lock is taken: the pool asks this of every buffer it
  /// hands out again (issue 47: the lock and the prune cost a small upload ~60 instructions).
  /// A buffer in the pool is used by nobody, so what its last user recorded was recorded before
  /// the pool took it back, under the pool's lock, which acquire() holds too.
  bool busy() noexcept {
    if (!recorded_.load(std::memory_order_relaxed)) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    prune();
    recorded_.store(!events_.empty(), std::memory_order_relaxed);
    return !events_.empty();
  }

 private:
  void prune() noexcept {
    // An event that cannot be queried is kept: never reuse early.
    events_.erase(
        std::remove_if(events_.begin(), events_.end(),
                       [](const cl::Event& event) { return event_status(event()).ended(); }),
        events_.end());
  }

  std::mutex mutex_;
  std::vector<cl::Event> events_;
  std::atomic<bool> recorded_{false};  // events_ is not empty; written under mutex_
};

/// The memory of one DeviceBuffer: bytes [offset, offset + capacity) of the OpenCL buffer
/// `buffer`. A buffer of the pool starts at offset 0; a view shares its root's `buffer` at the
/// view's byte offset, so every command on a view addresses the root buffer (no sub-buffer).
/// `host` is the block behind `buffer` (its byte 0) when the pool is host-backed.
struct Allocation {
  cl::Buffer buffer;
  std::size_t capacity = 0;
  void* host = nullptr;
  bool fresh = false;              ///< never handed out before: no command can be using it
  std::shared_ptr<Fences> fences;  ///< other queues' commands on it; null when not pooled
  std::size_t offset = 0;          ///< where this memory begins in `buffer`, in bytes
  /// While the memory is in the pool: the shape vector of the DeviceBuffer that gave it back,
  /// whose heap block the next 1-D DeviceBuffer made from it keeps (no allocation for its
  /// shape: issue 47). Empty elsewhere.
  std::vector<std::size_t> shape_storage;

  /// Byte `at` of this memory as an offset in `buffer`, for OpenCL commands.
  std::size_t at(std::size_t at) const noexcept { return offset + at; }
  /// Byte `at` of this memory in the host block (only where `host` is set).
  char* host_at(std::size_t at) const noexcept { return static_cast<char*>(host) + offset + at; }
};

inline void CL_CALLBACK free_host_block(cl_mem, void* block) { std::free(block); }

class MemoryPool {
 public:
  MemoryPool(cl::Context context, bool host_backed, std::size_t limit_bytes,
             std::uint64_t max_alloc_bytes)
      : context_(std::move(context)),
        host_backed_(host_backed),
        max_alloc_bytes_(max_alloc_bytes),
        limit_(limit_bytes) {
    stats_.limit_bytes = limit_bytes;
  }

  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  bool host_backed() const noexcept { return host_backed_; }

  /// The capacity a request of `bytes` is served with: 64 B, then powers of two up to 4 KiB,
  /// then steps of an eighth of a power of two (at most 12.5% unused), never past `max`.
  static std::size_t bin_size(std::size_t bytes, std::uint64_t max) noexcept {
    std::size_t bin = 64;
    if (bytes > 4096) {
      std::size_t power = 4096;
      while (power * 2 < bytes && power * 2 > power) power *= 2;
      const std::size_t step = power / 8;
      bin = (bytes + step - 1) / step * step;
      if (bin < bytes) bin = bytes;  // wrapped near SIZE_MAX
    } else {
      while (bin < bytes) bin *= 2;
    }
    return bin > max ? bytes : bin;
  }

  /// A buffer of at least `bytes` (> 0) bytes. Trims the pool and retries once when the
  /// driver or the host is out of memory. Inline up to the hot slot, the rest out of line.
  CLBUF_DETAIL_INLINE Allocation acquire(std::size_t bytes, const char* operation) {
    Allocation allocation;
    acquire_into(allocation, bytes, operation);
    return allocation;
  }

  /// As acquire(), into `out` (which holds no buffer): a DeviceBuffer's own memory, with no
  /// Allocation moved on the way (issue 47).
  CLBUF_DETAIL_INLINE void acquire_into(Allocation& out, std::size_t bytes, const char* operation) {
    const std::size_t capacity = bin_size(bytes, max_alloc_bytes_);
    if (take_hot(capacity, out)) return;
    out = acquire_listed(capacity, operation);
  }

  /// Takes a buffer back for reuse, or frees it when the pool is full or closed.
  CLBUF_DETAIL_INLINE void give_back(Allocation&& allocation) noexcept {
    if (allocation.buffer() != nullptr && give_hot(allocation)) return;
    give_back_listed(std::move(allocation));
  }

  /// Memory of `capacity` bytes the pool handed out will not come back (the application owns
  /// it): it no longer counts as in use. Nothing for 0 (an empty buffer's).
  void forget(std::size_t capacity) noexcept {
    if (capacity == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    uncount(capacity);
  }

  /// Frees every cached buffer.
  void trim() noexcept {
    std::unordered_map<std::size_t, std::vector<Allocation>> dropped;
    Allocation hot;
    std::lock_guard<std::mutex> lock(mutex_);
    if (take_hot_any(hot)) uncount(hot.capacity);
    dropped.swap(free_);
    stats_.cached_bytes = 0;
    stats_.cached_buffers = 0;
    list_bytes_.store(0, std::memory_order_seq_cst);
    ++stats_.trims;
  }

  /// Trims and stops caching (the manager was cleaned up); buffers still out are freed on return.
  void close() noexcept {
    closed_.store(true, std::memory_order_seq_cst);  // first: no buffer enters the hot slot after
    trim();
    std::lock_guard<std::mutex> lock(mutex_);
    context_ = cl::Context();
  }

  void set_limit(std::size_t limit_bytes) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.limit_bytes = limit_bytes;
      limit_.store(limit_bytes, std::memory_order_seq_cst);
      if (stats_.cached_bytes + hot_bytes_.load(std::memory_order_seq_cst) <= limit_bytes) return;
    }
    trim();
  }

  PoolStats stats() const {
    PoolStats stats;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats = stats_;
    }
    // The hot slot's buffer is counted in use by stats_ and cached here; its takes are hits.
    const std::size_t hot = hot_bytes_.load(std::memory_order_relaxed);
    if (hot != 0 && stats.in_use_buffers != 0) {
      stats.in_use_bytes -= std::min(stats.in_use_bytes, hot);
      --stats.in_use_buffers;
      stats.cached_bytes += hot;
      ++stats.cached_buffers;
    }
    stats.hits += hot_hits_.load(std::memory_order_relaxed);
    return stats;
  }

 private:
  static bool is_out_of_memory(cl_int err) noexcept {
    return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
           err == CL_OUT_OF_HOST_MEMORY;
  }

  // The hot slot (issue 47): one cached buffer that acquire() takes and give_back() puts back
  // with atomic operations only, no lock, no map: a round trip through a new buffer (the seed's
  // upload, then its destruction) does both on every call, and the lock, the bin's lookup and
  // the list cost ~250 instructions of it. The slot's state says who owns `hot_`: nobody while
  // empty, the slot while full, the thread that set it busy while busy. Its buffer stays counted
  // in use by stats_ (the lock's counters) and hot_bytes_ holds its capacity, which stats()
  // moves to the cached counts; trim() and close() empty the slot under the lock.
  enum : int { hot_empty = 0, hot_full = 1, hot_busy = 2 };

  /// Moves the slot's buffer into `out` when it is full with a buffer of `capacity` that no
  /// other queue may still use.
  CLBUF_DETAIL_INLINE bool take_hot(std::size_t capacity, Allocation& out) noexcept {
    if (hot_bytes_.load(std::memory_order_relaxed) != capacity) return false;
    int state = hot_full;
    if (!hot_state_.compare_exchange_strong(state, hot_busy, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
      return false;
    }
    if (hot_.capacity != capacity || (hot_.fences && hot_.fences->busy())) {
      hot_state_.store(hot_full, std::memory_order_release);
      return false;
    }
    // Written by the slot's owner only (the busy state orders the owners): a plain store, no
    // locked instruction.
    hot_hits_.store(hot_hits_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    empty_slot_into(out);
    return true;
  }

  /// Moves the buffer of the slot this thread set busy into `out` and leaves the slot empty.
  /// A stale nonzero hot_bytes_ seen elsewhere only makes give_back_listed() cautious.
  void empty_slot_into(Allocation& out) noexcept {
    out = std::move(hot_);  // leaves hot_ without a buffer, fences or shape storage
    hot_bytes_.store(0, std::memory_order_relaxed);
    hot_state_.store(hot_empty, std::memory_order_release);
  }

  /// Puts `allocation` (counted in use) into the empty slot; false when the slot is full or
  /// busy, the pool closed, or the buffer would take the cached bytes past the limit (then the
  /// lock's path decides).
  CLBUF_DETAIL_INLINE bool give_hot(Allocation& allocation) noexcept {
    if (closed_.load(std::memory_order_relaxed)) return false;
    int state = hot_empty;
    if (!hot_state_.compare_exchange_strong(state, hot_busy, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
      return false;
    }
    // Within the limit with the lists' bytes. Sequentially consistent, as give_back_listed's
    // store and load in the other order: of two buffers given back at once, one each way, at
    // least one sees the other.
    hot_bytes_.store(allocation.capacity, std::memory_order_seq_cst);
    if (list_bytes_.load(std::memory_order_seq_cst) + allocation.capacity >
        limit_.load(std::memory_order_relaxed)) {
      hot_bytes_.store(0, std::memory_order_seq_cst);
      hot_state_.store(hot_empty, std::memory_order_release);
      return false;
    }
    allocation.fresh = false;
    hot_ = std::move(allocation);
    hot_state_.store(hot_full, std::memory_order_release);
    if (closed_.load(std::memory_order_seq_cst)) cool_closed();  // close() ran meanwhile
    return true;
  }

  CLBUF_DETAIL_COLD void cool_closed() noexcept {  // freed as a buffer given back once closed
    Allocation hot;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!take_hot_any(hot)) return;
    uncount(hot.capacity);
    ++stats_.released;
  }

  /// Moves the slot's buffer, whatever its size, into `out` when the slot is full. Under mutex_.
  bool take_hot_any(Allocation& out) noexcept {
    int state = hot_full;
    if (!hot_state_.compare_exchange_strong(state, hot_busy, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
      return false;
    }
    empty_slot_into(out);
    return true;
  }

  /// A buffer in use of `capacity` bytes no longer counts as in use. Under mutex_.
  void uncount(std::size_t capacity) noexcept {
    stats_.in_use_bytes -= std::min(stats_.in_use_bytes, capacity);
    stats_.in_use_buffers -= std::min<std::size_t>(stats_.in_use_buffers, 1);
  }

  /// acquire() past the hot slot: a cached buffer of the bin's list, else a new one.
  CLBUF_DETAIL_COLD Allocation acquire_listed(std::size_t capacity, const char* operation) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto bin = free_.find(capacity);
      if (bin != free_.end()) {
        std::vector<Allocation>& cached = bin->second;
        // The most recently freed first; one that another queue may still use stays cached.
        for (std::size_t i = cached.size(); i-- > 0;) {
          if (cached[i].fences && cached[i].fences->busy()) continue;
          Allocation allocation = std::move(cached[i]);
          cached.erase(cached.begin() + static_cast<std::ptrdiff_t>(i));
          ++stats_.hits;
          --stats_.cached_buffers;
          stats_.cached_bytes -= capacity;
          list_bytes_.store(stats_.cached_bytes, std::memory_order_seq_cst);
          ++stats_.in_use_buffers;
          stats_.in_use_bytes += capacity;
          return allocation;
        }
      }
      ++stats_.misses;
    }
    cl_int err = CL_SUCCESS;
    Allocation allocation = create(capacity, err);
    if (is_out_of_memory(err)) {
      trim();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.retries;
      }
      allocation = create(capacity, err);
    }
    check(err, operation, host_backed_ ? "clCreateBuffer(CL_MEM_USE_HOST_PTR)" : "clCreateBuffer");
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.in_use_buffers;
    stats_.in_use_bytes += allocation.capacity;
    return allocation;
  }

  /// give_back() past the hot slot: into the bin's list, or freed when the pool is full or
  /// closed.
  CLBUF_DETAIL_COLD void give_back_listed(Allocation&& allocation) noexcept {
    if (allocation.buffer() == nullptr) {  // release()d to the application: no longer clbuf's
      forget(allocation.capacity);
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    uncount(allocation.capacity);
    const std::size_t cached = stats_.cached_bytes + allocation.capacity;
    // Counted before the slot is looked at (give_hot() looks the other way round).
    list_bytes_.store(cached, std::memory_order_seq_cst);
    if (closed_.load(std::memory_order_relaxed) ||
        cached + hot_bytes_.load(std::memory_order_seq_cst) > stats_.limit_bytes) {
      list_bytes_.store(stats_.cached_bytes, std::memory_order_seq_cst);
      ++stats_.released;
      lock.unlock();
      allocation = Allocation();  // the host block is freed when the driver drops the buffer
      return;
    }
    allocation.fresh = false;
    stats_.cached_bytes = cached;
    ++stats_.cached_buffers;
    free_[allocation.capacity].push_back(std::move(allocation));
  }

  Allocation create(std::size_t capacity, cl_int& err) {
    Allocation allocation;
    allocation.capacity = capacity;
    allocation.fresh = true;
    try {
      allocation.fences = std::make_shared<Fences>();
    } catch (const std::bad_alloc&) {
      err = CL_OUT_OF_HOST_MEMORY;
      return allocation;
    }
    if (!host_backed_) {
      allocation.buffer = cl::Buffer(
          CLBUF_CL(clCreateBuffer)(context_(), CL_MEM_READ_WRITE, capacity, nullptr, &err), false);
      return allocation;
    }
    void* block = allocate_host_block(capacity);
    if (block == nullptr) {
      err = CL_OUT_OF_HOST_MEMORY;
      return allocation;
    }
    cl_mem memory = CLBUF_CL(clCreateBuffer)(context_(), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                                             capacity, block, &err);
    if (err != CL_SUCCESS) {
      std::free(block);
      return allocation;
    }
    // The block must outlive every command on the buffer, which may outlive this object.
    err = CLBUF_CL(clSetMemObjectDestructorCallback)(memory, free_host_block, block);
    if (err != CL_SUCCESS) {
      CLBUF_CL(clReleaseMemObject)(memory);
      std::free(block);
      return allocation;
    }
    allocation.buffer = cl::Buffer(memory, false);
    allocation.host = block;
    return allocation;
  }

  mutable std::mutex mutex_;
  cl::Context context_;
  const bool host_backed_;
  const std::uint64_t max_alloc_bytes_;
  std::atomic<bool> closed_{false};
  PoolStats stats_;
  std::unordered_map<std::size_t, std::vector<Allocation>> free_;
  std::atomic<std::size_t> limit_;          // stats_.limit_bytes, for give_hot()
  std::atomic<std::size_t> list_bytes_{0};  // stats_.cached_bytes (the lists'), for give_hot()
  std::atomic<int> hot_state_{hot_empty};   // the hot slot: empty, full or busy
  Allocation hot_;                          // its buffer while full
  std::atomic<std::size_t> hot_bytes_{0};   // its capacity while full (counted in use)
  std::atomic<std::uint64_t> hot_hits_{0};  // acquisitions it served
};

/// The lock under which a DeviceBuffer makes its Lease (the first view of it): one of a few,
/// picked by the buffer's address, so that buffers stay small and movable.
inline std::mutex& lease_mutex(const void* buffer) noexcept {
  static std::mutex mutexes[16];
  return mutexes[(reinterpret_cast<std::uintptr_t>(buffer) >> 6) % 16];
}

/// Memory shared by a DeviceBuffer and its sub-buffer views or mapped views: it goes back to the
/// pool only when the last of them is gone, and never once one of them was released to the
/// application (the application may still use it).
struct Lease {
  Lease(Allocation allocation, std::shared_ptr<MemoryPool> owner)
      : memory(std::move(allocation)), pool(std::move(owner)) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() {
    if (!pool) return;
    if (reusable.load()) {
      pool->give_back(std::move(memory));
    } else {
      pool->forget(memory.capacity);
    }
  }

  /// Records a MappedView's host range [data, data + bytes) while it is mapped.
  /// @throws Error CL_OUT_OF_HOST_MEMORY when the record cannot be kept.
  void add_mapping(const char* operation, const void* data, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mappings_mutex_);
    guard_host_memory(operation, sizeof(mappings_[0]), "the record of a mapping", [&] {
      mappings_.emplace_back(reinterpret_cast<std::uintptr_t>(data), bytes);
    });
  }

  void remove_mapping(const void* data) noexcept {
    std::lock_guard<std::mutex> lock(mappings_mutex_);
    const auto address = reinterpret_cast<std::uintptr_t>(data);
    for (std::size_t i = 0; i < mappings_.size(); ++i) {
      if (mappings_[i].first == address) {
        mappings_.erase(mappings_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
  }

  /// True when [data, data + bytes) shares a byte with a live mapping of this memory.
  bool maps_onto(const void* data, std::size_t bytes) noexcept {
    std::lock_guard<std::mutex> lock(mappings_mutex_);
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    for (const auto& mapping : mappings_) {
      if (bytes != 0 && mapping.second != 0 && begin < mapping.first + mapping.second &&
          mapping.first < begin + bytes) {
        return true;
      }
    }
    return false;
  }

  Allocation memory;
  std::shared_ptr<MemoryPool> pool;  // null: not pooled (adopted memory)
  std::atomic<bool> reusable{true};

 private:
  std::mutex mappings_mutex_;
  std::vector<std::pair<std::uintptr_t, std::size_t>> mappings_;  // live MappedViews
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_POOL_HPP
