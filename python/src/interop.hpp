// SPDX-License-Identifier: MIT
// pyopencl interop, zero copy on the same cl_mem: int_ptr handles, BufferManager.from_pyopencl,
// adopt(), to_pyopencl(), events both ways. pyopencl is imported only when one of these is used.
#ifndef CLBUF_PYTHON_INTEROP_HPP
#define CLBUF_PYTHON_INTEROP_HPP

#include "buffers.hpp"

namespace clbuf_python {

/// The module pyopencl (or pyopencl.array); clbuf.Error naming `operation` when it cannot be
/// imported.
py::module_ import_pyopencl(const char* operation, const char* name = "pyopencl");

/// `wait_for` (None, or a sequence of clbuf.Future and pyopencl.Event) as OpenCL events.
std::vector<cl::Event> as_events(const char* operation, const py::handle& wait_for);

/// A cl_event as a pyopencl.Event (retained); None for a null event.
py::object to_pyopencl_event(const char* operation, cl_event event);

/// A pyopencl.array.Array of the buffer's shape and dtype on the same memory.
py::object to_pyopencl(const std::shared_ptr<Handle>& handle);

/// A cl_mem, cl_context, ... as the Python int pyopencl's from_int_ptr() takes.
template <class H>
std::uintptr_t int_ptr(H handle) noexcept {
  return reinterpret_cast<std::uintptr_t>(handle);
}

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_INTEROP_HPP
