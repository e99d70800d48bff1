// SPDX-License-Identifier: MIT
// clbuf::BufferManager: owns a context and an in-order queue on one device, and moves typed data
// between host memory and device memory. This file is the typed facade: each call enters the
// gate, checks its input (detail/checks.hpp) before OpenCL is called, converts elements to bytes
// once, and hands the bytes to the transfer engine (detail/transfer_engine.hpp), where the one
// path rule picks how they move. Rectangles: detail/regions.hpp; other contexts:
// detail/cross_context.hpp; the device, context and queue: detail/device_context.hpp.
#ifndef CLBUF_MANAGER_HPP
#define CLBUF_MANAGER_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/checks.hpp>
#include <clbuf/detail/cross_context.hpp>
#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/gate.hpp>
#include <clbuf/detail/gated.hpp>
#include <clbuf/detail/host_memory.hpp>
#include <clbuf/detail/memory_object.hpp>
#include <clbuf/detail/npy_io.hpp>
#include <clbuf/detail/pool.hpp>
#include <clbuf/detail/regions.hpp>
#include <clbuf/detail/transfer_engine.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>
#include <clbuf/mapped_view.hpp>
#include <clbuf/options.hpp>
#include <clbuf/pinned.hpp>
#include <clbuf/rect.hpp>
#include <clbuf/telemetry.hpp>
#include <clbuf/tile_plan.hpp>

#include <cstddef>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace clbuf {

namespace detail {
struct ManagerAccess;
}  // namespace detail

/// Moves typed data between host memory and one OpenCL device.
///
/// Thread safety: one manager may be used from several threads at once (README "Threads").
/// Calls from several threads go to one in-order queue. Not movable: hold it by value or in a
/// smart pointer.
///
/// Paths (docs/performance.md). On a CPU device (MemoryModel::host; PoCL), clbuf allocates
/// device memory itself as huge-page host blocks (CL_MEM_USE_HOST_PTR) and moves bytes with
/// memcpy once the queue has finished earlier work. On a discrete device, pageable transfers of
/// at least Options::staging_threshold_bytes are staged through pinned chunks and pipelined. On
/// every device freed buffers go back to a size-binned pool, so repeated uploads skip allocation.
class BufferManager {
 public:
  /// @name Construction
  /// @{

  /// Picks a device: CLBUF_DEVICE from the environment if it is set and not empty (read at each
  /// construction), else the first GPU, else the first CPU device, else any device.
  /// Wraps clGetPlatformIDs, clGetDeviceIDs, clCreateContext, clCreateCommandQueue.
  /// @throws Error CL_DEVICE_NOT_FOUND (listing the devices that exist) or
  ///         CL_PLATFORM_NOT_FOUND_KHR (-1001) when no OpenCL platform is installed.
  BufferManager() : BufferManager(std::string(), Options()) {}

  /// Picks a device by `selector`: "gpu", "cpu", "accelerator", "P:D" (indices as in
  /// list_devices()), or part of a device name (any case). An empty selector means "none
  /// given": CLBUF_DEVICE, then the default.
  explicit BufferManager(const std::string& selector) : BufferManager(selector, Options()) {}

  /// As BufferManager(selector), with `options` (memory model, staging, pool; options.hpp).
  /// @throws Error CL_INVALID_VALUE for options out of range, else as BufferManager().
  BufferManager(const std::string& selector, const Options& options) try
      : device_(selector, options, "BufferManager"), pool_(make_pool()), engine_(device_) {
  } catch (...) {
    detail::rethrow_host_memory("BufferManager");
  }

  /// Adopts an application's context and in-order queue (shares them; does not copy).
  /// @throws Error CL_INVALID_CONTEXT if the queue is not of the context,
  ///         CL_INVALID_COMMAND_QUEUE if either is null or the queue is out-of-order.
  BufferManager(cl::Context context, cl::CommandQueue queue, const Options& options = Options()) try
      : device_(std::move(context), std::move(queue), options, "BufferManager"),
        pool_(make_pool()),
        engine_(device_) {
  } catch (...) {
    detail::rethrow_host_memory("BufferManager");
  }

  BufferManager(const BufferManager&) = delete;
  BufferManager& operator=(const BufferManager&) = delete;

  /// cleanup(); never throws.
  ~BufferManager() {
    try {
      cleanup();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }
  /// @}

  /// @name The device and its handles
  /// @{

  /// The device in use. Still answers after cleanup().
  const DeviceInfo& device() const noexcept { return device_.info(); }
  /// Why this device was picked, in words (e.g. "no GPU found, so the first CPU device ...").
  const std::string& selection_reason() const noexcept { return device_.reason(); }
  /// The transfer paths in use (never MemoryModel::automatic).
  MemoryModel memory_model() const noexcept { return device_.options().memory; }
  /// The options in force, with every `automatic` resolved.
  const Options& options() const noexcept { return device_.options(); }
  /// The manager's context, retained: the handle stays valid after cleanup() or the manager's
  /// destruction, however many threads ask while another cleans up.
  /// @throws Error (code CL_SUCCESS) after cleanup().
  cl::Context context() const {
    auto entry = gate_.enter("context");
    return device_.context();
  }
  /// The manager's in-order queue, retained like context().
  /// @throws Error (code CL_SUCCESS) after cleanup().
  cl::CommandQueue queue() const {
    auto entry = gate_.enter("queue");
    return device_.queue().handle();
  }
  /// @}

  /// @name Statistics
  /// @{

  /// Bytes, operations and time per direction, and the pool's counters.
  TransferStats stats() const {
    TransferStats stats;
    engine_.telemetry().fill(stats);
    stats.pool = pool_->stats();
    stats.pinned = engine_.pinned().stats();
    return stats;
  }
  /// How much fits: the device's memory and max allocation, what this manager holds now (its
  /// buffers in use, the pool's cached buffers, its pinned host memory) and the tiles
  /// stream_tiles() would choose with `options` for elements of `element_bytes` in and out.
  /// No OpenCL call. @throws Error CL_INVALID_VALUE for options out of range (TileOptions).
  MemoryReport memory_report(const TileOptions& options = TileOptions(),
                             std::size_t element_bytes = sizeof(float)) const {
    MemoryReport report;
    report.device_memory_bytes = device_.info().global_mem_bytes;
    report.max_alloc_bytes = device_.info().max_alloc_bytes;
    const PoolStats pool = pool_->stats();
    report.buffers = pool.in_use_buffers;
    report.buffers_bytes = pool.in_use_bytes;
    report.pool_cached_bytes = pool.cached_bytes;
    const PinnedStats pinned = engine_.pinned().stats();
    report.pinned_bytes = pinned.allocated_bytes;
    report.pinned_budget_bytes = pinned.budget_bytes;
    report.stream =
        detail::plan_tiles("memory_report", device_.info(), std::numeric_limits<std::size_t>::max(),
                           element_bytes, element_bytes, options);
    report.stream.tiles = 0;
    return report;
  }
  /// Sets the transfer counters of stats() back to zero (the pool's counters stay).
  void reset_stats() noexcept { engine_.telemetry().reset(); }

  /// When this manager traces (CLBUF_TRACE, Options::trace_path; docs/performance.md "Tracing"),
  /// a span `name` on the track "application commands (host's view)" from now until `event`
  /// completes, as the host learns it (the event's callback): an application's own kernel on the
  /// timeline beside clbuf's transfers. `name` must outlive the manager (a string literal). Does
  /// nothing when the manager does not trace; never throws. Wraps clSetEventCallback.
  void trace_command(const char* name, const cl::Event& event) noexcept {
    detail::Tracer* const tracer = engine_.telemetry().tracer();
    if (tracer == nullptr) return;
    try {
      const int track = tracer->track("application commands (host's view)");
      tracer->until_complete(event(), track, name, detail::trace_now(), {});
    } catch (...) {  // NOLINT(bugprone-empty-catch): tracing never fails the caller
    }
  }
  /// Frees every buffer the pool holds for reuse.
  void trim_pool() noexcept { pool_->trim(); }
  /// @}

  /// @name Allocation
  /// @{

  /// Device memory for `count` elements, contents unspecified. Served from the pool when it
  /// can be, else wraps clCreateBuffer.
  /// @throws Error CL_INVALID_VALUE when count * sizeof(T) overflows, CL_INVALID_BUFFER_SIZE
  ///         beyond the device's max allocation.
  template <class T>
  [[nodiscard]] DeviceBuffer<T> allocate(std::size_t count) {
    return detail::guard_host_memory("allocate", [&] {
      const char* op = "allocate";
      auto entry = gate_.enter(op);
      return new_buffer<T>(op, count);
    });
  }

  /// Pinned host memory for `count` elements (contents unspecified), for the fastest transfers.
  /// Wraps clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) and clEnqueueMapBuffer.
  template <class T>
  [[nodiscard]] PinnedBuffer<T> allocate_pinned(std::size_t count) {
    const char* op = "allocate_pinned";
    auto entry = gate_.enter(op);
    const std::size_t bytes = bytes_of<T>(op, count);
    if (bytes == 0) return PinnedBuffer<T>();
    return PinnedBuffer<T>(detail::PinnedBlock(device_.context(), device_.queue(), bytes, op),
                           count);
  }
  /// @}

  /// @name Upload: host -> device (blocking: the host memory may be reused on return)
  /// @{

  /// Copies `count` elements from `data` into new device memory.
  /// @throws Error CL_INVALID_VALUE for a null `data` with count > 0 or an overflowing size,
  ///         CL_INVALID_BUFFER_SIZE beyond the device's max allocation.
  template <class T>
  [[nodiscard]] DeviceBuffer<T> upload(const T* data, std::size_t count) {
    return detail::guard_host_memory(
        "upload", [&] { return upload_new(data, count, nullptr, detail::HostMemory::pageable); });
  }
  /// As upload(data.data(), data.size()).
  template <class T>
  [[nodiscard]] DeviceBuffer<T> upload(const std::vector<T>& data) {
    return detail::guard_host_memory("upload", [&] {
      return upload_new(data.data(), data.size(), nullptr, detail::HostMemory::pageable);
    });
  }
  /// As upload(data), recording `shape`, whose product must equal data.size().
  /// @throws Error CL_INVALID_VALUE when the shape does not match.
  template <class T>
  [[nodiscard]] DeviceBuffer<T> upload(const std::vector<T>& data, std::vector<std::size_t> shape) {
    return upload_new(data.data(), data.size(), &shape, detail::HostMemory::pageable);
  }
  /// Copies pinned memory into new device memory, by DMA with no staging copy.
  template <class T>
  [[nodiscard]] DeviceBuffer<T> upload(const PinnedBuffer<T>& data) {
    return detail::guard_host_memory("upload", [&] {
      return upload_new(data.data(), data.size(), nullptr, detail::HostMemory::pinned);
    });
  }

  /// Copies `count` elements from `data` into `dst` starting at element `dst_offset`. Wraps
  /// clEnqueueWriteBuffer. @throws Error CL_INVALID_VALUE past the end of `dst` or for a null
  /// `data` with count > 0; CL_INVALID_OPERATION when `data` is `dst`'s own mapped memory.
  template <class T>
  void upload(DeviceBuffer<T>& dst, const T* data, std::size_t count, std::size_t dst_offset = 0) {
    upload_into(dst, data, count, dst_offset, detail::HostMemory::pageable);
  }
  /// As upload(dst, data.data(), data.size(), dst_offset).
  template <class T>
  void upload(DeviceBuffer<T>& dst, const std::vector<T>& data, std::size_t dst_offset = 0) {
    detail::guard_host_memory("upload", [&] {
      upload_into(dst, data.data(), data.size(), dst_offset, detail::HostMemory::pageable);
    });
  }
  /// As upload(dst, data.data(), data.size(), dst_offset), by DMA with no staging copy.
  template <class T>
  void upload(DeviceBuffer<T>& dst, const PinnedBuffer<T>& data, std::size_t dst_offset = 0) {
    upload_into(dst, data.data(), data.size(), dst_offset, detail::HostMemory::pinned);
  }

  /// Starts copying `data` (which the Future owns until the copy completes) into new device
  /// memory, after the commands of `after` (events of this context, e.g. a kernel on another
  /// queue); get() returns the buffer. Returns at once on every path: large pageable data for a
  /// discrete device is staged through pinned chunks by clbuf's background thread while the
  /// queue holds later work behind it. Wraps clEnqueueWriteBuffer, non-blocking.
  /// @throws Error CL_INVALID_CONTEXT for an event of another context.
  template <class T>
  Future<DeviceBuffer<T>> upload_async(std::vector<T> data,
                                       const std::vector<cl::Event>& after = {}) {
    return detail::guard_host_memory("upload_async", [&] {
      const auto host = detail::shared_vector("upload_async", std::move(data));
      return start_upload(host->data(), host->size(), std::shared_ptr<const void>(host), after);
    });
  }
  /// As upload_async(std::vector), without a copy of `data`, which the caller keeps alive and
  /// unchanged until the Future has completed.
  /// @throws Error CL_INVALID_VALUE for a null `data` with count > 0.
  template <class T>
  Future<DeviceBuffer<T>> upload_async(const T* data, std::size_t count,
                                       const std::vector<cl::Event>& after = {}) {
    return detail::guard_host_memory("upload_async",
                                     [&] { return start_upload(data, count, nullptr, after); });
  }

  /// Starts copying `data` (which the Future owns until the copy completes) into `dst` from
  /// element `dst_offset`, after the commands of `after`; returns at once, as
  /// upload_async(std::vector). With a buffer allocated beforehand, a kernel can be queued
  /// behind the upload (on the manager's queue, or waiting for Future::event()) with no wait.
  /// @throws Error CL_INVALID_VALUE past the end of `dst`; CL_INVALID_CONTEXT for an event of
  ///         another context.
  template <class T>
  Future<void> upload_async(DeviceBuffer<T>& dst, std::vector<T> data, std::size_t dst_offset = 0,
                            const std::vector<cl::Event>& after = {}) {
    const auto host = detail::shared_vector("upload_async", std::move(data));
    return start_upload_into(dst, host->data(), host->size(), dst_offset,
                             std::shared_ptr<const void>(host), after);
  }
  /// As upload_async(dst, std::vector), without a copy of `data`, which the caller keeps alive
  /// and unchanged until the Future has completed.
  template <class T>
  Future<void> upload_async(DeviceBuffer<T>& dst, const T* data, std::size_t count,
                            std::size_t dst_offset = 0, const std::vector<cl::Event>& after = {}) {
    return start_upload_into(dst, data, count, dst_offset, nullptr, after);
  }
  /// @}

  /// @name Download: device -> host
  /// @{

  /// The whole buffer, as the element type and count that were uploaded (blocking).
  /// @throws Error CL_OUT_OF_HOST_MEMORY when the vector cannot be allocated.
  template <class T>
  [[nodiscard]] std::vector<T> download(const DeviceBuffer<T>& buffer) {
    const char* op = "download";
    auto entry = gate_.enter(op);
    check(op, buffer);
    detail::check_host_access(op, buffer.access_, true, false);
    return engine_.read_new(op, buffer.memory_, 0, buffer.size_bytes(), [&](const void* from) {
      return from == nullptr
                 ? detail::new_vector<T>(op, buffer.size())
                 : detail::new_vector<T>(op, static_cast<const T*>(from), buffer.size());
    });
  }

  /// Reads `count` elements starting at element `src_offset` of `buffer` into `out`
  /// (blocking). Wraps clEnqueueReadBuffer.
  /// @throws Error CL_INVALID_VALUE past the end of `buffer` or for a null `out` with count > 0;
  ///         CL_INVALID_OPERATION when `out` is `buffer`'s own mapped memory.
  template <class T>
  void download(const DeviceBuffer<T>& buffer, T* out, std::size_t count,
                std::size_t src_offset = 0) {
    detail::guard_host_memory("download", [&] {
      const char* op = "download";
      auto entry = gate_.enter(op);
      check_host_transfer(op, buffer, out, count, src_offset, false);
      engine_.read(op, buffer.memory_, src_offset * sizeof(T), out, count * sizeof(T),
                   detail::HostMemory::pageable);
    });
  }

  /// Reads out.size() elements starting at element `src_offset` into pinned memory, by DMA.
  template <class T>
  void download(const DeviceBuffer<T>& buffer, PinnedBuffer<T>& out, std::size_t src_offset = 0) {
    const char* op = "download";
    auto entry = gate_.enter(op);
    check_host_transfer(op, buffer, out.data(), out.size(), src_offset, false);
    engine_.read(op, buffer.memory_, src_offset * sizeof(T), out.data(), out.size_bytes(),
                 detail::HostMemory::pinned);
  }

  /// Starts reading the whole buffer, after the commands of `after`, into a vector the Future
  /// owns; get() hands it over. Returns at once on every path (staged for large downloads from
  /// a discrete device, as upload_async()). Wraps clEnqueueReadBuffer, non-blocking.
  /// @throws Error CL_INVALID_CONTEXT for an event of another context.
  template <class T>
  Future<std::vector<T>> download_async(const DeviceBuffer<T>& buffer,
                                        const std::vector<cl::Event>& after = {}) {
    return detail::guard_host_memory("download_async", [&] {
      const char* op = "download_async";
      auto entry = gate_.enter(op);
      check(op, buffer);
      detail::check_host_access(op, buffer.access_, true, false);
      const std::vector<cl_event> wait = wait_list(op, after);
      std::vector<T> out = detail::new_vector<T>(op, buffer.size());
      detail::Started start = start_after(op, wait, [&] {
        return engine_.read_async(op, buffer.memory_, 0, out.data(), buffer.size_bytes());
      });
      buffer.fence(pool_.get(), start.event);
      // Moving the vector into the Future keeps its heap block, which the device writes into.
      return future<std::vector<T>>(op, std::move(start), std::move(out));
    });
  }

  /// Starts reading `count` elements at element `src_offset` into `out`, which the caller keeps
  /// alive until the Future has completed. Wraps clEnqueueReadBuffer, non-blocking.
  /// @throws Error CL_INVALID_VALUE past the end of `buffer` or for a null `out` with count > 0.
  template <class T>
  Future<void> download_async(const DeviceBuffer<T>& buffer, T* out, std::size_t count,
                              std::size_t src_offset = 0,
                              const std::vector<cl::Event>& after = {}) {
    return detail::guard_host_memory("download_async", [&] {
      const char* op = "download_async";
      auto entry = gate_.enter(op);
      check_host_transfer(op, buffer, out, count, src_offset, false);
      detail::Started start = start_after(op, after, [&] {
        return engine_.read_async(op, buffer.memory_, src_offset * sizeof(T), out,
                                  count * sizeof(T));
      });
      buffer.fence(pool_.get(), start.event);
      return future<void>(op, std::move(start), {});
    });
  }
  /// @}

  /// @name Files: numpy's .npy (docs/design.md "Files and checkpoints")
  /// @{

  /// A new buffer holding the array of the .npy file `path`, whose dtype must be T's
  /// (NpyType<T>: "<f4" for float; big-endian files are swapped on the host) in C order; the
  /// file's shape is the buffer's shape() and, when `shape` is set, stored there. The bytes go
  /// from the file through pinned chunks to the device, the read of each chunk overlapping the
  /// DMA of the one before (Options::staging_chunk_bytes each); into a CPU device's memory
  /// straight. @throws Error CL_INVALID_VALUE naming the path and what differs: a missing file, a
  /// folder, no permission, not a .npy file, another dtype, Fortran order, a size other than the
  /// header says; CL_INVALID_BUFFER_SIZE past the device's max allocation.
  template <class T>
  [[nodiscard]] DeviceBuffer<T> load_npy(const std::string& path,
                                         std::vector<std::size_t>* shape = nullptr) {
    return detail::guard_host_memory("load_npy", [&] {
      const char* op = "load_npy";
      auto entry = gate_.enter(op);
      const detail::NpyFile npy = detail::open_npy<T>(op, path);
      DeviceBuffer<T> buffer = new_buffer<T>(op, npy.header.elements, npy.header.shape);
      detail::npy_read(engine_, op, npy, buffer.memory_, true);
      if (shape != nullptr) *shape = npy.header.shape;
      return buffer;
    });
  }

  /// As load_npy(path, shape), into `dst` (a buffer or a view), which must hold as many
  /// elements as the file. @throws Error as load_npy(); CL_INVALID_VALUE when the counts differ.
  template <class T>
  void load_npy(const std::string& path, DeviceBuffer<T>& dst,
                std::vector<std::size_t>* shape = nullptr) {
    detail::guard_host_memory("load_npy", [&] {
      const char* op = "load_npy";
      auto entry = gate_.enter(op);
      check(op, dst);
      detail::check_host_access(op, dst.access_, false, true);
      const detail::NpyFile npy = detail::open_npy<T>(op, path);
      detail::check_file_elements(op, npy, dst.size());
      detail::npy_read(engine_, op, npy, dst.memory_, false);
      if (shape != nullptr) *shape = npy.header.shape;
    });
  }

  /// Writes `buffer` (or a view) as the .npy file `path` of `shape` (empty: 1-D of size()),
  /// little-endian, C order, readable by np.load. Written to a temporary file in the same folder,
  /// fsync'd, then renamed over `path`: `path` holds its old contents or the whole new file, and
  /// a failure (a full disk) leaves no temporary file. The device's reads of the next chunks
  /// overlap the file's write of each. @throws Error CL_INVALID_VALUE naming the path (a folder
  /// that is missing or not writable, a full disk) or a shape that does not hold size().
  template <class T>
  void save_npy(const std::string& path, const DeviceBuffer<T>& buffer,
                std::vector<std::size_t> shape = {}) {
    detail::guard_host_memory("save_npy", [&] {
      const char* op = "save_npy";
      auto entry = gate_.enter(op);
      check_save(op, buffer, shape);
      detail::save_npy_file(engine_, op, path, detail::npy_descr<T>(), shape, buffer.memory_,
                            buffer.size_bytes(), sizeof(T));
    });
  }

  /// As load_npy(path), returning at once: the header is read and checked during the call
  /// (errors there are thrown), the bytes move on clbuf's background thread; work queued on the
  /// manager's queue after the call runs after they have landed. get() returns the buffer.
  template <class T>
  Future<DeviceBuffer<T>> load_npy_async(const std::string& path) {
    return detail::guard_host_memory("load_npy_async", [&] {
      const char* op = "load_npy_async";
      auto entry = gate_.enter(op);
      detail::NpyFile npy = detail::open_npy<T>(op, path);
      DeviceBuffer<T> buffer = new_buffer<T>(op, npy.header.elements, npy.header.shape);
      detail::Started start =
          detail::npy_read_async(engine_, device_, op, std::move(npy), buffer.memory_);
      buffer.fence(pool_.get(), start.event);
      return future<DeviceBuffer<T>>(op, std::move(start), std::move(buffer));
    });
  }

  /// As load_npy(path, dst), returning at once; `dst` must stay alive until the Future has
  /// completed.
  template <class T>
  Future<void> load_npy_async(const std::string& path, DeviceBuffer<T>& dst) {
    return detail::guard_host_memory("load_npy_async", [&] {
      const char* op = "load_npy_async";
      auto entry = gate_.enter(op);
      check(op, dst);
      detail::check_host_access(op, dst.access_, false, true);
      detail::NpyFile npy = detail::open_npy<T>(op, path);
      detail::check_file_elements(op, npy, dst.size());
      detail::Started start =
          detail::npy_read_async(engine_, device_, op, std::move(npy), dst.memory_);
      dst.fence(pool_.get(), start.event);
      return future<void>(op, std::move(start), {});
    });
  }

  /// As save_npy(), returning at once: the temporary file is made during the call, the bytes
  /// and the rename follow on clbuf's background thread; a failure then (a full disk) surfaces
  /// at wait() / get(), the temporary file removed. Work queued after the call that writes
  /// `buffer` runs after it has been read.
  template <class T>
  Future<void> save_npy_async(const std::string& path, const DeviceBuffer<T>& buffer,
                              std::vector<std::size_t> shape = {}) {
    return detail::guard_host_memory("save_npy_async", [&] {
      const char* op = "save_npy_async";
      auto entry = gate_.enter(op);
      check_save(op, buffer, shape);
      detail::Started start =
          detail::save_npy_async(engine_, device_, op, path, detail::npy_descr<T>(), shape,
                                 buffer.memory_, buffer.size_bytes(), sizeof(T));
      buffer.fence(pool_.get(), start.event);
      return future<void>(op, std::move(start), {});
    });
  }
  /// @}

  /// @name Device copies (no host round trip)
  /// @{

  /// Copies all of `src` into `dst`; returns when done. Wraps clEnqueueCopyBuffer.
  /// @throws Error CL_INVALID_VALUE when the sizes differ, CL_MEM_COPY_OVERLAP for one buffer.
  template <class T>
  void copy(const DeviceBuffer<T>& src, DeviceBuffer<T>& dst) {
    const char* op = "copy";
    auto entry = gate_.enter(op);
    check(op, src);
    check(op, dst);
    detail::check_same_size(op, src.size(), dst.size());
    check_apart(op, src, 0, dst, 0, src.size_bytes());  // a buffer onto itself overlaps
    engine_.copy(op, src.memory_, 0, dst.memory_, 0, src.size_bytes());
  }

  /// Copies `size_bytes` bytes from `src` at `src_offset_bytes` to `dst` at `dst_offset_bytes`;
  /// returns when done. Wraps clEnqueueCopyBuffer.
  /// @throws Error CL_INVALID_VALUE past the end of either buffer, CL_MEM_COPY_OVERLAP for
  ///         overlapping ranges of one buffer.
  template <class T, class U>
  void copy_bytes(const DeviceBuffer<T>& src, DeviceBuffer<U>& dst, std::size_t size_bytes,
                  std::size_t src_offset_bytes = 0, std::size_t dst_offset_bytes = 0) {
    const char* op = "copy_bytes";
    auto entry = gate_.enter(op);
    check_copy(op, src, dst, size_bytes, src_offset_bytes, dst_offset_bytes);
    engine_.copy(op, src.memory_, src_offset_bytes, dst.memory_, dst_offset_bytes, size_bytes);
  }

  /// As copy_bytes(), after the commands of `after`, but returns at once; the Future completes
  /// when the device has copied. Wraps clEnqueueCopyBuffer, non-blocking.
  template <class T, class U>
  Future<void> copy_bytes_async(const DeviceBuffer<T>& src, DeviceBuffer<U>& dst,
                                std::size_t size_bytes, std::size_t src_offset_bytes = 0,
                                std::size_t dst_offset_bytes = 0,
                                const std::vector<cl::Event>& after = {}) {
    const char* op = "copy_bytes_async";
    auto entry = gate_.enter(op);
    check_copy(op, src, dst, size_bytes, src_offset_bytes, dst_offset_bytes);
    detail::GatedCall gated = gated_call(op, wait_list(op, after));
    detail::Started start{engine_.copy_async(op, src.memory_, src_offset_bytes, dst.memory_,
                                             dst_offset_bytes, size_bytes),
                          nullptr};
    gated.done(start.event);
    src.fence(pool_.get(), start.event);
    dst.fence(pool_.get(), start.event);
    return future<void>(op, std::move(start), {});
  }
  /// @}

  /// @name Fill
  /// @{

  /// Sets every element of `buffer` to `value` (blocking). Wraps clEnqueueFillBuffer where the
  /// device has it (OpenCL 1.2) and sizeof(T) is a power of two up to 128 bytes; otherwise
  /// copies from a small buffer made with the pattern (clCreateBuffer(CL_MEM_COPY_HOST_PTR)),
  /// then doubling clEnqueueCopyBuffer calls: device work only, whatever the host-access flags.
  /// On a CPU device, clbuf's own memory is filled by the host after clFinish.
  /// @throws Error CL_INVALID_MEM_OBJECT for a moved-from buffer, CL_INVALID_CONTEXT for a buffer
  ///         of another context.
  template <class T>
  void fill(DeviceBuffer<T>& buffer, const T& value) {
    fill(buffer, value, buffer.size(), 0);
  }

  /// Sets `count` elements of `buffer` starting at element `offset` to `value` (blocking).
  /// @throws Error CL_INVALID_VALUE for a range past the end of `buffer`.
  template <class T>
  void fill(DeviceBuffer<T>& buffer, const T& value, std::size_t count, std::size_t offset = 0) {
    const char* op = "fill";
    auto entry = gate_.enter(op);
    check(op, buffer);
    detail::check_range(op, "write", count, offset, buffer.size(), sizeof(T));
    if (count == 0) return;
    engine_.fill(op, buffer.memory_, offset * sizeof(T), &value, sizeof(T), count);
  }

  /// As fill(buffer, value), after the commands of `after`, returning at once (`value` may be
  /// reused on return). Wraps clEnqueueFillBuffer (or the copies of fill()), non-blocking.
  template <class T>
  Future<void> fill_async(DeviceBuffer<T>& buffer, const T& value,
                          const std::vector<cl::Event>& after = {}) {
    return fill_async(buffer, value, buffer.size(), 0, after);
  }

  /// As fill(buffer, value, count, offset), returning at once.
  template <class T>
  Future<void> fill_async(DeviceBuffer<T>& buffer, const T& value, std::size_t count,
                          std::size_t offset = 0, const std::vector<cl::Event>& after = {}) {
    const char* op = "fill_async";
    auto entry = gate_.enter(op);
    check(op, buffer);
    detail::check_range(op, "write", count, offset, buffer.size(), sizeof(T));
    detail::GatedCall gated = gated_call(op, wait_list(op, after));
    detail::Started start =
        engine_.fill_async(op, buffer.memory_, offset * sizeof(T), &value, sizeof(T), count);
    gated.done(start.event);
    buffer.fence(pool_.get(), start.event);
    return future<void>(op, std::move(start), {});
  }

  /// A value of another type than the buffer's elements does not compile, even with the
  /// element type given (`fill<int>(ints, 1.7)` would store 1): convert it where the reader
  /// sees it, `fill(ints, static_cast<int>(v))`.
  template <class T, class V, std::enable_if_t<!std::is_same_v<T, V>, int> = 0>
  void fill(DeviceBuffer<T>& buffer, const V& value) = delete;
  template <class T, class V, std::enable_if_t<!std::is_same_v<T, V>, int> = 0>
  void fill(DeviceBuffer<T>& buffer, const V& value, std::size_t count,
            std::size_t offset = 0) = delete;
  template <class T, class V, std::enable_if_t<!std::is_same_v<T, V>, int> = 0>
  Future<void> fill_async(DeviceBuffer<T>& buffer, const V& value,
                          const std::vector<cl::Event>& after = {}) = delete;
  template <class T, class V, std::enable_if_t<!std::is_same_v<T, V>, int> = 0>
  Future<void> fill_async(DeviceBuffer<T>& buffer, const V& value, std::size_t count,
                          std::size_t offset = 0,
                          const std::vector<cl::Event>& after = {}) = delete;
  /// @}

  /// @name Rectangular regions
  /// @{

  /// Copies the box `region` from the host array `data` of `count` elements (laid out as
  /// region.src_extents) into `dst` (laid out as region.dst_extents), blocking. Pitches come from
  /// the extents. Wraps clEnqueueWriteBufferRect. An empty region makes no OpenCL call.
  /// @throws Error CL_INVALID_VALUE when the box leaves either array, an array does not fit in
  ///         `count` elements or in `dst`, a size overflows, or `data` is null with count > 0.
  template <class T>
  void upload_rect(DeviceBuffer<T>& dst, const T* data, std::size_t count, const Region& region) {
    auto entry = gate_.enter("upload_rect");
    transfer_rect("upload_rect", true, dst, const_cast<T*>(data), count, region, nullptr);
    engine_.settle("upload_rect");
  }
  /// As upload_rect(dst, data.data(), data.size(), region).
  template <class T>
  void upload_rect(DeviceBuffer<T>& dst, const std::vector<T>& data, const Region& region) {
    upload_rect(dst, data.data(), data.size(), region);
  }

  /// As upload_rect(), after the commands of `after`, returning at once; `data` must stay alive
  /// and unchanged until the Future has completed. Wraps clEnqueueWriteBufferRect, non-blocking.
  template <class T>
  Future<void> upload_rect_async(DeviceBuffer<T>& dst, const T* data, std::size_t count,
                                 const Region& region, const std::vector<cl::Event>& after = {}) {
    const char* op = "upload_rect_async";
    auto entry = gate_.enter(op);
    return future<void>(
        op, transfer_rect(op, true, dst, const_cast<T*>(data), count, region, &after), {});
  }
  /// As upload_rect_async(dst, data.data(), data.size(), region, after).
  template <class T>
  Future<void> upload_rect_async(DeviceBuffer<T>& dst, const std::vector<T>& data,
                                 const Region& region, const std::vector<cl::Event>& after = {}) {
    return upload_rect_async(dst, data.data(), data.size(), region, after);
  }

  /// Copies the box `region` of `src` (laid out as region.src_extents) into the host array `out`
  /// of `count` elements (laid out as region.dst_extents), blocking; elements of `out` outside
  /// the box are left as they were. Wraps clEnqueueReadBufferRect.
  /// @throws Error CL_INVALID_VALUE as upload_rect().
  template <class T>
  void download_rect(const DeviceBuffer<T>& src, T* out, std::size_t count, const Region& region) {
    auto entry = gate_.enter("download_rect");
    transfer_rect("download_rect", false, src, out, count, region, nullptr);
    engine_.settle("download_rect");
  }
  /// As download_rect(src, out.data(), out.size(), region).
  template <class T>
  void download_rect(const DeviceBuffer<T>& src, std::vector<T>& out, const Region& region) {
    download_rect(src, out.data(), out.size(), region);
  }

  /// As download_rect(), after the commands of `after`, returning at once; `out` must stay alive
  /// until the Future has completed. Wraps clEnqueueReadBufferRect, non-blocking.
  template <class T>
  Future<void> download_rect_async(const DeviceBuffer<T>& src, T* out, std::size_t count,
                                   const Region& region, const std::vector<cl::Event>& after = {}) {
    const char* op = "download_rect_async";
    auto entry = gate_.enter(op);
    return future<void>(op, transfer_rect(op, false, src, out, count, region, &after), {});
  }
  /// As download_rect_async(src, out.data(), out.size(), region, after).
  template <class T>
  Future<void> download_rect_async(const DeviceBuffer<T>& src, std::vector<T>& out,
                                   const Region& region, const std::vector<cl::Event>& after = {}) {
    return download_rect_async(src, out.data(), out.size(), region, after);
  }

  /// Copies the box `region` from `src` to `dst` on the device (blocking, no host round trip).
  /// Wraps clEnqueueCopyBufferRect; one clEnqueueCopyBuffer per row where that cannot express
  /// the copy (one root buffer with different extents on the two sides, or a view whose offset
  /// splits a row).
  /// @throws Error CL_INVALID_VALUE as upload_rect(); CL_MEM_COPY_OVERLAP when source and
  ///         destination share a byte of one buffer (views of one buffer included). With equal
  ///         extents on both sides the test is exact; with different extents any overlap of the
  ///         two byte spans counts.
  template <class T>
  void copy_rect(const DeviceBuffer<T>& src, DeviceBuffer<T>& dst, const Region& region) {
    auto entry = gate_.enter("copy_rect");
    copy_box("copy_rect", src, dst, region, nullptr);
    engine_.settle("copy_rect");
  }

  /// As copy_rect(), after the commands of `after`, returning at once.
  template <class T>
  Future<void> copy_rect_async(const DeviceBuffer<T>& src, DeviceBuffer<T>& dst,
                               const Region& region, const std::vector<cl::Event>& after = {}) {
    const char* op = "copy_rect_async";
    auto entry = gate_.enter(op);
    return future<void>(op, copy_box(op, src, dst, region, &after), {});
  }
  /// @}

  /// @name Raw handles and views
  /// @{

  /// Wraps an application's OpenCL buffer (shared, not copied) as a DeviceBuffer of `count`
  /// elements. clbuf never pools it: it is released when the DeviceBuffer and every view of it
  /// are gone. A sub-buffer is recognised (CL_MEM_ASSOCIATED_MEMOBJECT), so overlap checks see
  /// its parent. For a raw cl_mem pass cl::Buffer(mem, true) (retains it). Wraps
  /// clGetMemObjectInfo.
  /// @throws Error CL_INVALID_MEM_OBJECT for a null buffer, CL_INVALID_CONTEXT for a buffer of
  ///         another context, CL_INVALID_VALUE when count * sizeof(T) overflows or exceeds the
  ///         buffer's CL_MEM_SIZE.
  template <class T>
  [[nodiscard]] DeviceBuffer<T> adopt(cl::Buffer buffer, std::size_t count) {
    return detail::guard_host_memory("adopt", [&] {
      const char* op = "adopt";
      auto entry = gate_.enter(op);
      const detail::MemoryFacts facts = detail::memory_facts(op, buffer());
      if (facts.context != device_.context()()) {
        detail::fail(op, CL_INVALID_CONTEXT,
                     "the cl::Buffer belongs to another OpenCL context than this BufferManager's");
      }
      detail::check_adopt_capacity(op, count, sizeof(T), facts.size);
      detail::Allocation memory;
      memory.buffer = std::move(buffer);
      memory.capacity = facts.size;
      DeviceBuffer<T> adopted(std::move(memory), nullptr, device_.context(), count, {count});
      adopted.access_ = facts.access;
      if (facts.parent != nullptr) {
        adopted.root_ = cl::Buffer(facts.parent, true);
        adopted.root_offset_ = facts.offset;
      }
      return adopted;
    });
  }

  /// A DeviceBuffer of `count` elements starting at element `offset` (any offset) of `parent`,
  /// sharing its memory, usable everywhere a buffer is. No OpenCL object is made: every clbuf
  /// operation on a view addresses the root buffer at the view's byte offset (native() makes a
  /// sub-buffer only when asked). The memory goes back to the pool only when `parent` and every
  /// view of it are gone; a view outlives its parent safely. A view of a view is a view of the
  /// same root buffer. count == 0 gives an empty buffer.
  /// @throws Error CL_INVALID_VALUE past the end of `parent`.
  template <class T>
  [[nodiscard]] DeviceBuffer<T> view(DeviceBuffer<T>& parent, std::size_t offset,
                                     std::size_t count) {
    return detail::guard_host_memory("view", [&] {
      const char* op = "view";
      auto entry = gate_.enter(op);
      check(op, parent);
      detail::check_range(op, "view", count, offset, parent.size(), sizeof(T));
      if (count == 0)
        return DeviceBuffer<T>(detail::Allocation(), nullptr, device_.context(), 0, {0});
      auto native = std::make_shared<detail::NativeView>(device_.base_align_bytes(),
                                                         device_.sub_buffer_rule());
      const std::shared_ptr<detail::Lease>& lease = parent.share_memory();
      detail::Allocation memory = parent.memory_;  // the same buffer, retained
      memory.offset += offset * sizeof(T);
      memory.capacity = count * sizeof(T);
      DeviceBuffer<T> result(std::move(memory), nullptr, device_.context(), count, {count});
      result.root_ = cl::Buffer(parent.root(), true);
      result.root_offset_ = parent.root_offset_ + offset * sizeof(T);
      result.share_lease(lease);
      result.native_view_ = std::move(native);
      result.access_ = parent.access_;
      return result;
    });
  }

  /// Maps all of `buffer` for the host (blocking); see MappedView. Zero-copy where the device
  /// shares host memory. Wraps clEnqueueMapBuffer.
  template <class T>
  [[nodiscard]] MappedView<T> map(DeviceBuffer<T>& buffer, MapMode mode = MapMode::read_write) {
    return map(buffer, mode, 0, buffer.size());
  }

  /// Maps `count` elements of `buffer` starting at element `offset`.
  /// @throws Error CL_INVALID_VALUE past the end of `buffer`, CL_INVALID_MEM_OBJECT for a
  ///         moved-from buffer, CL_INVALID_CONTEXT for one of another context.
  template <class T>
  [[nodiscard]] MappedView<T> map(DeviceBuffer<T>& buffer, MapMode mode, std::size_t offset,
                                  std::size_t count) {
    return detail::guard_host_memory("map", [&] {
      const char* op = "map";
      auto entry = gate_.enter(op);
      check(op, buffer);
      detail::check_range(op, mode == MapMode::read ? "read" : "write", count, offset,
                          buffer.size(), sizeof(T));
      detail::check_host_access(op, buffer.access_, mode != MapMode::write, mode != MapMode::read);
      if (count == 0) return MappedView<T>();
      const std::shared_ptr<detail::Lease>& lease = buffer.share_memory();
      void* mapped = device_.queue().map(op, buffer.memory_.buffer(), detail::map_flags(mode),
                                         buffer.memory_.at(offset * sizeof(T)), count * sizeof(T));
      MappedView<T> view(device_.queue().handle(), buffer.memory_.buffer, lease, mapped, count,
                         mode);
      view.lease_->add_mapping(op, mapped, count * sizeof(T));  // on failure the view unmaps
      engine_.settle(op);
      return view;
    });
  }
  /// @}

  /// @name Several managers
  /// @{

  /// Copies all of `src`, a buffer of `source`, into `dst`, a buffer of this manager (blocking).
  /// Same OpenCL context: one clEnqueueCopyBuffer after `source`'s queue has finished. Different
  /// contexts (other devices or platforms): chunks pipelined through two pinned buffers of
  /// this context (clEnqueueReadBuffer on `source`'s queue, clEnqueueWriteBuffer on this one),
  /// or straight into or out of a CPU device's own memory; never a full host copy.
  /// @throws Error CL_INVALID_VALUE when the sizes differ, CL_INVALID_CONTEXT when `src` is not
  ///         of `source` or `dst` not of this manager, CL_MEM_COPY_OVERLAP for one buffer.
  template <class T>
  void copy_from(BufferManager& source, const DeviceBuffer<T>& src, DeviceBuffer<T>& dst) {
    const char* op = "copy_from";
    auto entries = enter_both(op, source);
    check_copy_from(op, source, src, dst);
    copy_from_now(op, source, src, dst);
  }

  /// As copy_from(), returning at once: the copy runs after the work queued on both managers
  /// before the call, and work queued on either after it runs after the copy. Same context: one
  /// clEnqueueCopyBuffer, ordered by a marker of `source`'s queue and a barrier on it. Different
  /// contexts: the pinned chunks of copy_from() on clbuf's background thread.
  /// @throws Error as copy_from(); a failure during the copy surfaces at wait() / get().
  template <class T>
  Future<void> copy_from_async(BufferManager& source, const DeviceBuffer<T>& src,
                               DeviceBuffer<T>& dst) {
    return detail::guard_host_memory("copy_from_async", [&] {
      const char* op = "copy_from_async";
      auto entries = enter_both(op, source);
      check_copy_from(op, source, src, dst);
      if (src.size_bytes() == 0 || !device_.opencl_1_2() || !source.device_.opencl_1_2()) {
        copy_from_now(op, source, src, dst);  // no markers or barriers before OpenCL 1.2
        return future<void>(op, detail::Started(), {});
      }
      detail::Started start =
          source.device_.context()() != device_.context()()
              ? detail::copy_across_contexts_async(op, source.device_, src.memory_, device_,
                                                   engine_, dst.memory_, src.size_bytes())
              : copy_in_context_async(op, source, src, dst);
      src.fence(pool_.get(), start.event);
      dst.fence(pool_.get(), start.event);
      Future<void> result = future<void>(op, std::move(start), {});
      source.device_.queue().flush(op);
      return result;
    });
  }
  /// @}

  /// @name Lifetime
  /// @{

  /// Waits for everything queued. Wraps clFinish.
  /// @throws Error as clFinish fails, or with the code of a buffered upload that failed on the
  ///         device since the last synchronising call (README "Errors").
  void finish() {
    const char* op = "finish";
    auto entry = gate_.enter(op);
    device_.queue().finish(op);
    engine_.settle(op);
  }

  /// finish(), then releases the queue, the context, the staging chunks and the pool's cached
  /// buffers. Idempotent; afterwards every call but cleanup(), device() and stats() throws
  /// Error (code CL_SUCCESS). Buffers stay valid; their memory is freed when they are.
  /// @throws Error if the final clFinish fails, or a buffered upload failed that no call has
  ///         reported yet (the manager is released all the same).
  void cleanup() {
    cl_int err = CL_SUCCESS;
    cl_int buffered = CL_SUCCESS;
    std::string what;
    gate_.close([&]() noexcept {
      err = device_.queue().finish_code();
      gated_.close();
      kept_.clear();
      buffered = engine_.settle_code(&what);
      engine_.close();
      pool_->close();
      device_.release();
    });
    detail::check(err, "cleanup", "clFinish");
    if (buffered != CL_SUCCESS) detail::fail("cleanup", buffered, what);
  }
  /// @}

 private:
  std::shared_ptr<detail::MemoryPool> make_pool() const {
    return std::make_shared<detail::MemoryPool>(
        device_.context(), device_.options().memory == MemoryModel::host,
        device_.options().pool_limit_bytes, device_.info().max_alloc_bytes);
  }

  /// Enters both managers' gates, in address order, so two opposite copies cannot deadlock.
  std::pair<detail::Gate::Entry, detail::Gate::Entry> enter_both(const char* operation,
                                                                 BufferManager& other) {
    BufferManager* first = this < &other ? this : &other;
    BufferManager* second = this < &other ? &other : this;
    std::pair<detail::Gate::Entry, detail::Gate::Entry> entries;
    entries.first = first->gate_.enter(operation);
    if (second != first) entries.second = second->gate_.enter(operation);
    return entries;
  }

  /// copy_from, once checked: returns when `dst` holds the copy.
  template <class T>
  void copy_from_now(const char* op, BufferManager& source, const DeviceBuffer<T>& src,
                     DeviceBuffer<T>& dst) {
    if (src.size_bytes() == 0) return;
    source.device_.queue().finish(op);
    source.engine_.settle(op);
    if (source.device_.context()() == device_.context()()) {
      engine_.copy(op, src.memory_, 0, dst.memory_, 0, src.size_bytes());
    } else {
      detail::copy_across_contexts(op, source.device_.queue(), src.memory_, device_.queue(),
                                   engine_, dst.memory_, src.size_bytes());
    }
  }

  /// copy_from: `src` of `source`, `dst` of this manager, equal sizes, no overlap.
  template <class T>
  void check_copy_from(const char* operation, const BufferManager& source,
                       const DeviceBuffer<T>& src, const DeviceBuffer<T>& dst) const {
    source.check(operation, src);
    check(operation, dst);
    detail::check_same_size(operation, src.size(), dst.size());
    check_apart(operation, src, 0, dst, 0, src.size_bytes());
    if (source.device_.context()() != device_.context()()) {  // through host memory
      detail::check_host_access(operation, src.access_, true, false);
      detail::check_host_access(operation, dst.access_, false, true);
    }
  }

  template <class T>
  void check(const char* operation, const DeviceBuffer<T>& buffer) const {
    detail::check_buffer(operation, buffer.valid(), buffer.context(), device_.context()());
  }

  /// save_npy: `buffer` is usable here and readable by the host; an empty `shape` becomes
  /// {size()}, any other must hold size() elements.
  template <class T>
  void check_save(const char* operation, const DeviceBuffer<T>& buffer,
                  std::vector<std::size_t>& shape) const {
    check(operation, buffer);
    detail::check_host_access(operation, buffer.access_, true, false);
    if (shape.empty()) shape.push_back(buffer.size());
    detail::check_shape(operation, shape, buffer.size());
  }

  template <class T>
  std::size_t bytes_of(const char* operation, std::size_t count) const {
    return detail::checked_bytes(operation, count, sizeof(T), device_.info().max_alloc_bytes);
  }

  /// copy_from_async() within one context: one device copy on this manager's queue, after a
  /// marker of `source`'s queue and before a barrier on it (where that is another queue).
  template <class T>
  detail::Started copy_in_context_async(const char* op, BufferManager& source,
                                        const DeviceBuffer<T>& src, DeviceBuffer<T>& dst) {
    const detail::Queue& theirs = source.device_.queue();
    const bool other_queue = theirs.get() != device_.queue().get();
    if (other_queue) {
      const cl::Event before = theirs.marker(op);
      theirs.flush(op);
      hold(op, {before()});
    }
    detail::Started start;
    start.event = engine_.copy_async(op, src.memory_, 0, dst.memory_, 0, src.size_bytes());
    if (other_queue) source.kept_.keep(theirs.barrier(op, {start.event()}));
    return start;
  }

  /// A read of `count` elements at `offset` of `buffer` into `host` (or, `write`, a write from
  /// it) is allowed: the range fits, the host may access the buffer that way, and `host` is not
  /// a MappedView of it.
  template <class T>
  void check_host_transfer(const char* operation, const DeviceBuffer<T>& buffer, const T* host,
                           std::size_t count, std::size_t offset, bool write) const {
    check(operation, buffer);
    detail::check_host_pointer(operation, host, count);
    detail::check_range(operation, write ? "write" : "read", count, offset, buffer.size(),
                        sizeof(T));
    detail::check_host_access(operation, buffer.access_, !write, write);
    detail::check_not_mapped(operation, buffer.shared_lease(), host, count, sizeof(T));
  }

  /// Byte ranges of two buffers share no byte of one root buffer.
  template <class T, class U>
  static void check_apart(const char* operation, const DeviceBuffer<T>& src, std::size_t src_at,
                          const DeviceBuffer<U>& dst, std::size_t dst_at, std::size_t bytes) {
    detail::check_no_overlap(operation, src.root(), src.root_offset_bytes() + src_at, dst.root(),
                             dst.root_offset_bytes() + dst_at, bytes);
  }

  /// Both buffers are usable here, both byte ranges fit, and they do not overlap in one buffer.
  template <class T, class U>
  void check_copy(const char* operation, const DeviceBuffer<T>& src, const DeviceBuffer<U>& dst,
                  std::size_t bytes, std::size_t src_offset, std::size_t dst_offset) const {
    check(operation, src);
    check(operation, dst);
    detail::check_range(operation, "read", bytes, src_offset, src.size_bytes(), 1);
    detail::check_range(operation, "write", bytes, dst_offset, dst.size_bytes(), 1);
    check_apart(operation, src, src_offset, dst, dst_offset, bytes);
  }

  /// A buffer of `count` elements from the pool (contents unspecified).
  template <class T>
  DeviceBuffer<T> new_buffer(const char* operation, std::size_t count,
                             std::vector<std::size_t> shape) {
    const std::size_t bytes = bytes_of<T>(operation, count);
    detail::Allocation memory =
        bytes == 0 ? detail::Allocation() : pool_->acquire(bytes, operation);
    return DeviceBuffer<T>(std::move(memory), pool_, device_.context(), count, std::move(shape));
  }
  /// As new_buffer(operation, count, {count}), the shape in the pool's kept heap block.
  template <class T>
  DeviceBuffer<T> new_buffer(const char* operation, std::size_t count) {
    const std::size_t bytes = bytes_of<T>(operation, count);
    if (bytes == 0) return new_buffer<T>(operation, count, {count});
    return DeviceBuffer<T>(pool_, device_.context()(), count, bytes, operation);
  }

  /// The handles of `after` (checked: this context) to hold the queue for.
  std::vector<cl_event> wait_list(const char* operation,
                                  const std::vector<cl::Event>& after) const {
    if (after.empty()) return {};  // the common case, inline: no call, no context asked
    return detail::wait_list_of(operation, after, device_.context()());
  }

  /// A call with `after` (`events`): its commands, enqueued while the result lives, go to a
  /// gated queue behind `events` and the queue's earlier work, and the queue's later commands
  /// wait for them however they end (detail::GatedCall: no command of the manager's queue ever
  /// waits for an event that may fail). Nothing for no events; before OpenCL 1.2 (no barrier
  /// with a wait list) the host waits for them here; without a relay thread (the host refused
  /// one) the queue holds its later commands with a barrier on them, as hold().
  detail::GatedCall gated_call(const char* operation, const std::vector<cl_event>& events) {
    if (events.empty() || !device_.opencl_1_2() || !gated_.running()) {
      hold(operation, events);
      return detail::GatedCall();
    }
    return detail::GatedCall(operation, gated_, engine_, device_.context()(), device_.queue(),
                             events);
  }

  /// Runs `start` (which enqueues a call's commands and returns what it started) behind `events`
  /// as gated_call() arranges; with no events (the common case: a call without `after`) it only
  /// runs `start`, with no gate to make and take down on the call's fast path.
  template <class Start>
  detail::Started start_after(const char* operation, const std::vector<cl_event>& events,
                              Start&& start) {
    if (events.empty()) return start();
    detail::GatedCall gated = gated_call(operation, events);
    detail::Started started = start();
    gated.done(started.event);
    return started;
  }

  /// start_after() for the events of `after`: with none (the common case) no wait list is made
  /// and taken down (issue 47).
  template <class Start>
  CLBUF_DETAIL_INLINE detail::Started start_after(const char* operation,
                                                  const std::vector<cl::Event>& after,
                                                  Start&& start) {
    if (after.empty()) return start();
    return start_after(operation, wait_list(operation, after), std::forward<Start>(start));
  }

  /// Holds the queue's later commands until each of `events` has completed (before OpenCL 1.2,
  /// which has no barrier with a wait list, the host waits for them). The barrier's event is
  /// kept until it has ended (detail::KeptEvents: an event of another queue may fail).
  void hold(const char* operation, const std::vector<cl_event>& events) {
    if (events.empty()) return;
    if (device_.opencl_1_2()) {
      kept_.keep(device_.queue().barrier(operation, events));
    } else {
      detail::Queue::wait(operation, events);
    }
  }

  /// The Future of a started operation; `host`, when set, owns host memory the operation uses.
  /// Flushes the queue once the Future owns that memory, so that a failed flush cannot free
  /// memory the device is using (the Future's destructor waits).
  /// Takes its arguments by reference: each value passed by value was one more move and one
  /// more destructor on every small call's path (issue 47).
  template <class R>
  Future<R> future(const char* operation, detail::Started&& start,
                   typename Future<R>::Stored&& value,
                   std::shared_ptr<const void>&& host = nullptr) {
    const bool enqueued = start.event() != nullptr;
    Future<R> result(operation, std::move(start.event), std::move(value),
                     enqueued ? std::move(host) : nullptr, std::move(start.outcome));
    if (enqueued) device_.queue().flush(operation);
    return result;
  }

  /// upload_rect / download_rect and their async forms: blocking when `after` is null, else
  /// started after `after`.
  template <class T>
  detail::Started transfer_rect(const char* op, bool to_device, const DeviceBuffer<T>& buffer,
                                T* host, std::size_t count, const Region& region,
                                const std::vector<cl::Event>* after) {
    check(op, buffer);
    detail::check_host_pointer(op, host, count);
    const Offset& device_origin = to_device ? region.dst_origin : region.src_origin;
    const Extents& device_extents = to_device ? region.dst_extents : region.src_extents;
    const Offset& host_origin = to_device ? region.src_origin : region.dst_origin;
    const Extents& host_extents = to_device ? region.src_extents : region.dst_extents;
    const detail::RectSide host_side =
        detail::rect_side(op, "host", region.size, host_origin, host_extents, count, sizeof(T));
    const detail::RectSide device_side =
        detail::rect_side(op, to_device ? "destination" : "source", region.size, device_origin,
                          device_extents, buffer.size(), sizeof(T));
    detail::check_host_access(op, buffer.access_, !to_device, to_device);
    const std::vector<cl_event> wait = after ? wait_list(op, *after) : std::vector<cl_event>();
    if (detail::rect_empty(region.size)) return detail::Started();
    detail::check_not_mapped(op, buffer.shared_lease(), host, count, sizeof(T));
    detail::GatedCall gated = gated_call(op, wait);
    detail::Started start{
        detail::transfer_rect(engine_, op, to_device, buffer.memory_, device_side, device_extents.y,
                              host, host_side, region, sizeof(T), after == nullptr),
        nullptr};
    gated.done(start.event);
    buffer.fence(pool_.get(), start.event);
    return start;
  }

  /// copy_rect and copy_rect_async: blocking when `after` is null, else started after `after`.
  template <class T>
  detail::Started copy_box(const char* op, const DeviceBuffer<T>& src, DeviceBuffer<T>& dst,
                           const Region& region, const std::vector<cl::Event>* after) {
    check(op, src);
    check(op, dst);
    const detail::RectEnd from =
        detail::rect_end(op, "source", src.root(), src.root_offset_bytes(), region.size,
                         region.src_origin, region.src_extents, src.size(), sizeof(T));
    const detail::RectEnd to =
        detail::rect_end(op, "destination", dst.root(), dst.root_offset_bytes(), region.size,
                         region.dst_origin, region.dst_extents, dst.size(), sizeof(T));
    const std::vector<cl_event> wait = after ? wait_list(op, *after) : std::vector<cl_event>();
    if (detail::rect_empty(region.size)) return detail::Started();
    detail::GatedCall gated = gated_call(op, wait);
    detail::Started start{
        detail::copy_rect(engine_, op, from, to, region.size, sizeof(T), after == nullptr),
        nullptr};
    gated.done(start.event);
    src.fence(pool_.get(), start.event);
    dst.fence(pool_.get(), start.event);
    return start;
  }

  template <class T>
  DeviceBuffer<T> upload_new(const T* data, std::size_t count, std::vector<std::size_t>* shape,
                             detail::HostMemory host) {
    const char* op = "upload";
    auto entry = gate_.enter(op);
    detail::check_host_pointer(op, data, count);
    if (shape != nullptr) detail::check_shape(op, *shape, count);
    DeviceBuffer<T> buffer =
        shape != nullptr ? new_buffer<T>(op, count, std::move(*shape)) : new_buffer<T>(op, count);
    if (!buffer.empty()) engine_.write_fresh(op, buffer.memory_, data, buffer.size_bytes(), host);
    return buffer;
  }

  template <class T>
  void upload_into(DeviceBuffer<T>& dst, const T* data, std::size_t count, std::size_t dst_offset,
                   detail::HostMemory host) {
    const char* op = "upload";
    auto entry = gate_.enter(op);
    check_host_transfer(op, dst, data, count, dst_offset, true);
    if (count == 0) return;
    engine_.write(op, dst.memory_, dst_offset * sizeof(T), data, count * sizeof(T), host);
  }

  /// upload_async: `host`, when set, owns `data` until the write completes.
  template <class T>
  Future<DeviceBuffer<T>> start_upload(const T* data, std::size_t count,
                                       std::shared_ptr<const void>&& host,
                                       const std::vector<cl::Event>& after) {
    const char* op = "upload_async";
    auto entry = gate_.enter(op);
    detail::check_host_pointer(op, data, count);
    const std::vector<cl_event> wait = wait_list(op, after);
    DeviceBuffer<T> buffer = new_buffer<T>(op, count);
    detail::Started start = start_after(op, wait, [&] {
      return engine_.write_async(op, buffer.memory_, 0, data, buffer.size_bytes(), host,
                                 wait.empty());
    });
    buffer.fence(pool_.get(), start.event);
    return future<DeviceBuffer<T>>(op, std::move(start), std::move(buffer), std::move(host));
  }

  /// upload_async into an existing buffer: `host`, when set, owns `data`. Inline: the public
  /// calls are its only callers, and a call less is ~30 instructions of a small upload (issue 47).
  template <class T>
  CLBUF_DETAIL_INLINE Future<void> start_upload_into(DeviceBuffer<T>& dst, const T* data,
                                                     std::size_t count, std::size_t dst_offset,
                                                     std::shared_ptr<const void>&& host,
                                                     const std::vector<cl::Event>& after) {
    const char* op = "upload_async";
    auto entry = gate_.enter(op);
    check_host_transfer(op, dst, data, count, dst_offset, true);
    detail::Started start = start_after(op, wait_list(op, after), [&] {
      return engine_.write_async(op, dst.memory_, dst_offset * sizeof(T), data, count * sizeof(T),
                                 host, false);
    });
    dst.fence(pool_.get(), start.event);
    return future<void>(op, std::move(start), {}, std::move(host));
  }

  friend struct detail::ManagerAccess;

  detail::Gate gate_;                         // cleanup() against calls in flight
  detail::DeviceContext device_;              // device, context, queue, resolved options
  std::shared_ptr<detail::MemoryPool> pool_;  // shared with the buffers it serves
  detail::TransferEngine engine_;             // the path rule; copier, stager, telemetry
  detail::KeptEvents kept_;                   // barriers for events not clbuf's, until they end
  detail::GatedQueues gated_;                 // queues of the calls with `after`, their relay
};

namespace detail {

/// A manager's blocking transfers by bytes, for layers built over it (clbuf/mpi.hpp): `bytes` at
/// byte `offset` of an OpenCL buffer of the manager's context, from or into pageable host
/// memory, by the manager's own path rule (TransferEngine::route: on a discrete device a small
/// write is buffered and a read bounces through pinned memory), after the queue's earlier work.
/// The caller has checked the buffer and the range.
struct ManagerAccess {
  /// The manager's transfer engine: its path rule, chunk calls and pinned pool (clbuf::mpi).
  static TransferEngine& engine(BufferManager& manager) noexcept { return manager.engine_; }
  /// The manager's gate entered for one call of a layer built over it that uses the engine
  /// directly (a .npy file's bytes, a checkpoint's array): cleanup() waits until the Entry is
  /// gone. @throws Error (code CL_SUCCESS) once cleanup() has begun.
  static Gate::Entry enter(const BufferManager& manager, const char* operation) {
    return manager.gate_.enter(operation);
  }
  /// A new buffer of `count` elements (1-D) of the manager's pool for a layer built over it, its
  /// errors naming `operation` (a checkpoint's load, not "allocate"). The caller holds an Entry.
  template <class T>
  static DeviceBuffer<T> allocate(BufferManager& manager, const char* operation,
                                  std::size_t count) {
    return manager.new_buffer<T>(operation, count);
  }
  static void write(BufferManager& manager, const char* operation, cl_mem buffer,
                    std::size_t offset, const void* data, std::size_t bytes) {
    auto entry = manager.gate_.enter(operation);
    manager.engine_.write(operation, unpooled(buffer), offset, data, bytes, HostMemory::pageable);
  }
  static void read(BufferManager& manager, const char* operation, cl_mem buffer, std::size_t offset,
                   void* out, std::size_t bytes) {
    auto entry = manager.gate_.enter(operation);
    manager.engine_.read(operation, unpooled(buffer), offset, out, bytes, HostMemory::pageable);
  }

  /// The path of the manager's blocking upload (`write`) or download of `bytes` of pageable host
  /// memory to or from a buffer of its pool, as TransferEngine::route() chooses it, named as
  /// stats().paths counts it: "host_copy",
  /// "staged", "buffered", "bounced" or "direct" (for `clbuf info`, python/src/paths.cpp).
  static const char* path(const BufferManager& manager, std::size_t bytes, bool write) {
    // route() asks only whether the memory is a host block: every buffer of a host-backed pool is.
    static char block;
    Allocation memory;
    if (manager.device_.options().memory == MemoryModel::host) memory.host = &block;
    using Use = TransferEngine::Use;
    return Telemetry::name(TransferEngine::counted(manager.engine_.route(
        memory, bytes, HostMemory::pageable, write ? Use::blocking_write : Use::blocking_read)));
  }

 private:
  /// `buffer` as memory outside the pool (no host block, no fences of other queues).
  static Allocation unpooled(cl_mem buffer) {
    Allocation memory;
    memory.buffer = cl::Buffer(buffer, true);
    return memory;
  }
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_MANAGER_HPP
