// SPDX-License-Identifier: MIT
// A manager's transfer counters: bytes, operations and time per direction. Cheap enough to stay
// on: a few relaxed atomic additions and two clock reads per blocking call.
#ifndef CLBUF_DETAIL_TELEMETRY_HPP
#define CLBUF_DETAIL_TELEMETRY_HPP

#include <clbuf/telemetry.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace clbuf {
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

#endif  // CLBUF_DETAIL_TELEMETRY_HPP
