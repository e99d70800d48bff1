// clbuf::BufferManager: owns a context and an in-order queue on one device, and moves typed data
// between host and device. Every public call checks its input here, before OpenCL is called,
// then makes one OpenCL call (or none, for zero-sized work).
#ifndef CLBUF_MANAGER_HPP
#define CLBUF_MANAGER_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/range.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {

/// Moves typed data between host memory and one OpenCL device.
///
/// Thread safety: one manager may be used from several threads at once. OpenCL 1.2 makes the
/// enqueue calls thread-safe; the manager's own state is immutable after construction except
/// for cleanup(), which takes an exclusive lock that waits for every call in progress. Calls
/// from several threads go to one in-order queue, so each thread's transfers are ordered among
/// themselves. Not movable: hold it by value or in a smart pointer.
class BufferManager {
 public:
  /// Picks a device: CLBUF_DEVICE from the environment if it is set and not empty (read at each
  /// construction), else the first GPU, else the first CPU device, else any device.
  /// @throws Error CL_DEVICE_NOT_FOUND (listing the devices that exist) or
  ///         CL_PLATFORM_NOT_FOUND_KHR (-1001) when no OpenCL platform is installed.
  BufferManager() : BufferManager(environment_selector(), "CLBUF_DEVICE") {}

  /// Picks a device by `selector`: "gpu", "cpu", "accelerator", "P:D" (indices as in
  /// list_devices()), or part of a device name (any case). An empty selector is the default.
  explicit BufferManager(const std::string& selector) : BufferManager(selector, "selector") {}

  /// Adopts an application's context and in-order queue (shares them; does not copy).
  /// @throws Error CL_INVALID_CONTEXT if the queue is not of the context,
  ///         CL_INVALID_COMMAND_QUEUE if either is null or the queue is out-of-order.
  BufferManager(cl::Context context, cl::CommandQueue queue)
      : context_(std::move(context)), queue_(std::move(queue)) {
    const char* op = "BufferManager";
    if (context_() == nullptr || queue_() == nullptr) {
      detail::fail(op, CL_INVALID_COMMAND_QUEUE, "adopted a null context or queue");
    }
    cl_context queue_context = nullptr;
    cl_device_id device = nullptr;
    cl_command_queue_properties properties = 0;
    detail::check(CLBUF_CL(clGetCommandQueueInfo)(queue_(), CL_QUEUE_CONTEXT,
                                                  sizeof(queue_context), &queue_context, nullptr),
                  op, "clGetCommandQueueInfo");
    detail::check(CLBUF_CL(clGetCommandQueueInfo)(queue_(), CL_QUEUE_DEVICE, sizeof(device),
                                                  &device, nullptr),
                  op, "clGetCommandQueueInfo");
    detail::check(CLBUF_CL(clGetCommandQueueInfo)(queue_(), CL_QUEUE_PROPERTIES,
                                                  sizeof(properties), &properties, nullptr),
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
    detail::check(CLBUF_CL(clGetDeviceInfo)(device, CL_DEVICE_PLATFORM, sizeof(platform),
                                            &platform, nullptr),
                  op, "clGetDeviceInfo");
    info_ = detail::describe_device(platform, device, 0, 0, op);
    for (const detail::DeviceEntry& entry : detail::enumerate_devices(op)) {
      if (entry.device == device) info_ = entry.info;
    }
    reason_ = "adopted from the application's context and queue";
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

  /// Device memory for `count` elements, contents unspecified. Wraps clCreateBuffer.
  /// @throws Error CL_INVALID_VALUE when count * sizeof(T) overflows, CL_INVALID_BUFFER_SIZE
  ///         beyond the device's max allocation.
  template <class T>
  DeviceBuffer<T> allocate(std::size_t count) {
    const char* op = "allocate";
    auto lock = enter(op);
    const std::size_t bytes = checked_bytes<T>(op, count);
    return make_buffer<T>(op, bytes, nullptr, count, {count});
  }

  /// Copies `count` elements from `data` into new device memory (blocking: `data` may be reused
  /// on return). Wraps clCreateBuffer with CL_MEM_COPY_HOST_PTR, which needs no queue command.
  /// @throws Error CL_INVALID_VALUE for a null `data` with count > 0 or an overflowing size,
  ///         CL_INVALID_BUFFER_SIZE beyond the device's max allocation.
  template <class T>
  DeviceBuffer<T> upload(const T* data, std::size_t count) {
    return upload_shaped(data, count, {count});
  }

  template <class T>
  DeviceBuffer<T> upload(const std::vector<T>& data) {
    return upload_shaped(data.data(), data.size(), {data.size()});
  }

  /// As upload(data), recording `shape`, whose product must equal data.size().
  /// @throws Error CL_INVALID_VALUE when the shape does not match.
  template <class T>
  DeviceBuffer<T> upload(const std::vector<T>& data, std::vector<std::size_t> shape) {
    return upload_shaped(data.data(), data.size(), std::move(shape));
  }

  /// Copies `count` elements from `data` into `dst` starting at element `dst_offset` (blocking).
  /// Wraps clEnqueueWriteBuffer. @throws Error CL_INVALID_VALUE past the end of `dst`.
  template <class T>
  void upload(DeviceBuffer<T>& dst, const T* data, std::size_t count,
              std::size_t dst_offset = 0) {
    const char* op = "upload";
    auto lock = enter(op);
    check_buffer(op, dst);
    check_host_pointer(op, data, count);
    check_range(op, "write", dst, count, dst_offset);
    if (count == 0) return;
    detail::check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), dst.buffer_(), CL_TRUE,
                                                 dst_offset * sizeof(T), count * sizeof(T), data,
                                                 0, nullptr, nullptr),
                  op, "clEnqueueWriteBuffer");
  }

  template <class T>
  void upload(DeviceBuffer<T>& dst, const std::vector<T>& data, std::size_t dst_offset = 0) {
    upload(dst, data.data(), data.size(), dst_offset);
  }

  /// Starts copying `data` (which the Future owns until the copy completes) into new device
  /// memory; get() returns the buffer. Wraps clEnqueueWriteBuffer, non-blocking.
  template <class T>
  Future<DeviceBuffer<T>> upload_async(std::vector<T> data) {
    const char* op = "upload_async";
    auto lock = enter(op);
    const std::size_t count = data.size();
    const std::size_t bytes = checked_bytes<T>(op, count);
    DeviceBuffer<T> buffer = make_buffer<T>(op, bytes, nullptr, count, {count});
    if (count == 0) return Future<DeviceBuffer<T>>(op, cl::Event(), std::move(buffer), nullptr);
    auto host = std::make_shared<const std::vector<T>>(std::move(data));
    cl_event event = nullptr;
    detail::check(CLBUF_CL(clEnqueueWriteBuffer)(queue_(), buffer.buffer_(), CL_FALSE, 0, bytes,
                                                 host->data(), 0, nullptr, &event),
                  op, "clEnqueueWriteBuffer");
    Future<DeviceBuffer<T>> future(op, cl::Event(event, false), std::move(buffer),
                                   std::move(host));
    flush(op);
    return future;
  }

  /// The whole buffer, as the element type and count that were uploaded (blocking).
  /// Wraps clEnqueueReadBuffer.
  template <class T>
  std::vector<T> download(const DeviceBuffer<T>& buffer) {
    const char* op = "download";
    auto lock = enter(op);
    check_buffer(op, buffer);
    std::vector<T> out(buffer.size());
    read(op, buffer, out.data(), out.size(), 0, CL_TRUE, nullptr);
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
    read(op, buffer, out, count, src_offset, CL_TRUE, nullptr);
  }

  /// Starts reading the whole buffer into a vector the Future owns; get() hands it over.
  /// Wraps clEnqueueReadBuffer, non-blocking.
  template <class T>
  Future<std::vector<T>> download_async(const DeviceBuffer<T>& buffer) {
    const char* op = "download_async";
    auto lock = enter(op);
    check_buffer(op, buffer);
    std::vector<T> out(buffer.size());
    if (out.empty()) return Future<std::vector<T>>(op, cl::Event(), std::move(out), nullptr);
    cl_event event = nullptr;
    read(op, buffer, out.data(), out.size(), 0, CL_FALSE, &event);
    // Moving the vector into the Future keeps its heap block, which the device writes into.
    Future<std::vector<T>> future(op, cl::Event(event, false), std::move(out), nullptr);
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
                   "source has " + std::to_string(src.size()) +
                       " elements but destination has " + std::to_string(dst.size()));
    }
    copy_checked(op, src.buffer_(), dst.buffer_(), src.size_bytes(), 0, 0);
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
    check_buffer(op, src);
    check_buffer(op, dst);
    if (!detail::range_fits(src_offset_bytes, size_bytes, src.size_bytes())) {
      detail::fail_range(op, "read", size_bytes, src_offset_bytes, src.size_bytes(), 1);
    }
    if (!detail::range_fits(dst_offset_bytes, size_bytes, dst.size_bytes())) {
      detail::fail_range(op, "write", size_bytes, dst_offset_bytes, dst.size_bytes(), 1);
    }
    copy_checked(op, src.buffer_(), dst.buffer_(), size_bytes, src_offset_bytes,
                 dst_offset_bytes);
  }

  /// Waits for everything queued. Wraps clFinish.
  void finish() {
    const char* op = "finish";
    auto lock = enter(op);
    detail::check(CLBUF_CL(clFinish)(queue_()), op, "clFinish");
  }

  /// finish(), then releases the queue and context. Idempotent; afterwards every call but
  /// cleanup() and device() throws Error (code CL_SUCCESS). Buffers stay valid.
  /// @throws Error if the final clFinish fails (the manager is released all the same).
  void cleanup() {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    if (cleaned_up_) return;
    cleaned_up_ = true;
    const cl_int err = queue_() != nullptr ? CLBUF_CL(clFinish)(queue_()) : CL_SUCCESS;
    queue_ = cl::CommandQueue();
    context_ = cl::Context();
    detail::check(err, "cleanup", "clFinish");
  }

 private:
  BufferManager(const std::string& selector, const char* origin) {
    const char* op = "BufferManager";
    detail::Selection selection = detail::select_device(selector, origin, op);
    info_ = std::move(selection.entry.info);
    reason_ = std::move(selection.reason);
    const cl_context_properties properties[] = {
        CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(selection.entry.platform),
        0};
    cl_int err = CL_SUCCESS;
    cl_device_id device = selection.entry.device;
    context_ = cl::Context(
        CLBUF_CL(clCreateContext)(properties, 1, &device, nullptr, nullptr, &err), false);
    detail::check(err, op, "clCreateContext");
    queue_ = cl::CommandQueue(CLBUF_CL(clCreateCommandQueue)(context_(), device, 0, &err), false);
    detail::check(err, op, "clCreateCommandQueue");
  }

  static std::string environment_selector() {
    const char* value = std::getenv("CLBUF_DEVICE");
    return value != nullptr ? value : "";
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
    if (buffer.context_ != context_()) detail::fail_other_context(operation);
  }

  template <class T>
  static void check_host_pointer(const char* operation, const T* pointer, std::size_t count) {
    if (pointer == nullptr && count != 0) detail::fail_null_pointer(operation, count);
  }

  template <class T>
  static void check_range(const char* operation, const char* access,
                          const DeviceBuffer<T>& buffer, std::size_t count, std::size_t offset) {
    if (!detail::range_fits(offset, count, buffer.size())) {
      detail::fail_range(operation, access, count, offset, buffer.size(), sizeof(T));
    }
  }

  /// New device memory of `bytes` bytes, filled from `data` when it is not null.
  template <class T>
  DeviceBuffer<T> make_buffer(const char* operation, std::size_t bytes, const T* data,
                              std::size_t count, std::vector<std::size_t> shape) {
    if (bytes == 0) return DeviceBuffer<T>(cl::Buffer(), context_(), count, std::move(shape));
    cl_int err = CL_SUCCESS;
    const cl_mem_flags flags = CL_MEM_READ_WRITE | (data != nullptr ? CL_MEM_COPY_HOST_PTR : 0);
    // CL_MEM_COPY_HOST_PTR only reads `data`, during the call.
    cl_mem memory = CLBUF_CL(clCreateBuffer)(context_(), flags, bytes,
                                             const_cast<T*>(data), &err);
    detail::check(err, operation, "clCreateBuffer");
    return DeviceBuffer<T>(cl::Buffer(memory, false), context_(), count, std::move(shape));
  }

  template <class T>
  DeviceBuffer<T> upload_shaped(const T* data, std::size_t count, std::vector<std::size_t> shape) {
    const char* op = "upload";
    auto lock = enter(op);
    check_host_pointer(op, data, count);
    std::size_t elements = 0;
    if (!detail::shape_elements(shape, elements) || elements != count) {
      std::string extents;
      for (std::size_t extent : shape) {
        extents += (extents.empty() ? "" : ", ") + std::to_string(extent);
      }
      detail::fail(op, CL_INVALID_VALUE,
                   "shape [" + extents + "] holds " +
                       (detail::shape_elements(shape, elements) ? std::to_string(elements)
                                                                : std::string("more than SIZE_MAX")) +
                       " elements but the data has " + std::to_string(count));
    }
    const std::size_t bytes = checked_bytes<T>(op, count);
    return make_buffer<T>(op, bytes, data, count, std::move(shape));
  }

  template <class T>
  void read(const char* operation, const DeviceBuffer<T>& buffer, T* out, std::size_t count,
            std::size_t offset, cl_bool blocking, cl_event* event) {
    check_range(operation, "read", buffer, count, offset);
    if (count == 0) return;
    detail::check(CLBUF_CL(clEnqueueReadBuffer)(queue_(), buffer.buffer_(), blocking,
                                                offset * sizeof(T), count * sizeof(T), out, 0,
                                                nullptr, event),
                  operation, "clEnqueueReadBuffer");
  }

  /// The byte ranges fit their buffers; rejects overlap within one buffer, then copies and
  /// waits for the copy.
  void copy_checked(const char* operation, cl_mem src, cl_mem dst, std::size_t bytes,
                    std::size_t src_offset, std::size_t dst_offset) {
    if (src == dst && detail::ranges_overlap(src_offset, dst_offset, bytes)) {
      detail::fail_overlap(operation, src_offset, dst_offset, bytes);
    }
    if (bytes == 0) return;
    cl_event event = nullptr;
    detail::check(CLBUF_CL(clEnqueueCopyBuffer)(queue_(), src, dst, src_offset, dst_offset, bytes,
                                                0, nullptr, &event),
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
  cl::Context context_;
  cl::CommandQueue queue_;
  DeviceInfo info_;
  std::string reason_;
};

}  // namespace clbuf

#endif  // CLBUF_MANAGER_HPP
