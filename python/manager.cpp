// SPDX-License-Identifier: MIT
// clbuf.BufferManager and clbuf.DeviceInfo (manager.hpp).
#include "manager.hpp"

namespace clbuf_python {
namespace {

/// BufferManager's `selector`: None or a str that UTF-8 can hold.
std::optional<std::string> as_selector(const py::handle& value) {
  const char* op = "BufferManager";
  if (value.is_none()) return std::nullopt;
  if (!PyUnicode_Check(value.ptr())) {
    fail(op, CL_INVALID_VALUE, "selector must be a str or None, not " + type_name(value));
  }
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  if (text == nullptr) {  // a lone surrogate such as '\ud800'
    const std::string why = take_python_error();
    const auto shown = py::reinterpret_steal<py::object>(PyObject_ASCII(value.ptr()));
    if (!shown) PyErr_Clear();
    fail(op, CL_INVALID_VALUE,
         "selector " + (shown ? text_of(shown) : std::string("?")) + " is not valid UTF-8 text (" +
             why + ")");
  }
  return std::string(text, static_cast<std::size_t>(size));
}

}  // namespace

void bind_manager(py::module_& m) {
  // Objects made by __new__ alone hold no C++ object: every method and property below takes
  // `self` as a Self<T> and gets the object through initialised() or checked(); repr() answers
  // all the same. Every class is held by a std::shared_ptr for that (see held_object()).
  using Info = clbuf::DeviceInfo;
  py::class_<Info, std::shared_ptr<Info>>(m, "DeviceInfo", "What clbuf knows of one OpenCL device.")
      .def_property_readonly("name",
                             [](Self<Info> self) { return initialised(self, "name")->name; })
      .def_property_readonly(
          "platform", [](Self<Info> self) { return initialised(self, "platform")->platform; })
      .def_property_readonly(
          "type", [](Self<Info> self) { return clbuf::to_string(initialised(self, "type")->type); })
      .def_property_readonly(
          "global_mem_bytes",
          [](Self<Info> self) { return initialised(self, "global_mem_bytes")->global_mem_bytes; })
      .def_property_readonly(
          "max_alloc_bytes",
          [](Self<Info> self) { return initialised(self, "max_alloc_bytes")->max_alloc_bytes; })
      .def_property_readonly(
          "platform_index",
          [](Self<Info> self) { return initialised(self, "platform_index")->platform_index; })
      .def_property_readonly(
          "device_index",
          [](Self<Info> self) { return initialised(self, "device_index")->device_index; })
      .def("__getitem__",
           [](Self<Info> self, const py::handle& key) -> py::object {
             initialised(self, "__getitem__");
             // The fields only: any other key (an attribute such as "__class__" included) is a
             // KeyError, as in a dict.
             static const char* const fields[] = {
                 "name",           "platform",    "type", "global_mem_bytes", "max_alloc_bytes",
                 "platform_index", "device_index"};
             if (py::isinstance<py::str>(key)) {
               for (const char* field : fields) {
                 if (py::str(field).equal(key)) return self.object.attr(field);
               }
             }
             PyErr_SetObject(PyExc_KeyError, key.ptr());
             throw py::error_already_set();
           })
      .def("__repr__", [](Self<Info> self) -> std::string {
        const std::shared_ptr<Info>& info = self.held;
        if (!info) return "<clbuf.DeviceInfo (never initialised)>";
        return "<clbuf.DeviceInfo [" + std::to_string(info->platform_index) + ":" +
               std::to_string(info->device_index) + "] " + info->name + " (" +
               clbuf::to_string(info->type) + ", " + info->platform + ")>";
      });

  m.def("list_devices", &clbuf::list_devices,
        "Every device of every OpenCL platform, numbered as the 'P:D' selector counts them.");

  py::class_<Manager, std::shared_ptr<Manager>>(
      m, "BufferManager",
      "Manages buffer transfers between host numpy arrays and one OpenCL device.")
      .def(py::init([](Selector selector) {
             return std::make_shared<Manager>(as_selector(selector.object));
           }),
           py::arg("selector") = py::none(),
           "Picks a device: `selector` ('gpu', 'cpu', 'accelerator', 'P:D' or part of a device "
           "name), else CLBUF_DEVICE, else the first GPU, else the first CPU device.")
      .def("upload_to_device", checked("upload_to_device", &Manager::upload_to_device),
           py::arg("data"), "Copies a numpy array into new device memory; returns a DeviceBuffer.")
      .def("download_from_device", checked("download_from_device", &Manager::download_from_device),
           py::arg("device_buffer"), py::arg("shape") = py::none(), py::arg("dtype") = py::none(),
           "Reads a whole DeviceBuffer into a new array of `shape` and `dtype` (None: as "
           "uploaded), whose byte count must equal the buffer's.")
      .def("copy_device_buffer", checked("copy_device_buffer", &Manager::copy_device_buffer),
           py::arg("source_buffer"), py::arg("dest_buffer"), py::arg("size_bytes"),
           "Copies the first `size_bytes` bytes of source_buffer to dest_buffer on the device.")
      .def("upload_async", checked("upload_async", &Manager::upload_async), py::arg("data"),
           "Starts an upload; Future.get() returns the DeviceBuffer. Do not modify `data` until "
           "the Future is done.")
      .def("download_async", checked("download_async", &Manager::download_async),
           py::arg("device_buffer"), py::arg("shape") = py::none(), py::arg("dtype") = py::none(),
           "Starts a download; Future.get() returns the ndarray.")
      .def("cleanup", checked("cleanup", &Manager::cleanup),
           "Waits for queued work, then releases the queue and context. Idempotent; every later "
           "transfer raises clbuf.Error (code 0).")
      .def_property_readonly("device", checked("device", &Manager::device),
                             py::return_value_policy::copy)
      .def_property_readonly("selection_reason",
                             checked("selection_reason", &Manager::selection_reason))
      .def_property_readonly("memory_model", checked("memory_model", &Manager::memory_model),
                             "The transfer paths in use: 'host' (a CPU device; bytes move by "
                             "memcpy), 'unified' (shares host memory) or 'discrete' (own memory; "
                             "large transfers are staged through pinned memory).")
      .def("stats", checked("stats", &Manager::stats),
           "The transfers so far: a dict with 'summary' (one line of text), 'upload', "
           "'download' and 'copy' (each a dict of operations, bytes, nanoseconds and "
           "gigabytes_per_second) and 'pool' (hits, misses, released, trims, retries, "
           "cached_buffers, cached_bytes, limit_bytes). Still answers after cleanup().")
      .def("reset_stats", checked("reset_stats", &Manager::reset_stats),
           "Sets the transfer counters of stats() to 0.")
      .def("__enter__",
           [](Self<Manager> self) {
             initialised(self, "__enter__");
             return py::reinterpret_borrow<py::object>(self.object);
           })
      .def("__exit__", [](Self<Manager> self, const py::args&) {
        initialised(self, "__exit__")->cleanup();
        return false;
      });

  // numpy's limit on dimensions (NPY_MAXDIMS) went from 32 to 64 in numpy 2.0.
  const std::string numpy_version = text_of(py::module_::import("numpy").attr("__version__"));
  int numpy_major = 0;
  for (const char c : numpy_version) {
    if (c < '0' || c > '9') break;
    numpy_major = numpy_major * 10 + (c - '0');
  }
  numpy_max_dims = numpy_major >= 2 ? 64 : 32;
}

}  // namespace clbuf_python
