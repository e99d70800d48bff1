// SPDX-License-Identifier: MIT
// What a BufferManager runs on: the device it picked (or adopted), its context and in-order
// queue, the facts about the device clbuf needs, and the Options with every `automatic`
// resolved. Fixed at construction (but for the side queue, made on first use); cleanup() drops
// the context and queues.
#ifndef CLBUF_DETAIL_DEVICE_CONTEXT_HPP
#define CLBUF_DETAIL_DEVICE_CONTEXT_HPP

#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/sub_buffers.hpp>
#include <clbuf/detail/trace.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>
#include <clbuf/options.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace clbuf {
namespace detail {

class DeviceContext {
 public:
  /// Picks a device by `selector` (blank: CLBUF_DEVICE, then the default), then makes a context
  /// and an in-order queue on it. Wraps clCreateContext and clCreateCommandQueue.
  DeviceContext(const std::string& selector, const Options& options, const char* operation)
      : options_(options) {
    std::string origin;
    const std::string text = effective_selector(selector, origin);
    Selection selection =
        select_device(text, origin == "CLBUF_DEVICE" ? "CLBUF_DEVICE" : "selector", operation);
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
    const auto serial = discovery_lock();
    context_ = cl::Context(
        CLBUF_CL(clCreateContext)(properties, 1, &device, nullptr, nullptr, &err), false);
    check(err, operation, "clCreateContext");
    queue_ = Queue::create(operation, context_(), device);
    resolve(device, operation);
  }

  /// Adopts an application's context and in-order queue (shared, not copied).
  DeviceContext(cl::Context context, cl::CommandQueue queue, const Options& options,
                const char* operation)
      : options_(options), context_(std::move(context)), queue_(std::move(queue)) {
    if (context_() == nullptr || queue_.get() == nullptr) {
      fail(operation, CL_INVALID_COMMAND_QUEUE, "adopted a null context or queue");
    }
    cl_context queue_context = nullptr;
    cl_device_id device = nullptr;
    cl_command_queue_properties properties = 0;
    check(CLBUF_CL(clGetCommandQueueInfo)(queue_.get(), CL_QUEUE_CONTEXT, sizeof(queue_context),
                                          &queue_context, nullptr),
          operation, "clGetCommandQueueInfo");
    check(CLBUF_CL(clGetCommandQueueInfo)(queue_.get(), CL_QUEUE_DEVICE, sizeof(device), &device,
                                          nullptr),
          operation, "clGetCommandQueueInfo");
    check(CLBUF_CL(clGetCommandQueueInfo)(queue_.get(), CL_QUEUE_PROPERTIES, sizeof(properties),
                                          &properties, nullptr),
          operation, "clGetCommandQueueInfo");
    if (queue_context != context_()) {
      fail(operation, CL_INVALID_CONTEXT, "the adopted queue belongs to another context");
    }
    if (properties & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) {
      fail(operation, CL_INVALID_COMMAND_QUEUE,
           "the adopted queue is out-of-order; clbuf orders transfers by an in-order queue");
    }
    cl_platform_id platform = nullptr;
    check(
        CLBUF_CL(clGetDeviceInfo)(device, CL_DEVICE_PLATFORM, sizeof(platform), &platform, nullptr),
        operation, "clGetDeviceInfo");
    info_ = describe_device(platform, device, 0, 0, operation);
    for (const DeviceEntry& entry : enumerate_devices(operation)) {
      if (entry.device == device) info_ = entry.info;
    }
    reason_ = "adopted from the application's context and queue";
    // The application's context has queues of its own, and maybe other managers, which a buffered
    // upload would not be ordered with: every blocking upload waits for its write.
    options_.buffered_upload_max_bytes = 0;
    resolve(device, operation);
  }

  const Options& options() const noexcept { return options_; }
  const DeviceInfo& info() const noexcept { return info_; }
  const std::string& reason() const noexcept { return reason_; }
  const cl::Context& context() const noexcept { return context_; }
  const Queue& queue() const noexcept { return queue_; }
  /// CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: where sub-buffers may start.
  std::size_t base_align_bytes() const noexcept { return base_align_bytes_; }
  /// How native() of a view makes and releases its sub-buffer (NVIDIA's driver needs an order).
  SubBufferRule sub_buffer_rule() const noexcept { return sub_buffer_rule_; }
  /// The device speaks OpenCL 1.2 or later: clEnqueueFillBuffer, markers and barriers with
  /// wait lists.
  bool opencl_1_2() const noexcept { return opencl_1_2_; }

  /// A second in-order queue on the device, made on first use: where clbuf's background jobs
  /// enqueue while the main queue holds later work behind their barrier. Wraps
  /// clCreateCommandQueue.
  const Queue& side_queue(const char* operation) const {
    std::lock_guard<std::mutex> lock(side_mutex_);
    if (side_.get() == nullptr) side_ = Queue::beside(operation, context_(), queue_);
    return side_;
  }

  /// Drops the context and queues (cleanup()); the facts stay.
  void release() noexcept {
    {
      std::lock_guard<std::mutex> lock(side_mutex_);
      side_ = Queue();
    }
    queue_ = Queue();
    context_ = cl::Context();
  }

 private:
  void resolve(cl_device_id device, const char* operation) {
    resolve_memory_model(device, operation);
    check_pinned_sizes(operation);
    resolve_automatic_sizes();
    options_.trace_path = trace_path(options_.trace_path);  // the option wins over CLBUF_TRACE
    learn_device(device, operation);
  }

  /// MemoryModel::automatic made the device's, and MemoryModel::host refused for another than a
  /// CPU device.
  void resolve_memory_model(cl_device_id device, const char* operation) {
    if (options_.memory == MemoryModel::automatic) {
      const cl_bool unified =
          device_value<cl_bool>(device, CL_DEVICE_HOST_UNIFIED_MEMORY, operation);
      options_.memory = !unified                        ? MemoryModel::discrete
                        : info_.type == DeviceType::cpu ? MemoryModel::host
                                                        : MemoryModel::unified;
    }
    if (options_.memory == MemoryModel::host && info_.type != DeviceType::cpu) {
      // The host path writes a buffer's host memory directly, which only a CPU device reads.
      fail(operation, CL_INVALID_VALUE,
           std::string("MemoryModel::host needs a CPU device; ") + info_.name + " is a " +
               to_string(info_.type) + " (use MemoryModel::automatic)");
    }
  }

  /// Sizes of pinned memory clbuf would allocate: refused here, naming the option, rather than
  /// at the first transfer (or never: a count of chunks in the billions allocates until the host
  /// runs out).
  void check_pinned_sizes(const char* operation) const {
    const auto too_large = [&](const char* option, std::size_t value, std::uint64_t limit,
                               const char* why, bool automatic_allowed = false) {
      if ((!automatic_allowed || value != Options::automatic) && value > limit) {
        fail(operation, CL_INVALID_VALUE,
             std::string("Options::") + option + " of " + std::to_string(value) +
                 " is out of range: at most " + std::to_string(limit) + " (" + why + ")");
      }
    };
    too_large("staging_chunk_bytes", options_.staging_chunk_bytes, info_.max_alloc_bytes,
              "the device's max allocation: each chunk is one pinned buffer");
    too_large("staging_chunks", options_.staging_chunks, max_staging_chunks,
              "pinned chunks per direction");
    if (options_.staging_chunks != 0 &&
        options_.staging_chunk_bytes > SIZE_MAX / options_.staging_chunks) {
      fail(operation, CL_INVALID_VALUE,
           "Options::staging_chunk_bytes * staging_chunks overflows size_t (" +
               std::to_string(options_.staging_chunk_bytes) + " * " +
               std::to_string(options_.staging_chunks) + ")");
    }
    too_large("bounce_max_bytes", options_.bounce_max_bytes, info_.max_alloc_bytes,
              "the device's max allocation: a bounced download reads into one pinned buffer of "
              "this size",
              true);
  }

  /// Every `automatic` size made the device's (or the host's), and the sizes bounded by others.
  void resolve_automatic_sizes() {
    if (options_.copy_threads == 0) {
      options_.copy_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 12u);
    }
    if (options_.bounce_max_bytes == Options::automatic) {
      options_.bounce_max_bytes = std::min(options_.staging_threshold_bytes, std::size_t{4} << 20);
    }
    // Downloads from the staging threshold up are staged: a larger block would never be filled.
    options_.bounce_max_bytes =
        std::min(options_.bounce_max_bytes, options_.staging_threshold_bytes);
    // The ring holds 16 writes of this size in pinned memory: bounded at 1 MiB a write (16 MiB).
    options_.buffered_upload_max_bytes =
        std::min(options_.buffered_upload_max_bytes, std::size_t{1} << 20);
    if (options_.pinned_budget_bytes == Options::automatic) {
      const std::size_t lanes = 2 * options_.staging_chunk_bytes * options_.staging_chunks;
      options_.pinned_budget_bytes = lanes + 16 * options_.buffered_upload_max_bytes +
                                     4 * options_.bounce_max_bytes + (std::size_t{128} << 20);
    }
    if (options_.pool_limit_bytes == Options::automatic) {
      options_.pool_limit_bytes = static_cast<std::size_t>(
          std::min<std::uint64_t>(info_.global_mem_bytes / 4, std::uint64_t{1} << 30));
    }
  }

  /// The device facts clbuf needs: its base address alignment, whether it is OpenCL 1.2 (which
  /// gives the main queue a marker buffer of its own).
  void learn_device(cl_device_id device, const char* operation) {
    const cl_uint align_bits =
        device_value<cl_uint>(device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, operation);
    base_align_bytes_ = std::max<std::size_t>(1, align_bits / 8);
    sub_buffer_rule_ = detail::sub_buffer_rule(info_.platform);
    // "OpenCL 1.0 ..." and "OpenCL 1.1 ..." devices have no clEnqueueFillBuffer.
    const std::string version = device_string(device, CL_DEVICE_VERSION, operation);
    opencl_1_2_ = version.rfind("OpenCL 1.0", 0) != 0 && version.rfind("OpenCL 1.1", 0) != 0;
    if (opencl_1_2_) {  // the main queue's markers are writes into a buffer of its own (queue.hpp)
      cl_int err = CL_SUCCESS;
      cl::Buffer fence(
          CLBUF_CL(clCreateBuffer)(context_(), CL_MEM_READ_WRITE, sizeof(cl_uint), nullptr, &err),
          false);
      check(err, operation, "clCreateBuffer (the queue's marker buffer)");
      queue_.set_fence(std::move(fence));
    }
  }

  static constexpr std::size_t max_staging_chunks = 4096;

  Options options_;
  cl::Context context_;
  Queue queue_;
  DeviceInfo info_;
  std::string reason_;
  std::size_t base_align_bytes_ = 1;
  SubBufferRule sub_buffer_rule_ = SubBufferRule::with_view;
  bool opencl_1_2_ = true;
  mutable std::mutex side_mutex_;
  mutable Queue side_;  // side_queue(), under side_mutex_
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_DEVICE_CONTEXT_HPP
