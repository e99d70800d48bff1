// SPDX-License-Identifier: MIT
// One trace file (detail/trace.hpp): the managers that trace to it share it, each a process of
// its own. Each thread appends to a buffer of its own (its own mutex, uncontended but for a
// flush); a full one (buffer_events events) goes to the file's writer thread, which formats and
// writes it off the transfer's thread; the rest are written at cleanup(), destruction and exit.
// Each write puts records and the closing "]}" after them in one write() (write_text()), so the
// file is valid JSON at every instant the process can stop at, a kill included. A write that
// fails (a full disk, RLIMIT_FSIZE) ends the file's writing, the file valid JSON as far as it got,
// and is reported (trace_write_failed(): stderr, clbuf::trace_write_errors()). TraceRegistry
// (trace_registry.hpp) opens the files and writes them out at exit.
#ifndef CLBUF_DETAIL_TRACE_FILE_HPP
#define CLBUF_DETAIL_TRACE_FILE_HPP

#include <clbuf/detail/output_file.hpp>
#include <clbuf/detail/rank_files.hpp>
#include <clbuf/detail/trace_json.hpp>
#include <clbuf/error.hpp>

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/vfs.h>
#endif

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

/// The failures to write a trace file so far, one line each (trace_write_failed()). Never
/// destroyed: files are written out at exit, after static destruction has begun.
struct TraceFailures {
  std::mutex mutex;
  std::string lines;  // under mutex
  static TraceFailures& instance() {
    static TraceFailures* const failures = new TraceFailures();  // NOLINT: never freed, on purpose
    return *failures;
  }
};

/// Reports that a write of the trace file `path` failed with `error` (an errno value): one line
/// on stderr ("clbuf: the trace file ... could not be written (<reason>) ..."), once a file, and
/// the line kept for clbuf::trace_write_errors(). Tracing never fails a transfer: this is how a
/// failed write is known.
inline void trace_write_failed(const std::string& path, int error) noexcept {
  try {
    const std::string line = "the trace file \"" + path + "\" could not be written (" +
                             output_error_text(error) +
                             "): it keeps the events written before (valid JSON); later events "
                             "are dropped";
    TraceFailures& failures = TraceFailures::instance();
    {
      std::lock_guard<std::mutex> lock(failures.mutex);
      failures.lines += line + "\n";
    }
    std::fprintf(stderr, "clbuf: %s\n", line.c_str());
  } catch (...) {  // NOLINT(bugprone-empty-catch): no memory for the report: stderr only
    std::fputs("clbuf: a trace file could not be written\n", stderr);
  }
}

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
    std::lock_guard<std::mutex> lock(write_mutex_);
    if (regular_ && !failed_ && size_ != end_ + tail_size) {  // the spaces after "]}" go
      static_cast<void>(::ftruncate(fd_, static_cast<off_t>(end_ + tail_size)));
    }
    ::close(fd_);
  }

  /// What a new trace file holds: the array's opening and closing; the clock named for readers.
  static std::string empty_text() { return std::string(head_text) + tail_text; }

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
      : fd_(file.fd), regular_(file.regular), path_(std::move(path)) {}

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

  /// Appends the records of `text` (each ending in ",\n"; `ends`: after each unit to keep whole)
  /// where the closing "]}" was, so that the file is valid JSON whatever instant the process
  /// stops at: each write() puts records and the closing "]}" after them at once, so a process
  /// killed between two writes leaves the file as the first left it. A write() is whole or not
  /// at all when it stays within a page of the file (Linux checks for a fatal signal between the
  /// pages of one write(), so a write() across pages can be cut there): each write holds the
  /// records that fit before the end of the page the closing "]}" is on, and one that crosses
  /// the page's end is written alone, so that only the moment its first page is written remains
  /// (the closing "]}" cannot move to the next page any other way). A write that fails (a full
  /// disk, RLIMIT_FSIZE) puts the closing "]}" back where it was and ends the file's writing
  /// (failed()).
  void write_text(const std::string& text, const std::vector<std::size_t>& ends) {
    static const std::size_t page = page_size();
    std::lock_guard<std::mutex> lock(write_mutex_);
    if (failed_) return;
    WriteGuard guard;  // past RLIMIT_FSIZE: EFBIG, never SIGXFSZ
    if (write_direct(text)) return;
    std::string piece;
    std::size_t done = 0;  // of text, in the file
    for (std::size_t unit = 0; unit < ends.size();) {
      const std::uint64_t room = page - end_ % page;
      const std::size_t comma = any_ ? 2 : 0;
      std::size_t last = unit;  // the units [unit, last) that fit in the page with "]}"
      while (last < ends.size() && comma + (ends[last] - 2 - done) + tail_size <= room) ++last;
      if (last == unit) last = unit + 1;  // crosses the page's end: alone
      piece.assign(any_ ? ",\n" : "");
      piece.append(text, done, ends[last - 1] - 2 - done);  // without its last ",\n"
      piece.append(tail_text, tail_size);
      if (regular_ && end_ + piece.size() > size_) {
        // Spaces after the closing "]}" first (JSON still): the write that moves it then finds
        // its pages there, and the file's size stays, so its first page is quickly done.
        const std::uint64_t size = (end_ + piece.size() + ahead) / page * page;
        spaces_.resize(size - size_, ' ');
        // Should they not fit (a size limit near), the records may still: spaces no more.
        size_ = write_output_at(fd_, spaces_.data(), spaces_.size(), size_) == 0 ? size : no_size;
      }
      const int error = write_output_at(fd_, piece.data(), piece.size(), end_);
      if (error != 0) return stop_writing(error);
      end_ += piece.size() - tail_size;
      any_ = true;
      done = ends[last - 1];
      unit = last;
    }
  }

  /// Writes `text` as write_text() does, in one direct write (O_DIRECT) of the file's blocks from
  /// the one the closing "]}" begins in: true when done (or failed: failed_), false where the file
  /// system has no direct writes (then write_text() writes through the page cache). A direct
  /// write() is whole once begun: the kernel has no fatal-signal point inside it (a page-cache
  /// write() has one between pages), so a kill leaves the file as it was before or after it,
  /// whatever the pages it spans. The blocks end in spaces after "]}" (JSON still), removed at
  /// the file's end. Under write_mutex_.
  bool write_direct(const std::string& text) {
    if (direct_ == Direct::unknown) {
      const int flags = ::fcntl(fd_, F_GETFL);
      direct_ = regular_ && direct_io_is_real(fd_) && flags >= 0 &&
                        ::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0
                    ? Direct::on
                    : Direct::off;
    }
    if (direct_ != Direct::on) return false;
    const std::size_t body = block_.size() + (any_ ? 2 : 0) + text.size() - 2 + tail_size;
    const std::size_t size = (body + direct_block - 1) / direct_block * direct_block;
    void* memory = nullptr;
    if (::posix_memalign(&memory, direct_block, size) != 0) return false;
    const std::unique_ptr<char, void (*)(void*)> blocks(static_cast<char*>(memory), std::free);
    char* at = std::copy(block_.begin(), block_.end(), blocks.get());
    if (any_) at = std::copy_n(",\n", 2, at);
    at = std::copy_n(text.data(), text.size() - 2, at);  // without its last ",\n"
    at = std::copy_n(tail_text, tail_size, at);
    std::fill(at, blocks.get() + size, ' ');
    if (write_output_at(fd_, blocks.get(), size, block_start_) != 0) {
      // No direct writes to this file after all, or not all of these records fit (a size limit,
      // a full disk): the file as it was, and the page cache's writes from now on, which write
      // what fits and report the failure.
      direct_ = Direct::off;
      static_cast<void>(::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT));
      const int error = write_output_at(fd_, tail_text, tail_size, end_);
      if (error != 0 || ::ftruncate(fd_, static_cast<off_t>(end_ + tail_size)) != 0) {
        stop_writing(error != 0 ? error : errno);
        return true;
      }
      size_ = end_ + tail_size;
      return false;
    }
    end_ = block_start_ + body - tail_size;
    size_ = std::max<std::uint64_t>(size_, block_start_ + size);
    const std::uint64_t start = end_ / direct_block * direct_block;
    block_.assign(blocks.get() + (start - block_start_), end_ - start);
    block_start_ = start;
    any_ = true;
    return true;
  }

  /// True when `fd`'s file system writes O_DIRECT to its device (ext2/3/4, XFS), so that a
  /// direct write() is whole once begun. Others take the flag and write through the page cache
  /// all the same (tmpfs), or may: their files take write_text()'s writes a page at a time.
  static bool direct_io_is_real(int fd) noexcept {
#if defined(__linux__)
    struct statfs facts {};
    if (::fstatfs(fd, &facts) != 0) return false;
    const auto type = static_cast<unsigned long>(facts.f_type);
    return type == 0xEF53ul /* ext2, ext3, ext4 */ || type == 0x58465342ul /* XFS */;
#else
    static_cast<void>(fd);
    return false;
#endif
  }

  /// A write failed with `error`: the file as the last whole write left it (its closing "]}"
  /// where it was, what a cut write put after it removed), its writing ended, the failure
  /// reported (trace_write_failed()). Under write_mutex_.
  void stop_writing(int error) noexcept {
    failed_ = true;
    static_cast<void>(write_output_at(fd_, tail_text, tail_size, end_));
    if (regular_) static_cast<void>(::ftruncate(fd_, static_cast<off_t>(end_ + tail_size)));
    trace_write_failed(path_, error);
  }

  static std::size_t page_size() noexcept {
    const long size = ::sysconf(_SC_PAGESIZE);
    return size >= 512 ? static_cast<std::size_t>(size) : 4096;
  }

  static constexpr const char* head_text =
      "{\"otherData\":{\"clock\":\"std::chrono::steady_clock\",\"unit\":\"us\"},"
      "\"traceEvents\":[\n";
  static constexpr const char* tail_text = "\n]}\n";
  static constexpr std::size_t tail_size = 4;

  friend class TraceRegistry;

  const int fd_;
  const bool regular_;  // a regular file (else a device such as /dev/null): truncated on failure
  const std::string path_;
  const std::uint64_t serial_ = next_serial();
  // Under write_mutex_: where the next records go (the closing "]}" follows them).
  std::uint64_t end_ = std::char_traits<char>::length(head_text);
  bool any_ = false;     // under write_mutex_: the array holds a record (the next needs a comma)
  bool failed_ = false;  // under write_mutex_: a write failed; nothing more is written
  std::uint64_t size_ =
      std::char_traits<char>::length(head_text) + tail_size;  // under write_mutex_
  std::string spaces_;                                        // under write_mutex_
  static constexpr std::uint64_t ahead = 64 << 10;  // spaces written after the closing "]}"
  static constexpr std::uint64_t no_size = ~std::uint64_t{0};  // spaces are written no more
  // Direct writes (write_direct()): whether the file has them; its blocks' size and alignment.
  enum class Direct { unknown, on, off };
  Direct direct_ = Direct::unknown;                  // under write_mutex_
  static constexpr std::size_t direct_block = 4096;  // a multiple of every device's block
  std::uint64_t block_start_ = 0;                    // under write_mutex_: end_'s block
  std::string block_ = head_text;                    // under write_mutex_: its bytes before end_
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
