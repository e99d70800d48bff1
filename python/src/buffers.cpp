// SPDX-License-Identifier: MIT
// clbuf.DeviceBuffer (buffers.hpp): properties, views by slicing, and its pyopencl handles.
#include "buffers.hpp"

#include "interop.hpp"

namespace clbuf_python {

std::shared_ptr<Handle> as_handle(const char* operation, const py::handle& value,
                                  const char* what) {
  std::shared_ptr<Handle> exact;
  if (exact_held(value, exact) && exact) return exact;  // a DeviceBuffer, without a type lookup
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

std::shared_ptr<Handle> new_handle(std::shared_ptr<clbuf::BufferManager> manager,
                                   const py::dtype& dtype, std::vector<py::ssize_t> shape) {
  auto handle = std::make_shared<Handle>();
  handle->manager = std::move(manager);
  handle->dtype = dtype;
  handle->shape = std::move(shape);
  return handle;
}

namespace {

/// buf[i:j]: a view of rows i to j of the first axis (step 1), the C++ view of those bytes.
/// Negative bounds count from the end, as in Python; bounds past the end are an error, not
/// clamped, so that a view never silently holds fewer rows than asked for.
std::shared_ptr<Handle> slice(const std::shared_ptr<Handle>& handle, const py::handle& key) {
  const char* op = "view";
  if (PySlice_Check(key.ptr()) == 0) {
    fail(op, CL_INVALID_VALUE,
         "a clbuf.DeviceBuffer takes a slice (buf[i:j]) for a view, not " + type_name(key));
  }
  if (handle->shape.empty()) fail(op, CL_INVALID_VALUE, "a 0-d clbuf.DeviceBuffer has no rows");
  Py_ssize_t start = 0;
  Py_ssize_t stop = 0;
  Py_ssize_t step = 0;
  if (PySlice_Unpack(key.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
  const auto* range = reinterpret_cast<PySliceObject*>(key.ptr());
  // The slice as written, for messages only (str() of its bounds costs more than the view).
  const auto shown = [range] {
    return (range->start == Py_None ? "" : text_of(range->start)) + ":" +
           (range->stop == Py_None ? "" : text_of(range->stop));
  };
  if (step != 1) {
    fail(op, CL_INVALID_VALUE,
         "view [" + shown() + ":" + text_of(range->step) + "] has step " + std::to_string(step) +
             "; views are contiguous (step 1)");
  }
  const py::ssize_t rows = handle->shape[0];
  if (range->start == Py_None) start = 0;
  if (range->stop == Py_None) stop = rows;
  if (start < 0) start += rows;
  if (stop < 0) stop += rows;
  if (start < 0 || stop > rows || stop < start) {
    fail(op, CL_INVALID_VALUE,
         "view [" + shown() + "] is out of range of a buffer of " + std::to_string(rows) +
             " rows (shape " + describe_shape(handle->shape) + ")");
  }
  std::size_t row_bytes = handle->itemsize();
  for (std::size_t i = 1; i < handle->shape.size(); ++i) {
    row_bytes *= static_cast<std::size_t>(handle->shape[i]);
  }
  std::vector<py::ssize_t> shape = handle->shape;
  shape[0] = stop - start;
  auto view = new_handle(handle->manager, handle->dtype, std::move(shape));
  view->root = handle->root ? handle->root : handle;
  view->memory = handle->manager->view(handle->memory, static_cast<std::size_t>(start) * row_bytes,
                                       static_cast<std::size_t>(stop - start) * row_bytes);
  return view;
}

}  // namespace

void bind_buffers(py::module_& m) {
  python_class<Handle>(
      m, "DeviceBuffer",
      "Device memory holding an array's bytes, with its dtype and shape. Made by "
      "BufferManager.upload_to_device(), empty(), adopt() and the async uploads; buf[i:j] is a "
      "view of rows i to j (the first axis, step 1) sharing its memory. Freed when the last "
      "reference (views included) goes.")
      .def_property_readonly("nbytes", checked("nbytes", &Handle::nbytes),
                             "The bytes the buffer holds (size times dtype.itemsize).")
      .def_property_readonly("size", checked("size", &Handle::size),
                             "The number of elements (nbytes / dtype.itemsize).")
      .def_property_readonly(
          "dtype",
          [](Self<Handle> self) -> DtypeResult { return initialised(self, "dtype")->dtype; },
          "The numpy dtype of the elements, as uploaded (or given to empty() and adopt()).")
      .def_property_readonly(
          "shape",
          [](Self<Handle> self) -> ShapeTuple {
            return py::tuple(py::cast(initialised(self, "shape")->shape));
          },
          "The numpy shape of the elements, a tuple of ints; a view's first axis is its rows.")
      .def_property_readonly(
          "is_view",
          [](Self<Handle> self) { return initialised(self, "is_view")->memory.is_view(); },
          "True for a view (buf[i:j]) and for an adopted pyopencl array at an offset.")
      .def_property_readonly(
          "int_ptr",
          [](Self<Handle> self) {
            return int_ptr(initialised(self, "int_ptr")->memory.native_root()());
          },
          "The cl_mem the bytes live in, as pyopencl's from_int_ptr() takes it (0 when empty); "
          "for a view, its root buffer's, with element 0 at native_offset_bytes. Valid while "
          "this DeviceBuffer lives.")
      .def_property_readonly(
          "native_offset_bytes",
          [](Self<Handle> self) {
            return initialised(self, "native_offset_bytes")->memory.native_offset_bytes();
          },
          "The byte offset of element 0 in the cl_mem of int_ptr (0 unless a view).")
      .def(
          "to_pyopencl",
          [](Self<Handle> self) -> PyopenclArray {
            return reported<Handle>("to_pyopencl",
                                    [&] { return to_pyopencl(initialised(self, "to_pyopencl")); });
          },
          "A pyopencl.array.Array of this buffer's shape and dtype on the same memory (no copy; "
          "a view's: its root buffer at an offset), on the manager's queue. The memory is no "
          "longer pooled by clbuf: it lives as long as either side uses it.")
      .def(
          "__getitem__",
          [](Self<Handle> self, const SliceArg& key) -> AnyBuffer {
            return to_python(slice(initialised(self, "__getitem__"), key));
          },
          py::arg("key"),
          "buf[i:j]: a view of rows i to j of the first axis (step 1; negative bounds count "
          "from the end; out of range is a clbuf.Error, never clamped), sharing the memory.")
      .def(
          "__len__",
          [](Self<Handle> self) -> py::ssize_t {
            const std::shared_ptr<Handle> h = initialised(self, "__len__");
            if (h->shape.empty()) throw py::type_error("len() of a 0-d DeviceBuffer");
            return h->shape[0];
          },
          "The length of the first axis (TypeError for a 0-d buffer).")
      .def("__repr__", [](Self<Handle> self) -> std::string {
        const std::shared_ptr<Handle>& h = self.held;
        if (!h) return "<clbuf.DeviceBuffer (never initialised)>";
        return std::string("<clbuf.DeviceBuffer ") + (h->memory.is_view() ? "view " : "") +
               "shape=" + describe_shape(h->shape) + " dtype=" + describe_dtype(h->dtype) +
               " nbytes=" + std::to_string(h->nbytes()) + ">";
      });
}

}  // namespace clbuf_python
