// SPDX-License-Identifier: MIT
// The tracer (CLBUF_TRACE, Options::trace_path): a timeline of a manager's transfers in the Chrome
// Trace Event Format, which Perfetto and chrome://tracing open (docs/performance.md "Tracing").
// Managers tracing to one path share one file (TraceFile, a registry by path), each its own pid.
// Each thread appends to a buffer of its own (its own mutex, uncontended but for a flush); a full
// one (buffer_events events) goes to the file's writer thread, which formats and writes it off the
// transfer's thread; the rest are written at cleanup(), destruction and exit. The
// file is rewritten to end in "]}" after every write, so it is valid JSON whenever the program
// stops: at exit, and on std::terminate (an uncaught exception), whose handler writes the buffers
// first. Timestamps are std::chrono::steady_clock in microseconds (absolute: two processes on one
// host line up). When tracing is off the components hold a null Tracer*: one branch per span.
#ifndef CLBUF_DETAIL_TRACE_HPP
#define CLBUF_DETAIL_TRACE_HPP

#include <clbuf/error.hpp>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/stat.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// Now, in microseconds of std::chrono::steady_clock: the trace's clock.
inline double trace_now() noexcept {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// `time` in the trace's clock.
inline double trace_time(std::chrono::steady_clock::time_point time) noexcept {
  return std::chrono::duration<double, std::micro>(time.time_since_epoch()).count();
}

/// One argument of an event: a number, or `text` (a string literal) when not null.
struct TraceArg {
  const char* key = nullptr;  // null: no argument
  const char* text = nullptr;
  double number = 0;
};

/// One event as a thread's buffer holds it: no allocation but the buffer's own. `name` and every
/// text are string literals (or outlive the file). Phases: 'X' a complete span, 'A' a span that
/// may overlap others on its track (written as the async pair "b"/"e" with `id`), 'C' a counter,
/// 's' and 'f' the start and the end of a flow arrow `id` (bound to the span around `begin` on
/// its track: an MPI message's send and its receive).
struct TraceEvent {
  static constexpr std::size_t max_args = 5;
  char phase = 'X';
  const char* name = "";
  int pid = 0;
  int tid = 0;
  double begin = 0;  // microseconds, trace_now()
  double end = 0;
  std::uint64_t id = 0;
  TraceArg args[max_args];
};

/// The length of the well-formed UTF-8 character at `text` (RFC 3629: no overlong form, no
/// surrogate, nothing past U+10FFFF), of at most `size` bytes; 0 when there is none there. Sets
/// `part` to the bytes of the longest start of one (the maximal ill-formed part: 1 at least).
inline std::size_t utf8_character(const unsigned char* text, std::size_t size,
                                  std::size_t& part) noexcept {
  const unsigned char lead = text[0];
  part = 1;
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong below
    if (lead == 0xed) high = 0x9f;  // surrogates above
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong below
    if (lead == 0xf4) high = 0x8f;  // past U+10FFFF above
  } else {
    return 0;  // a continuation byte, C0, C1 (overlong) or F5-FF: never a lead byte
  }
  for (std::size_t k = 1; k < length; ++k) {
    if (k >= size) return 0;
    const unsigned char next = text[k];
    if (k == 1 ? (next < low || next > high) : (next < 0x80 || next > 0xbf)) return 0;
    part = k + 1;
  }
  return length;
}

/// The `size` bytes at `text` as a JSON string's contents, always valid JSON in well-formed UTF-8,
/// whatever the bytes: `"` and `\\` escaped, control characters (0x00-0x1f, 0x7f) as \\u00XX,
/// well-formed UTF-8 as it is, and each maximal ill-formed part (a byte that starts no character,
/// or a character cut short) as one U+FFFD, the replacement character (the Unicode standard's
/// practice, which browsers follow).
inline void append_json_string(std::string& out, const char* text, std::size_t size) {
  if (text == nullptr) return;
  const char* plain = text;  // the common case, names and keys with nothing to escape: at once
  const char* const end = text + size;
  while (plain != end && *plain != '"' && *plain != '\\' &&
         static_cast<unsigned char>(*plain) >= 0x20 && static_cast<unsigned char>(*plain) < 0x7f) {
    ++plain;
  }
  out.append(text, plain);
  for (const char* c = plain; c != end;) {
    const unsigned char byte = static_cast<unsigned char>(*c);
    if (byte == '"' || byte == '\\') {
      out += '\\';
      out += *c++;
    } else if (byte < 0x20 || byte == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      const char escaped[6] = {'\\', 'u', '0', '0', hex[byte >> 4], hex[byte & 15]};
      out.append(escaped, 6);
      ++c;
    } else if (byte < 0x80) {
      out += *c++;
    } else {
      std::size_t part = 1;
      const std::size_t length = utf8_character(reinterpret_cast<const unsigned char*>(c),
                                                static_cast<std::size_t>(end - c), part);
      if (length == 0) {
        out += "\xef\xbf\xbd";  // U+FFFD for the ill-formed part
        c += part;
      } else {
        out.append(c, length);
        c += length;
      }
    }
  }
}

/// The C string `text` (null: "") as a JSON string's contents (as above).
inline void append_json_string(std::string& out, const char* text) {
  if (text != nullptr) append_json_string(out, text, std::strlen(text));
}

/// `text` as a JSON string's contents (as above; a NUL in it as \\u0000).
inline void append_json_string(std::string& out, const std::string& text) {
  append_json_string(out, text.data(), text.size());
}

// The writers below format without snprintf (integers by std::to_chars): a full buffer of 4096
// events is formatted on the thread that recorded the last, inside a transfer, so formatting is
// most of what tracing costs a staged transfer (about 1 us an event by snprintf, on PoCL's host).

/// `value` in decimal.
inline void append_json_integer(std::string& out, long long value) {
  char text[24];
  const std::to_chars_result made = std::to_chars(text, text + sizeof(text), value);
  out.append(text, made.ptr);
}

/// `value` as a JSON number: an integer up to 2^53 exactly, else 17 significant digits; never
/// NaN or infinity, which JSON lacks (0 instead).
inline void append_json_number(std::string& out, double value) {
  if (!(value == value && value - value == 0)) value = 0;
  if (value == static_cast<double>(static_cast<long long>(value)) && value <= 9007199254740992.0 &&
      value >= -9007199254740992.0) {
    append_json_integer(out, static_cast<long long>(value));
    return;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  out += text;
}

/// A time in microseconds to the nanosecond (three decimals), as a JSON number.
inline void append_json_time(std::string& out, double microseconds) {
  if (!(microseconds >= 0 && microseconds < 9e15)) {  // not from the trace's clock: as it is
    append_json_number(out, microseconds);
    return;
  }
  const long long ns = static_cast<long long>(microseconds * 1000.0 + 0.5);
  append_json_integer(out, ns / 1000);
  const char fraction[4] = {'.', static_cast<char>('0' + ns / 100 % 10),
                            static_cast<char>('0' + ns / 10 % 10),
                            static_cast<char>('0' + ns % 10)};
  out.append(fraction, 4);
}

/// The arguments of `event` as the members of a JSON object.
inline void append_trace_args(std::string& out, const TraceEvent& event) {
  for (std::size_t a = 0; a < TraceEvent::max_args && event.args[a].key != nullptr; ++a) {
    out += a == 0 ? "\"" : ",\"";
    append_json_string(out, event.args[a].key);
    out += "\":";
    if (event.args[a].text == nullptr) {
      append_json_number(out, event.args[a].number);
    } else {
      out += '"';
      append_json_string(out, event.args[a].text);
      out += '"';
    }
  }
}

/// The events of a TraceEvent as JSON objects, each followed by ",\n".
inline void append_trace_event(std::string& out, const TraceEvent& event) {
  const bool pair = event.phase == 'A';
  const char phases[2] = {pair ? 'b' : event.phase, 'e'};
  for (int half = 0; half < (pair ? 2 : 1); ++half) {
    out += "{\"ph\":\"";
    out += phases[half];
    out += "\",\"cat\":\"clbuf\",\"name\":\"";
    append_json_string(out, event.name);
    out += "\",\"pid\":";
    append_json_integer(out, event.pid);
    out += ",\"tid\":";
    append_json_integer(out, event.tid);
    out += ",\"ts\":";
    append_json_time(out, half == 0 ? event.begin : event.end);
    if (event.phase == 'X') {
      out += ",\"dur\":";
      append_json_time(out, std::max(0.0, event.end - event.begin));
    }
    if (pair || event.phase == 's' || event.phase == 'f') {
      out += ",\"id\":";
      append_json_integer(out, static_cast<long long>(event.id));
    }
    if (event.phase == 'f') out += ",\"bp\":\"e\"";
    out += ",\"args\":{";
    if (half == 0) append_trace_args(out, event);
    out += "}},\n";
  }
}

/// This process's rank as a launcher gives it to the processes it starts (Open MPI's
/// OMPI_COMM_WORLD_RANK, MPICH's and Slurm's PMI_RANK, Slurm's SLURM_PROCID), or -1 outside one:
/// read from the environment, so that a manager made before MPI_Init knows it. Not PMIX_RANK,
/// which a singleton MPI_Init (mpi4py imported by a program run alone) sets to 0.
inline int launcher_rank() noexcept {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0 && rank < 100000) return static_cast<int>(rank);
  }
  return -1;
}

/// True when `path` names an existing folder (its trace file cannot be written: the error says
/// so rather than a rank's name made from it).
inline bool names_a_folder(const std::string& path) noexcept {
  if (!path.empty() && path.back() == '/') return true;
#if defined(__unix__) || defined(__APPLE__)
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
#else
  return false;
#endif
}

/// `path` with ".rank<N>" before its file name's extension: "trace.json" -> "trace.rank3.json",
/// "out/trace" -> "out/trace.rank3"; a path that has it already stays as it is (the Options of
/// another manager passed on), and so does a folder.
inline std::string rank_path(const std::string& path, int rank) {
  if (names_a_folder(path)) return path;
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  const bool extension =
      dot != std::string::npos && dot != 0 && (slash == std::string::npos || dot > slash + 1);
  const std::size_t at = extension ? dot : path.size();
  const std::string tag = ".rank" + std::to_string(rank);
  if (at >= tag.size() && path.compare(at - tag.size(), tag.size(), tag) == 0) return path;
  return path.substr(0, at) + tag + path.substr(at);
}

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
    std::lock_guard<std::mutex> lock(write_mutex_);
    std::fclose(file_);
  }

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
  TraceFile(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}

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
    write_text(text);
  }

  void write_events(const std::vector<TraceEvent>& events) {
    if (events.empty()) return;
    std::string text;
    text.reserve(events.size() * 160);
    for (const TraceEvent& event : events) append_trace_event(text, event);
    write_text(text);
  }

  /// Appends `text` (events, each ending in ",\n") where the closing bracket was, and closes the
  /// array again, so that the file is valid JSON after each write.
  void write_text(const std::string& text) {
    static const char tail[] = "\n]}\n";
    if (text.size() < 2) return;
    std::lock_guard<std::mutex> lock(write_mutex_);
    std::fseek(file_, end_, SEEK_SET);
    if (any_) std::fwrite(",\n", 1, 2, file_);
    std::fwrite(text.data(), 1, text.size() - 2, file_);  // without its last ",\n"
    end_ += static_cast<long>(text.size() - (any_ ? 0 : 2));
    any_ = true;
    std::fwrite(tail, 1, sizeof(tail) - 1, file_);
    std::fflush(file_);
  }

  friend class TraceRegistry;

  std::FILE* const file_;
  const std::string path_;
  const std::uint64_t serial_ = next_serial();
  long end_ = 0;      // under write_mutex_: where the next events go (the tail follows them)
  bool any_ = false;  // under write_mutex_: the array holds an event (the next needs a comma)
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

/// The open trace files by path; writes them out at exit and on std::terminate. Never destroyed
/// (a file's last holder may let it go after static destruction: a driver's callback thread).
class TraceRegistry {
 public:
  static TraceRegistry& instance() {
    static TraceRegistry* const registry = new TraceRegistry();  // NOLINT: never freed, on purpose
    return *registry;
  }

  /// The file of `path`: the one open, else a new one, once a file of that path that is still
  /// being closed has been (two FILEs must never write one path), waiting at most close_wait.
  std::shared_ptr<TraceFile> open(const std::string& path, const char* operation) {
    std::unique_lock<std::mutex> lock(mutex_);
    Entry& entry = files_[path];  // a map's entries stay where they are
    const auto give_up = std::chrono::steady_clock::now() + close_wait;
    while (true) {
      if (std::shared_ptr<TraceFile> file = entry.file.lock()) return file;
      if (!entry.closing) break;
      if (closed_.wait_until(lock, give_up) == std::cv_status::timeout) {
        fail(operation, CL_INVALID_VALUE,
             "the trace file \"" + path + "\" of an earlier manager is still being closed");
      }
    }
    std::FILE* handle = std::fopen(path.c_str(), "w");
    if (handle == nullptr) {
      const int error = errno;
      fail(operation, CL_INVALID_VALUE,
           "cannot write the trace file \"" + path +
               "\" (CLBUF_TRACE, Options::trace_path or Python's clbuf.trace()): " +
               std::strerror(error));
    }
    entry.closing = true;  // until close() has run; others wait for the file below
    lock.unlock();
    std::shared_ptr<TraceFile> file = make(path, handle);
    lock.lock();
    entry.file = file;
    lock.unlock();
    closed_.notify_all();
    return file;
  }

  /// Writes every open file's buffers out.
  void flush_all() noexcept {
    std::vector<std::shared_ptr<TraceFile>> open;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& entry : files_) {
        if (auto file = entry.second.file.lock()) open.push_back(std::move(file));
      }
    }
    for (const auto& file : open) file->flush();
  }

  TraceRegistry(const TraceRegistry&) = delete;
  TraceRegistry& operator=(const TraceRegistry&) = delete;

 private:
  struct Entry {
    std::weak_ptr<TraceFile> file;
    bool closing = false;  // a file of this path exists (open, or its last holder closing it)
  };

  // How long open() waits for a file of its path that is being closed.
  static constexpr std::chrono::seconds close_wait{5};

  /// Installs the std::terminate handler, and the exit handler (files still open at exit: a
  /// manager never destroyed, get their events).
  TraceRegistry() {
    previous_ = std::set_terminate(&TraceRegistry::on_terminate);
    std::atexit([] { instance().flush_all(); });
  }

  /// The file of `path`, writing to `handle`; its deleter is close().
  std::shared_ptr<TraceFile> make(const std::string& path, std::FILE* handle) {
    TraceFile* made = nullptr;
    try {
      made = new TraceFile(handle, path);
    } catch (...) {
      std::fclose(handle);
      ended(path);
      throw;
    }
    start(*made);
    // Should the shared_ptr find no memory, it calls the deleter: the file is closed all the same.
    return std::shared_ptr<TraceFile>(made, [this, path](TraceFile* file) { close(path, file); });
  }

  /// The deleter of a file: closes it (its last events written), then lets its path be opened.
  void close(const std::string& path, TraceFile* file) noexcept {
    delete file;
    ended(path);
  }

  /// No file of `path` exists any more: it may be opened again.
  void ended(const std::string& path) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      files_[path].closing = false;  // the entry exists: open() made it
    }
    closed_.notify_all();
  }

  /// The array's opening and its first closing; the clock named for readers of the file.
  static void start(TraceFile& file) {
    static const char head[] =
        "{\"otherData\":{\"clock\":\"std::chrono::steady_clock\",\"unit\":\"us\"},"
        "\"traceEvents\":[\n";
    static const char tail[] = "]}\n";
    std::fwrite(head, 1, sizeof(head) - 1, file.file_);
    std::fwrite(tail, 1, sizeof(tail) - 1, file.file_);
    std::fflush(file.file_);
    file.end_ = static_cast<long>(sizeof(head) - 1);
  }

  /// The program ends by an uncaught exception: the buffers written, then the handler before.
  static void on_terminate() {
    instance().flush_all();
    if (previous_ != nullptr) previous_();
    std::abort();
  }

  std::mutex mutex_;
  std::condition_variable closed_;
  std::map<std::string, Entry> files_;  // under mutex_
  static inline std::terminate_handler previous_ = nullptr;
};

inline std::shared_ptr<TraceFile> TraceFile::open(const std::string& path, const char* operation) {
  return TraceRegistry::instance().open(path, operation);
}

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
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TRACE_HPP
