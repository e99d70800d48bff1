// SPDX-License-Identifier: MIT
// numpy's .npy files and a DeviceGroup's ShardedBuffer: one file, each shard's part of the array
// read from (or written at) its own place in it, through its device's manager: pinned chunks of
// that manager's pool pipelined with its DMAs (a CPU device's memory read into straight), as
// BufferManager::load_npy / save_npy do for one buffer (docs/design.md "Files and checkpoints").
// The shards are moved one after another (one file, one disk); the header is checked before
// any shard is allocated, and a save is atomic (temporary file, fsync, rename) over all shards.
#ifndef CLBUF_SHARDED_NPY_HPP
#define CLBUF_SHARDED_NPY_HPP

#include <clbuf/detail/buffer_access.hpp>
#include <clbuf/detail/npy_io.hpp>
#include <clbuf/device_group.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/sharded_buffer.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace clbuf {

/// The array of the .npy file `path` (T's dtype, C order; as BufferManager::load_npy checks it)
/// as a ShardedBuffer of `group` split by `partition`, with `halo` units of ghost elements
/// before and after each part (left unwritten); the file's shape in `shape` when set.
/// @throws Error as BufferManager::load_npy() (naming "DeviceGroup::load_npy") and
///         DeviceGroup::allocate().
template <class T>
ShardedBuffer<T> load_npy(DeviceGroup& group, const std::string& path,
                          const Partition& partition = Partition(), std::size_t halo = 0,
                          std::vector<std::size_t>* shape = nullptr) {
  return detail::guard_host_memory("DeviceGroup::load_npy", [&] {
    const char* op = "DeviceGroup::load_npy";
    const detail::NpyFile npy = detail::open_npy<T>(op, path);
    ShardedBuffer<T> array = group.allocate<T>(npy.header.elements, partition, halo);
    for (std::size_t i = 0; i < array.shards(); ++i) {
      if (array.count(i) == 0) continue;
      BufferManager& manager = group.manager(array.device(i));
      const auto entry = detail::ManagerAccess::enter(manager, op);
      detail::TransferEngine& engine = detail::ManagerAccess::engine(manager);
      const detail::Allocation& memory = detail::BufferAccess::memory(array.shard(i));
      if (memory.host != nullptr && !memory.fresh) engine.queue().finish(op);
      detail::file_to_device(op, npy.file, npy.header.data_offset + array.offset(i) * sizeof(T),
                             memory, array.ghost() * sizeof(T), array.count(i) * sizeof(T),
                             engine.chunk_io(), detail::file_chunk(engine, sizeof(T)),
                             npy.pass(nullptr));
      engine.settle(op);
    }
    if (shape != nullptr) *shape = npy.header.shape;
    return array;
  });
}

/// Writes `array` (its parts, not the ghost elements) as the .npy file `path` of `shape`
/// (empty: 1-D of size()), atomically as BufferManager::save_npy() does.
/// @throws Error as BufferManager::save_npy() (naming "DeviceGroup::save_npy"); CL_INVALID_VALUE
///         for a moved-from array.
template <class T>
void save_npy(DeviceGroup& group, const std::string& path, const ShardedBuffer<T>& array,
              std::vector<std::size_t> shape = {}) {
  detail::guard_host_memory("DeviceGroup::save_npy", [&] {
    const char* op = "DeviceGroup::save_npy";
    if (!array.valid()) detail::fail(op, CL_INVALID_VALUE, "the ShardedBuffer holds nothing");
    if (shape.empty()) shape.push_back(array.size());
    detail::check_shape(op, shape, array.size());
    const std::string header = detail::format_npy_header(detail::npy_descr<T>(), shape);
    detail::AtomicFile out(op, path);
    out.file().write_at(op, header.data(), header.size(), 0);
    for (std::size_t i = 0; i < array.shards(); ++i) {
      if (array.count(i) == 0) continue;
      BufferManager& manager = group.manager(array.device(i));
      const auto entry = detail::ManagerAccess::enter(manager, op);
      detail::TransferEngine& engine = detail::ManagerAccess::engine(manager);
      const detail::Allocation& memory = detail::BufferAccess::memory(array.shard(i));
      if (memory.host != nullptr) engine.queue().finish(op);
      detail::device_to_file(op, memory, array.ghost() * sizeof(T), array.count(i) * sizeof(T),
                             out.file(), header.size() + array.offset(i) * sizeof(T),
                             engine.chunk_io(), detail::file_chunk(engine, sizeof(T)),
                             detail::FilePass());
      engine.settle(op);
    }
    out.commit(op);
  });
}

}  // namespace clbuf

#endif  // CLBUF_SHARDED_NPY_HPP
