// SPDX-License-Identifier: MIT
// A manager's transfer counters: bytes, operations, time and the path taken per direction. Cheap
// enough to stay on: a few relaxed atomic additions and two clock reads per blocking call.
#ifndef CLBUF_DETAIL_TELEMETRY_HPP
#define CLBUF_DETAIL_TELEMETRY_HPP

#include <clbuf/telemetry.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace clbuf {
namespace detail {

class Telemetry {
 public:
  enum Direction { upload, download, copy };
  /// The paths of PathStats, in its order.
  enum Path { host_copy, staged, buffered, bounced, relayed, direct, path_count };
  /// The name of `path` as PathStats' member.
  static const char* name(Path path) noexcept {
    static const char* const names[path_count] = {"host_copy", "staged",  "buffered",
                                                  "bounced",   "relayed", "direct"};
    return path < path_count ? names[path] : "unknown";
  }

 private:
  struct Counter {
    std::atomic<std::uint64_t> operations{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> nanoseconds{0};
    std::atomic<std::uint64_t> paths[path_count] = {};

    void count(Path path, std::uint64_t moved) noexcept {
      operations.fetch_add(1, std::memory_order_relaxed);
      bytes.fetch_add(moved, std::memory_order_relaxed);
      paths[path].fetch_add(1, std::memory_order_relaxed);
    }
  };

 public:
  /// Counts a transfer on `path`; time it by keeping the returned Timer alive across the
  /// blocking call.
  class Timer {
   public:
    Timer(Telemetry& telemetry, Direction direction, Path path, std::uint64_t bytes) noexcept
        : counter_(telemetry.counters_[direction]), start_(std::chrono::steady_clock::now()) {
      counter_.count(path, bytes);
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

  void count_async(Direction direction, Path path, std::uint64_t bytes) noexcept {
    counters_[direction].count(path, bytes);
  }

  void fill(TransferStats& stats) const noexcept {
    DirectionStats* out[] = {&stats.upload, &stats.download, &stats.copy};
    for (int d = 0; d < 3; ++d) {
      const Counter& in = counters_[d];
      out[d]->operations = in.operations.load(std::memory_order_relaxed);
      out[d]->bytes = in.bytes.load(std::memory_order_relaxed);
      out[d]->nanoseconds = in.nanoseconds.load(std::memory_order_relaxed);
      PathStats& paths = out[d]->paths;
      std::uint64_t* const by_path[path_count] = {&paths.host_copy, &paths.staged,  &paths.buffered,
                                                  &paths.bounced,   &paths.relayed, &paths.direct};
      for (int p = 0; p < path_count; ++p) {
        *by_path[p] = in.paths[p].load(std::memory_order_relaxed);
      }
    }
  }

  void reset() noexcept {
    for (Counter& c : counters_) {
      c.operations.store(0, std::memory_order_relaxed);
      c.bytes.store(0, std::memory_order_relaxed);
      c.nanoseconds.store(0, std::memory_order_relaxed);
      for (std::atomic<std::uint64_t>& path : c.paths) path.store(0, std::memory_order_relaxed);
    }
  }

 private:
  Counter counters_[3];
};

}  // namespace detail

}  // namespace clbuf

#endif  // CLBUF_DETAIL_TELEMETRY_HPP
