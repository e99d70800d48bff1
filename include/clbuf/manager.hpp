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
#include <clbuf/staging.hpp>
#include <clbuf/telemetry.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>
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
  std::size_t staging_threshold_bytes = std::size_t{512} << 10;
  std::size_t staging_chunk_bytes = std::size_t{1} << 20;  ///< bytes per pinned chunk
  /// Pinned chunks (at least 2), shared out among the copy threads, two or more each; pinned
  /// memory stays at staging_chunk_bytes * staging_chunks.
  std::size_t staging_chunks = 32;
  /// Threads for large host copies (the CPU device's memcpy, staged chunks); 0: as many as
  /// the host has, at most 16.
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
    const cl_context_properties properties[] = {
        CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(selection.entry.platform), 0};
    cl_int err = CL_SUCCESS;
    cl_device_id device = selection.entry.device;
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

  /// @throws Error (code CL_SUCCESS) after cleanup().
  const cl::Context& context() const {
    auto lock = enter("context");
    return context_;
  }
  /// The manager's in-order queue. @throws Error (code CL_SUCCESS) after cleanup().
  const cl::CommandQueue& queue() const {
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
    auto host = std::make_shared<const std::vector<T>>(std::move(data));
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
    std::vector<T> out;
    detail::resize_fresh(out, buffer.size());
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
    std::vector<T> out;
    detail::resize_fresh(out, buffer.size());
    telemetry_.count_async(detail::Telemetry::download, buffer.size_bytes());
    if (out.empty()) return Future<std::vector<T>>(op, cl::Event(), std::move(out), nullptr);
    cl_event event = nullptr;
    detail::check(
        CLBUF_CL(clEnqueueReadBuffer)(queue_(), buffer.memory_.buffer(), CL_FALSE, 0,
                                      buffer.size_bytes(), out.data(), 0, nullptr, &event),
        op, "clEnqueueReadBuffer");
    // Moving the vector into the Future keeps its heap block, which the device writes into.
    Future<std::vector<T>> future(op, cl::Event(event, false), std::move(out), nullptr);
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
    telemetry_.count_async(detail::Telemetry::download, count * sizeof(T));
    if (count == 0) return Future<void>(op, cl::Event(), {}, nullptr);
    cl_event event = nullptr;
    detail::check(CLBUF_CL(clEnqueueReadBuffer)(queue_(), buffer.memory_.buffer(), CL_FALSE,
                                                src_offset * sizeof(T), count * sizeof(T), out, 0,
                                                nullptr, &event),
                  op, "clEnqueueReadBuffer");
    Future<void> future(op, cl::Event(event, false), {}, nullptr);
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
    check_copy(op, src, dst, src.size_bytes(), 0, 0);  // one buffer onto itself overlaps
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
    Future<void> future(op, cl::Event(event, false), {}, nullptr);
    flush(op);
    return future;
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
    if (options_.copy_threads == 0) {
      options_.copy_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
    }
    if (options_.pool_limit_bytes == Options::automatic) {
      options_.pool_limit_bytes = static_cast<std::size_t>(
          std::min<std::uint64_t>(info_.global_mem_bytes / 4, std::uint64_t{1} << 30));
    }
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
    if (src.memory_.buffer() == dst.memory_.buffer() &&
        detail::ranges_overlap(src_offset, dst_offset, bytes)) {
      detail::fail_overlap(operation, src_offset, dst_offset, bytes);
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

  void flush(const char* operation) {
    // Without a flush an asynchronous transfer may never start, and ready() would poll forever.
    detail::check(CLBUF_CL(clFlush)(queue_()), operation, "clFlush");
  }

  mutable std::shared_mutex mutex_;  // shared: any call; exclusive: cleanup()
  bool cleaned_up_ = false;
  Options options_;
  cl::Context context_;
  cl::CommandQueue queue_;
  DeviceInfo info_;
  std::string reason_;
  std::unique_ptr<detail::ParallelCopier> copier_;
  std::shared_ptr<detail::MemoryPool> pool_;  // shared with the buffers it serves
  std::unique_ptr<detail::Stager> stager_;    // discrete devices only
  detail::Telemetry telemetry_;
};

}  // namespace clbuf

#endif  // CLBUF_MANAGER_HPP
