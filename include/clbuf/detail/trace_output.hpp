// SPDX-License-Identifier: MIT
// The bytes of one trace file and the order they are written in (TraceFile, trace_file.hpp, holds
// one): the file is valid JSON at every instant the process can stop at, a kill included, and a
// write that fails (a full disk, RLIMIT_FSIZE) ends the file's writing with the file valid JSON
// as far as it got, reported (trace_write_failed(): one line on stderr,
// clbuf::trace_write_errors()).
#ifndef CLBUF_DETAIL_TRACE_OUTPUT_HPP
#define CLBUF_DETAIL_TRACE_OUTPUT_HPP

#include <clbuf/detail/output_file.hpp>

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/vfs.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

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

/// One trace file's bytes: `{"otherData": ..., "traceEvents": [` records `]}`. Not thread-safe:
/// its TraceFile writes under a lock of its own.
class TraceOutput {
 public:
  /// What a new trace file holds: the array's opening and closing; the clock named for readers.
  static std::string empty_text() { return std::string(head_text) + tail_text; }

  /// The file `path`, open as `file` (which it then owns), holding empty_text().
  TraceOutput(const OutputFile& file, std::string path)
      : fd_(file.fd), regular_(file.regular), path_(std::move(path)) {}
  TraceOutput(const TraceOutput&) = delete;
  TraceOutput& operator=(const TraceOutput&) = delete;
  /// Closes the file, the spaces after its closing "]}" removed.
  ~TraceOutput() {
    if (regular_ && !failed_ && size_ != end_ + tail_size) {
      static_cast<void>(::ftruncate(fd_, static_cast<off_t>(end_ + tail_size)));
    }
    ::close(fd_);
  }

  /// Appends the records of `text` (each ending in ",\n"; `ends`: after each unit to keep whole)
  /// where the closing "]}" was, so that the file is valid JSON whatever instant the process
  /// stops at: each write() puts records and the closing "]}" after them at once, so a process
  /// killed between two writes leaves the file as the first left it. Where direct writes reach
  /// the device (ext2/3/4, XFS) all of `text` goes in one (write_direct()). Else a write() is whole
  /// or not at all when it stays within a page of the file (Linux checks for a fatal signal between
  /// the pages of one write(), so a write() across pages can be cut there): each write holds the
  /// records that fit before the end of the page the closing "]}" is on, and one that crosses
  /// the page's end is written alone, so that only the moment its first page is written remains
  /// (the closing "]}" cannot move to the next page any other way). A write that fails (a full
  /// disk, RLIMIT_FSIZE) puts the closing "]}" back where it was and ends the file's writing
  /// (failed_).
  void write(const std::string& text, const std::vector<std::size_t>& ends) {
    static const std::size_t page = page_size();
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

 private:
  /// Writes `text` as write() does, in one direct write (O_DIRECT) of the file's blocks from
  /// the one the closing "]}" begins in: true when done (or failed: failed_), false where the file
  /// system has no direct writes (then write() writes through the page cache). A direct
  /// write() is whole once begun: the kernel has no fatal-signal point inside it (a page-cache
  /// write() has one between pages), so a kill leaves the file as it was before or after it,
  /// whatever the pages it spans. The blocks end in spaces after "]}" (JSON still), removed at
  /// the file's end.
  bool write_direct(const std::string& text) {
    if (!direct_on()) return false;
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

  /// Whether the file takes direct writes: decided at its first write, O_DIRECT set then.
  bool direct_on() noexcept {
    if (direct_ == Direct::unknown) {
      const int flags = ::fcntl(fd_, F_GETFL);
      direct_ = regular_ && direct_io_is_real(fd_) && flags >= 0 &&
                        ::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0
                    ? Direct::on
                    : Direct::off;
    }
    return direct_ == Direct::on;
  }

  /// True when `fd`'s file system writes O_DIRECT to its device (ext2/3/4, XFS), so that a
  /// direct write() is whole once begun. Others take the flag and write through the page cache
  /// all the same (tmpfs), or may: their files take write()'s writes a page at a time.
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
  /// reported (trace_write_failed()).
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

  const int fd_;
  const bool regular_;  // a regular file (else a device such as /dev/null): truncated on failure
  const std::string path_;
  // Under the caller's lock: where the next records go (the closing "]}" follows them).
  std::uint64_t end_ = std::char_traits<char>::length(head_text);
  bool any_ = false;     // the caller's lock: the array holds a record (the next needs a comma)
  bool failed_ = false;  // the caller's lock: a write failed; nothing more is written
  std::uint64_t size_ = std::char_traits<char>::length(head_text) + tail_size;  // the caller's lock
  std::string spaces_;                                                          // the caller's lock
  static constexpr std::uint64_t ahead = 64 << 10;  // spaces written after the closing "]}"
  static constexpr std::uint64_t no_size = ~std::uint64_t{0};  // spaces are written no more
  // Direct writes (write_direct()): whether the file has them; its blocks' size and alignment.
  enum class Direct { unknown, on, off };
  Direct direct_ = Direct::unknown;                  // the caller's lock
  static constexpr std::size_t direct_block = 4096;  // a multiple of every device's block
  std::uint64_t block_start_ = 0;                    // the caller's lock: end_'s block
  std::string block_ = head_text;                    // the caller's lock: its bytes before end_
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TRACE_OUTPUT_HPP
