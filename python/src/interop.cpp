// SPDX-License-Identifier: MIT
// pyopencl interop (interop.hpp). Every object crosses as its OpenCL handle (int_ptr /
// from_int_ptr, retained), so both libraries use the same cl_mem, cl_context and cl_event.
#include "interop.hpp"

#include "futures.hpp"

namespace clbuf_python {

py::module_ import_pyopencl(const char* operation, const char* name) {
  try {
    return py::module_::import(name);
  } catch (py::error_already_set& error) {
    error.restore();
    const std::string why = take_python_error();
    fail(operation, CL_INVALID_OPERATION,
         std::string("needs ") + name + ", which cannot be imported (" + why +
             "); Debian: apt install python3-pyopencl");
  }
}

namespace {

/// obj.int_ptr as a pointer-sized integer.
std::uintptr_t int_ptr_of(const char* operation, const py::handle& object, const char* what) {
  try {
    return object.attr("int_ptr").cast<std::uintptr_t>();
  } catch (py::error_already_set& error) {
    error.restore();
    const std::string why = take_python_error();
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " (" + type_name(object) + ") has no int_ptr: " + why);
  } catch (const py::cast_error&) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " (" + type_name(object) + ") has an int_ptr that is not an int");
  }
}

bool is_instance(const py::handle& object, const py::module_& module, const char* name) {
  return py::isinstance(object, module.attr(name));
}

}  // namespace

std::vector<cl::Event> as_events(const char* operation, const py::handle& wait_for) {
  std::vector<cl::Event> events;
  if (wait_for.is_none()) return events;
  if (PySequence_Check(wait_for.ptr()) == 0 || py::isinstance<py::str>(wait_for)) {
    fail(operation, CL_INVALID_VALUE,
         "wait_for must be a list of clbuf.Future or pyopencl.Event, not " + type_name(wait_for));
  }
  const auto items = py::reinterpret_borrow<py::sequence>(wait_for);
  for (const py::handle item : items) {
    if (py::isinstance<Pending>(item)) {
      const std::shared_ptr<Pending> pending = held_object<Pending>(item);
      if (!pending) {
        fail(operation, CL_INVALID_EVENT, "wait_for holds an uninitialised clbuf.Future");
      }
      const cl_event event = pending->event();
      if (event != nullptr) events.emplace_back(event, true);
      continue;
    }
    const char* type = Py_TYPE(item.ptr())->tp_name;
    if (std::strstr(type, "Event") == nullptr) {
      fail(operation, CL_INVALID_EVENT,
           "wait_for holds a " + type_name(item) + "; it takes clbuf.Future and pyopencl.Event");
    }
    const py::module_ cl = import_pyopencl(operation);
    if (!is_instance(item, cl, "Event")) {
      fail(operation, CL_INVALID_EVENT,
           "wait_for holds a " + type_name(item) + "; it takes clbuf.Future and pyopencl.Event");
    }
    const std::uintptr_t event = int_ptr_of(operation, item, "an event of wait_for");
    if (event != 0) events.emplace_back(reinterpret_cast<cl_event>(event), true);
  }
  return events;
}

py::object to_pyopencl_event(const char* operation, cl_event event) {
  const py::module_ cl = import_pyopencl(operation);
  if (event == nullptr) return py::none();
  return cl.attr("Event").attr("from_int_ptr")(int_ptr(event), true);
}

py::object to_pyopencl(const std::shared_ptr<Handle>& handle) {
  const char* op = "to_pyopencl";
  const py::module_ cl = import_pyopencl(op);
  const py::module_ array = import_pyopencl(op, "pyopencl.array");
  // pyopencl keeps the cl_mem alive on its side; clbuf's pool must then never hand the memory
  // out again. Every Handle's memory is shared from the start (Handle::own), so marking it
  // changes no member a transfer in another thread reads.
  const std::shared_ptr<Handle>& root = handle->root ? handle->root : handle;
  clbuf::detail::BufferAccess::keep_out_of_pool(root->memory);
  root->exported = true;
  const py::object queue =
      cl.attr("CommandQueue").attr("from_int_ptr")(int_ptr(handle->manager->queue()()), true);
  py::object data = py::none();
  if (handle->nbytes() > 0) {
    data = cl.attr("Buffer").attr("from_int_ptr")(int_ptr(handle->memory.native_root()()), true);
  }
  py::dict kwargs;
  kwargs["data"] = data;
  kwargs["offset"] = handle->memory.native_offset_bytes();
  return array.attr("Array")(queue, py::tuple(py::cast(handle->shape)), handle->dtype, **kwargs);
}

}  // namespace clbuf_python
