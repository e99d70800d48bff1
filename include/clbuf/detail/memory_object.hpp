// SPDX-License-Identifier: MIT
// OpenCL memory objects that clbuf does not allocate from its pool: an application's buffer
// being adopted (what OpenCL says about it), and the sub-buffer a view hands out from native().
// clbuf's own commands never address a sub-buffer of its making: a view is its root buffer plus
// a byte offset (Allocation::offset). Sub-buffers must start at CL_DEVICE_MEM_BASE_ADDR_ALIGN,
// and NVIDIA's driver crashes releasing overlapping ones in the wrong order
// (detail/sub_buffers.hpp); views have neither limit.
#ifndef CLBUF_DETAIL_MEMORY_OBJECT_HPP
#define CLBUF_DETAIL_MEMORY_OBJECT_HPP

#include <clbuf/detail/pool.hpp>
#include <clbuf/detail/sub_buffers.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>

namespace clbuf {
namespace detail {

/// What clGetMemObjectInfo says about a buffer to adopt.
struct MemoryFacts {
  cl_context context = nullptr;
  std::size_t size = 0;     ///< CL_MEM_SIZE
  cl_mem parent = nullptr;  ///< CL_MEM_ASSOCIATED_MEMOBJECT: set for a sub-buffer
  std::size_t offset = 0;   ///< CL_MEM_OFFSET within the parent
  /// Its CL_MEM_HOST_* flags (a sub-buffer's, else inherited) and CL_MEM_READ_ONLY /
  /// CL_MEM_WRITE_ONLY (what kernels may do; a sub-buffer's and its parent's).
  cl_mem_flags access = 0;
};

/// The CL_MEM_HOST_* bits of a CL_MEM_FLAGS value.
constexpr cl_mem_flags host_access_bits(cl_mem_flags flags) noexcept {
  return flags & (CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS);
}

/// The CL_MEM_READ_ONLY and CL_MEM_WRITE_ONLY bits of a CL_MEM_FLAGS value (kernels' access).
constexpr cl_mem_flags kernel_access_bits(cl_mem_flags flags) noexcept {
  return flags & (CL_MEM_READ_ONLY | CL_MEM_WRITE_ONLY);
}

/// @throws Error CL_INVALID_MEM_OBJECT for a null buffer, or the query's code.
inline MemoryFacts memory_facts(const char* operation, cl_mem buffer) {
  if (buffer == nullptr) fail(operation, CL_INVALID_MEM_OBJECT, "the cl::Buffer to adopt is null");
  MemoryFacts facts;
  const auto query = [&](cl_mem_info what, std::size_t size, void* value) {
    check(CLBUF_CL(clGetMemObjectInfo)(buffer, what, size, value, nullptr), operation,
          "clGetMemObjectInfo");
  };
  query(CL_MEM_CONTEXT, sizeof(facts.context), &facts.context);
  query(CL_MEM_SIZE, sizeof(facts.size), &facts.size);
  query(CL_MEM_ASSOCIATED_MEMOBJECT, sizeof(facts.parent), &facts.parent);
  query(CL_MEM_OFFSET, sizeof(facts.offset), &facts.offset);
  cl_mem_flags flags = 0;
  query(CL_MEM_FLAGS, sizeof(flags), &flags);
  cl_mem_flags host = host_access_bits(flags);
  cl_mem_flags kernel = kernel_access_bits(flags);
  if (facts.parent != nullptr) {  // a sub-buffer inherits what it does not set from its parent
    check(CLBUF_CL(clGetMemObjectInfo)(facts.parent, CL_MEM_FLAGS, sizeof(flags), &flags, nullptr),
          operation, "clGetMemObjectInfo");
    if (host == 0) host = host_access_bits(flags);
    kernel |= kernel_access_bits(flags);
  }
  facts.access = host | kernel;
  return facts;
}

/// The sub-buffer behind DeviceBuffer::native() of a view, made on the first call and given up
/// when the view is destroyed: released then, or, under SubBufferRule::ordered, once no newer
/// overlapping one is left (detail/sub_buffers.hpp). clbuf's own commands never use it.
class NativeView {
 public:
  NativeView(std::size_t base_align_bytes, SubBufferRule rule) noexcept
      : align_(base_align_bytes), rule_(rule) {}
  NativeView(const NativeView&) = delete;
  NativeView& operator=(const NativeView&) = delete;
  ~NativeView() {
    buffer_ = cl::Buffer();  // the view's reference first: a recorded sub-buffer goes in drop()
    if (ticket_ != 0) NativeSubBuffers::instance().drop(parent_, ticket_);
  }

  /// The sub-buffer of bytes [offset, offset + bytes) of `parent`, a buffer that is not itself
  /// a sub-buffer (OpenCL has no sub-buffer of a sub-buffer: a view of an adopted sub-buffer,
  /// `owner`, asks for one of the parent, with the sub-buffer's `flags`; 0 inherits the
  /// parent's). Wraps clCreateSubBuffer.
  /// @throws Error CL_MISALIGNED_SUB_BUFFER_OFFSET, before OpenCL is called, when the offset is
  ///         not a multiple of the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN; under
  ///         SubBufferRule::refuse CL_INVALID_OPERATION while an overlapping view's sub-buffer is
  ///         alive; else the driver's code.
  const cl::Buffer& get(const cl::Buffer& owner, cl_mem parent, std::size_t offset,
                        std::size_t bytes, cl_mem_flags flags) {
    return guard_host_memory("native", [&]() -> const cl::Buffer& {
      std::lock_guard<std::mutex> lock(mutex_);
      if (buffer_() != nullptr) return buffer_;
      if (offset % align_ != 0) fail_misaligned(offset);
      auto made = NativeSubBuffers::instance().make(rule_, owner, parent, offset, bytes, flags);
      buffer_ = std::move(made.first);
      parent_ = parent;
      ticket_ = made.second;
      return buffer_;
    });
  }

 private:
  [[noreturn]] void fail_misaligned(std::size_t offset) const {
    fail("native", CL_MISALIGNED_SUB_BUFFER_OFFSET,
         "the view starts " + std::to_string(offset) +
             " bytes into its buffer, not a multiple of the device's "
             "CL_DEVICE_MEM_BASE_ADDR_ALIGN of " +
             std::to_string(align_) +
             " bytes, so OpenCL cannot make a sub-buffer of it (clbuf's own operations take "
             "the view as it is); for a kernel, pass native_root() and native_offset_bytes() / "
             "sizeof(T) as an element offset (clbuf::set_view_args), or make the view at a "
             "multiple of " +
             std::to_string(align_) + " bytes");
  }

  std::mutex mutex_;
  const std::size_t align_;
  const SubBufferRule rule_;
  cl::Buffer buffer_;
  cl_mem parent_ = nullptr;
  std::uint64_t ticket_ = 0;  // NativeSubBuffers' record of buffer_; 0: none
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MEMORY_OBJECT_HPP
