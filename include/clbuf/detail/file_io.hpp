// SPDX-License-Identifier: MIT
// POSIX files for clbuf's .npy files and checkpoints (npy_io.hpp, checkpoint.hpp): an owned file
// descriptor, whole reads and writes at an offset (EINTR retried, short transfers continued),
// fsync of a file and of its folder, renames and removals, and a file written under a temporary
// name in the folder of its destination that is renamed into place only once it is whole
// (AtomicFile). Every failure is a clbuf::Error (CL_INVALID_VALUE: OpenCL has no code for files)
// naming the operation, the path and the system's text (strerror). POSIX only. Built on the
// tracer's output_file.hpp where it has the piece: a path checked before the system sees it
// (empty, or holding a NUL), the temporary file's name, and writes under a WriteGuard, so a
// write past RLIMIT_FSIZE (ulimit -f) fails with EFBIG instead of ending the process (SIGXFSZ).
#ifndef CLBUF_DETAIL_FILE_IO_HPP
#define CLBUF_DETAIL_FILE_IO_HPP

#include <clbuf/detail/output_file.hpp>
#include <clbuf/error.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// An Error of `operation` about `path`: "<what> '<path>': <strerror(error)>".
[[noreturn]] inline void fail_file(const char* operation, const std::string& path,
                                   const std::string& what, int error) {
  fail(operation, CL_INVALID_VALUE, what + " '" + path + "': " + std::strerror(error));
}

/// An Error of `operation` about the contents of the file `path`: "'<path>': <what>".
[[noreturn]] inline void fail_file_contents(const char* operation, const std::string& path,
                                            const std::string& what) {
  fail(operation, CL_INVALID_VALUE, "'" + path + "': " + what);
}

/// The folder part of `path` ("." when it has none).
inline std::string folder_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

/// An open file descriptor, closed by the destructor.
class File {
 public:
  File() = default;
  File(int fd, std::string path) noexcept : fd_(fd), path_(std::move(path)) {}
  File(File&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
  File& operator=(File&& other) noexcept {
    if (this != &other) {
      close_quietly();
      fd_ = std::exchange(other.fd_, -1);
      path_ = std::move(other.path_);
    }
    return *this;
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() { close_quietly(); }

  /// `path` opened for reading; refused unless it is a regular file (opened without blocking,
  /// so a FIFO is refused rather than waited on).
  static File open_read(const char* operation, const std::string& path) {
    return open_read_at(operation, AT_FDCWD, path, path);
  }

  /// As open_read(), `name` in the folder open as `folder` (a descriptor; AT_FDCWD: the current
  /// folder), named `path` in errors.
  static File open_read_at(const char* operation, int folder, const std::string& name,
                           const std::string& path) {
    check_output_path(operation, path, "the file");
    int fd = -1;
    do {
      fd = ::openat(folder, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) fail_file(operation, path, "cannot open", errno);
    File file(fd, path);
    struct stat facts {};
    if (::fstat(fd, &facts) != 0) fail_file(operation, path, "cannot stat", errno);
    if (S_ISDIR(facts.st_mode)) fail_file_contents(operation, path, "is a folder, not a file");
    if (!S_ISREG(facts.st_mode)) fail_file_contents(operation, path, "is not a regular file");
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      fail_file(operation, path, "cannot set blocking reads on", errno);
    }
    return file;
  }

  /// A new file `path` for writing (O_EXCL: an existing file is an error).
  static File create(const char* operation, const std::string& path) {
    check_output_path(operation, path, "the file");
    int fd = -1;
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) fail_file(operation, path, "cannot create", errno);
    return File(fd, path);
  }

  int fd() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }

  /// The file's size in bytes.
  std::uint64_t size(const char* operation) const {
    struct stat facts {};
    if (::fstat(fd_, &facts) != 0) fail_file(operation, path_, "cannot stat", errno);
    return static_cast<std::uint64_t>(facts.st_size);
  }

  /// Reads exactly `bytes` at `offset` into `out`. @throws Error at a read error or when the
  /// file ends first ("truncated").
  void read_at(const char* operation, void* out, std::size_t bytes, std::uint64_t offset) const {
    char* at = static_cast<char*>(out);
    while (bytes > 0) {
      const ssize_t got = ::pread(fd_, at, bytes, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail_file(operation, path_, "cannot read", errno);
      if (got == 0) {
        fail_file_contents(operation, path_,
                           "the file ends at byte " + std::to_string(offset) + ", " +
                               std::to_string(bytes) + " bytes before its header says (truncated)");
      }
      at += got;
      bytes -= static_cast<std::size_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
  }

  /// Writes all `bytes` of `data` at `offset` (a full disk or a file-size limit: an Error).
  void write_at(const char* operation, const void* data, std::size_t bytes,
                std::uint64_t offset) const {
    int error = 0;
    {
      WriteGuard guard;  // EFBIG, not SIGXFSZ, past RLIMIT_FSIZE
      error = write_output_at(fd_, static_cast<const char*>(data), bytes, offset);
    }
    if (error != 0) fail_file(operation, path_, "cannot write", error);
  }

  /// Flushes the file's data and size to the storage.
  void sync(const char* operation) const {
    int err = 0;
    do {
      err = ::fsync(fd_);
    } while (err != 0 && errno == EINTR);
    if (err != 0) fail_file(operation, path_, "cannot fsync", errno);
  }

  /// Closes, reporting an error (NFS may report a failed write only here).
  void close(const char* operation) {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) {
      fail_file(operation, path_, "cannot close", errno);
    }
  }

 private:
  void close_quietly() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
  std::string path_;
};

/// fsync of the folder `folder`: a rename or a new entry in it reaches the storage.
inline void sync_folder(const char* operation, const std::string& folder) {
  int fd = -1;
  do {
    fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail_file(operation, folder, "cannot open the folder", errno);
  File dir(fd, folder);
  dir.sync(operation);
}

/// A folder held open: the files opened through it are that folder's even when it is renamed,
/// replaced or removed meanwhile (a checkpoint read while another process saves one: a save
/// replaces the folder by a rename and never changes a file in place).
class OpenFolder {
 public:
  /// `path` opened. @throws Error when it cannot be (missing, not a folder, no permission).
  OpenFolder(const char* operation, const std::string& path) : path_(path) {
    int fd = -1;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) fail_file(operation, path, "cannot open the folder", errno);
    dir_ = File(fd, path);
    struct stat facts {};
    if (::fstat(fd, &facts) != 0) fail_file(operation, path, "cannot stat", errno);
    device_ = facts.st_dev;
    inode_ = facts.st_ino;
  }

  const std::string& path() const noexcept { return path_; }

  /// The file `name` of this folder, opened for reading (File::open_read's checks).
  File open_read(const char* operation, const std::string& name) const {
    return File::open_read_at(operation, dir_.fd(), name, path_ + "/" + name);
  }

  /// True when `path` is no longer this folder (another took its place, or none is there).
  bool replaced_at(const std::string& path) const noexcept {
    struct stat facts {};
    return ::stat(path.c_str(), &facts) != 0 || facts.st_dev != device_ || facts.st_ino != inode_;
  }

 private:
  std::string path_;
  File dir_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

/// Renames `from` to `to` (replacing a file `to`; an empty folder `to` too).
inline void rename_path(const char* operation, const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    fail_file(operation, from, "cannot rename to '" + to + "':", errno);
  }
}

/// True when `path` exists (of any kind).
inline bool path_exists(const std::string& path) noexcept {
  struct stat facts {};
  return ::lstat(path.c_str(), &facts) == 0;
}

/// True when `path` is a folder.
inline bool is_folder(const std::string& path) noexcept {
  struct stat facts {};
  return ::stat(path.c_str(), &facts) == 0 && S_ISDIR(facts.st_mode);
}

/// The names in `folder` but "." and "..". @throws Error when it cannot be read.
inline std::vector<std::string> folder_entries(const char* operation, const std::string& folder) {
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) fail_file(operation, folder, "cannot read the folder", errno);
  std::vector<std::string> names;
  try {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
  } catch (...) {
    ::closedir(dir);
    throw;
  }
  ::closedir(dir);
  return names;
}

/// Removes `path`, a file or a folder with what it holds (no symbolic link is followed);
/// nothing when it does not exist. @throws Error when something cannot be removed.
inline void remove_tree(const char* operation, const std::string& path) {
  struct stat facts {};
  if (::lstat(path.c_str(), &facts) != 0) {
    if (errno == ENOENT) return;
    fail_file(operation, path, "cannot stat", errno);
  }
  if (S_ISDIR(facts.st_mode)) {
    for (const std::string& name : folder_entries(operation, path)) {
      remove_tree(operation, path + "/" + name);
    }
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
      fail_file(operation, path, "cannot remove the folder", errno);
    }
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    fail_file(operation, path, "cannot remove", errno);
  }
}

/// Makes the folder `path` (0755 less the umask). @throws Error when it cannot.
inline void make_folder(const char* operation, const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) fail_file(operation, path, "cannot make the folder", errno);
}

/// `path`, once check_output_path() has passed it (not empty, no NUL).
inline std::string checked_path(const char* operation, std::string path) {
  check_output_path(operation, path, "the file");
  return path;
}

/// A file that appears at `path` whole or not at all: written under a temporary name in the
/// same folder, and commit() fsyncs it, renames it over `path` and fsyncs the folder. Destroyed
/// before commit() (an error on the way), it removes the temporary file: `path` is then as it
/// was before.
class AtomicFile {
 public:
  AtomicFile(const char* operation, std::string path)
      : path_(checked_path(operation, std::move(path))),
        file_(File::create(operation, temporary_output_path(path_))) {}
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (!committed_) {
      const std::string temporary = file_.path();
      file_ = File();
      ::unlink(temporary.c_str());
    }
  }

  const File& file() const noexcept { return file_; }

  /// fsync, close, rename into place, fsync of the folder.
  void commit(const char* operation) {
    file_.sync(operation);
    file_.close(operation);
    rename_path(operation, file_.path(), path_);
    committed_ = true;
    sync_folder(operation, folder_of(path_));
  }

 private:
  std::string path_;
  File file_;
  bool committed_ = false;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_FILE_IO_HPP
