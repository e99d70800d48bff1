// SPDX-License-Identifier: MIT
// One trace file (detail/trace.hpp): the managers that trace to it share it, each a process of
// its own. Each thread appends to a buffer of its own (its own mutex, uncontended but for a
// flush); a full one (buffer_events events) goes to the file's writer thread, which formats and
// writes it off the transfer's thread; the rest are written at cleanup(), destruction and exit.
// The file's bytes and the order they are written in (valid JSON at every instant, a failed write
// reported) are TraceOutput's (trace_output.hpp). TraceRegistry
// (trace_registry.hpp) opens the files and writes them out at exit.
#ifndef CLBUF_DETAIL_TRACE_FILE_HPP
#define CLBUF_DETAIL_TRACE_FILE_HPP

#include <clbuf/detail/output_file.hpp>
#include <clbuf/detail/rank_files.hpp>
#include <clbuf/detail/trace_json.hpp>
#include <clbuf/detail/trace_output.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

class TraceFile;

/// A thread's events for one file, until the file takes them. Its mutex is taken by the thread
/// at each event and by the file when it writes them out: uncontended but for that.
struct TraceBuffer {
  std::mutex mutex;
  std::vector<TraceEvent> events;  // under mutex
  bool closed = false;             // under mutex: the file has ended; events are dropped
  // The thread's own, no lock: its "API calls" track per process (pid, tid).
  std::vector<std::pair<int, int>> api_tracks;
};

/// One trace file, shared by the managers that trace to its path (open()).
class TraceFile {
 public:
  /// Events a thread's buffer holds before the thread writes them into the file.
  static constexpr std::size_t buffer_events = 4096;

  /// The file of `path`, opened (truncated) by its first manager and shared by the others while
  /// one holds it. @throws Error CL_INVALID_VALUE naming the path and the OS error when it cannot
  /// be written (a folder, a missing or read-only folder).
  static std::shared_ptr<TraceFile> open(const std::string& path, const char* operation);

  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;
  /// Writes every buffer out and closes the file (valid JSON).
  ~TraceFile() {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stopping_ = true;
    }
    queued_.notify_all();
    if (writer_.joinable()) writer_.join();  // never this thread: it holds no owner of the file
    flush();
    for (const auto& buffer : buffers_) {
      std::lock_guard<std::mutex> lock(buffer->mutex);
      buffer->closed = true;  // its thread drops it at its next new buffer
    }
  }  // output_ closes the file

  /// What a new trace file holds (TraceOutput::empty_text()).
  static std::string empty_text() { return TraceOutput::empty_text(); }

  const std::string& path() const noexcept { return path_; }

  /// A new process (a manager) named `name`: its pid. Under an MPI launcher (launcher_rank())
  /// the first is the rank, named "rank N: " and the device, and further ones rank + k * 100000,
  /// so that the files of all ranks merge without two processes of one pid.
  int process(const std::string& name) {
    const int n = processes_.fetch_add(1);
    if (rank_ < 0) {
      write_metadata("process_name", n + 1, 0, name);
      return n + 1;
    }
    const int pid = rank_ + 100000 * n;
    const std::string prefix = "clbuf: ";
    write_metadata(
        "process_name", pid, 0,
        "rank " + std::to_string(rank_) + ": " +
            (name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size()) : name));
    return pid;
  }

  /// The track of `pid` named `name` (made at its first use): its tid.
  int track(int pid, const std::string& name) {
    {
      std::lock_guard<std::mutex> lock(tracks_mutex_);
      const auto found = tracks_.find({pid, name});
      if (found != tracks_.end()) return found->second;
    }
    const int tid = next_tid_.fetch_add(1);
    write_metadata("thread_name", pid, tid, name);
    std::lock_guard<std::mutex> lock(tracks_mutex_);
    return tracks_.emplace(std::make_pair(pid, name), tid).first->second;
  }

  /// The calling thread's "API calls" track in `pid`.
  int api_track(int pid) {
    TraceBuffer& buffer = own_buffer();
    for (const auto& known : buffer.api_tracks) {
      if (known.first == pid) return known.second;
    }
    const int number = api_threads_.fetch_add(1);
    const int tid = track(pid, "API calls, thread " + std::to_string(number));
    buffer.api_tracks.emplace_back(pid, tid);
    return tid;
  }

  /// Appends `event` to the calling thread's buffer, which it writes out when full. Never throws:
  /// an event that finds no memory is dropped.
  void record(const TraceEvent& event) noexcept {
    try {
      TraceBuffer& buffer = own_buffer();
      std::vector<TraceEvent> full;
      {
        std::lock_guard<std::mutex> lock(buffer.mutex);
        if (buffer.closed) return;
        buffer.events.push_back(event);
        if (buffer.events.size() >= buffer_events) full.swap(buffer.events);
      }
      if (!full.empty()) hand_over(std::move(full));
    } catch (...) {  // NOLINT(bugprone-empty-catch): tracing never fails a transfer
    }
  }

  /// Writes every thread's buffer into the file, and the full ones the writer thread has not
  /// written yet (cleanup(), exit, std::terminate): on return all recorded before are in it.
  void flush() noexcept {
    write_queued();
    std::vector<std::shared_ptr<TraceBuffer>> buffers;
    {
      std::lock_guard<std::mutex> lock(buffers_mutex_);
      buffers = buffers_;
      // Buffers of threads that have ended (the file alone holds them) go once written.
      buffers_.erase(std::remove_if(buffers_.begin(), buffers_.end(),
                                    [](const auto& b) { return b.use_count() == 2; }),
                     buffers_.end());
    }
    for (const auto& buffer : buffers) {
      std::vector<TraceEvent> events;
      {
        std::lock_guard<std::mutex> lock(buffer->mutex);
        events.swap(buffer->events);
      }
      try {
        write_events(events);
      } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: those events are lost
      }
    }
  }

  /// A span is waiting for an event's callback (Tracer::until_complete).
  void pending() noexcept { pending_.fetch_add(1); }
  /// That callback has recorded its span.
  void recorded() noexcept {
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      pending_.fetch_sub(1);
    }
    drained_.notify_all();
  }
  /// Waits, at most `limit`, until no span waits for a callback: once the queue has finished,
  /// every callback is about to run (cleanup(), a manager's end).
  void drain(std::chrono::milliseconds limit) noexcept {
    std::unique_lock<std::mutex> lock(pending_mutex_);
    drained_.wait_for(lock, limit, [&] { return pending_.load() == 0; });
  }

  /// A number unique in the file, for the ids of spans that may overlap.
  std::uint64_t next_id() noexcept { return next_id_.fetch_add(1); }

 private:
  /// The file `path`, open as `file` (which it then owns), holding empty_text().
  TraceFile(const OutputFile& file, std::string path)
      : output_(file, path), path_(std::move(path)) {}

  /// The calling thread's buffer for this file (made and registered at its first event).
  TraceBuffer& own_buffer() {
    thread_local std::vector<std::pair<std::uint64_t, std::shared_ptr<TraceBuffer>>> mine;
    for (const auto& entry : mine) {
      if (entry.first == serial_) return *entry.second;
    }
    // Entries of files that have ended are dropped here, so a thread holds few.
    mine.erase(std::remove_if(mine.begin(), mine.end(),
                              [](const auto& entry) {
                                std::lock_guard<std::mutex> lock(entry.second->mutex);
                                return entry.second->closed;
                              }),
               mine.end());
    bool many = false;
    {
      std::lock_guard<std::mutex> lock(buffers_mutex_);
      many = buffers_.size() >= buffers_before_flush;
    }
    if (many) flush();  // writes out, and drops, the buffers of threads that have ended
    auto buffer = std::make_shared<TraceBuffer>();
    buffer->events.reserve(64);
    {
      std::lock_guard<std::mutex> lock(buffers_mutex_);
      buffers_.push_back(buffer);
    }
    mine.emplace_back(serial_, buffer);
    return *buffer;
  }

  /// A full buffer goes to the writer thread (started at the first), which formats and writes it
  /// off the thread that recorded it (a transfer's); when queued_max are waiting already, or no
  /// thread could be started, this thread writes it (memory stays bounded).
  void hand_over(std::vector<TraceEvent> full) {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    if (!writer_.joinable() && !stopping_) {
      try {
        writer_ = std::thread([this] { write_loop(); });
      } catch (...) {  // NOLINT(bugprone-empty-catch): no thread: written here
      }
    }
    if (!writer_.joinable() || queue_.size() >= queued_max) {
      lock.unlock();
      write_events(full);
      return;
    }
    queue_.push_back(std::move(full));
    lock.unlock();
    queued_.notify_one();
  }

  /// The writer thread: writes the queued buffers until the file ends.
  void write_loop() noexcept {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    while (true) {
      queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, all written
      std::vector<TraceEvent> events = std::move(queue_.front());
      queue_.pop_front();
      ++writing_;
      lock.unlock();
      try {
        write_events(events);
      } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: those events are lost
      }
      lock.lock();
      --writing_;
      written_.notify_all();
    }
  }

  /// Writes the queued buffers in this thread, and waits for the one the writer is writing.
  void write_queued() noexcept {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    while (!queue_.empty()) {
      std::vector<TraceEvent> events = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      try {
        write_events(events);
      } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: those events are lost
      }
      lock.lock();
    }
    written_.wait(lock, [this] { return writing_ == 0; });
  }

  // Full buffers waiting for the writer thread before a recording thread writes its own.
  static constexpr std::size_t queued_max = 8;

  // Buffers a file holds before a new thread's first event writes them all out: a program that
  // starts many short threads keeps at most this many buffers of ended threads.
  static constexpr std::size_t buffers_before_flush = 64;

  void write_metadata(const char* kind, int pid, int tid, const std::string& name) {
    std::string text = "{\"ph\":\"M\",\"name\":\"";
    text += kind;
    text += "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid);
    text += ",\"args\":{\"name\":\"";
    append_json_string(text, name);
    text += "\"}},\n";
    write_text(text, {text.size()});
  }

  void write_events(const std::vector<TraceEvent>& events) {
    if (events.empty()) return;
    std::string text;
    text.reserve(events.size() * 160);
    std::vector<std::size_t> ends;  // where each event's records end
    ends.reserve(events.size());
    for (const TraceEvent& event : events) {
      append_trace_event(text, event);
      ends.push_back(text.size());
    }
    write_text(text, ends);
  }

  /// Writes `text` (records each ending in ",\n"; `ends`: after each unit to keep whole) into
  /// the file (TraceOutput::write()).
  void write_text(const std::string& text, const std::vector<std::size_t>& ends) {
    std::lock_guard<std::mutex> lock(write_mutex_);
    output_.write(text, ends);
  }

  friend class TraceRegistry;

  TraceOutput output_;  // under write_mutex_
  const std::string path_;
  const std::uint64_t serial_ = next_serial();
  std::mutex write_mutex_;
  std::mutex queue_mutex_;
  std::condition_variable queued_;             // a full buffer was queued, or the file ends
  std::condition_variable written_;            // the writer thread finished a buffer
  std::deque<std::vector<TraceEvent>> queue_;  // under queue_mutex_: full buffers to write
  int writing_ = 0;                            // under queue_mutex_: the writer's, 0 or 1
  bool stopping_ = false;                      // under queue_mutex_: the file ends
  std::thread writer_;                         // started at the first full buffer
  std::mutex buffers_mutex_;
  std::vector<std::shared_ptr<TraceBuffer>> buffers_;  // every thread's, under buffers_mutex_
  std::mutex tracks_mutex_;
  std::map<std::pair<int, std::string>, int> tracks_;  // under tracks_mutex_
  const int rank_ = launcher_rank();                   // -1: not under an MPI launcher
  std::atomic<int> processes_{0};
  std::atomic<int> next_tid_{1};
  std::atomic<int> api_threads_{0};
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<int> pending_{0};  // spans waiting for their event's callback
  std::mutex pending_mutex_;
  std::condition_variable drained_;

  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> serial{1};
    return serial.fetch_add(1);
  }
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TRACE_FILE_HPP
