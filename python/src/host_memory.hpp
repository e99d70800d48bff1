// SPDX-License-Identifier: MIT
// Host memory the device reads and writes: pinned numpy arrays (bm.pinned_empty) and mappings
// (bm.map). Both give numpy arrays whose memory lives exactly as long as the arrays do, so no use
// of an array can touch freed memory.
#ifndef CLBUF_PYTHON_HOST_MEMORY_HPP
#define CLBUF_PYTHON_HOST_MEMORY_HPP

#include "buffers.hpp"

namespace clbuf_python {

/// The base object of a pinned_empty() array: owns the pinned block the array's memory is.
struct PinnedMemory {
  clbuf::PinnedBuffer<std::uint8_t> block;
};

/// The pinned block that is exactly `array`'s memory, or null (any other array, a slice of a
/// pinned array included, takes the pageable path).
clbuf::PinnedBuffer<std::uint8_t>* pinned_block_of(const py::array& array);

/// A new array of `shape` and `dtype` over new pinned memory of `manager`.
py::array pinned_empty(clbuf::BufferManager& manager, const py::handle& shape,
                       const py::handle& dtype);

/// bm.map(buf, mode): a context manager whose __enter__ gives a numpy array (clbuf's
/// MappedArray) of the buffer's shape and dtype over the mapped bytes, and whose __exit__
/// unmaps. Where the device's mapping is clbuf's own host block of the buffer (a CPU device:
/// zero copy), the array is over it, and the Mapping keeps the buffer, and with it the block,
/// alive as long as the array; elsewhere the array is over pinned memory the Mapping owns,
/// filled from the device at entry (modes "r" and "rw") and written back at exit ("w", "rw").
/// Either way the array's memory outlives every use of the array: after the block the array
/// raises clbuf.Error (MappedArray checks `closed`), and what bypasses that check (a view made
/// with np.asarray) reads memory that is still valid, never freed or unmapped memory.
class Mapping {
 public:
  /// Maps `handle` by `manager` (any manager of the buffer's context).
  Mapping(std::shared_ptr<Handle> handle, std::shared_ptr<clbuf::BufferManager> manager,
          clbuf::MapMode mode);
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  /// The array over the mapped bytes (the first call maps).
  py::object enter(const py::object& self);
  /// Unmaps (writes back); idempotent.
  void close();
  bool closed() const noexcept { return closed_; }
  bool zero_copy() const noexcept { return zero_copy_; }
  std::string mode() const;

 private:
  std::shared_ptr<Handle> handle_;
  std::shared_ptr<clbuf::BufferManager> manager_;
  clbuf::MapMode mode_;
  clbuf::MappedView<std::uint8_t> view_;    // zero copy: the mapping itself
  clbuf::PinnedBuffer<std::uint8_t> copy_;  // otherwise: the array's memory
  bool entered_ = false;
  bool closed_ = false;
  bool zero_copy_ = false;
};

template <>
struct PythonName<Mapping> {
  static constexpr const char* name = "_Mapping";
  static constexpr const char* scope = "map";
  static constexpr const char* made_by = "mappings come from BufferManager.map()";
};

template <>
struct PythonName<PinnedMemory> {
  static constexpr const char* name = "_PinnedMemory";
  static constexpr const char* scope = "pinned_empty";
  static constexpr const char* made_by = "pinned memory comes from BufferManager.pinned_empty()";
};

/// The mode argument of map(): "r", "w" or "rw".
clbuf::MapMode as_map_mode(const char* operation, const py::handle& mode);

void bind_host_memory(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_HOST_MEMORY_HPP
