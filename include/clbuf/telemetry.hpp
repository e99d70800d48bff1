// Transfer telemetry: per manager, bytes, operations and time per direction. Cheap enough to
// stay on: a few relaxed atomic additions and two clock reads per blocking call.
#ifndef CLBUF_TELEMETRY_HPP
#define CLBUF_TELEMETRY_HPP

#include <clbuf/pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace clbuf {

/// One direction's totals. Asynchronous transfers count bytes and operations when they are
/// started; their time is not counted (it overlaps other work).
struct DirectionStats {
  std::uint64_t operations = 0;
  std::uint64_t bytes = 0;
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
  PoolStats pool;

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

namespace detail {

class Telemetry {
  struct Counter {
    std::atomic<std::uint64_t> operations{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> nanoseconds{0};
  };

 public:
  enum Direction { upload, download, copy };

  /// Counts a transfer; time it by keeping the returned Timer alive across the blocking call.
  class Timer {
   public:
    Timer(Telemetry& telemetry, Direction direction, std::uint64_t bytes) noexcept
        : counter_(telemetry.counters_[direction]), start_(std::chrono::steady_clock::now()) {
      counter_.operations.fetch_add(1, std::memory_order_relaxed);
      counter_.bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
    ~Timer() {
      const auto elapsed = std::chrono::steady_clock::now() - start_;
      counter_.nanoseconds.fetch_add(
          static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
          std::memory_order_relaxed);
    }

   private:
    Counter& counter_;
    std::chrono::steady_clock::time_point start_;
  };

  void count_async(Direction direction, std::uint64_t bytes) noexcept {
    counters_[direction].operations.fetch_add(1, std::memory_order_relaxed);
    counters_[direction].bytes.fetch_add(bytes, std::memory_order_relaxed);
  }

  void fill(TransferStats& stats) const noexcept {
    DirectionStats* out[] = {&stats.upload, &stats.download, &stats.copy};
    for (int d = 0; d < 3; ++d) {
      out[d]->operations = counters_[d].operations.load(std::memory_order_relaxed);
      out[d]->bytes = counters_[d].bytes.load(std::memory_order_relaxed);
      out[d]->nanoseconds = counters_[d].nanoseconds.load(std::memory_order_relaxed);
    }
  }

  void reset() noexcept {
    for (Counter& c : counters_) {
      c.operations.store(0, std::memory_order_relaxed);
      c.bytes.store(0, std::memory_order_relaxed);
      c.nanoseconds.store(0, std::memory_order_relaxed);
    }
  }

 private:
  Counter counters_[3];
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_TELEMETRY_HPP
