// SPDX-License-Identifier: MIT
// The open trace files of the process (detail/trace.hpp): a path opens the file open already, else
// a new one; every open file is written out at exit and on std::terminate (an uncaught
// exception), whose handler writes the buffers first.
#ifndef CLBUF_DETAIL_TRACE_REGISTRY_HPP
#define CLBUF_DETAIL_TRACE_REGISTRY_HPP

#include <clbuf/detail/output_file.hpp>
#include <clbuf/detail/trace_file.hpp>
#include <clbuf/error.hpp>

#include <cerrno>
#include <chrono>
#include <condition_variable>
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

/// The open trace files by what they are (FileId: every spelling of a path, links included, is
/// one file, written by one TraceFile); writes them out at exit and on std::terminate. Never
/// destroyed (a file's last holder may let it go after static destruction: a driver's callback
/// thread).
class TraceRegistry {
 public:
  static TraceRegistry& instance() {
    static TraceRegistry* const registry = new TraceRegistry();  // NOLINT: never freed, on purpose
    return *registry;
  }

  /// The file of `path`: the one open, whatever the spelling that opened it, else the file started
  /// afresh (TraceFile::empty_text(), whole or not at all: see start_afresh()), once a file of it
  /// that is still being closed has been (two writers must never write one file), waiting at most
  /// close_wait. @throws Error CL_INVALID_VALUE of `operation` naming the path and the reason
  /// when it is empty, holds a NUL, or cannot be written (a folder, a missing or read-only folder,
  /// a FIFO, a full device).
  std::shared_ptr<TraceFile> open(const std::string& path, const char* operation) {
    check_output_path(operation, path, "the trace file");
    std::unique_lock<std::mutex> lock(mutex_);
    const auto give_up = std::chrono::steady_clock::now() + close_wait;
    while (true) {
      OutputFile file;
      bool created = false;
      int error = open_or_create(path, file, created);
      if (error != 0) cannot_write(operation, path, error);
      Entry& entry = files_[file.id];  // a map's entries stay where they are
      if (!created) {
        std::shared_ptr<TraceFile> open = entry.file.lock();
        if (open != nullptr || entry.closing) {
          ::close(file.fd);
          if (open != nullptr) return open;
          if (closed_.wait_until(lock, give_up) == std::cv_status::timeout) {
            fail(operation, CL_INVALID_VALUE,
                 "the trace file \"" + path + "\" of an earlier manager is still being closed");
          }
          continue;  // closed: open it again
        }
        error = start_afresh(path, file);
        if (error != 0) cannot_write(operation, path, error);
      }
      Entry& started = files_[file.id];  // start_afresh() may have made a new file
      started.closing = true;            // until close() has run; others wait for the file above
      lock.unlock();
      std::shared_ptr<TraceFile> made = make(path, file);
      lock.lock();
      started.file = made;
      lock.unlock();
      closed_.notify_all();
      return made;
    }
  }

  /// Opens the file at `path`, or makes it whole (TraceFile::empty_text()) where there is none
  /// (`created`). Returns 0, or the errno of the failure.
  static int open_or_create(const std::string& path, OutputFile& file, bool& created) {
    int error = open_output_file(path, file);
    if (error != ENOENT) return error;
    error = create_output_file(path, TraceFile::empty_text(), file);
    created = error == 0;
    // A symlink to no file, or a file made meanwhile (by another process): opened as it is.
    if (error == EEXIST) error = open_output_file(path, file, true);
    // No temporary file beside it (a name too long for its suffix, say): made in place, its own
    // error the one reported.
    if (error != 0 && open_output_file(path, file, true) == 0) error = 0;
    return error;
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
    bool closing = false;  // a writer of this file exists (open, or its last holder closing it)
  };

  // How long open() waits for a file that is being closed.
  static constexpr std::chrono::seconds close_wait{5};

  /// Installs the std::terminate handler, and the exit handler (files still open at exit: a
  /// manager never destroyed, get their events).
  TraceRegistry() {
    previous_ = std::set_terminate(&TraceRegistry::on_terminate);
    std::atexit([] { instance().flush_all(); });
  }

  [[noreturn]] static void cannot_write(const char* operation, const std::string& path, int error) {
    fail(operation, CL_INVALID_VALUE,
         "cannot write the trace file \"" + path +
             "\" (CLBUF_TRACE, Options::trace_path or Python's clbuf.trace()): " +
             output_error_text(error));
  }

  /// Starts the existing `file` of `path` afresh (TraceFile::empty_text()), so that it is valid
  /// JSON at every instant: a regular file of one link that this process owns is replaced by a
  /// new one renamed over it (`file` becomes the new one); else (a hard link, another owner, a
  /// folder this process may not write) it is emptied and written in place, which leaves it
  /// empty for the moment between the two; a device (/dev/null) is written. 0, or the error (the
  /// file closed).
  static int start_afresh(const std::string& path, OutputFile& file) {
    const std::string text = TraceFile::empty_text();
    if (file.regular && file.links == 1 && file.owner == ::geteuid()) {
      OutputFile fresh;
      if (replace_output_file(path, text, file.mode, fresh) == 0) {
        ::close(file.fd);
        file = fresh;
        return 0;
      }
    }
    int error = file.regular && ::ftruncate(file.fd, 0) != 0 ? errno : 0;
    if (error == 0) {
      WriteGuard guard;
      error = write_output_at(file.fd, text.data(), text.size(), 0);
    }
    if (error != 0) ::close(file.fd);
    return error;
  }

  /// The TraceFile of `file` (holding TraceFile::empty_text()); its deleter is close().
  std::shared_ptr<TraceFile> make(const std::string& path, const OutputFile& file) {
    TraceFile* made = nullptr;
    try {
      made = new TraceFile(file, path);
    } catch (...) {
      ::close(file.fd);
      ended(file.id);
      throw;
    }
    // Should the shared_ptr find no memory, it calls the deleter: the file is closed all the same.
    const FileId id = file.id;
    return std::shared_ptr<TraceFile>(made, [this, id](TraceFile* done) { close(id, done); });
  }

  /// The deleter of a file: closes it (its last events written), then lets it be opened again.
  void close(FileId id, TraceFile* file) noexcept {
    delete file;
    ended(id);
  }

  /// No writer of file `id` exists any more: it may be opened again.
  void ended(FileId id) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      files_[id].closing = false;  // the entry exists: open() made it
    }
    closed_.notify_all();
  }

  /// The program ends by an uncaught exception: the buffers written, then the handler before.
  static void on_terminate() {
    instance().flush_all();
    if (previous_ != nullptr) previous_();
    std::abort();
  }

  std::mutex mutex_;
  std::condition_variable closed_;
  std::map<FileId, Entry> files_;  // under mutex_
  static inline std::terminate_handler previous_ = nullptr;
};

inline std::shared_ptr<TraceFile> TraceFile::open(const std::string& path, const char* operation) {
  return TraceRegistry::instance().open(path, operation);
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TRACE_REGISTRY_HPP
