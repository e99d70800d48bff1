// SPDX-License-Identifier: MIT
// clbuf.DeviceBuffer (buffers.hpp).
#include "buffers.hpp"

namespace clbuf_python {

std::shared_ptr<Handle> as_handle(const char* operation, const py::handle& value,
                                  const char* what) {
  if (!py::isinstance<Handle>(value)) {
    fail(operation, CL_INVALID_MEM_OBJECT,
         std::string(what) + " must be a clbuf.DeviceBuffer, not " + type_name(value));
  }
  std::shared_ptr<Handle> handle = held_object<Handle>(value);
  if (!handle) {
    fail(operation, CL_INVALID_MEM_OBJECT,
         std::string(what) +
             " is an uninitialised clbuf.DeviceBuffer (made by clbuf.DeviceBuffer.__new__); "
             "DeviceBuffers come from upload_to_device() and upload_async()");
  }
  return handle;
}

void bind_buffers(py::module_& m) {
  py::class_<Handle, std::shared_ptr<Handle>>(
      m, "DeviceBuffer",
      "Device memory holding an uploaded array's bytes, with its dtype and shape. Made by "
      "BufferManager.upload_to_device(); freed when the last reference goes.")
      .def_property_readonly("nbytes", checked("nbytes", &Handle::nbytes))
      .def_property_readonly("size", checked("size", &Handle::size))
      .def_property_readonly("dtype",
                             [](Self<Handle> self) { return initialised(self, "dtype")->dtype; })
      .def_property_readonly(
          "shape",
          [](Self<Handle> self) { return py::tuple(py::cast(initialised(self, "shape")->shape)); })
      .def("__len__",
           [](Self<Handle> self) -> py::ssize_t {
             const std::shared_ptr<Handle> h = initialised(self, "__len__");
             if (h->shape.empty()) throw py::type_error("len() of a 0-d DeviceBuffer");
             return h->shape[0];
           })
      .def("__repr__", [](Self<Handle> self) -> std::string {
        const std::shared_ptr<Handle>& h = self.held;
        if (!h) return "<clbuf.DeviceBuffer (never initialised)>";
        return "<clbuf.DeviceBuffer shape=" + describe_shape(h->shape) +
               " dtype=" + describe_dtype(h->dtype) + " nbytes=" + std::to_string(h->nbytes()) +
               ">";
      });
}

}  // namespace clbuf_python
