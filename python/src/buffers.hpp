// SPDX-License-Identifier: MIT
// clbuf.DeviceBuffer: device memory with the numpy dtype and shape of its contents. The memory is
// a clbuf::DeviceBuffer<std::uint8_t> (views included: a view is a C++ view, the root buffer plus
// a byte offset); typed work (fill, reductions) goes through typed_alias().
#ifndef CLBUF_PYTHON_BUFFERS_HPP
#define CLBUF_PYTHON_BUFFERS_HPP

#include "common.hpp"

#include <clbuf/detail/buffer_access.hpp>

#include <typeindex>

namespace clbuf_python {

/// Device memory holding an array's bytes, with the dtype and shape it was uploaded with.
struct Handle {
  clbuf::DeviceBuffer<std::uint8_t> memory;
  py::dtype dtype;
  std::vector<py::ssize_t> shape;
  /// The manager that made it (views are made by it); null for a Handle never filled in.
  std::shared_ptr<clbuf::BufferManager> manager;
  /// A view's root Handle (a view of a view: the same root); null for a root.
  std::shared_ptr<Handle> root;
  /// The memory was handed to pyopencl (to_pyopencl()): it never goes back to clbuf's pool.
  bool exported = false;
  /// `memory` as DeviceBuffer<T> for typed work (fill of wide dtypes), one per T, made by
  /// alias_of() with the GIL held on first use and kept for the Handle's life; destroyed before
  /// `memory` (declared after it), so its retained cl_mem is gone when the memory is pooled.
  std::vector<std::pair<std::type_index, std::shared_ptr<void>>> aliases;

  /// Takes `made` as this Handle's memory, its memory shared at once (before Python can hand the
  /// Handle to another thread), so that slicing never changes `memory` under a transfer.
  void own(clbuf::DeviceBuffer<std::uint8_t>&& made) {
    clbuf::detail::BufferAccess::prepare_for_views(made);
    memory = std::move(made);
  }

  std::size_t nbytes() const noexcept { return memory.size_bytes(); }
  std::size_t itemsize() const noexcept { return static_cast<std::size_t>(dtype.itemsize()); }
  std::size_t size() const noexcept {
    const std::size_t item = itemsize();
    return item == 0 ? 0 : nbytes() / item;
  }
};

template <>
struct PythonName<Handle> {
  static constexpr const char* name = "DeviceBuffer";
  static constexpr const char* scope = "";
  static constexpr const char* made_by =
      "DeviceBuffers come from upload_to_device(), upload_async(), empty() and adopt()";
};

template <>
struct PythonName<clbuf::DeviceInfo> {
  static constexpr const char* name = "DeviceInfo";
  static constexpr const char* scope = "DeviceInfo.";
  static constexpr const char* made_by =
      "DeviceInfos come from BufferManager.device and list_devices()";
};

/// `value` as a clbuf.DeviceBuffer; clbuf.Error (CL_INVALID_MEM_OBJECT) for anything else.
std::shared_ptr<Handle> as_handle(const char* operation, const py::handle& value, const char* what);

/// A new Handle of `manager` with `dtype` and `shape` and no memory yet.
std::shared_ptr<Handle> new_handle(std::shared_ptr<clbuf::BufferManager> manager,
                                   const py::dtype& dtype, std::vector<py::ssize_t> shape);

/// The elements of a Handle's bytes as C++ type T (sizeof(T) == itemsize): the same memory
/// adopted as DeviceBuffer<T> (retained, never pooled), viewed at the Handle's offset.
/// @throws clbuf.Error when the bytes do not start at a multiple of sizeof(T) in their buffer.
template <class T>
clbuf::DeviceBuffer<T> typed_alias(const char* operation, clbuf::BufferManager& manager,
                                   const clbuf::DeviceBuffer<std::uint8_t>& bytes) {
  if (bytes.size_bytes() == 0) return clbuf::DeviceBuffer<T>();
  const std::size_t offset = bytes.native_offset_bytes();
  if (offset % sizeof(T) != 0 || bytes.size_bytes() % sizeof(T) != 0) {
    fail(operation, CL_MISALIGNED_SUB_BUFFER_OFFSET,
         "the buffer's bytes start at byte " + std::to_string(offset) +
             " of their OpenCL buffer, not a multiple of its " + std::to_string(sizeof(T)) +
             "-byte elements");
  }
  std::size_t capacity = 0;
  clbuf::detail::check(
      clGetMemObjectInfo(bytes.native_root()(), CL_MEM_SIZE, sizeof(capacity), &capacity, nullptr),
      operation, "clGetMemObjectInfo");
  clbuf::DeviceBuffer<T> whole =
      manager.adopt<T>(cl::Buffer(bytes.native_root()(), true), capacity / sizeof(T));
  return manager.view(whole, offset / sizeof(T), bytes.size_bytes() / sizeof(T));
}

/// typed_alias() of `handle`'s memory, adopted by `manager` (the one doing the work: any
/// manager of the buffer's context; the alias, an adopted buffer, stays valid after it is
/// cleaned up), made once (the GIL held: Python threads never make one at the same time) and
/// shared afterwards; the caller's copy of the pointer keeps it alive while the GIL is released.
template <class T>
std::shared_ptr<clbuf::DeviceBuffer<T>> alias_of(const char* operation, Handle& handle,
                                                 clbuf::BufferManager& manager) {
  for (const auto& [type, alias] : handle.aliases) {
    if (type == std::type_index(typeid(T))) {
      return std::static_pointer_cast<clbuf::DeviceBuffer<T>>(alias);
    }
  }
  auto alias =
      std::make_shared<clbuf::DeviceBuffer<T>>(typed_alias<T>(operation, manager, handle.memory));
  handle.aliases.emplace_back(std::type_index(typeid(T)), alias);
  return alias;
}

void bind_buffers(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_BUFFERS_HPP
