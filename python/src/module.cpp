// SPDX-License-Identifier: MIT
// The extension module `clbuf._clbuf` of the Python package `clbuf` (python/clbuf/), over the
// clbuf C++ core, one file a concern:
//   common.*    clbuf.Error, releasing the GIL, objects made by __new__ alone, argument checks
//   manager.*   clbuf.BufferManager, clbuf.DeviceInfo
//   values.*    a Python number as one element of a dtype (fill's value), exactly
//   dtype_dispatch.hpp  the one dispatch on element size (Bytes16, fill_as), for typed calls
//   buffers.*   clbuf.DeviceBuffer
//   futures.*   clbuf.Future
//   host_memory.*  pinned numpy arrays (pinned_empty) and mappings (map)
//   interop.*   pyopencl: int_ptr handles, from_pyopencl, adopt, to_pyopencl, events
//   mpi.*       clbuf.mpi.Communicator over clbuf::mpi (built where MPI is found)
//   group.*     clbuf.DeviceGroup, clbuf.ShardedBuffer, clbuf.ShardedHalo (several devices)
//   paths.cpp   the transfer path of each size and the resolved options, for `clbuf info`
//   files.cpp   clbuf.load and clbuf.save: .npy files straight to and from device memory
//   checkpoint.cpp  clbuf.Checkpoint: buffers saved to a folder and loaded back, atomic, checked
//   tiles.cpp   clbuf.stream_tiles, clbuf.plan_tiles, clbuf.Tile: arrays streamed in tiles
// Every failure is a clbuf.Error (a RuntimeError) with `.code`, the OpenCL error code, and
// nothing is changed. All OpenCL work, and every check of buffers, ranges and the manager's
// state, is the library's (clbuf::BufferManager); this extension checks only what Python passes
// in.
#include "group.hpp"
#include "manager.hpp"
#include "values.hpp"

namespace clbuf_python {
void bind_paths(py::module_& m);       // paths.cpp
void bind_files(py::module_& m);       // files.cpp
void bind_checkpoint(py::module_& m);  // checkpoint.cpp
void bind_tiles(py::module_& m);       // tiles.cpp
}  // namespace clbuf_python

#ifdef CLBUF_PYTHON_MPI
namespace clbuf_python {
void bind_mpi(py::module_& m);  // mpi.cpp
}
#endif

using namespace clbuf_python;

// The private extension of the package `clbuf` (python/clbuf/__init__.py), which defines the
// Python class clbuf.Error before it imports this module.
PYBIND11_MODULE(_clbuf, m) {
  m.doc() = "Typed, checked host<->device transfers over OpenCL (the clbuf C++ library).";
  m.attr("__version__") = std::to_string(CLBUF_VERSION_MAJOR) + "." +
                          std::to_string(CLBUF_VERSION_MINOR) + "." +
                          std::to_string(CLBUF_VERSION_PATCH);

  m.def(
      "error_name",
      [](const Int& code) { return clbuf::error_name(as_int("error_name", code, "code")); },
      py::arg("code"),
      "The name of an OpenCL error code, e.g. error_name(-30) == 'CL_INVALID_VALUE' (clbuf.Error "
      "has it as .name).");
  m.def(
      "_trace_scope",
      [](const std::string& path) {
        py::gil_scoped_release release;  // writing the files out may wait for a driver's thread
        return clbuf::detail::scoped_trace_path(&path);
      },
      py::arg("path"),
      "Sets the trace path of the managers made from now on (clbuf.trace(); '': none), writes "
      "every open trace file out, and returns the path set before.");
  m.def(
      "_trace_enter",
      [](const std::string& path) {
        py::gil_scoped_release release;  // as _trace_scope
        return clbuf::detail::enter_trace_scope(path);
      },
      py::arg("path"),
      "Enters clbuf.trace(path): as _trace_scope, but an empty path or one holding a NUL is a "
      "clbuf.Error (CL_INVALID_VALUE) and nothing is set.");
  m.def(
      "trace_write_errors", [] { return clbuf::trace_write_errors(); },
      "The trace files whose writing has failed since the program started (a full disk, the "
      "file-size limit of ulimit -f), one line each naming the file and the reason; '' when every "
      "write succeeded. Such a file keeps the events written before it failed (valid JSON) and "
      "one line on stderr said so; tracing never fails a transfer.");
  py::object error = py::module_::import("clbuf").attr("Error");
  m.attr("Error") = error;
  error_type = error.ptr();  // the module's attribute keeps it alive

  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const clbuf::Error& e) {
      py::object instance = py::reinterpret_borrow<py::object>(error_type)(e.what(), e.code());
      PyErr_SetObject(error_type, instance.ptr());
    }
  });

  bind_buffers(m);
  bind_futures(m);
  bind_host_memory(m);
  bind_manager(m);
  bind_group(m);
  bind_paths(m);
  bind_files(m);
  bind_checkpoint(m);
  bind_tiles(m);
#ifdef CLBUF_PYTHON_MPI
  bind_mpi(m);
#endif

  // numpy's limit on dimensions (NPY_MAXDIMS) went from 32 to 64 in numpy 2.0.
  const std::string numpy_version = text_of(py::module_::import("numpy").attr("__version__"));
  int numpy_major = 0;
  for (const char c : numpy_version) {
    if (c < '0' || c > '9') break;
    numpy_major = numpy_major * 10 + (c - '0');
  }
  numpy_max_dims = numpy_major >= 2 ? 64 : 32;

  init_values();
  register_exit_handler();
}
