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

/// BufferManager::memory_report() as a dict; "stream" holds the plan of a stream.
inline py::dict to_dict(const clbuf::MemoryReport& report) {
  py::dict stream;
  stream["tile_elements"] = report.stream.tile_elements;
  stream["in_flight"] = report.stream.in_flight;
  stream["device_bytes"] = report.stream.device_bytes;
  stream["budget_bytes"] = report.stream.budget_bytes;
  py::dict out;
  out["device_memory_bytes"] = report.device_memory_bytes;
  out["max_alloc_bytes"] = report.max_alloc_bytes;
  out["buffers"] = report.buffers;
  out["buffers_bytes"] = report.buffers_bytes;
  out["pool_cached_bytes"] = report.pool_cached_bytes;
  out["pinned_bytes"] = report.pinned_bytes;
  out["pinned_budget_bytes"] = report.pinned_budget_bytes;
  out["stream"] = stream;
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
  pool["in_use_buffers"] = stats.pool.in_use_buffers;
  pool["in_use_bytes"] = stats.pool.in_use_bytes;
  py::dict pinned;
  pinned["budget_bytes"] = stats.pinned.budget_bytes;
  pinned["allocated_bytes"] = stats.pinned.allocated_bytes;
  pinned["in_use_bytes"] = stats.pinned.in_use_bytes;
  pinned["cached_bytes"] = stats.pinned.cached_bytes;
  pinned["peak_bytes"] = stats.pinned.peak_bytes;
  pinned["leases"] = stats.pinned.leases;
  pinned["reuses"] = stats.pinned.reuses;
  pinned["allocations"] = stats.pinned.allocations;
  pinned["refusals"] = stats.pinned.refusals;
  pinned["trims"] = stats.pinned.trims;
  pinned["leaked"] = stats.pinned.leaked;
  py::dict out;
  out["summary"] = stats.summary();
  out["upload"] = to_dict(stats.upload);
  out["download"] = to_dict(stats.download);
  out["copy"] = to_dict(stats.copy);
  out["pool"] = pool;
  out["pinned"] = pinned;
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
  /// A manager owned elsewhere (a DeviceGroup's; `shared` may alias and keep its owner alive).
  explicit Manager(std::shared_ptr<clbuf::BufferManager> shared) : manager_(std::move(shared)) {}

  clbuf::BufferManager& cpp() const noexcept { return *manager_; }
  const std::shared_ptr<clbuf::BufferManager>& shared() const noexcept { return manager_; }

  const clbuf::DeviceInfo& device() const noexcept { return manager_->device(); }
  const std::string& selection_reason() const noexcept { return manager_->selection_reason(); }
  std::string memory_model() const { return clbuf::to_string(manager_->memory_model()); }
  Dict stats() const { return to_dict(manager_->stats()); }
  void reset_stats() noexcept { manager_->reset_stats(); }
  Dict memory_report(std::size_t element_bytes) const {
    return to_dict(manager_->memory_report(clbuf::TileOptions(), element_bytes));
  }
  std::string explain_selection() const;
  std::uintptr_t context_int_ptr() const;
  std::uintptr_t queue_int_ptr() const;

  AnyBuffer upload_to_device(const HostData& data);
  WritableData download_from_device(const AnyBuffer& device_buffer, const OptionalShape& shape,
                                    const OptionalDType& dtype, const OptionalWritableData& out);
  void copy_device_buffer(const AnyBuffer& source_buffer, const AnyBuffer& dest_buffer,
                          const Int& size_bytes, const Int& src_offset, const Int& dst_offset);
  AnyBuffer empty(const Shape& shape, const DType& dtype);
  void fill(const AnyBuffer& buffer, const Number& value);
  void upload_into(const AnyBuffer& buffer, const HostData& data, const Int& offset);
  void upload_rect(const AnyBuffer& buffer, const HostData& array, const RegionArg& region);
  void download_rect(const AnyBuffer& buffer, const WritableData& array, const RegionArg& region);
  void copy_rect(const AnyBuffer& source, const AnyBuffer& dest, const RegionArg& region);

  std::shared_ptr<Pending> upload_async(const HostData& data, const WaitFor& wait_for);
  std::shared_ptr<Pending> download_async(const AnyBuffer& device_buffer,
                                          const OptionalShape& shape, const OptionalDType& dtype,
                                          const OptionalWritableData& out, const WaitFor& wait_for);
  std::shared_ptr<Pending> fill_async(const AnyBuffer& buffer, const Number& value,
                                      const WaitFor& wait_for);
  std::shared_ptr<Pending> upload_into_async(const AnyBuffer& buffer, const HostData& data,
                                             const Int& offset, const WaitFor& wait_for);
  std::shared_ptr<Pending> copy_async(const AnyBuffer& source_buffer, const AnyBuffer& dest_buffer,
                                      const Int& size_bytes, const Int& src_offset,
                                      const Int& dst_offset, const WaitFor& wait_for);

  std::shared_ptr<Mapping> map(const AnyBuffer& buffer, const Str& mode);
  py::array pinned_empty(const Shape& shape, const DType& dtype);
  std::shared_ptr<Handle> adopt(const PyopenclMemory& object);

  void finish() {
    NoGil release;
    manager_->finish();
  }
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
  static constexpr const char* scope = "";
  static constexpr const char* made_by = "create one with clbuf.BufferManager(selector)";
};

void bind_manager(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_MANAGER_HPP
