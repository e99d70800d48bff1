// SPDX-License-Identifier: MIT
// clbuf::set_view_args: a buffer or a view of one as two kernel arguments (the OpenCL buffer its
// bytes live in and the element offset), so kernels reach views at any offset with no
// sub-buffer.
#ifndef CLBUF_KERNEL_HPP
#define CLBUF_KERNEL_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <string>

namespace clbuf {

/// Sets argument `index` of `kernel` to the OpenCL buffer `buffer`'s bytes live in
/// (native_root()) and argument `index + 1` to the element offset of its first element there
/// (native_offset_bytes() / sizeof(T), a `cl_ulong`), for a kernel that takes
/// `__global T* data, ulong offset` and reads `data[offset + i]`. Works for a view at any
/// offset and for a whole buffer (offset 0), on every driver, with no sub-buffer; an empty
/// buffer passes a null buffer. Wraps clSetKernelArg (twice).
/// @throws Error CL_INVALID_MEM_OBJECT for a moved-from or default-constructed buffer; the
///         driver's code naming the argument, e.g. CL_INVALID_ARG_SIZE when argument `index + 1`
///         is not a `ulong`, CL_INVALID_ARG_INDEX past the kernel's arguments.
template <class T>
void set_view_args(const cl::Kernel& kernel, cl_uint index, const DeviceBuffer<T>& buffer) {
  const char* op = "set_view_args";
  if (!buffer.valid()) detail::fail_invalid_buffer(op);
  const cl_mem memory = buffer.native_root()();
  const cl_ulong offset = buffer.native_offset_bytes() / sizeof(T);
  const auto set = [&](cl_uint at, std::size_t size, const void* value, const char* what) {
    const cl_int err = CLBUF_CL(clSetKernelArg)(kernel(), at, size, value);
    if (err != CL_SUCCESS) {
      detail::fail(op, err,
                   "argument " + std::to_string(at) + " (" + what + ", " + std::to_string(size) +
                       " bytes) of the kernel");
    }
  };
  set(index, sizeof(cl_mem), &memory, "the buffer, native_root()");
  set(index + 1, sizeof(cl_ulong), &offset, "the element offset, a ulong");
}

}  // namespace clbuf

#endif  // CLBUF_KERNEL_HPP
