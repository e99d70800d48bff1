// SPDX-License-Identifier: MIT
// The tracer (CLBUF_TRACE, Options::trace_path): a timeline of a manager's transfers in the Chrome
// Trace Event Format, which Perfetto and chrome://tracing open (docs/performance.md "Tracing").
// This header is the Tracer, the calls components record spans by, and the policy that picks the
// trace path (Options::trace_path, Python's clbuf.trace(), CLBUF_TRACE, the rank). The rest, one
// concern a header: the events and their JSON (trace_json.hpp), the rank's file names
// (rank_files.hpp), one file with its threads' buffers and writer thread (trace_file.hpp), the
// registry of open files with the exit hooks (trace_registry.hpp), and beneath them the opening
// and writing of a file that grows (output_file.hpp). Timestamps are
// std::chrono::steady_clock in microseconds (absolute: two processes on one host line up). When
// tracing is off the components hold a null Tracer*: one branch per span.
#ifndef CLBUF_DETAIL_TRACE_HPP
#define CLBUF_DETAIL_TRACE_HPP

#include <clbuf/detail/output_file.hpp>
#include <clbuf/detail/rank_files.hpp>
#include <clbuf/detail/trace_file.hpp>
#include <clbuf/detail/trace_json.hpp>
#include <clbuf/detail/trace_registry.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>

namespace clbuf {
namespace detail {

/// A manager's tracer: its process in a trace file, and the calls components record spans by.
/// Components hold a Tracer* that is null when tracing is off.
class Tracer {
 public:
  /// A process named `process` in the file of `path`. @throws Error as TraceFile::open().
  Tracer(const std::string& path, const std::string& process, const char* operation)
      : file_(TraceFile::open(path, operation)),
        pid_(file_->process(process)),
        started_track_(file_->track(pid_, "started transfers (host's view)")) {}
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  ~Tracer() { flush(); }

  /// The track named `name` in this manager's process.
  int track(const std::string& name) { return file_->track(pid_, name); }

  /// A span from `begin` to `end` on the calling thread's "API calls" track.
  void api_span(const char* name, double begin, double end,
                std::initializer_list<TraceArg> args) noexcept {
    try {
      span(file_->api_track(pid_), name, begin, end, args);
    } catch (...) {  // NOLINT(bugprone-empty-catch): tracing never fails a transfer
    }
  }

  /// The track of started transfers, from their call until their event completes.
  int started_track() const noexcept { return started_track_; }

  /// A span on track `tid` from `begin` to `end` ('X': spans of one track nest or follow).
  void span(int tid, const char* name, double begin, double end,
            std::initializer_list<TraceArg> args) noexcept {
    file_->record(make_event('X', tid, name, begin, end, args));
  }

  /// A span that may overlap others of its track (a pair "b"/"e" of its own id).
  void overlapping(int tid, const char* name, double begin, double end,
                   std::initializer_list<TraceArg> args) noexcept {
    TraceEvent e = make_event('A', tid, name, begin, end, args);
    e.id = file_->next_id();
    file_->record(e);
  }

  /// A span from `begin` to when `event` completes (a started transfer: from its call until the
  /// device has done it, as the host sees it), recorded by the event's callback on a thread of
  /// the driver's; the record keeps the file open until then. Without an event, or when the
  /// callback cannot be set, the span ends now.
  void until_complete(cl_event event, int tid, const char* name, double begin,
                      std::initializer_list<TraceArg> args) noexcept {
    Pending* pending = nullptr;
    try {
      pending = new Pending{file_, make_event('A', tid, name, begin, begin, args)};
    } catch (...) {
      return;  // no memory for the record: the span is lost, never the transfer
    }
    pending->event.id = file_->next_id();
    file_->pending();
    if (event != nullptr && CLBUF_CL(clSetEventCallback)(event, CL_COMPLETE, &Tracer::completed,
                                                         pending) == CL_SUCCESS) {
      return;
    }
    completed(nullptr, CL_COMPLETE, pending);
  }

  /// One end of the flow arrow `id` (`start`: where it leaves) at `at`, on track `tid`: bound to
  /// the span of that track around `at` (Perfetto draws the arrow between the two spans).
  void flow(int tid, bool start, std::uint64_t id, double at) noexcept {
    TraceEvent e = make_event(start ? 's' : 'f', tid, "MPI message", at, at, {});
    e.id = id;
    file_->record(e);
  }

  /// A counter `name` at now, with up to three series.
  void counter(const char* name, std::initializer_list<TraceArg> series) noexcept {
    const double now = trace_now();
    file_->record(make_event('C', 0, name, now, now, series));
  }

  /// Writes every thread's buffer out, once the spans of started transfers are in them (cleanup(),
  /// after the queue has finished; the manager's end).
  void flush() noexcept {
    file_->drain(std::chrono::milliseconds(2000));
    file_->flush();
  }

  const std::shared_ptr<TraceFile>& file() const noexcept { return file_; }
  int pid() const noexcept { return pid_; }

 private:
  TraceEvent make_event(char phase, int tid, const char* name, double begin, double end,
                        std::initializer_list<TraceArg> args) const noexcept {
    TraceEvent e;
    e.phase = phase;
    e.name = name;
    e.pid = pid_;
    e.tid = tid;
    e.begin = begin;
    e.end = end;
    std::copy_n(args.begin(), std::min(args.size(), TraceEvent::max_args), e.args);
    return e;
  }

  struct Pending {
    std::shared_ptr<TraceFile> file;
    TraceEvent event;
  };

  static void CL_CALLBACK completed(cl_event, cl_int, void* data) {
    std::unique_ptr<Pending> pending(static_cast<Pending*>(data));
    pending->event.end = trace_now();
    pending->file->record(pending->event);
    pending->file->recorded();
  }

  std::shared_ptr<TraceFile> file_;
  int pid_ = 0;
  int started_track_ = 0;
};

/// The path of Python's `with clbuf.trace(path):` block (empty: none), process-wide: managers
/// made while it is set trace there unless their Options name a path (trace_path()). With `set`,
/// it becomes `*set`, and every open trace file is written out. Returns the path before.
inline std::string scoped_trace_path(const std::string* set = nullptr) {
  if (set != nullptr && !set->empty()) check_output_path("clbuf.trace()", *set, "the trace file");
  static std::mutex mutex;
  static std::string path;
  std::string before;
  {
    std::lock_guard<std::mutex> lock(mutex);
    before = path;
    if (set != nullptr) path = *set;
  }
  if (set != nullptr) TraceRegistry::instance().flush_all();
  return before;
}

/// Python's `with clbuf.trace(path):` entered: the managers made from now on trace to `path`
/// (scoped_trace_path()). Returns the path before, which the block's end sets again. @throws Error
/// CL_INVALID_VALUE of "clbuf.trace()" when `path` is empty or holds a NUL, nothing set.
inline std::string enter_trace_scope(const std::string& path) {
  check_output_path("clbuf.trace()", path, "the trace file");
  return scoped_trace_path(&path);
}

/// The trace path in force: `option` (Options::trace_path) when set, else the scoped path (Python's
/// clbuf.trace()), else CLBUF_TRACE, else ""; under an MPI launcher with the rank in its name
/// (rank_path()), so that each rank writes a file of its own (scripts/trace_merge.py merges them).
inline std::string trace_path(const std::string& option) {
  std::string path = !option.empty() ? option : scoped_trace_path();
  if (path.empty()) {
    const char* env = std::getenv("CLBUF_TRACE");
    if (env != nullptr) path = env;
  }
  const int rank = path.empty() ? -1 : launcher_rank();
  return rank < 0 ? path : rank_path(path, rank);
}

}  // namespace detail

/// The trace files whose writing has failed since the program started (a full disk, the file-size
/// limit RLIMIT_FSIZE / `ulimit -f`), one line each naming the file and the system's reason; ""
/// when every write succeeded. Tracing never fails a transfer: a failed write ends that file's
/// writing (the file keeps the events written before, valid JSON), prints one line on stderr, and
/// is known here. A file that cannot be opened or started is an Error at the manager's
/// construction instead.
inline std::string trace_write_errors() {
  detail::TraceFailures& failures = detail::TraceFailures::instance();
  std::lock_guard<std::mutex> lock(failures.mutex);
  return failures.lines;
}
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TRACE_HPP
