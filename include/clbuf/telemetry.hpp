// SPDX-License-Identifier: MIT
// clbuf::TransferStats: a manager's bytes, operations and time per direction, and its pool's
// counters (the counters themselves: detail/telemetry.hpp).
#ifndef CLBUF_TELEMETRY_HPP
#define CLBUF_TELEMETRY_HPP

#include <clbuf/pool.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

namespace clbuf {

/// One direction's totals. Asynchronous transfers count bytes and operations when they are
/// started; their time is not counted (it overlaps other work).
struct DirectionStats {
  std::uint64_t operations = 0;   ///< transfers started (zero-sized ones and rejected ones not)
  std::uint64_t bytes = 0;        ///< bytes moved
  std::uint64_t nanoseconds = 0;  ///< wall time inside blocking calls
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
