// SPDX-License-Identifier: MIT
// clbuf.BufferManager over one clbuf::BufferManager, and clbuf.DeviceInfo.
#ifndef CLBUF_PYTHON_MANAGER_HPP
#define CLBUF_PYTHON_MANAGER_HPP

#include "futures.hpp"
#include "host_memory.hpp"

namespace clbuf_python {

inline py::dict to_dict(const clbuf::DirectionStats& d) {
  py::dict paths;
  paths["host_copy"] = d.paths.host_copy;
  paths["staged"] = d.paths.staged;
  paths["buffered"] = d.paths.buffered;
  paths["bounced"] = d.paths.bounced;
  paths["relayed"] = d.paths.relayed;
  paths["direct"] = d.paths.direct;
  py::dict out;
  out["operations"] = d.operations;
  out["bytes"] = d.bytes;
  out["nanoseconds"] = d.nanoseconds;
  out["gigabytes_per_second"] = d.gigabytes_per_second();
  out["paths"] = paths;
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

/// clbuf.BufferManager over one clbuf::BufferManager. Every check of buffers, ranges and the
/// manager's state is the library's; this class checks only the Python side (types, dtypes,
/// shapes, host data). The library's manager is safe to share between threads and orders
/// cleanup() after calls in progress, so no lock is needed here. Buffers share the C++ manager
/// (views are made by it), so it lives as long as the last of them.
class Manager {
 public:
  explicit Manager(const std::optional<std::string>& selector);
  Manager(cl::Context context, cl::CommandQueue queue);

  clbuf::BufferManager& cpp() const noexcept { return *manager_; }
  const std::shared_ptr<clbuf::BufferManager>& shared() const noexcept { return manager_; }

  const clbuf::DeviceInfo& device() const noexcept { return manager_->device(); }
  const std::string& selection_reason() const noexcept { return manager_->selection_reason(); }
  std::string memory_model() const { return clbuf::to_string(manager_->memory_model()); }
  py::dict stats() const { return to_dict(manager_->stats()); }
  void reset_stats() noexcept { manager_->reset_stats(); }
  std::string explain_selection() const;
  std::uintptr_t context_int_ptr() const;
  std::uintptr_t queue_int_ptr() const;

  py::object upload_to_device(const py::handle& data);
  py::object download_from_device(const py::handle& device_buffer, const py::handle& shape,
                                  const py::handle& dtype, const py::handle& out);
  void copy_device_buffer(const py::handle& source_buffer, const py::handle& dest_buffer,
                          const py::handle& size_bytes, const py::handle& src_offset,
                          const py::handle& dst_offset);
  py::object empty(const py::handle& shape, const py::handle& dtype);
  void fill(const py::handle& buffer, const py::handle& value);
  void upload_into(const py::handle& buffer, const py::handle& data, const py::handle& offset);
  void upload_rect(const py::handle& buffer, const py::handle& array, const py::handle& region);
  void download_rect(const py::handle& buffer, const py::handle& array, const py::handle& region);
  void copy_rect(const py::handle& source, const py::handle& dest, const py::handle& region);

  std::shared_ptr<Pending> upload_async(const py::handle& data, const py::handle& wait_for);
  std::shared_ptr<Pending> download_async(const py::handle& device_buffer, const py::handle& shape,
                                          const py::handle& dtype, const py::handle& out,
                                          const py::handle& wait_for);
  std::shared_ptr<Pending> fill_async(const py::handle& buffer, const py::handle& value,
                                      const py::handle& wait_for);
  std::shared_ptr<Pending> upload_into_async(const py::handle& buffer, const py::handle& data,
                                             const py::handle& offset, const py::handle& wait_for);
  std::shared_ptr<Pending> copy_async(const py::handle& source_buffer,
                                      const py::handle& dest_buffer, const py::handle& size_bytes,
                                      const py::handle& src_offset, const py::handle& dst_offset,
                                      const py::handle& wait_for);

  std::shared_ptr<Mapping> map(const py::handle& buffer, const py::handle& mode);
  py::array pinned_empty(const py::handle& shape, const py::handle& dtype);
  std::shared_ptr<Handle> adopt(const py::handle& object);

  void cleanup() {
    NoGil release;
    manager_->cleanup();
  }

 private:
  /// A Handle of this manager for `array`'s dtype and shape, no memory yet.
  std::shared_ptr<Handle> handle_for(const py::array& array) const;
  /// An uninitialised array for the whole of `handle`: `shape`/`dtype`, or (None) as uploaded.
  static py::array new_array(const char* operation, const Handle& handle, const py::handle& shape,
                             const py::handle& dtype);
  /// `out` checked against the buffer (writable, C-contiguous, dtype and byte count).
  static py::array out_array(const char* operation, const Handle& handle, const py::handle& out,
                             const py::handle& shape, const py::handle& dtype);

  std::shared_ptr<clbuf::BufferManager> manager_;
  std::string selector_;
};

template <>
struct PythonName<Manager> {
  static constexpr const char* name = "BufferManager";
  static constexpr const char* made_by = "create one with clbuf.BufferManager(selector)";
};

void bind_manager(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_MANAGER_HPP
