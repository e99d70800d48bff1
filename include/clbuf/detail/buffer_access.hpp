// SPDX-License-Identifier: MIT
// The byte-level view of a DeviceBuffer for layers built over BufferManager (clbuf/mpi.hpp):
// the pool Allocation behind it (its cl_mem and, on a CPU device, the host block clbuf allocated)
// and its root buffer. Only the typed facades use it; everything below works on bytes.
#ifndef CLBUF_DETAIL_BUFFER_ACCESS_HPP
#define CLBUF_DETAIL_BUFFER_ACCESS_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/pool.hpp>

namespace clbuf {
namespace detail {

struct BufferAccess {
  /// The memory a buffer uses: bytes from `offset` of its OpenCL buffer (and of the host block
  /// `host`, when the memory is one).
  template <class T>
  static const Allocation& memory(const DeviceBuffer<T>& buffer) noexcept {
    return buffer.memory_;
  }
  /// The OpenCL buffer that owns the bytes (a view's parent).
  template <class T>
  static cl_mem root(const DeviceBuffer<T>& buffer) noexcept {
    return buffer.root();
  }
  /// The CL_MEM_HOST_* flags of an adopted buffer (0 for memory clbuf made).
  template <class T>
  static cl_mem_flags host_access(const DeviceBuffer<T>& buffer) noexcept {
    return buffer.host_access_;
  }
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_BUFFER_ACCESS_HPP
