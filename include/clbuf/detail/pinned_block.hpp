// SPDX-License-Identifier: MIT
// A pinned host block: a CL_MEM_ALLOC_HOST_PTR buffer mapped once for the host, the memory the
// driver moves by DMA at full bus speed. Used by PinnedBuffer, the staging slots, the buffered
// uploads' ring, the bounced transfers and the copies between contexts (the last two through a
// PinnedCache, which keeps a few from call to call, and a PinnedLease per transfer); MappedView
// shares its unmap-with-retry.
#ifndef CLBUF_DETAIL_PINNED_BLOCK_HPP
#define CLBUF_DETAIL_PINNED_BLOCK_HPP

#include <clbuf/error.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// Unmaps `data` of `buffer`. A mapping holds a reference to its buffer, so a lost unmap would
/// leak the buffer, its context and its queue: a failed unmap is retried once after the queue
/// has drained. Returns the last code; `event` (may be null) receives the unmap's event.
inline cl_int unmap_with_retry(cl_command_queue queue, cl_mem buffer, void* data,
                               cl_event* event) noexcept {
  cl_int err = CLBUF_CL(clEnqueueUnmapMemObject)(queue, buffer, data, 0, nullptr, event);
  if (err != CL_SUCCESS) {
    CLBUF_CL(clFinish)(queue);
    err = CLBUF_CL(clEnqueueUnmapMemObject)(queue, buffer, data, 0, nullptr, event);
  }
  return err;
}

class PinnedBlock {
 public:
  PinnedBlock() = default;

  /// `bytes` (> 0) of pinned memory of `context`, mapped for reading and writing on `queue`.
  /// Wraps clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) and a blocking clEnqueueMapBuffer.
  PinnedBlock(const cl::Context& context, const cl::CommandQueue& queue, std::size_t bytes,
              const char* operation)
      : queue_(queue), bytes_(bytes) {
    cl_int err = CL_SUCCESS;
    buffer_ =
        cl::Buffer(CLBUF_CL(clCreateBuffer)(context(), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                                            bytes, nullptr, &err),
                   false);
    check(err, operation, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)");
    data_ = CLBUF_CL(clEnqueueMapBuffer)(queue_(), buffer_(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                         0, bytes, 0, nullptr, nullptr, &err);
    check(err, operation, "clEnqueueMapBuffer");
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
      unmap_with_retry(queue_(), buffer_(), data_, nullptr);
      CLBUF_CL(clFlush)(queue_());
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
  cl_mem buffer() const noexcept { return buffer_(); }

 private:
  void swap(PinnedBlock& other) noexcept {
    std::swap(buffer_, other.buffer_);
    std::swap(queue_, other.queue_);
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }

  cl::Buffer buffer_;
  cl::CommandQueue queue_;  // the queue it was mapped on, which unmaps it
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Pinned blocks of one context, kept from one call to the next: allocating and mapping pinned
/// memory costs about a millisecond on NVIDIA's driver, more than moving a MiB through it. Blocks
/// are taken and given back by any number of threads; at most `kept` wait in the cache, so what it
/// holds stays bounded (kept x block bytes); more in use at once are made and freed as needed.
class PinnedCache {
 public:
  using Held = std::unique_ptr<PinnedBlock>;  // one pointer moves between cache and lease

  explicit PinnedCache(std::size_t kept) : kept_(kept) {}

  /// A block of exactly `bytes`, from the cache or new (mapped on `queue`).
  Held take(const cl::Context& context, const cl::CommandQueue& queue, std::size_t bytes,
            const char* operation) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if ((*it)->size() == bytes) {
          Held block = std::move(*it);
          free_.erase(it);
          return block;
        }
      }
    }
    return guard_host_memory(operation, sizeof(PinnedBlock), "a pinned block's record", [&] {
      return std::make_unique<PinnedBlock>(context, queue, bytes, operation);
    });
  }

  /// Gives `block` back once nothing uses it any more; freed if the cache is full.
  void give(Held&& block) noexcept {
    Held dropped;  // unmapped outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    if (!block) return;
    if (free_.size() >= kept_) {
      dropped = std::move(block);
      return;
    }
    try {
      free_.push_back(std::move(block));
    } catch (...) {  // NOLINT(bugprone-empty-catch): no room to keep it: freed with `block`
    }
  }

  /// Frees every cached block (their queues must still exist; cleanup() calls it).
  void clear() noexcept {
    std::vector<Held> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
    }
  }

 private:
  const std::size_t kept_;
  std::mutex mutex_;
  std::vector<Held> free_;
};

/// A block of a PinnedCache held for one transfer: taken at construction, given back on every
/// way out. The transfer must have finished with it by then (blocking commands, or a drain
/// declared after the lease, which therefore runs first).
class PinnedLease {
 public:
  PinnedLease(PinnedCache& cache, const cl::Context& context, const cl::CommandQueue& queue,
              std::size_t bytes, const char* operation)
      : cache_(cache), block_(cache.take(context, queue, bytes, operation)) {}
  PinnedLease(const PinnedLease&) = delete;
  PinnedLease& operator=(const PinnedLease&) = delete;
  ~PinnedLease() { cache_.give(std::move(block_)); }

  void* data() const noexcept { return block_->data(); }

 private:
  PinnedCache& cache_;
  PinnedCache::Held block_;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_PINNED_BLOCK_HPP
