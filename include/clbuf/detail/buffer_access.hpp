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
  /// Makes `buffer`'s memory shared (as a view of it would) before other threads can see the
  /// buffer, so that views made later from several threads change none of its members; for
  /// front ends (the Python module) whose buffers any thread may reach.
  template <class T>
  static void prepare_for_views(DeviceBuffer<T>& buffer) {
    if (buffer.valid() && !buffer.empty()) buffer.share_memory();
  }
  /// Keeps the memory of a buffer readied by prepare_for_views() out of clbuf's pool for good
  /// (other code holds its cl_mem now); safe while other threads use the buffer.
  template <class T>
  static void keep_out_of_pool(const DeviceBuffer<T>& buffer) noexcept {
    if (detail::Lease* lease = buffer.shared_lease()) lease->reusable.store(false);
  }
  /// The CL_MEM_HOST_* and CL_MEM_READ_ONLY / CL_MEM_WRITE_ONLY flags of an adopted buffer (0
  /// for memory clbuf made).
  template <class T>
  static cl_mem_flags access(const DeviceBuffer<T>& buffer) noexcept {
    return buffer.access_;
  }
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_BUFFER_ACCESS_HPP
