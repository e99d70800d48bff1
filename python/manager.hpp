// SPDX-License-Identifier: MIT
// clbuf.BufferManager over one clbuf::BufferManager, and clbuf.DeviceInfo.
#ifndef CLBUF_PYTHON_MANAGER_HPP
#define CLBUF_PYTHON_MANAGER_HPP

#include "futures.hpp"

namespace clbuf_python {

inline py::dict to_dict(const clbuf::DirectionStats& d) {
  py::dict out;
  out["operations"] = d.operations;
  out["bytes"] = d.bytes;
  out["nanoseconds"] = d.nanoseconds;
  out["gigabytes_per_second"] = d.gigabytes_per_second();
  return out;
}

inline py::dict to_dict(const clbuf::TransferStats& stats) {
  py::dict pool;
  pool["hits"] = stats.pool.hits;
  pool["misses"] = stats.pool.misses;
  pool["released"] = stats.pool.released;
  pool["trims"] = stats.pool.trims;
  pool["retries"] = stats.pool.retries;
  pool["cached_buffers"] = stats.pool.cached_buffers;
  pool["cached_bytes"] = stats.pool.cached_bytes;
  pool["limit_bytes"] = stats.pool.limit_bytes;
  py::dict out;
  out["summary"] = stats.summary();
  out["upload"] = to_dict(stats.upload);
  out["download"] = to_dict(stats.download);
  out["copy"] = to_dict(stats.copy);
  out["pool"] = pool;
  return out;
}

/// clbuf.BufferManager: the seed's API over one clbuf::BufferManager. Every check of buffers,
/// ranges and the manager's state is the library's; this class checks only the Python side
/// (types, dtypes, shapes). The library's manager is safe to share between threads and
/// orders cleanup() after calls in progress, so no lock is needed here.
class Manager {
 public:
  explicit Manager(const std::optional<std::string>& selector) {
    NoGil release;
    manager_ = selector ? std::make_unique<clbuf::BufferManager>(*selector)
                        : std::make_unique<clbuf::BufferManager>();
  }

  const clbuf::DeviceInfo& device() const noexcept { return manager_->device(); }
  const std::string& selection_reason() const noexcept { return manager_->selection_reason(); }
  std::string memory_model() const { return clbuf::to_string(manager_->memory_model()); }
  py::dict stats() const { return to_dict(manager_->stats()); }
  void reset_stats() noexcept { manager_->reset_stats(); }

  std::shared_ptr<Handle> upload_to_device(const py::handle& data) {
    const py::array array = as_contiguous_array("upload_to_device", data);
    auto handle = new_handle(array);
    const auto* bytes = static_cast<const std::uint8_t*>(array.data());
    const auto count = static_cast<std::size_t>(array.nbytes());
    {
      NoGil release;
      handle->memory = manager_->upload(bytes, count);
    }
    return handle;
  }

  py::array download_from_device(const py::handle& device_buffer, const py::handle& shape,
                                 const py::handle& dtype) {
    const char* op = "download_from_device";
    const std::shared_ptr<Handle> handle = as_handle(op, device_buffer, "device_buffer");
    py::array out = new_array(op, *handle, shape, dtype);
    auto* bytes = static_cast<std::uint8_t*>(out.mutable_data());
    const std::size_t count = handle->nbytes();
    {
      NoGil release;
      manager_->download(handle->memory, bytes, count, 0);
    }
    return out;
  }

  void copy_device_buffer(const py::handle& source_buffer, const py::handle& dest_buffer,
                          const py::handle& size_bytes) {
    const char* op = "copy_device_buffer";
    const std::shared_ptr<Handle> source = as_handle(op, source_buffer, "source_buffer");
    const std::shared_ptr<Handle> dest = as_handle(op, dest_buffer, "dest_buffer");
    const std::size_t bytes = as_size(op, size_bytes, "size_bytes");
    // Blocking: measured faster than copy_bytes_async on small copies (one queue command less on
    // a CPU device), and no slower on large ones once the next read waits for the copy.
    NoGil release;
    manager_->copy_bytes(source->memory, dest->memory, bytes);
  }

  std::shared_ptr<Pending> upload_async(const py::handle& data) {
    const py::array array = as_contiguous_array("upload_async", data);
    auto handle = new_handle(array);
    const auto* bytes = static_cast<const std::uint8_t*>(array.data());
    const auto count = static_cast<std::size_t>(array.nbytes());
    Pending::Upload future;
    {
      NoGil release;
      future = manager_->upload_async(bytes, count);
    }
    // The device reads the array in place: the Pending keeps it alive until the upload is done.
    return std::make_shared<Pending>(std::move(future), std::move(handle), array);
  }

  std::shared_ptr<Pending> download_async(const py::handle& device_buffer, const py::handle& shape,
                                          const py::handle& dtype) {
    const char* op = "download_async";
    const std::shared_ptr<Handle> handle = as_handle(op, device_buffer, "device_buffer");
    py::array out = new_array(op, *handle, shape, dtype);
    auto* bytes = static_cast<std::uint8_t*>(out.mutable_data());
    const std::size_t count = handle->nbytes();
    Pending::Download future;
    {
      NoGil release;
      future = manager_->download_async(handle->memory, bytes, count, 0);
    }
    return std::make_shared<Pending>(std::move(future), std::move(out));
  }

  void cleanup() {
    NoGil release;
    manager_->cleanup();
  }

 private:
  static std::shared_ptr<Handle> new_handle(const py::array& array) {
    auto handle = std::make_shared<Handle>();
    handle->dtype = array.dtype();
    handle->shape.assign(array.shape(), array.shape() + array.ndim());
    return handle;
  }

  /// An uninitialised array for the whole of `handle`: `shape`/`dtype`, or (None) as uploaded.
  static py::array new_array(const char* operation, const Handle& handle, const py::handle& shape,
                             const py::handle& dtype) {
    const py::dtype type = dtype.is_none() ? handle.dtype : as_dtype(operation, dtype);
    const std::vector<py::ssize_t> extents =
        shape.is_none() ? handle.shape : as_shape(operation, shape);
    const std::size_t bytes = shape_bytes(operation, extents, type);
    if (bytes != handle.nbytes()) {
      fail(operation, CL_INVALID_VALUE,
           "shape " + describe_shape(extents) + " of " + describe_dtype(type) + " holds " +
               std::to_string(bytes) + " bytes but the buffer holds " +
               std::to_string(handle.nbytes()) + " bytes (uploaded as shape " +
               describe_shape(handle.shape) + " of " + describe_dtype(handle.dtype) + ")");
    }
    return py::array(type, extents);
  }

  std::unique_ptr<clbuf::BufferManager> manager_;
};

template <>
struct PythonName<Manager> {
  static constexpr const char* name = "BufferManager";
  static constexpr const char* made_by = "create one with clbuf.BufferManager(selector)";
};

void bind_manager(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_MANAGER_HPP
