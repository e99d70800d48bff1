// SPDX-License-Identifier: MIT
// clbuf::TransferStats: a manager's bytes, operations and time per direction, and its pool's
// counters (the counters themselves: detail/telemetry.hpp).
#ifndef CLBUF_TELEMETRY_HPP
#define CLBUF_TELEMETRY_HPP

#include <clbuf/pool.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace clbuf {

/// How one direction's operations moved their bytes: each operation counts once, on the path
/// the manager chose for it (docs/design.md "Transfer paths"), so the six add up to
/// DirectionStats::operations. Which path a transfer takes follows from the memory model, the
/// Options thresholds, the host memory (pageable or a PinnedBuffer) and whether the call blocks.
struct PathStats {
  /// Copied by the host (memcpy), no OpenCL command: a CPU device's own memory
  /// (MemoryModel::host) in blocking calls, and small uploads into its fresh buffers.
  std::uint64_t host_copy = 0;
  /// Pageable memory through pinned chunks on the copy threads: a discrete device, at least
  /// Options::staging_threshold_bytes.
  std::uint64_t staged = 0;
  /// Blocking uploads that returned once the bytes were in clbuf's pinned ring: a discrete
  /// device, pageable memory of at most Options::buffered_upload_max_bytes.
  std::uint64_t buffered = 0;
  /// Blocking downloads read into a pinned block of clbuf's, then copied out: a discrete device,
  /// pageable memory of at most Options::bounce_max_bytes, below the staging threshold.
  std::uint64_t bounced = 0;
  /// copy_from() between two contexts through two pinned chunks (neither side a CPU device's
  /// own memory).
  std::uint64_t relayed = 0;
  /// OpenCL commands the driver carries out (clEnqueueWriteBuffer, ReadBuffer, CopyBuffer,
  /// FillBuffer and their rect forms): every other transfer.
  std::uint64_t direct = 0;
};

/// clbuf's own pinned host memory (detail/pinned_pool.hpp): the staging slots, the buffered
/// uploads' ring, bounced reads, copy_from's chunks between contexts and clbuf::mpi's chunks, all
/// leased from one pool per manager within Options::pinned_budget_bytes. PinnedBuffers the
/// application allocates are not counted.
struct PinnedStats {
  std::size_t budget_bytes = 0;     ///< the most bytes the pool may hold (leased plus cached)
  std::size_t allocated_bytes = 0;  ///< bytes it holds now: in_use_bytes + cached_bytes
  std::size_t in_use_bytes = 0;     ///< bytes leased now
  std::size_t cached_bytes = 0;     ///< bytes kept for the next lease
  std::size_t peak_bytes = 0;       ///< the most allocated_bytes ever held; never over budget
  std::uint64_t leases = 0;         ///< blocks asked for
  std::uint64_t reuses = 0;         ///< leases served from the cache
  std::uint64_t allocations = 0;    ///< blocks made (clCreateBuffer and a map)
  std::uint64_t refusals = 0;       ///< leases the budget could not hold (the caller went without)
  std::uint64_t trims = 0;          ///< cached blocks freed to make room for another size
  std::uint64_t leaked = 0;         ///< blocks left to MPI by failed transfers (no longer counted)
};

/// One direction's totals. Asynchronous transfers count bytes and operations when they are
/// started; their time is not counted (it overlaps other work).
struct DirectionStats {
  std::uint64_t operations = 0;   ///< transfers started (zero-sized ones and rejected ones not)
  std::uint64_t bytes = 0;        ///< bytes moved
  std::uint64_t nanoseconds = 0;  ///< wall time inside blocking calls
  PathStats paths;                ///< the operations by the path they took
  /// Achieved GB/s (10^9 bytes per second) over the blocking calls, 0 when none was timed.
  double gigabytes_per_second() const noexcept {
    return nanoseconds == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(nanoseconds);
  }
};

/// A snapshot of a BufferManager's transfers and pool.
struct TransferStats {
  DirectionStats upload;    ///< host -> device
  DirectionStats download;  ///< device -> host
  DirectionStats copy;      ///< device -> device
  PoolStats pool;           ///< the buffer pool's counters
  PinnedStats pinned;       ///< clbuf's own pinned memory

  /// One line, e.g. "upload 12 ops 48.0 MiB 9.1 GB/s | download ... | copy ... | pool 10 hits".
  std::string summary() const {
    auto part = [](const char* name, const DirectionStats& d) {
      char text[128];
      std::snprintf(text, sizeof(text), "%s %llu ops %.1f MiB %.2f GB/s", name,
                    static_cast<unsigned long long>(d.operations),
                    static_cast<double>(d.bytes) / 1048576.0, d.gigabytes_per_second());
      return std::string(text);
    };
    char tail[160];
    std::snprintf(tail, sizeof(tail), " | pool %llu hits %llu misses %.1f MiB cached",
                  static_cast<unsigned long long>(pool.hits),
                  static_cast<unsigned long long>(pool.misses),
                  static_cast<double>(pool.cached_bytes) / 1048576.0);
    return part("upload", upload) + " | " + part("download", download) + " | " +
           part("copy", copy) + tail;
  }
};

}  // namespace clbuf

#endif  // CLBUF_TELEMETRY_HPP
