// SPDX-License-Identifier: MIT
// Files clbuf writes as it goes (the tracer's; anything written in place and read while it grows):
// a path checked before the system sees it (check_output_path(): empty, or holding a NUL, which
// the system would cut it at), a file opened for writing and known by what it is, not by how its
// path is spelled (OutputFile::id: its device and inode, one for "t.json", "./t.json", an absolute
// path, a symlink or a hard link), a file created or started afresh whole or not at all (a
// temporary file in its folder, linked or renamed into place), positional writes that never raise
// SIGXFSZ (WriteGuard: a write past RLIMIT_FSIZE fails with EFBIG instead of killing the process),
// and the system's text for a failure (output_error_text()). Functions return 0 or an errno
// value; the caller makes the Error or the report. POSIX only.
#ifndef CLBUF_DETAIL_OUTPUT_FILE_HPP
#define CLBUF_DETAIL_OUTPUT_FILE_HPP

#include <clbuf/error.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

namespace clbuf {
namespace detail {

/// A file as the system knows it: its device and inode, the same for every spelling of its path.
struct FileId {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  friend bool operator<(const FileId& a, const FileId& b) noexcept {
    return std::tie(a.device, a.inode) < std::tie(b.device, b.inode);
  }
  friend bool operator==(const FileId& a, const FileId& b) noexcept {
    return a.device == b.device && a.inode == b.inode;
  }
};

/// A file open for writing (`fd`, owned by the caller), with what fstat() said of it.
struct OutputFile {
  int fd = -1;
  FileId id;
  bool regular = false;  // a regular file (else a character device such as /dev/null)
  mode_t mode = 0;
  nlink_t links = 0;
  uid_t owner = 0;
};

/// The error of a path that names no file to write: a folder, a FIFO, a socket, a block device.
constexpr int not_an_output_file = -1;

/// The system's text for `error` (an errno value, or not_an_output_file).
inline std::string output_error_text(int error) {
  if (error == not_an_output_file) {
    return "not a regular file (a FIFO, socket or block device is never written)";
  }
  return std::strerror(error);
}

/// Refuses `path` before the system sees it: empty, or holding a NUL (the system would take the
/// part before it). @throws Error CL_INVALID_VALUE of `operation` naming `what` and the path (a NUL
/// shown as \0).
inline void check_output_path(const char* operation, const std::string& path,
                              const std::string& what) {
  if (path.empty()) fail(operation, CL_INVALID_VALUE, what + ": the path is empty");
  if (path.find('\0') != std::string::npos) {
    fail(operation, CL_INVALID_VALUE, what + " \"" + path + "\": the path holds a NUL");
  }
}

/// Fills `file`'s facts from fstat(file.fd); 0, or the error (not_an_output_file for anything
/// but a regular file or a character device).
inline int describe_output_file(OutputFile& file) noexcept {
  struct stat facts {};
  if (::fstat(file.fd, &facts) != 0) return errno;
  if (S_ISDIR(facts.st_mode)) return EISDIR;
  if (!S_ISREG(facts.st_mode) && !S_ISCHR(facts.st_mode)) return not_an_output_file;
  file.id = {static_cast<std::uint64_t>(facts.st_dev), static_cast<std::uint64_t>(facts.st_ino)};
  file.regular = S_ISREG(facts.st_mode);
  file.mode = facts.st_mode;
  file.links = facts.st_nlink;
  file.owner = facts.st_uid;
  return 0;
}

/// Opens the file at `path` for writing as it is (nothing truncated; created, empty, with
/// `create`): 0 and `file`, ENOENT when there is none, else the error. A FIFO is refused before it
/// is opened (opening one waits for a reader).
inline int open_output_file(const std::string& path, OutputFile& file,
                            bool create = false) noexcept {
  struct stat facts {};
  if (::stat(path.c_str(), &facts) == 0 && S_ISFIFO(facts.st_mode)) return not_an_output_file;
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (create ? O_CREAT : 0),
                0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno == ENXIO ? not_an_output_file : errno;
  file.fd = fd;
  const int error = describe_output_file(file);
  if (error != 0) {
    ::close(fd);
    file.fd = -1;
    return error;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return 0;
}

/// Writes the `size` bytes at `data` at `offset` of `fd`: EINTR retried, a short write continued.
/// 0, or the error (EFBIG past RLIMIT_FSIZE under a WriteGuard, ENOSPC, EIO, ...).
inline int write_output_at(int fd, const char* data, std::size_t size,
                           std::uint64_t offset) noexcept {
  while (size > 0) {
    const ssize_t wrote = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (wrote == 0) return EIO;
    data += wrote;
    size -= static_cast<std::size_t>(wrote);
    offset += static_cast<std::uint64_t>(wrote);
  }
  return 0;
}

/// While it lives, the calling thread's writes past RLIMIT_FSIZE (ulimit -f) fail with EFBIG
/// instead of raising SIGXFSZ, whose default ends the process: the signal is blocked for the
/// thread, and one raised meanwhile is taken back at the end (unless it was pending before).
class WriteGuard {
 public:
  WriteGuard() noexcept {
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, SIGXFSZ);
    blocked_ = ::pthread_sigmask(SIG_BLOCK, &only, &before_) == 0;
    sigset_t pending;
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) == 1;
  }
  WriteGuard(const WriteGuard&) = delete;
  WriteGuard& operator=(const WriteGuard&) = delete;
  ~WriteGuard() {
    if (!blocked_) return;
    sigset_t pending;
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) == 1) {
      sigset_t only;
      sigemptyset(&only);
      sigaddset(&only, SIGXFSZ);
      const timespec none = {0, 0};
      static_cast<void>(::sigtimedwait(&only, nullptr, &none));  // ours: taken back
    }
    ::pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }

 private:
  sigset_t before_{};
  bool blocked_ = false;
  bool was_pending_ = false;
};

/// A name for a temporary file in the folder of `path`: "<folder>/.<name>.<pid>.<n>.tmp".
inline std::string temporary_output_path(const std::string& path) {
  static std::atomic<unsigned> made{0};
  const std::size_t slash = path.find_last_of('/');
  const std::string folder = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return folder + "." + name + "." + std::to_string(::getpid()) + "." +
         std::to_string(made.fetch_add(1)) + ".tmp";
}

/// Writes `contents` into a new temporary file beside `path` (mode 0666 less the umask): 0 and
/// `file`, open, with its name in `temporary`, else the error (nothing left behind).
inline int write_temporary_output(const std::string& path, const std::string& contents,
                                  OutputFile& file, std::string& temporary) {
  temporary = temporary_output_path(path);
  int fd = -1;
  do {
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno;
  file.fd = fd;
  int error = describe_output_file(file);
  if (error == 0) {
    WriteGuard guard;
    error = write_output_at(fd, contents.data(), contents.size(), 0);
  }
  if (error != 0) {
    ::close(fd);
    ::unlink(temporary.c_str());
    file.fd = -1;
  }
  return error;
}

/// Creates the file `path` holding `contents`, whole or not at all: it appears under its name
/// only once written (a temporary file linked into place). 0 and `file`, open; EEXIST when a file
/// (or a symlink) of that name exists; else the error.
inline int create_output_file(const std::string& path, const std::string& contents,
                              OutputFile& file) {
  std::string temporary;
  const int error = write_temporary_output(path, contents, file, temporary);
  if (error != 0) return error;
  const int linked = ::link(temporary.c_str(), path.c_str()) == 0 ? 0 : errno;
  ::unlink(temporary.c_str());
  if (linked != 0) {
    ::close(file.fd);
    file.fd = -1;
  }
  return linked;
}

/// Replaces the regular file `path` (its final target: symlinks followed) by one holding
/// `contents` with mode `mode`, whole or not at all (a temporary file renamed over it): 0 and
/// `file`, open, else the error (the file as it was).
inline int replace_output_file(const std::string& path, const std::string& contents, mode_t mode,
                               OutputFile& file) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return errno;
  const std::string target = real;
  std::free(real);  // NOLINT(cppcoreguidelines-no-malloc): realpath's
  std::string temporary;
  int error = write_temporary_output(target, contents, file, temporary);
  if (error != 0) return error;
  if (::fchmod(file.fd, mode & 07777) != 0 || ::rename(temporary.c_str(), target.c_str()) != 0) {
    error = errno;
    ::close(file.fd);
    ::unlink(temporary.c_str());
    file.fd = -1;
  }
  return error;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_OUTPUT_FILE_HPP
