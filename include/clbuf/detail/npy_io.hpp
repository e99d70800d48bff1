// SPDX-License-Identifier: MIT
// The .npy calls under BufferManager's load_npy / save_npy (and Checkpoint's files): a .npy file
// opened and its header checked against the element type before any device memory is touched
// (NpyFile), its bytes moved by file_transfer.hpp, blocking on the manager's queue or started
// on the engine's background thread (start_file_job). A save writes a temporary file beside
// the destination, fsyncs it and renames it into place (AtomicFile): the destination is the old
// file or the whole new one, never part of one.
//
// An asynchronous file call has the shape of a staged transfer's (async.hpp): at the call, a
// marker M of the manager's queue and a barrier B there that waits for a user event U; the job,
// on the engine's background thread (in order with staged transfers), waits on the host for M,
// moves the bytes by chunks on the device's side queue (nothing there ever waits for an event),
// then completes U. The Future waits for B, so it completes after the last byte, and work
// queued after the call runs after the file's bytes have landed (or been read).
#ifndef CLBUF_DETAIL_NPY_IO_HPP
#define CLBUF_DETAIL_NPY_IO_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/detail/chunk_io.hpp>
#include <clbuf/detail/crc32c.hpp>
#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/file_io.hpp>
#include <clbuf/detail/file_transfer.hpp>
#include <clbuf/detail/memory_object.hpp>
#include <clbuf/detail/npy_format.hpp>
#include <clbuf/detail/telemetry.hpp>
#include <clbuf/detail/transfer_engine.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// "[2, 3]".
inline std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return text + "]";
}

/// A .npy file open for reading, its header parsed and its size checked against the header.
struct NpyFile {
  File file;
  NpyHeader header;
  std::vector<unsigned char> head;  // the bytes before the array (for a checksum of the file)

  /// Opens and checks `path`. @throws Error (CL_INVALID_VALUE) naming `operation` and the path:
  /// missing, a folder, unreadable, not a .npy header, or a size other than the header says.
  static NpyFile open(const char* operation, const std::string& path) {
    return of(operation, File::open_read(operation, path));
  }

  /// As open(), the file `file` opened for reading.
  static NpyFile of(const char* operation, File file) {
    NpyFile npy;
    npy.file = std::move(file);
    const std::string& path = npy.file.path();
    const std::uint64_t size = npy.file.size(operation);
    std::vector<unsigned char> prefix(
        static_cast<std::size_t>(std::min<std::uint64_t>(size, npy_prefix_bytes)));
    npy.file.read_at(operation, prefix.data(), prefix.size(), 0);
    std::uint64_t total = 0;
    std::string why = npy_header_length(prefix.data(), prefix.size(), total);
    if (!why.empty()) fail_file_contents(operation, path, why);
    if (total > size) {
      fail_file_contents(operation, path,
                         "the file has " + std::to_string(size) + " bytes, its header says it " +
                             "alone has " + std::to_string(total) + " (truncated)");
    }
    npy.head.resize(static_cast<std::size_t>(total));
    npy.file.read_at(operation, npy.head.data(), npy.head.size(), 0);
    why = parse_npy_header(npy.head.data(), npy.head.size(), npy.header);
    if (!why.empty()) fail_file_contents(operation, path, why);
    const std::uint64_t expected = total + npy.header.data_bytes;
    if (expected < total || size != expected) {  // (an overflow counts as "not what it says")
      fail_file_contents(operation, path,
                         "the file has " + std::to_string(size - total) +
                             " bytes of data, its header (" + npy.header.descr() + ", shape " +
                             shape_text(npy.header.shape) + ") says " +
                             std::to_string(npy.header.data_bytes) +
                             (size < expected ? " (truncated)" : " (longer than its header says)"));
    }
    return npy;
  }

  /// The file's dtype is `kind` of `bytes` (NpyType<T>) and its order C.
  void check_type(const char* operation, char kind, std::size_t bytes) const {
    if (header.kind != kind || header.item_bytes != bytes) {
      const std::string wanted =
          std::string(1, bytes == 1 ? '|' : '<') + kind + std::to_string(bytes);
      fail_file_contents(
          operation, file.path(),
          "the file's dtype is " + header.descr() + ", the buffer's element type " + wanted);
    }
    if (header.fortran_order) {
      fail_file_contents(operation, file.path(),
                         "the array is in Fortran order (fortran_order: True); clbuf reads C "
                         "order only (np.ascontiguousarray before np.save)");
    }
  }

  /// How the bytes pass on the way in: swapped for a big-endian file, counted into `crc`.
  FilePass pass(Crc32c* crc) const noexcept {
    FilePass pass;
    if (header.byte_order == '>') {
      pass.swap_bytes = header.kind == 'c' ? header.item_bytes / 2 : header.item_bytes;
    }
    pass.crc = crc;
    return pass;
  }
};

/// `path` opened as a .npy file of T's dtype (NpyType<T>), C order.
template <class T>
NpyFile open_npy(const char* operation, const std::string& path) {
  NpyFile npy = NpyFile::open(operation, path);
  npy.check_type(operation, NpyType<T>::kind, NpyType<T>::bytes);
  return npy;
}

/// The descr clbuf writes for T: little-endian ("<f4"), "|" for one byte.
template <class T>
std::string npy_descr() {
  static_assert(NpyType<T>::bytes == sizeof(T), "NpyType<T>::bytes must be sizeof(T)");
  return std::string(1, sizeof(T) == 1 ? '|' : '<') + NpyType<T>::kind + std::to_string(sizeof(T));
}

/// A load into an existing buffer: the file holds as many elements as the buffer.
inline void check_file_elements(const char* operation, const NpyFile& npy, std::size_t count) {
  if (npy.header.elements != count) {
    fail_file_contents(operation, npy.file.path(),
                       "the file holds " + std::to_string(npy.header.elements) +
                           " elements (shape " + shape_text(npy.header.shape) + "), the buffer " +
                           std::to_string(count));
  }
}

/// The chunk bytes of the engine's file transfers: Options::staging_chunk_bytes, a whole number
/// of `item_bytes` (so a byte swap never splits an element).
inline std::size_t file_chunk(const TransferEngine& engine, std::size_t item_bytes) noexcept {
  const std::size_t chunk = engine.options().staging_chunk_bytes;
  return item_bytes == 0 || chunk < item_bytes ? item_bytes : chunk / item_bytes * item_bytes;
}

/// The array of `npy` -> `memory` (npy.header.data_bytes of it), blocking, after the queue's
/// earlier work (`fresh`: memory just taken from the pool for a new buffer, which no command can
/// be using); `crc`, when set, gets the file's bytes.
inline void npy_read(TransferEngine& engine, const char* operation, const NpyFile& npy,
                     const Allocation& memory, bool fresh, Crc32c* crc = nullptr) {
  const std::size_t bytes = npy.header.data_bytes;
  if (crc != nullptr) crc->update(npy.head.data(), npy.head.size());
  if (bytes == 0) return;
  Telemetry::Timer timer(engine.telemetry(), Telemetry::upload,
                         memory.host != nullptr ? Telemetry::host_copy : Telemetry::staged, bytes,
                         operation);
  if (memory.host != nullptr && !(fresh && memory.fresh)) engine.queue().finish(operation);
  file_to_device(operation, npy.file, npy.header.data_offset, memory, 0, bytes, engine.chunk_io(),
                 file_chunk(engine, npy.header.item_bytes), npy.pass(crc));
  engine.settle(operation);
}

/// `bytes` of `memory` -> `file` after `header` (the .npy header's bytes), blocking, after the
/// queue's earlier work; `crc`, when set, gets the file's bytes (header included).
inline void npy_write(TransferEngine& engine, const char* operation, const File& file,
                      const std::string& header, const Allocation& memory, std::size_t bytes,
                      std::size_t item_bytes, Crc32c* crc = nullptr) {
  file.write_at(operation, header.data(), header.size(), 0);
  if (crc != nullptr) crc->update(header.data(), header.size());
  if (bytes == 0) return;
  Telemetry::Timer timer(engine.telemetry(), Telemetry::download,
                         memory.host != nullptr ? Telemetry::host_copy : Telemetry::staged, bytes,
                         operation);
  if (memory.host != nullptr) engine.queue().finish(operation);
  FilePass pass;
  pass.crc = crc;
  device_to_file(operation, memory, 0, bytes, file, header.size(), engine.chunk_io(),
                 file_chunk(engine, item_bytes), pass);
  engine.settle(operation);
}

/// save_npy: `memory` (`bytes`) as the .npy file `path` of `descr` and `shape`, atomically.
inline void save_npy_file(TransferEngine& engine, const char* operation, const std::string& path,
                          const std::string& descr, const std::vector<std::size_t>& shape,
                          const Allocation& memory, std::size_t bytes, std::size_t item_bytes) {
  const std::string header = format_npy_header(descr, shape);
  AtomicFile out(operation, path);
  npy_write(engine, operation, out.file(), header, memory, bytes, item_bytes);
  out.commit(operation);
}

/// An asynchronous file call's job (the shape above).
struct FileJob {
  const char* operation = "";
  Queue main, side;
  cl::Event before;  // M: the main queue's marker at the call
  UserEvent landed;  // U: completed when the job ends; B waits for it
  std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();
  std::function<void(const ChunkIo&)> work;  // moves the bytes by the chunk calls it is given
};

/// Runs a FileJob on the background thread: waits for M, works, reports, completes U.
inline void run_file_job(FileJob& job, PinnedPool& pinned) noexcept {
  finish_background_job(
      job.main.get(), job.operation, "a file transfer", *job.outcome, job.landed,
      [&] {
        Queue::wait(job.operation, job.before);
        job.work(ChunkIo(job.side, pinned));
      },
      // what the work holds (the file, a temporary file to remove) goes now
      [&]() noexcept { job.work = nullptr; });
}

/// Starts `work` as a FileJob of `bytes` (`upload`: into the device) and returns what its
/// Future waits for (B) and where it reports.
inline Started start_file_job(TransferEngine& engine, const DeviceContext& device,
                              const char* operation, bool upload, std::size_t bytes,
                              std::function<void(const ChunkIo&)> work) {
  auto job = std::make_shared<FileJob>();
  job->operation = operation;
  job->work = std::move(work);
  job->main = device.queue();
  job->side = device.side_queue(operation);
  job->landed = UserEvent(operation, device.context()());
  PinnedPool* pinned = &engine.pinned();
  std::function<void()> task = [job, pinned]() noexcept { run_file_job(*job, *pinned); };
  const Telemetry::AsyncSpan span = engine.telemetry().count_async(
      upload ? Telemetry::upload : Telemetry::download, Telemetry::staged, bytes, operation);
  Started started{cl::Event(), job->outcome};
  {
    std::lock_guard<std::mutex> submitting(submission_mutex());  // async.hpp: one order
    job->before = job->main.marker(operation);
    started.event = job->landed.barrier(operation, job->main);
    engine.background().post(std::move(task));
  }
  Telemetry::traced(span, started.event());
  return started;
}

/// load_npy_async: the array of `npy` -> `memory`, started.
inline Started npy_read_async(TransferEngine& engine, const DeviceContext& device,
                              const char* operation, NpyFile npy, const Allocation& memory) {
  if (npy.header.data_bytes == 0) return Started();
  const std::size_t bytes = npy.header.data_bytes;
  const std::size_t chunk = file_chunk(engine, npy.header.item_bytes);
  auto file = std::make_shared<NpyFile>(std::move(npy));
  return start_file_job(engine, device, operation, true, bytes,
                        [operation, file, memory, chunk](const ChunkIo& io) {
                          file_to_device(operation, file->file, file->header.data_offset, memory, 0,
                                         file->header.data_bytes, io, chunk, file->pass(nullptr));
                        });
}

/// save_npy_async: `memory` as the .npy file `path`, started; the temporary file is made at
/// the call (a folder that cannot be written fails there).
inline Started save_npy_async(TransferEngine& engine, const DeviceContext& device,
                              const char* operation, const std::string& path,
                              const std::string& descr, const std::vector<std::size_t>& shape,
                              const Allocation& memory, std::size_t bytes, std::size_t item_bytes) {
  const std::string header = format_npy_header(descr, shape);
  auto out = std::make_shared<AtomicFile>(operation, path);
  out->file().write_at(operation, header.data(), header.size(), 0);
  const std::size_t chunk = file_chunk(engine, item_bytes);
  const std::size_t offset = header.size();
  return start_file_job(engine, device, operation, false, bytes,
                        [operation, out, memory, bytes, chunk, offset](const ChunkIo& io) {
                          device_to_file(operation, memory, 0, bytes, out->file(), offset, io,
                                         chunk, FilePass());
                          out->commit(operation);
                        });
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_NPY_IO_HPP
