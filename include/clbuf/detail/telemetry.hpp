// SPDX-License-Identifier: MIT
// A manager's transfer counters: bytes, operations, time and the path taken per direction. Cheap
// enough to stay on: a few relaxed atomic additions and two clock reads per blocking call. Every
// transfer the engine counts is also a span of the trace when the manager traces (trace.hpp): the
// counting is the one place each transfer passes, so it is instrumented once, here.
#ifndef CLBUF_DETAIL_TELEMETRY_HPP
#define CLBUF_DETAIL_TELEMETRY_HPP

#include <clbuf/detail/trace.hpp>
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
  // The operations are the sum of the paths' counts (fill()): one atomic addition fewer a call
  // (issue 47: each is a locked instruction, ~20 cycles, on the small calls' path).
  struct Counter {
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> nanoseconds{0};
    std::atomic<std::uint64_t> paths[path_count] = {};

    void count(Path path, std::uint64_t moved) noexcept {
      bytes.fetch_add(moved, std::memory_order_relaxed);
      paths[path].fetch_add(1, std::memory_order_relaxed);
    }
  };

 public:
  /// The name of `direction`, as the trace's spans give it.
  static const char* name(Direction direction) noexcept {
    static const char* const names[3] = {"upload", "download", "copy"};
    return names[direction];
  }

  /// Counts a transfer on `path`; time it by keeping the returned Timer alive across the
  /// blocking call. When tracing, its end records a span named `operation` (a string literal) on
  /// the calling thread's "API calls" track.
  class Timer {
   public:
    Timer(Telemetry& telemetry, Direction direction, Path path, std::uint64_t bytes,
          const char* operation) noexcept
        : counter_(telemetry.counters_[direction]),
          tracer_(telemetry.tracer_),
          operation_(operation),
          direction_(direction),
          path_(path),
          bytes_(bytes),
          start_(std::chrono::steady_clock::now()) {
      counter_.count(path, bytes);
    }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
    ~Timer() {
      const auto end = std::chrono::steady_clock::now();
      counter_.nanoseconds.fetch_add(
          static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(end - start_).count()),
          std::memory_order_relaxed);
      if (tracer_ != nullptr) trace(end);
    }

   private:
    // Out of line, so that the Timer of a call that does not trace stays small enough to inline
    // (with the span inline, a 4-byte download on the host model took ~80 instructions more).
    CLBUF_DETAIL_COLD void trace(std::chrono::steady_clock::time_point end) const noexcept {
      tracer_->api_span(operation_, trace_time(start_), trace_time(end),
                        {{"bytes", nullptr, static_cast<double>(bytes_)},
                         {"path", Telemetry::name(path_)},
                         {"direction", Telemetry::name(direction_)}});
    }

    Counter& counter_;
    Tracer* const tracer_;  // null: not tracing
    const char* const operation_;
    const Direction direction_;
    const Path path_;
    const std::uint64_t bytes_;
    const std::chrono::steady_clock::time_point start_;
  };

  /// A started transfer, counted; traced() records its span once its event is known.
  struct AsyncSpan {
    Tracer* tracer = nullptr;  // null: not tracing
    const char* operation = "";
    Direction direction = upload;
    Path path = direct;
    std::uint64_t bytes = 0;
    double begin = 0;
  };

  /// Counts a started transfer (its time is not counted: it overlaps other work).
  AsyncSpan count_async(Direction direction, Path path, std::uint64_t bytes,
                        const char* operation) noexcept {
    counters_[direction].count(path, bytes);
    if (tracer_ == nullptr) return AsyncSpan();
    return AsyncSpan{tracer_, operation, direction, path, bytes, trace_now()};
  }

  /// When tracing, the span of `started` from its call until `event` (null: none; the span ends
  /// now) completes, on the manager's "started transfers (host's view)" track.
  CLBUF_DETAIL_INLINE static void traced(const AsyncSpan& started, cl_event event) noexcept {
    if (started.tracer != nullptr) trace_started(started, event);  // inline: no call when off
  }
  CLBUF_DETAIL_COLD static void trace_started(const AsyncSpan& started, cl_event event) noexcept {
    started.tracer->until_complete(event, started.tracer->started_track(), started.operation,
                                   started.begin,
                                   {{"bytes", nullptr, static_cast<double>(started.bytes)},
                                    {"path", Telemetry::name(started.path)},
                                    {"direction", Telemetry::name(started.direction)}});
  }

  /// Traces every transfer counted from now on into `tracer` (null: no tracing); set before any.
  void trace(Tracer* tracer) noexcept { tracer_ = tracer; }
  /// The manager's tracer (null: not tracing), for layers that trace spans of their own
  /// (clbuf::mpi's messages).
  Tracer* tracer() const noexcept { return tracer_; }

  void fill(TransferStats& stats) const noexcept {
    DirectionStats* out[] = {&stats.upload, &stats.download, &stats.copy};
    for (int d = 0; d < 3; ++d) {
      const Counter& in = counters_[d];
      out[d]->bytes = in.bytes.load(std::memory_order_relaxed);
      out[d]->nanoseconds = in.nanoseconds.load(std::memory_order_relaxed);
      PathStats& paths = out[d]->paths;
      std::uint64_t* const by_path[path_count] = {&paths.host_copy, &paths.staged,  &paths.buffered,
                                                  &paths.bounced,   &paths.relayed, &paths.direct};
      out[d]->operations = 0;
      for (int p = 0; p < path_count; ++p) {
        *by_path[p] = in.paths[p].load(std::memory_order_relaxed);
        out[d]->operations += *by_path[p];
      }
    }
  }

  void reset() noexcept {
    for (Counter& c : counters_) {
      c.bytes.store(0, std::memory_order_relaxed);
      c.nanoseconds.store(0, std::memory_order_relaxed);
      for (std::atomic<std::uint64_t>& path : c.paths) path.store(0, std::memory_order_relaxed);
    }
  }

 private:
  Counter counters_[3];
  Tracer* tracer_ = nullptr;  // the manager's, when it traces
};

}  // namespace detail

}  // namespace clbuf

#endif  // CLBUF_DETAIL_TELEMETRY_HPP
