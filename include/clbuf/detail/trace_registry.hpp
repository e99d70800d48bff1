// SPDX-License-Identifier: MIT
// The open trace files of the process (detail/trace.hpp): a path opens the file open already, else
// a new one; every open file is written out at exit and on std::terminate (an uncaught
// exception), whose handler writes the buffers first.
#ifndef CLBUF_DETAIL_TRACE_REGISTRY_HPP
#define CLBUF_DETAIL_TRACE_REGISTRY_HPP

#include <clbuf/detail/trace_file.hpp>
#include <clbuf/error.hpp>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

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

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TRACE_REGISTRY_HPP
