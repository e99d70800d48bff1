// clbuf::BufferManager: owns a context and an in-order queue on one device, and moves typed data
// between host and device. Every public call checks its input here, before OpenCL is called,
// then moves the bytes by the cheapest correct path for the device (see "Paths" below).
#ifndef CLBUF_MANAGER_HPP
#define CLBUF_MANAGER_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/host_memory.hpp>
#include <clbuf/detail/range.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>
#include <clbuf/pinned.hpp>
#include <clbuf/pool.hpp>
#include <clbuf/rect.hpp>
#include <clbuf/staging.hpp>
#include <clbuf/telemetry.hpp>
#include <clbuf/view.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace clbuf {

/// How a device's memory relates to the host's, which decides the transfer paths.
enum class MemoryModel {
  automatic,  ///< ask the device (CL_DEVICE_TYPE, CL_DEVICE_HOST_UNIFIED_MEMORY)
  host,       ///< a CPU device: device memory is host memory that clbuf allocates and copies itself
  unified,    ///< shares host memory but is not the CPU (integrated GPU): no staging
  discrete    ///< own memory over a bus: large pageable transfers are staged through pinned memory
};

/// Tuning of a BufferManager; the defaults suit most applications.
struct Options {
  static constexpr std::size_t automatic = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t never = std::numeric_limits<std::size_t>::max();
  /// Most bytes of freed device memory kept for reuse; `automatic`: a quarter of the device's
  /// memory, at most 1 GiB. 0 turns the pool off.
  std::size_t pool_limit_bytes = automatic;
  /// Pageable transfers at least this large to or from a discrete device are staged through
  /// pinned memory; `never` turns staging off.
  std::size_t staging_threshold_bytes = std::size_t{4} << 20;
  std::size_t staging_chunk_bytes = std::size_t{1} << 20;  ///< bytes per pinned chunk
  /// Pinned chunks (at least 2), shared out among the copy threads, two or more each; pinned
  /// memory stays at staging_chunk_bytes * staging_chunks.
  std::size_t staging_chunks = 24;
  /// Threads for large host copies (the CPU device's memcpy, staged chunks); 0: as many as
  /// the host has, at most 12.
  unsigned copy_threads = 0;
  MemoryModel memory = MemoryModel::automatic;
};

/// Moves typed data between host memory and one OpenCL device.
///
/// Thread safety: one manager may be used from several threads at once. OpenCL 1.2 makes the
/// enqueue calls thread-safe; the pool and the staging chunks have locks of their own; the rest
/// of the manager's state is fixed at construction except by cleanup(), which takes an exclusive
/// lock that waits for every call in progress. Calls from several threads go to one in-order
/// queue. Not movable: hold it by value or in a smart pointer.
///
/// Paths. On a CPU device (MemoryModel::host; PoCL), clbuf allocates device memory itself as
/// huge-page host blocks (CL_MEM_USE_HOST_PTR) and moves bytes with memcpy once the queue has
/// finished earlier work: no queue command per transfer. On a discrete device, transfers of at
/// least Options::staging_threshold_bytes are staged through pinned chunks and pipelined. On
/// every device freed buffers go back to a size-binned pool, so repeated uploads skip allocation.
class BufferManager {
 public:
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

  BufferManager(const std::string& selector, const Options& options) : options_(options) {
    const char* op = "BufferManager";
    const char* from_environment = std::getenv("CLBUF_DEVICE");
    const bool use_environment = detail::trimmed(selector).empty() && from_environment != nullptr &&
                                 *from_environment != '\0';
    detail::Selection selection =
        detail::select_device(use_environment ? std::string(from_environment) : selector,
                              use_environment ? "CLBUF_DEVICE" : "selector", op);
    info_ = std::move(selection.entry.info);
    reason_ = std::move(selection.reason);
    const char* debug = std::getenv("CLBUF_DEBUG");
    if (debug != nullptr && std::string(debug) == "1") {
      std::cerr << explain_selection(selector).to_string() << std::flush;
    }
    const cl_context_properties properties[] = {
        CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(selection.entry.platform), 0};
    cl_int err = CL_SUCCESS;
    cl_device_id device = selection.entry.device;
    const auto serial = detail::discovery_lock();
    context_ = cl::Context(
        CLBUF_CL(clCreateContext)(properties, 1, &device, nullptr, nullptr, &err), false);
    detail::check(err, op, "clCreateContext");
    queue_ = cl::CommandQueue(CLBUF_CL(clCreateCommandQueue)(context_(), device, 0, &err), false);
    detail::check(err, op, "clCreateCommandQueue");
    set_up_paths(device, op);
  }

  /// Adopts an application's context and in-order queue (shares them; does not copy).
  /// @throws Error CL_INVALID_CONTEXT if the queue is not of the context,
  ///         CL_INVALID_COMMAND_QUEUE if either is null or the queue is out-of-order.
  BufferManager(cl::Context context, cl::CommandQueue queue, const Options& options = Options())
      : options_(options), context_(std::move(context)), queue_(std::move(queue)) {
    const char* op = "BufferManager";
    if (context_() == nullptr || queue_() == nullptr) {
      detail::fail(op, CL_INVALID_COMMAND_QUEUE, "adopted a null context or queue");
    }
    cl_context queue_context = nullptr;
    cl_device_id device = nullptr;
    cl_command_queue_properties properties = 0;
    detail::check(CLBUF_CL(clGetCommandQueueInfo)(queue_(), CL_QUEUE_CONTEXT, sizeof(queue_context),
                                                  &queue_context, nullptr),
                  op, "clGetCommandQueueInfo");
    detail::check(CLBUF_CL(clGetCommandQueueInfo)(queue_(), CL_QUEUE_DEVICE, sizeof(device),
                                                  &device, nullptr),
                  op, "clGetCommandQueueInfo");
    detail::check(CLBUF_CL(clGetCommandQueueInfo)(queue_(), CL_QUEUE_PROPERTIES, sizeof(properties),
                                                  &properties, nullptr),
                  op, "clGetCommandQueueInfo");
    if (queue_context != context_()) {
      detail::fail(op, CL_INVALID_CONTEXT, "the adopted queue belongs to another context");
    }
    if (properties & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) {
      detail::fail(op, CL_INVALID_COMMAND_QUEUE,
                   "the adopted queue is out-of-order; clbuf orders transfers by an in-order "
                   "queue");
    }
    cl_platform_id platform = nullptr;
    detail::check(
        CLBUF_CL(clGetDeviceInfo)(device, CL_DEVICE_PLATFORM, sizeof(platform), &platform, nullptr),
        op, "clGetDeviceInfo");
    info_ = detail::describe_device(platform, device, 0, 0, op);
    for (const detail::DeviceEntry& entry : detail::enumerate_devices(op)) {
      if (entry.device == device) info_ = entry.info;
    }
    reason_ = "adopted from the application's context and queue";
    set_up_paths(device, op);
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

  /// The device in use. Still answers after cleanup().
  const DeviceInfo& device() const noexcept { return info_; }
  /// Why this device was picked, in words (e.g. "no GPU found, so the first CPU device ...").
  const std::string& selection_reason() const noexcept { return reason_; }
  /// The transfer paths in use (never MemoryModel::automatic).
  MemoryModel memory_model() const noexcept { return options_.memory; }
  /// The options in force, with every `automatic` resolved.
  const Options& options() const noexcept { return options_; }

  /// The manager's context, retained: the handle stays valid after cleanup() or the manager's
  /// destruction, however many threads ask while another cleans up.
  /// @throws Error (code CL_SUCCESS) after cleanup().
  cl::Context context() const {
    auto lock = enter("context");
    return context_;
  }
  /// The manager's in-order queue, retained like context().
  /// @throws Error (code CL_SUCCESS) after cleanup().
  cl::CommandQueue queue() const {
    auto lock = enter("queue");
    return queue_;
  }

  /// Bytes, operations and time per direction, and the pool's counters.
  TransferStats stats() const {
    TransferStats stats;
    telemetry_.fill(stats);
    stats.pool = pool_->stats();
    return stats;
  }
  void reset_stats() noexcept { telemetry_.reset(); }
  /// Frees every buffer the pool holds for reuse.
  void trim_pool() noexcept { pool_->trim(); }

  /// Device memory for `count` elements, contents unspecified. Served from the pool when it
  /// can be, else wraps clCreateBuffer.
  /// @throws Error CL_INVALID_VALUE when count * sizeof(T) overflows, CL_INVALID_BUFFER_SIZE
  ///         beyond the device's max allocation.
  template <class T>
  DeviceBuffer<T> allocate(std::size_t count) {
    const char* op = "allocate";
    auto lock = enter(op);
    const std::size_t bytes = checked_bytes<T>(op, count);
    return DeviceBuffer<T>(acquire(op, bytes), pool_, context_, count, {count});
  }

  /// Pinned host memory for `count` elements (contents unspecified), for the fastest transfers.
  /// Wraps clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) and clEnqueueMapBuffer.
  template <class T>
  PinnedBuffer<T> allocate_pinned(std::size_t count) {
    const char* op = "allocate_pinned";
    auto lock = enter(op);
    const std::size_t bytes = checked_bytes<T>(op, count);
    if (bytes == 0) return PinnedBuffer<T>();
    cl_int err = CL_SUCCESS;
    cl::Buffer buffer(
        CLBUF_CL(clCreateBuffer)(context_(), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes,
                                 nullptr, &err),
        false);
    detail::check(err, op, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)");
    void* data =
        CLBUF_CL(clEnqueueMapBuffer)(queue_(), buffer(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                     bytes, 0, nullptr, nullptr, &err);
    detail::check(err, op, "clEnqueueMapBuffer");
    return PinnedBuffer<T>(std::move(buffer), queue_, static_cast<T*>(data), count);
  }

  /// Copies `count` elements from `data` into new device memory (blocking: `data` may be reused
  /// on return).
  /// @throws Error CL_INVALID_VALUE for a null `data` with count > 0 or an overflowing size,
  ///         CL_INVALID_BUFFER_SIZE beyond the device's max allocation.
  template <class T>
  DeviceBuffer<T> upload(const T* data, std::size_t count) {
    return upload_new(data, count, {count}, false);
  }

  template <class T>
  DeviceBuffer<T> upload(const std::vector<T>& data) {
    return upload_new(data.data(), data.size(), {data.size()}, false);
  }

  /// As upload(data), recording `shape`, whose product must equal data.size().
  /// @throws Error CL_INVALID_VALUE when the shape does not match.
  template <class T>
  DeviceBuffer<T> upload(const std::vector<T>& data, std::vector<std::size_t> shape) {
    return upload_new(data.data(), data.size(), std::move(shape), false);
  }

  /// Copies pinned memory into new device memory, by DMA with no staging copy.
  template <class T>
  DeviceBuffer<T> upload(const PinnedBuffer<T>& data) {
    return upload_new(data.data(), data.size(), {data.size()}, true);
  }

  /// Copies `count` elements from `data` into `dst` starting at element `dst_offset`
  /// (blocking). Wraps clEnqueueWriteBuffer. @throws Error CL_INVALID_VALUE past the end of
  /// `dst` or for a null `data` with count > 0.
  template <class T>
  void upload(DeviceBuffer<T>& dst, const T* data, std::size_t count, std::size_t dst_offset = 0) {
    upload_into(dst, data, count, dst_offset, false);
  }

  template <class T>
  void upload(DeviceBuffer<T>& dst, const std::vector<T>& data, std::size_t dst_offset = 0) {
    upload_into(dst, data.data(), data.size(), dst_offset, false);
  }

  template <class T>
  void upload(DeviceBuffer<T>& dst, const PinnedBuffer<T>& data, std::size_t dst_offset = 0) {
    upload_into(dst, data.data(), data.size(), dst_offset, true);
  }

  /// Starts copying `data` (which the Future owns until the copy completes) into new device
  /// memory; get() returns the buffer. Wraps clEnqueueWriteBuffer, non-blocking.
  template <class T>
  Future<DeviceBuffer<T>> upload_async(std::vector<T> data) {
    std::shared_ptr<const std::vector<T>> host;
    try {
      host = std::make_shared<const std::vector<T>>(std::move(data));
    } catch (const std::bad_alloc&) {
      detail::fail_host_memory("upload_async", sizeof(std::vector<T>), "the Future's data");
    }
    return start_upload(host->data(), host->size(), host);
  }

  /// As upload_async(std::vector), without a copy of `data`, which the caller keeps alive and
  /// unchanged until the Future has completed.
  /// @throws Error CL_INVALID_VALUE for a null `data` with count > 0.
  template <class T>
  Future<DeviceBuffer<T>> upload_async(const T* data, std::size_t count) {
    return start_upload(data, count, nullptr);
  }

  /// The whole buffer, as the element type and count that were uploaded (blocking).
  template <class T>
  std::vector<T> download(const DeviceBuffer<T>& buffer) {
    const char* op = "download";
    auto lock = enter(op);
    check_buffer(op, buffer);
    std::vector<T> out = new_vector<T>(op, buffer.size());
    read(op, buffer, out.data(), out.size(), 0, false);
    return out;
  }

  /// Reads `count` elements starting at element `src_offset` of `buffer` into `out`
  /// (blocking). Wraps clEnqueueReadBuffer.
  /// @throws Error CL_INVALID_VALUE past the end of `buffer` or for a null `out` with count > 0.
  template <class T>
  void download(const DeviceBuffer<T>& buffer, T* out, std::size_t count,
                std::size_t src_offset = 0) {
    const char* op = "download";
    auto lock = enter(op);
    check_buffer(op, buffer);
    check_host_pointer(op, out, count);
    check_not_mapped(op, buffer, out, count);
    read(op, buffer, out, count, src_offset, false);
  }

  /// Reads out.size() elements starting at element `src_offset` into pinned memory, by DMA.
  template <class T>
  void download(const DeviceBuffer<T>& buffer, PinnedBuffer<T>& out, std::size_t src_offset = 0) {
    const char* op = "download";
    auto lock = enter(op);
    check_buffer(op, buffer);
    read(op, buffer, out.data(), out.size(), src_offset, true);
  }

  /// Starts reading the whole buffer into a vector the Future owns; get() hands it over.
  /// Wraps clEnqueueReadBuffer, non-blocking.
  template <class T>
  Future<std::vector<T>> download_async(const DeviceBuffer<T>& buffer) {
    const char* op = "download_async";
    auto lock = enter(op);
    check_buffer(op, buffer);
    std::vector<T> out = new_vector<T>(op, buffer.size());
    cl::Event event = start_read(op, buffer, out.data(), out.size(), 0);
    buffer.fence(pool_.get(), event);
    // Moving the vector into the Future keeps its heap block, which the device writes into.
    Future<std::vector<T>> future(op, std::move(event), std::move(out), nullptr);
    flush(op);
    return future;
  }

  /// Starts reading `count` elements at element `src_offset` into `out`, which the caller keeps
  /// alive until the Future has completed. Wraps clEnqueueReadBuffer, non-blocking.
  /// @throws Error CL_INVALID_VALUE past the end of `buffer` or for a null `out` with count > 0.
  template <class T>
  Future<void> download_async(const DeviceBuffer<T>& buffer, T* out, std::size_t count,
                              std::size_t src_offset = 0) {
    const char* op = "download_async";
    auto lock = enter(op);
    check_buffer(op, buffer);
    check_host_pointer(op, out, count);
    check_range(op, "read", buffer, count, src_offset);
    check_not_mapped(op, buffer, out, count);
    cl::Event event = start_read(op, buffer, out, count, src_offset);
    buffer.fence(pool_.get(), event);
    Future<void> future(op, std::move(event), {}, nullptr);
    flush(op);
    return future;
  }

  /// Copies all of `src` into `dst` on the device, with no host round trip; returns when done.
  /// Wraps clEnqueueCopyBuffer.
  /// @throws Error CL_INVALID_VALUE when the sizes differ, CL_MEM_COPY_OVERLAP for one buffer.
  template <class T>
  void copy(const DeviceBuffer<T>& src, DeviceBuffer<T>& dst) {
    const char* op = "copy";
    auto lock = enter(op);
    check_buffer(op, src);
    check_buffer(op, dst);
    if (src.size() != dst.size()) {
      detail::fail(op, CL_INVALID_VALUE,
                   "source has " + std::to_string(src.size()) + " elements but destination has " +
                       std::to_string(dst.size()));
    }
    check_no_overlap(op, src, dst, src.size_bytes(), 0, 0);  // a buffer onto itself overlaps
    copy_checked(op, src.memory_, dst.memory_, src.size_bytes(), 0, 0);
  }

  /// Copies `size_bytes` bytes from `src` at `src_offset_bytes` to `dst` at `dst_offset_bytes`
  /// on the device, with no host round trip; returns when done. Wraps clEnqueueCopyBuffer.
  /// @throws Error CL_INVALID_VALUE past the end of either buffer, CL_MEM_COPY_OVERLAP for
  ///         overlapping ranges of one buffer.
  template <class T, class U>
  void copy_bytes(const DeviceBuffer<T>& src, DeviceBuffer<U>& dst, std::size_t size_bytes,
                  std::size_t src_offset_bytes = 0, std::size_t dst_offset_bytes = 0) {
    const char* op = "copy_bytes";
    auto lock = enter(op);
    check_copy(op, src, dst, size_bytes, src_offset_bytes, dst_offset_bytes);
    copy_checked(op, src.memory_, dst.memory_, size_bytes, src_offset_bytes, dst_offset_bytes);
  }

  /// As copy_bytes(), but returns at once; the Future completes when the device has copied.
  /// Wraps clEnqueueCopyBuffer, non-blocking.
  template <class T, class U>
  Future<void> copy_bytes_async(const DeviceBuffer<T>& src, DeviceBuffer<U>& dst,
                                std::size_t size_bytes, std::size_t src_offset_bytes = 0,
                                std::size_t dst_offset_bytes = 0) {
    const char* op = "copy_bytes_async";
    auto lock = enter(op);
    check_copy(op, src, dst, size_bytes, src_offset_bytes, dst_offset_bytes);
    telemetry_.count_async(detail::Telemetry::copy, size_bytes);
    if (size_bytes == 0) return Future<void>(op, cl::Event(), {}, nullptr);
    cl_event event = nullptr;
    detail::check(CLBUF_CL(clEnqueueCopyBuffer)(queue_(), src.memory_.buffer(),
                                                dst.memory_.buffer(), src_offset_bytes,
                                                dst_offset_bytes, size_bytes, 0, nullptr, &event),
                  op, "clEnqueueCopyBuffer");
    const cl::Event copied(event, false);
    src.fence(pool_.get(), copied);
    dst.fence(pool_.get(), copied);
    Future<void> future(op, copied, {}, nullptr);
    flush(op);
    return future;
  }

  // ---- Fill ----------------------------------------------------------------------------------

  /// Sets every element of `buffer` to `value` (blocking). Wraps clEnqueueFillBuffer where the
  /// device has it (OpenCL 1.2) and sizeof(T) is a power of two up to 128 bytes; otherwise
  /// copies from a small buffer made with the pattern (clCreateBuffer(CL_MEM_COPY_HOST_PTR)),
  /// then doubling clEnqueueCopyBuffer calls: device work only, whatever the host-access flags. On a CPU
  /// device, clbuf's own memory is filled by the host after clFinish.
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
    auto lock = enter(op);
    check_buffer(op, buffer);
    check_range(op, "write", buffer, count, offset);
    if (count == 0) return;
    detail::Telemetry::Timer timer(telemetry_, detail::Telemetry::upload, count * sizeof(T));
    fill_bytes(op, buffer.memory_, offset * sizeof(T), &value, sizeof(T), count);
  }

  // ---- Rectangular regions -------------------------------------------------------------------

  /// Copies the box `region` from the host array `data` of `count` elements (laid out as
  /// region.src_extents) into `dst` (laid out as region.dst_extents), blocking. Pitches come from
  /// the extents. Wraps clEnqueueWriteBufferRect. An empty region makes no OpenCL call.
  /// @throws Error CL_INVALID_VALUE when the box leaves either array, an array does not fit in
  ///         `count` elements or in `dst`, a size overflows, or `data` is null with count > 0.
  template <class T>
  void upload_rect(DeviceBuffer<T>& dst, const T* data, std::size_t count, const Region& region) {
    const char* op = "upload_rect";
    auto lock = enter(op);
    check_buffer(op, dst);
    check_host_pointer(op, data, count);
    const detail::RectSide host =
        rect_side<T>(op, "host", region.size, region.src_origin, region.src_extents, count);
    const detail::RectSide device = rect_side<T>(op, "destination", region.size, region.dst_origin,
                                                 region.dst_extents, dst.size());
    if (detail::rect_empty(region.size)) return;
    check_not_mapped(op, dst, data, count);
    transfer_rect(op, true, dst.memory_, device, const_cast<T*>(data), host, region, sizeof(T));
  }

  template <class T>
  void upload_rect(DeviceBuffer<T>& dst, const std::vector<T>& data, const Region& region) {
    upload_rect(dst, data.data(), data.size(), region);
  }

  /// Copies the box `region` of `src` (laid out as region.src_extents) into the host array `out`
  /// of `count` elements (laid out as region.dst_extents), blocking; elements of `out` outside
  /// the box are left as they were. Wraps clEnqueueReadBufferRect.
  /// @throws Error CL_INVALID_VALUE as upload_rect().
  template <class T>
  void download_rect(const DeviceBuffer<T>& src, T* out, std::size_t count, const Region& region) {
    const char* op = "download_rect";
    auto lock = enter(op);
    check_buffer(op, src);
    check_host_pointer(op, out, count);
    const detail::RectSide device =
        rect_side<T>(op, "source", region.size, region.src_origin, region.src_extents, src.size());
    const detail::RectSide host =
        rect_side<T>(op, "host", region.size, region.dst_origin, region.dst_extents, count);
    if (detail::rect_empty(region.size)) return;
    check_not_mapped(op, src, out, count);
    transfer_rect(op, false, src.memory_, device, out, host, region, sizeof(T));
  }

  template <class T>
  void download_rect(const DeviceBuffer<T>& src, std::vector<T>& out, const Region& region) {
    download_rect(src, out.data(), out.size(), region);
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
    const char* op = "copy_rect";
    auto lock = enter(op);
    check_buffer(op, src);
    check_buffer(op, dst);
    const detail::RectSide from =
        rect_side<T>(op, "source", region.size, region.src_origin, region.src_extents, src.size());
    const detail::RectSide to = rect_side<T>(op, "destination", region.size, region.dst_origin,
                                             region.dst_extents, dst.size());
    if (detail::rect_empty(region.size)) return;
    if (src.root() == dst.root()) {
      check_rect_overlap(op, src.root_offset_bytes() + from.origin_bytes, from,
                         dst.root_offset_bytes() + to.origin_bytes, to, region.size, sizeof(T));
    }
    // Both sides are addressed in the root buffer, never a sub-buffer (PoCL 3.1 crashes in
    // clEnqueueCopyBufferRect when either buffer is a sub-buffer), with the absolute byte offset
    // split back into (x bytes, row, slice) by that side's pitches.
    const auto origin_in_root = [](std::size_t offset, const detail::RectSide& side) {
      return std::array<std::size_t, 3>{offset % side.slice_pitch % side.row_pitch,
                                        offset % side.slice_pitch / side.row_pitch,
                                        offset / side.slice_pitch};
    };
    const std::array<std::size_t, 3> src_origin =
        origin_in_root(src.root_offset_bytes() + from.origin_bytes, from);
    const std::array<std::size_t, 3> dst_origin =
        origin_in_root(dst.root_offset_bytes() + to.origin_bytes, to);
    const std::size_t extent[3] = {region.size.x * sizeof(T), region.size.y, region.size.z};
    detail::Telemetry::Timer timer(telemetry_, detail::Telemetry::copy,
                                   extent[0] * extent[1] * extent[2]);
    const bool same_pitches =
        from.row_pitch == to.row_pitch && from.slice_pitch == to.slice_pitch;
    if ((src.root() == dst.root() && !same_pitches) ||
        src_origin[0] + extent[0] > from.row_pitch || dst_origin[0] + extent[0] > to.row_pitch ||
        src_origin[1] + extent[1] > region.src_extents.y ||
        dst_origin[1] + extent[1] > region.dst_extents.y) {
      // clEnqueueCopyBufferRect rejects two pitches within one buffer, and a box that wraps in
      // the root's coordinates (a view whose offset is not a whole number of rows or slices).
      // Copy row by row instead.
      const std::size_t a = src.root_offset_bytes() + from.origin_bytes;
      const std::size_t b = dst.root_offset_bytes() + to.origin_bytes;
      for (std::size_t z = 0; z < region.size.z; ++z) {
        for (std::size_t y = 0; y < region.size.y; ++y) {
          detail::check(CLBUF_CL(clEnqueueCopyBuffer)(queue_(), src.root(), dst.root(),
                                                      a + z * from.slice_pitch + y * from.row_pitch,
                                                      b + z * to.slice_pitch + y * to.row_pitch,
                                                      extent[0], 0, nullptr, nullptr),
                        op, "clEnqueueCopyBuffer");
        }
      }
      detail::check(CLBUF_CL(clFinish)(queue_()), op, "clFinish");
      return;
    }
    cl_event event = nullptr;
    detail::check(CLBUF_CL(clEnqueueCopyBufferRect)(queue_(), src.root(), dst.root(),
                                                    src_origin.data(), dst_origin.data(), extent,
                                                    from.row_pitch, from.slice_pitch, to.row_pitch,
                                                    to.slice_pitch, 0, nullptr, &event),
                  op, "clEnqueueCopyBufferRect");
    const cl::Event owned(event, false);
    detail::check(CLBUF_CL(clWaitForEvents)(1, &event), op, "clWaitForEvents");
  }

  // ---- Raw handles ---------------------------------------------------------------------------

  /// Wraps an application's OpenCL buffer (shared, not copied) as a DeviceBuffer of `count`
  /// elements. clbuf never pools it: it is released when the DeviceBuffer and every view of it
  /// are gone. A sub-buffer is recognised (CL_MEM_ASSOCIATED_MEMOBJECT), so overlap checks see
  /// its parent. For a raw cl_mem pass cl::Buffer(mem, true) (retains it). Wraps
  /// clGetMemObjectInfo.
  /// @throws Error CL_INVALID_MEM_OBJECT for a null buffer, CL_INVALID_CONTEXT for a buffer of
  ///         another context, CL_INVALID_VALUE when count * sizeof(T) overflows or exceeds the
  ///         buffer's CL_MEM_SIZE.
  template <class T>
  DeviceBuffer<T> adopt(cl::Buffer buffer, std::size_t count) {
    const char* op = "adopt";
    auto lock = enter(op);
    if (buffer() == nullptr) {
      detail::fail(op, CL_INVALID_MEM_OBJECT, "the cl::Buffer to adopt is null");
    }
    cl_context context = nullptr;
    std::size_t capacity = 0;
    cl_mem parent = nullptr;
    std::size_t parent_offset = 0;
    detail::check(
        CLBUF_CL(clGetMemObjectInfo)(buffer(), CL_MEM_CONTEXT, sizeof(context), &context, nullptr),
        op, "clGetMemObjectInfo");
    if (context != context_()) {
      detail::fail(op, CL_INVALID_CONTEXT,
                   "the cl::Buffer belongs to another OpenCL context than this BufferManager's");
    }
    detail::check(
        CLBUF_CL(clGetMemObjectInfo)(buffer(), CL_MEM_SIZE, sizeof(capacity), &capacity, nullptr),
        op, "clGetMemObjectInfo");
    detail::check(CLBUF_CL(clGetMemObjectInfo)(buffer(), CL_MEM_ASSOCIATED_MEMOBJECT,
                                               sizeof(parent), &parent, nullptr),
                  op, "clGetMemObjectInfo");
    detail::check(CLBUF_CL(clGetMemObjectInfo)(buffer(), CL_MEM_OFFSET, sizeof(parent_offset),
                                               &parent_offset, nullptr),
                  op, "clGetMemObjectInfo");
    std::size_t bytes = 0;
    if (!detail::checked_multiply(count, sizeof(T), bytes)) {
      detail::fail_overflow(op, count, sizeof(T));
    }
    if (bytes > capacity) {
      detail::fail(op, CL_INVALID_VALUE,
                   std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
                       " bytes need " + std::to_string(bytes) + " bytes but the buffer has " +
                       std::to_string(capacity) + " (CL_MEM_SIZE)");
    }
    detail::Allocation memory;
    memory.buffer = std::move(buffer);
    memory.capacity = capacity;
    DeviceBuffer<T> adopted(std::move(memory), nullptr, context_, count, {count});
    if (parent != nullptr) {
      adopted.root_ = cl::Buffer(parent, true);
      adopted.root_offset_ = parent_offset;
    }
    return adopted;
  }

  // ---- Sub-buffer views ----------------------------------------------------------------------

  /// A DeviceBuffer of `count` elements starting at element `offset` of `parent`, sharing its
  /// memory (a sub-buffer: clCreateSubBuffer), usable everywhere a buffer is. The memory goes
  /// back to the pool only when `parent` and every view of it are gone; a view outlives its
  /// parent safely. A view of a view is a view of the same root buffer. count == 0 gives an
  /// empty buffer with no OpenCL call.
  /// @throws Error CL_INVALID_VALUE past the end of `parent`; CL_MISALIGNED_SUB_BUFFER_OFFSET
  ///         when the byte offset from the root buffer is not a multiple of the device's
  ///         CL_DEVICE_MEM_BASE_ADDR_ALIGN.
  template <class T>
  DeviceBuffer<T> view(DeviceBuffer<T>& parent, std::size_t offset, std::size_t count) {
    const char* op = "view";
    auto lock = enter(op);
    check_buffer(op, parent);
    check_range(op, "view", parent, count, offset);
    if (count == 0) return DeviceBuffer<T>(detail::Allocation(), nullptr, context_, 0, {0});
    const std::size_t bytes = count * sizeof(T);
    const std::size_t absolute = parent.root_offset_ + offset * sizeof(T);
    if (absolute % base_align_bytes_ != 0) {
      detail::fail(op, CL_MISALIGNED_SUB_BUFFER_OFFSET,
                   "offset of " + std::to_string(absolute) +
                       " bytes from the start of the root buffer is not a multiple of the "
                       "device's CL_DEVICE_MEM_BASE_ADDR_ALIGN of " +
                       std::to_string(base_align_bytes_) + " bytes");
    }
    const cl_buffer_region area = {absolute, bytes};
    cl_int err = CL_SUCCESS;
    detail::Allocation memory;
    memory.buffer =
        cl::Buffer(CLBUF_CL(clCreateSubBuffer)(parent.root(), CL_MEM_READ_WRITE,
                                               CL_BUFFER_CREATE_TYPE_REGION, &area, &err),
                   false);
    detail::check(err, op, "clCreateSubBuffer");
    memory.capacity = bytes;
    if (parent.memory_.host != nullptr) {
      memory.host = static_cast<char*>(parent.memory_.host) + offset * sizeof(T);
    }
    DeviceBuffer<T> result(std::move(memory), nullptr, context_, count, {count});
    result.root_ = cl::Buffer(parent.root(), true);
    result.root_offset_ = absolute;
    result.lease_ = parent.share_memory();
    return result;
  }

  // ---- Mapped views --------------------------------------------------------------------------

  /// Maps all of `buffer` for the host (blocking); see MappedView. Zero-copy where the device
  /// shares host memory. Wraps clEnqueueMapBuffer.
  template <class T>
  MappedView<T> map(DeviceBuffer<T>& buffer, MapMode mode = MapMode::read_write) {
    return map(buffer, mode, 0, buffer.size());
  }

  /// Maps `count` elements of `buffer` starting at element `offset`.
  /// @throws Error CL_INVALID_VALUE past the end of `buffer`, CL_INVALID_MEM_OBJECT for a
  ///         moved-from buffer, CL_INVALID_CONTEXT for one of another context.
  template <class T>
  MappedView<T> map(DeviceBuffer<T>& buffer, MapMode mode, std::size_t offset, std::size_t count) {
    const char* op = "map";
    auto lock = enter(op);
    check_buffer(op, buffer);
    check_range(op, mode == MapMode::read ? "read" : "write", buffer, count, offset);
    if (count == 0) return MappedView<T>();
    const cl_map_flags flags = mode == MapMode::read    ? CL_MAP_READ
                               : mode == MapMode::write ? CL_MAP_WRITE_INVALIDATE_REGION
                                                        : CL_MAP_READ | CL_MAP_WRITE;
    cl_int err = CL_SUCCESS;
    void* mapped = CLBUF_CL(clEnqueueMapBuffer)(queue_(), buffer.memory_.buffer(), CL_TRUE, flags,
                                                offset * sizeof(T), count * sizeof(T), 0, nullptr,
                                                nullptr, &err);
    detail::check(err, op, "clEnqueueMapBuffer");
    MappedView<T> view(queue_, buffer.memory_.buffer, buffer.share_memory(), mapped, count, mode);
    try {
      view.lease_->add_mapping(mapped, count * sizeof(T));
    } catch (const std::bad_alloc&) {
      detail::fail_host_memory(op, sizeof(void*) * 2, "the record of the mapping");  // unmaps
    }
    return view;
  }

  // ---- Several managers ----------------------------------------------------------------------

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
    // Both managers are entered in address order, so two opposite copies cannot deadlock.
    BufferManager* first = this < &source ? this : &source;
    BufferManager* second = this < &source ? &source : this;
    auto first_lock = first->enter(op);
    std::shared_lock<std::shared_mutex> second_lock;
    if (second != first) second_lock = second->enter(op);
    source.check_buffer(op, src);
    check_buffer(op, dst);
    if (src.size() != dst.size()) {
      detail::fail(op, CL_INVALID_VALUE,
                   "source has " + std::to_string(src.size()) + " elements but destination has " +
                       std::to_string(dst.size()));
    }
    const std::size_t bytes = src.size_bytes();
    check_no_overlap(op, src, dst, bytes, 0, 0);
    if (bytes == 0) return;
    detail::check(CLBUF_CL(clFinish)(source.queue_()), op, "clFinish");
    if (source.context_() == context_()) {
      copy_checked(op, src.memory_, dst.memory_, bytes, 0, 0);
      return;
    }
    detail::Telemetry::Timer timer(telemetry_, detail::Telemetry::copy, bytes);
    if (host_access(dst.memory_, op)) {  // a CPU device's own memory: read straight into it
      if (src.memory_.host != nullptr) {
        copier_->copy(dst.memory_.host, src.memory_.host, bytes);
        return;
      }
      detail::check(CLBUF_CL(clEnqueueReadBuffer)(source.queue_(), src.memory_.buffer(), CL_TRUE, 0,
                                                  bytes, dst.memory_.host, 0, nullptr, nullptr),
                    op, "clEnqueueReadBuffer");
      return;
    }
    if (src.memory_.host != nullptr) {  // write straight out of a CPU device's own memory
      detail::check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), dst.memory_.buffer(), CL_TRUE, 0,
                                                   bytes, src.memory_.host, 0, nullptr, nullptr),
                    op, "clEnqueueWriteBuffer");
      return;
    }
    copy_between_contexts(op, source.queue_, src.memory_.buffer, dst.memory_.buffer, bytes);
  }

  /// Waits for everything queued. Wraps clFinish.
  void finish() {
    const char* op = "finish";
    auto lock = enter(op);
    detail::check(CLBUF_CL(clFinish)(queue_()), op, "clFinish");
  }

  /// finish(), then releases the queue, the context, the staging chunks and the pool's cached
  /// buffers. Idempotent; afterwards every call but cleanup(), device() and stats() throws
  /// Error (code CL_SUCCESS). Buffers stay valid; their memory is freed when they are.
  /// @throws Error if the final clFinish fails (the manager is released all the same).
  void cleanup() {
    closing_.store(true, std::memory_order_release);
    std::unique_lock<std::shared_mutex> lock(mutex_);
    if (cleaned_up_) return;
    cleaned_up_ = true;
    const cl_int err = queue_() != nullptr ? CLBUF_CL(clFinish)(queue_()) : CL_SUCCESS;
    stager_.reset();
    if (pool_) pool_->close();
    queue_ = cl::CommandQueue();
    context_ = cl::Context();
    detail::check(err, "cleanup", "clFinish");
  }

 private:
  void set_up_paths(cl_device_id device, const char* op) {
    if (options_.memory == MemoryModel::automatic) {
      const cl_bool unified =
          detail::device_value<cl_bool>(device, CL_DEVICE_HOST_UNIFIED_MEMORY, op);
      options_.memory = !unified                        ? MemoryModel::discrete
                        : info_.type == DeviceType::cpu ? MemoryModel::host
                                                        : MemoryModel::unified;
    }
    if (options_.memory == MemoryModel::host && info_.type != DeviceType::cpu) {
      // The host path writes a buffer's host memory directly, which only a CPU device reads.
      detail::fail(op, CL_INVALID_VALUE,
                   std::string("MemoryModel::host needs a CPU device; ") + info_.name + " is a " +
                       to_string(info_.type) + " (use MemoryModel::automatic)");
    }
    if (options_.copy_threads == 0) {
      options_.copy_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 12u);
    }
    if (options_.pool_limit_bytes == Options::automatic) {
      options_.pool_limit_bytes = static_cast<std::size_t>(
          std::min<std::uint64_t>(info_.global_mem_bytes / 4, std::uint64_t{1} << 30));
    }
    const cl_uint align_bits =
        detail::device_value<cl_uint>(device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, op);
    base_align_bytes_ = std::max<std::size_t>(1, align_bits / 8);
    // "OpenCL 1.0 ..." and "OpenCL 1.1 ..." devices have no clEnqueueFillBuffer.
    const std::string version = detail::device_string(device, CL_DEVICE_VERSION, op);
    fill_buffer_ = version.rfind("OpenCL 1.0", 0) != 0 && version.rfind("OpenCL 1.1", 0) != 0;
    copier_ = std::make_unique<detail::ParallelCopier>(options_.copy_threads);
    pool_ = std::make_shared<detail::MemoryPool>(context_, options_.memory == MemoryModel::host,
                                                 options_.pool_limit_bytes, info_.max_alloc_bytes);
    if (options_.memory == MemoryModel::discrete &&
        options_.staging_threshold_bytes != Options::never) {
      stager_ = std::make_unique<detail::Stager>(context_, queue_, options_.staging_chunk_bytes,
                                                 options_.staging_chunks, options_.copy_threads);
    }
  }

  std::shared_lock<std::shared_mutex> enter(const char* operation) const {
    // Checked before the lock too: once cleanup() has begun no new call may take the shared
    // lock, or threads that keep calling would hold it forever and starve cleanup().
    if (closing_.load(std::memory_order_acquire)) detail::fail_cleaned_up(operation);
    std::shared_lock<std::shared_mutex> lock(mutex_);
    if (cleaned_up_) detail::fail_cleaned_up(operation);
    return lock;
  }

  template <class T>
  std::size_t checked_bytes(const char* operation, std::size_t count) const {
    std::size_t bytes = 0;
    if (!detail::checked_multiply(count, sizeof(T), bytes)) {
      detail::fail_overflow(operation, count, sizeof(T));
    }
    if (bytes > info_.max_alloc_bytes) {
      detail::fail_too_large(operation, bytes, info_.max_alloc_bytes);
    }
    return bytes;
  }

  template <class T>
  void check_buffer(const char* operation, const DeviceBuffer<T>& buffer) const {
    if (!buffer.valid()) detail::fail_invalid_buffer(operation);
    if (buffer.context_() != context_()) detail::fail_other_context(operation);
  }

  template <class T>
  static void check_host_pointer(const char* operation, const T* pointer, std::size_t count) {
    if (pointer == nullptr && count != 0) detail::fail_null_pointer(operation, count);
  }

  /// The host memory of a transfer must not be the buffer's own mapped memory (a live
  /// MappedView): OpenCL leaves a transfer into or out of a mapped region undefined, and on a
  /// device that shares host memory the copy would overlap itself.
  template <class T>
  static void check_not_mapped(const char* operation, const DeviceBuffer<T>& buffer,
                               const T* host, std::size_t count) {
    std::size_t bytes = 0;
    if (buffer.lease_ && detail::checked_multiply(count, sizeof(T), bytes) &&
        buffer.lease_->maps_onto(host, bytes)) {
      detail::fail(operation, CL_INVALID_OPERATION,
                   "the " + std::to_string(bytes) +
                       " bytes of host memory overlap a MappedView of the same buffer; unmap the "
                       "view first, or copy from memory of your own");
    }
  }

  template <class T>
  static void check_range(const char* operation, const char* access, const DeviceBuffer<T>& buffer,
                          std::size_t count, std::size_t offset) {
    if (!detail::range_fits(offset, count, buffer.size())) {
      detail::fail_range(operation, access, count, offset, buffer.size(), sizeof(T));
    }
  }

  /// Both buffers are usable here, both byte ranges fit, and they do not overlap in one buffer.
  template <class T, class U>
  void check_copy(const char* operation, const DeviceBuffer<T>& src, const DeviceBuffer<U>& dst,
                  std::size_t bytes, std::size_t src_offset, std::size_t dst_offset) const {
    check_buffer(operation, src);
    check_buffer(operation, dst);
    if (!detail::range_fits(src_offset, bytes, src.size_bytes())) {
      detail::fail_range(operation, "read", bytes, src_offset, src.size_bytes(), 1);
    }
    if (!detail::range_fits(dst_offset, bytes, dst.size_bytes())) {
      detail::fail_range(operation, "write", bytes, dst_offset, dst.size_bytes(), 1);
    }
    check_no_overlap(operation, src, dst, bytes, src_offset, dst_offset);
  }

  /// Views of one buffer overlap by their offsets from the root buffer. The ranges fit.
  template <class T, class U>
  static void check_no_overlap(const char* operation, const DeviceBuffer<T>& src,
                               const DeviceBuffer<U>& dst, std::size_t bytes,
                               std::size_t src_offset, std::size_t dst_offset) {
    if (src.root() == dst.root() &&
        detail::ranges_overlap(src.root_offset_bytes() + src_offset,
                               dst.root_offset_bytes() + dst_offset, bytes)) {
      detail::fail_overlap(operation, src.root_offset_bytes() + src_offset,
                           dst.root_offset_bytes() + dst_offset, bytes);
    }
  }

  /// upload_async: `host`, when set, owns `data` until the write completes.
  template <class T>
  Future<DeviceBuffer<T>> start_upload(const T* data, std::size_t count,
                                       std::shared_ptr<const void> host) {
    const char* op = "upload_async";
    auto lock = enter(op);
    check_host_pointer(op, data, count);
    const std::size_t bytes = checked_bytes<T>(op, count);
    DeviceBuffer<T> buffer(acquire(op, bytes), pool_, context_, count, {count});
    telemetry_.count_async(detail::Telemetry::upload, bytes);
    if (bytes == 0) return Future<DeviceBuffer<T>>(op, cl::Event(), std::move(buffer), nullptr);
    if (bytes < detail::huge_page_bytes && buffer.memory_.host != nullptr && buffer.memory_.fresh) {
      std::memcpy(buffer.memory_.host, data, bytes);  // cheaper than a queue command
      return Future<DeviceBuffer<T>>(op, cl::Event(), std::move(buffer), nullptr);
    }
    cl_event event = nullptr;
    detail::check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), buffer.memory_.buffer(), CL_FALSE, 0,
                                                 bytes, data, 0, nullptr, &event),
                  op, "clEnqueueWriteBuffer");
    Future<DeviceBuffer<T>> future(op, cl::Event(event, false), std::move(buffer), std::move(host));
    flush(op);
    return future;
  }

  /// The non-blocking read of both download_async()s, counted; a null event for zero-sized
  /// work (no OpenCL call). The range is checked. The caller flushes once a Future owns the
  /// memory, so that a failed flush cannot free memory the device is writing.
  template <class T>
  cl::Event start_read(const char* operation, const DeviceBuffer<T>& buffer, T* out,
                       std::size_t count, std::size_t offset) {
    telemetry_.count_async(detail::Telemetry::download, count * sizeof(T));
    if (count == 0) return cl::Event();
    cl_event event = nullptr;
    detail::check(CLBUF_CL(clEnqueueReadBuffer)(queue_(), buffer.memory_.buffer(), CL_FALSE,
                                                offset * sizeof(T), count * sizeof(T), out, 0,
                                                nullptr, &event),
                  operation, "clEnqueueReadBuffer");
    return cl::Event(event, false);
  }

  /// A vector of `count` elements for a download, or Error CL_OUT_OF_HOST_MEMORY.
  template <class T>
  static std::vector<T> new_vector(const char* operation, std::size_t count) {
    std::vector<T> out;
    try {
      detail::resize_fresh(out, count);
    } catch (const std::bad_alloc&) {
      detail::fail_host_memory(operation, count * sizeof(T), "the downloaded vector");
    } catch (const std::length_error&) {
      detail::fail_host_memory(operation, count * sizeof(T), "the downloaded vector");
    }
    return out;
  }

  detail::Allocation acquire(const char* operation, std::size_t bytes) {
    if (bytes == 0) return detail::Allocation();
    return pool_->acquire(bytes, operation);
  }

  /// On a CPU device, the host may touch clbuf's own blocks once every earlier command is done.
  bool host_access(const detail::Allocation& memory, const char* operation) {
    if (memory.host == nullptr) return false;
    detail::check(CLBUF_CL(clFinish)(queue_()), operation, "clFinish");
    return true;
  }

  template <class T>
  DeviceBuffer<T> upload_new(const T* data, std::size_t count, std::vector<std::size_t> shape,
                             bool pinned) {
    const char* op = "upload";
    auto lock = enter(op);
    check_host_pointer(op, data, count);
    std::size_t elements = 0;
    if (!detail::shape_elements(shape, elements) || elements != count) {
      std::string extents;
      for (std::size_t extent : shape) {
        extents += (extents.empty() ? "" : ", ") + std::to_string(extent);
      }
      detail::fail(
          op, CL_INVALID_VALUE,
          "shape [" + extents + "] holds " +
              (detail::shape_elements(shape, elements) ? std::to_string(elements)
                                                       : std::string("more than SIZE_MAX")) +
              " elements but the data has " + std::to_string(count));
    }
    const std::size_t bytes = checked_bytes<T>(op, count);
    DeviceBuffer<T> buffer(acquire(op, bytes), pool_, context_, count, std::move(shape));
    if (bytes == 0) return buffer;
    detail::Telemetry::Timer timer(telemetry_, detail::Telemetry::upload, bytes);
    if (buffer.memory_.host != nullptr && buffer.memory_.fresh) {
      copier_->copy(buffer.memory_.host, data, bytes);  // no command can be using a fresh block
    } else {
      write(op, buffer.memory_, 0, data, bytes, pinned);
    }
    return buffer;
  }

  template <class T>
  void upload_into(DeviceBuffer<T>& dst, const T* data, std::size_t count, std::size_t dst_offset,
                   bool pinned) {
    const char* op = "upload";
    auto lock = enter(op);
    check_buffer(op, dst);
    check_host_pointer(op, data, count);
    check_range(op, "write", dst, count, dst_offset);
    if (count == 0) return;
    check_not_mapped(op, dst, data, count);
    detail::Telemetry::Timer timer(telemetry_, detail::Telemetry::upload, count * sizeof(T));
    write(op, dst.memory_, dst_offset * sizeof(T), data, count * sizeof(T), pinned);
  }

  /// Host -> device, blocking, by the cheapest path: memcpy into a CPU device's block, pinned
  /// staging for a large pageable transfer to a discrete device, else one clEnqueueWriteBuffer.
  void write(const char* operation, const detail::Allocation& memory, std::size_t offset,
             const void* data, std::size_t bytes, bool pinned) {
    if (host_access(memory, operation)) {
      copier_->copy(static_cast<char*>(memory.host) + offset, data, bytes);
    } else if (stager_ && !pinned && bytes >= options_.staging_threshold_bytes) {
      stager_->write(memory.buffer(), offset, data, bytes, operation);
    } else {
      detail::check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), memory.buffer(), CL_TRUE, offset,
                                                   bytes, data, 0, nullptr, nullptr),
                    operation, "clEnqueueWriteBuffer");
    }
  }

  /// Device -> host, blocking; the mirror of write().
  template <class T>
  void read(const char* operation, const DeviceBuffer<T>& buffer, T* out, std::size_t count,
            std::size_t offset, bool pinned) {
    check_range(operation, "read", buffer, count, offset);
    if (count == 0) return;
    const std::size_t bytes = count * sizeof(T);
    const std::size_t byte_offset = offset * sizeof(T);
    const detail::Allocation& memory = buffer.memory_;
    detail::Telemetry::Timer timer(telemetry_, detail::Telemetry::download, bytes);
    if (host_access(memory, operation)) {
      copier_->copy(out, static_cast<const char*>(memory.host) + byte_offset, bytes);
    } else if (stager_ && !pinned && bytes >= options_.staging_threshold_bytes) {
      stager_->read(memory.buffer(), byte_offset, out, bytes, operation);
    } else {
      detail::check(CLBUF_CL(clEnqueueReadBuffer)(queue_(), memory.buffer(), CL_TRUE, byte_offset,
                                                  bytes, out, 0, nullptr, nullptr),
                    operation, "clEnqueueReadBuffer");
    }
  }

  /// Copies checked ranges (check_copy) and waits for the copy.
  void copy_checked(const char* operation, const detail::Allocation& src,
                    const detail::Allocation& dst, std::size_t bytes, std::size_t src_offset,
                    std::size_t dst_offset) {
    if (bytes == 0) return;
    detail::Telemetry::Timer timer(telemetry_, detail::Telemetry::copy, bytes);
    if (dst.host != nullptr && host_access(src, operation)) {
      // Both live in host memory, which is this device's memory: one memcpy is the copy.
      copier_->copy(static_cast<char*>(dst.host) + dst_offset,
                    static_cast<const char*>(src.host) + src_offset, bytes);
      return;
    }
    cl_event event = nullptr;
    detail::check(CLBUF_CL(clEnqueueCopyBuffer)(queue_(), src.buffer(), dst.buffer(), src_offset,
                                                dst_offset, bytes, 0, nullptr, &event),
                  operation, "clEnqueueCopyBuffer");
    const cl::Event owned(event, false);
    detail::check(CLBUF_CL(clWaitForEvents)(1, &event), operation, "clWaitForEvents");
  }

  /// Repeats the `size`-byte `pattern` `count` times from byte `offset` of `memory` (checked).
  void fill_bytes(const char* operation, const detail::Allocation& memory, std::size_t offset,
                  const void* pattern, std::size_t size, std::size_t count) {
    const std::size_t bytes = count * size;
    if (host_access(memory, operation)) {
      char* out = static_cast<char*>(memory.host) + offset;
      std::memcpy(out, pattern, size);
      for (std::size_t done = size; done < bytes; done += std::min(done, bytes - done)) {
        std::memcpy(out + done, out, std::min(done, bytes - done));
      }
      return;
    }
    const bool power_of_two = size != 0 && (size & (size - 1)) == 0 && size <= 128;
    if (fill_buffer_ && power_of_two) {
      cl_event event = nullptr;
      detail::check(CLBUF_CL(clEnqueueFillBuffer)(queue_(), memory.buffer(), pattern, size, offset,
                                                  bytes, 0, nullptr, &event),
                    operation, "clEnqueueFillBuffer");
      const cl::Event owned(event, false);
      detail::check(CLBUF_CL(clWaitForEvents)(1, &event), operation, "clWaitForEvents");
      return;
    }
    // No fill command for this pattern: a small run of it goes into a buffer of its own
    // (CL_MEM_COPY_HOST_PTR) and is copied on the device, then the filled part is doubled by
    // device copies. No host access to `memory` at all, so CL_MEM_HOST_NO_ACCESS buffers fill
    // too; source and destination ranges never overlap, and at most 64 KiB (one element at
    // least) crosses the bus.
    const std::size_t run =
        std::max<std::size_t>(1, std::min(count, (std::size_t{64} << 10) / size));
    std::vector<char> head(run * size);
    for (std::size_t i = 0; i < run; ++i) std::memcpy(head.data() + i * size, pattern, size);
    cl_int err = CL_SUCCESS;
    const cl::Buffer source(
        CLBUF_CL(clCreateBuffer)(context_(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, head.size(),
                                 head.data(), &err),
        false);
    detail::check(err, operation, "clCreateBuffer(CL_MEM_COPY_HOST_PTR)");
    detail::check(CLBUF_CL(clEnqueueCopyBuffer)(queue_(), source(), memory.buffer(), 0, offset,
                                                head.size(), 0, nullptr, nullptr),
                  operation, "clEnqueueCopyBuffer");
    for (std::size_t done = head.size(); done < bytes; done += std::min(done, bytes - done)) {
      detail::check(CLBUF_CL(clEnqueueCopyBuffer)(
                        queue_(), memory.buffer(), memory.buffer(), offset, offset + done,
                        std::min(done, bytes - done), 0, nullptr, nullptr),
                    operation, "clEnqueueCopyBuffer");
    }
    detail::check(CLBUF_CL(clFinish)(queue_()), operation, "clFinish");
  }

  /// One side of a region, checked against `capacity` elements; `side` names it in messages.
  template <class T>
  static detail::RectSide rect_side(const char* operation, const char* side, const Extents& size,
                                    const Offset& origin, const Extents& extents,
                                    std::size_t capacity) {
    detail::RectSide geometry;
    const std::string problem =
        detail::rect_side_problem(size, origin, extents, capacity, sizeof(T), geometry);
    if (!problem.empty()) detail::fail(operation, CL_INVALID_VALUE, side + (": " + problem));
    return geometry;
  }

  /// Regions of one buffer at absolute byte offsets `a` and `b` (checked sides) share no byte.
  static void check_rect_overlap(const char* operation, std::size_t a, const detail::RectSide& from,
                                 std::size_t b, const detail::RectSide& to, const Extents& size,
                                 std::size_t element_size) {
    const std::size_t width = size.x * element_size;
    bool overlap = false;
    if (from.row_pitch == to.row_pitch && from.slice_pitch == to.slice_pitch) {
      overlap =
          detail::rect_rows_overlap(a, b, width, size.y, size.z, from.row_pitch, from.slice_pitch);
    } else {  // different pitches: the byte spans must be apart
      const std::size_t a_span =
          (size.z - 1) * from.slice_pitch + (size.y - 1) * from.row_pitch + width;
      const std::size_t b_span =
          (size.z - 1) * to.slice_pitch + (size.y - 1) * to.row_pitch + width;
      overlap = a < b ? b - a < a_span : a - b < b_span;
    }
    if (overlap) {
      detail::fail(operation, CL_MEM_COPY_OVERLAP,
                   "source region at byte " + std::to_string(a) +
                       " and destination region at "
                       "byte " +
                       std::to_string(b) + " of one buffer share bytes (region of " +
                       detail::describe(size) + " elements, row pitches " +
                       std::to_string(from.row_pitch) + " and " + std::to_string(to.row_pitch) +
                       ", slice pitches " + std::to_string(from.slice_pitch) + " and " +
                       std::to_string(to.slice_pitch) + " bytes)");
    }
  }

  /// A blocking clEnqueueWriteBufferRect (`upload`) or clEnqueueReadBufferRect of checked sides.
  void transfer_rect(const char* operation, bool upload, const detail::Allocation& memory,
                     const detail::RectSide& device, void* host, const detail::RectSide& host_side,
                     const Region& region, std::size_t element_size) {
    const Offset& device_origin = upload ? region.dst_origin : region.src_origin;
    const Offset& host_origin = upload ? region.src_origin : region.dst_origin;
    const std::size_t buffer_origin[3] = {device_origin.x * element_size, device_origin.y,
                                          device_origin.z};
    const std::size_t host_offset[3] = {host_origin.x * element_size, host_origin.y, host_origin.z};
    const std::size_t extent[3] = {region.size.x * element_size, region.size.y, region.size.z};
    detail::Telemetry::Timer timer(telemetry_,
                                   upload ? detail::Telemetry::upload : detail::Telemetry::download,
                                   extent[0] * extent[1] * extent[2]);
    if (upload) {
      detail::check(CLBUF_CL(clEnqueueWriteBufferRect)(
                        queue_(), memory.buffer(), CL_TRUE, buffer_origin, host_offset, extent,
                        device.row_pitch, device.slice_pitch, host_side.row_pitch,
                        host_side.slice_pitch, host, 0, nullptr, nullptr),
                    operation, "clEnqueueWriteBufferRect");
    } else {
      detail::check(CLBUF_CL(clEnqueueReadBufferRect)(
                        queue_(), memory.buffer(), CL_TRUE, buffer_origin, host_offset, extent,
                        device.row_pitch, device.slice_pitch, host_side.row_pitch,
                        host_side.slice_pitch, host, 0, nullptr, nullptr),
                    operation, "clEnqueueReadBufferRect");
    }
  }

  /// `bytes` from `src` (read on `source_queue`, another context) into `dst` (written on this
  /// manager's queue), through two pinned chunks of this context: while one chunk is written to
  /// `dst`, the next is read into the other.
  void copy_between_contexts(const char* operation, const cl::CommandQueue& source_queue,
                             const cl::Buffer& src, const cl::Buffer& dst, std::size_t bytes) {
    const std::size_t chunk =
        std::min(bytes, std::max<std::size_t>(options_.staging_chunk_bytes, 4096));
    cl_int err = CL_SUCCESS;
    cl::Buffer pinned[2];
    void* host[2] = {nullptr, nullptr};
    for (int i = 0; i < 2; ++i) {
      pinned[i] =
          cl::Buffer(CLBUF_CL(clCreateBuffer)(context_(), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                                              chunk, nullptr, &err),
                     false);
      detail::check(err, operation, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)");
      host[i] =
          CLBUF_CL(clEnqueueMapBuffer)(queue_(), pinned[i](), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                       0, chunk, 0, nullptr, nullptr, &err);
      detail::check(err, operation, "clEnqueueMapBuffer");
    }
    // Unmaps on every way out, after the last command that touches the chunks has finished.
    struct Unmap {
      const cl::CommandQueue& queue;
      cl::Buffer* buffers;
      void** host;
      ~Unmap() {
        CLBUF_CL(clFinish)(queue());
        for (int i = 0; i < 2; ++i) {
          CLBUF_CL(clEnqueueUnmapMemObject)(queue(), buffers[i](), host[i], 0, nullptr, nullptr);
        }
        CLBUF_CL(clFinish)(queue());
      }
    } unmap{queue_, pinned, host};
    cl::Event written[2];  // the last write out of each chunk
    for (std::size_t offset = 0, i = 0; offset < bytes; offset += chunk, ++i) {
      const std::size_t n = std::min(chunk, bytes - offset);
      const std::size_t slot = i % 2;
      if (written[slot]() != nullptr) {
        cl_event wait = written[slot]();
        detail::check(CLBUF_CL(clWaitForEvents)(1, &wait), operation, "clWaitForEvents");
      }
      detail::check(CLBUF_CL(clEnqueueReadBuffer)(source_queue(), src(), CL_TRUE, offset, n,
                                                  host[slot], 0, nullptr, nullptr),
                    operation, "clEnqueueReadBuffer");
      cl_event event = nullptr;
      detail::check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), dst(), CL_FALSE, offset, n, host[slot],
                                                   0, nullptr, &event),
                    operation, "clEnqueueWriteBuffer");
      written[slot] = cl::Event(event, false);
      flush(operation);
    }
    detail::check(CLBUF_CL(clFinish)(queue_()), operation, "clFinish");
  }

  void flush(const char* operation) {
    // Without a flush an asynchronous transfer may never start, and ready() would poll forever.
    detail::check(CLBUF_CL(clFlush)(queue_()), operation, "clFlush");
  }

  mutable std::shared_mutex mutex_;   // shared: any call; exclusive: cleanup()
  std::atomic<bool> closing_{false};  // cleanup() has begun: no new call enters
  bool cleaned_up_ = false;
  Options options_;
  cl::Context context_;
  cl::CommandQueue queue_;
  DeviceInfo info_;
  std::string reason_;
  std::unique_ptr<detail::ParallelCopier> copier_;
  std::shared_ptr<detail::MemoryPool> pool_;  // shared with the buffers it serves
  std::unique_ptr<detail::Stager> stager_;    // discrete devices only
  std::size_t base_align_bytes_ = 1;          // CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes
  bool fill_buffer_ = true;                   // the device has clEnqueueFillBuffer (1.2+)
  detail::Telemetry telemetry_;
};

}  // namespace clbuf

#endif  // CLBUF_MANAGER_HPP
