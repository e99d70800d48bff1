// SPDX-License-Identifier: MIT
// clbuf::PoolStats: the counters of a BufferManager's device-memory pool (detail/pool.hpp).
#ifndef CLBUF_POOL_HPP
#define CLBUF_POOL_HPP

#include <cstddef>
#include <cstdint>

namespace clbuf {

/// Counters of a BufferManager's device-memory pool.
struct PoolStats {
  std::uint64_t hits = 0;          ///< allocations served from the pool
  std::uint64_t misses = 0;        ///< allocations that created a buffer
  std::uint64_t released = 0;      ///< buffers freed instead of cached (over the limit)
  std::uint64_t trims = 0;         ///< times the whole pool was emptied
  std::uint64_t retries = 0;       ///< failed allocations retried after a trim
  std::size_t cached_buffers = 0;  ///< buffers waiting for reuse now
  std::size_t cached_bytes = 0;    ///< their capacity in bytes
  std::size_t limit_bytes = 0;     ///< most bytes the pool keeps cached
  /// Buffers the pool handed out that have not come back (live DeviceBuffers and their views'
  /// memory; a release()d buffer's until its last view is gone).
  std::size_t in_use_buffers = 0;
  std::size_t in_use_bytes = 0;  ///< the capacity in bytes of the in_use_buffers
};

}  // namespace clbuf

#endif  // CLBUF_POOL_HPP
