// SPDX-License-Identifier: MIT
// clbuf.load and clbuf.save: numpy's .npy files straight to and from device memory, as np.load
// and np.save are for host memory (clbuf/npy.hpp: pinned chunks pipelined between the file and
// the device, the file written under a temporary name and renamed into place). The dtype and
// shape are the file's (load) or the buffer's (save); the bytes move unchanged, so no element
// type is needed here: a Handle's memory is bytes.
#include "buffers.hpp"
#include "common.hpp"
#include "manager.hpp"

#include <clbuf/npy.hpp>

#include <string>
#include <vector>

namespace clbuf_python {

namespace {

AnyBuffer load(const std::string& path, Self<Manager> manager_arg) {
  const auto& manager = initialised(manager_arg, "load");
  clbuf::NpyHeader header;
  clbuf::DeviceBuffer<std::uint8_t> bytes;
  {
    NoGil release;
    bytes = clbuf::load_npy_bytes(manager->cpp(), path, header);
  }
  std::vector<py::ssize_t> shape;
  for (std::size_t extent : header.shape) shape.push_back(static_cast<py::ssize_t>(extent));
  auto handle = new_handle(manager->shared(), py::dtype(header.descr()), std::move(shape));
  handle->own(std::move(bytes));
  return AnyBuffer(to_python(handle));
}

void save(const std::string& path, const AnyBuffer& buffer) {
  const char* op = "save";
  const std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
  require_numeric(op, handle->dtype);
  if (!handle->manager) fail(op, CL_INVALID_MEM_OBJECT, "the buffer has no memory");
  std::vector<std::size_t> shape;
  for (py::ssize_t extent : handle->shape) shape.push_back(static_cast<std::size_t>(extent));
  const std::string descr = py::str(handle->dtype.attr("str"));
  NoGil release;
  clbuf::save_npy_bytes(*handle->manager, path, handle->memory, descr, shape);
}

}  // namespace

void bind_files(py::module_& m) {
  m.def("load", &load, py::arg("path"), py::arg("manager"),
        "The array of the .npy file `path` (as np.save writes it) in new device memory of "
        "`manager`, with the file's dtype and shape (a big-endian file's bytes are swapped to "
        "the host's order): bytes go from the file through pinned chunks to the device, never "
        "a whole host copy. clbuf.Error naming the path and what is wrong for a missing file, a "
        "folder, no permission, not a .npy file, a dtype that is not numeric, Fortran order, a "
        "size other than the header says.");
  m.def("save", &save, py::arg("path"), py::arg("buffer"),
        "Writes `buffer` (its dtype and shape, C order) as the .npy file `path`, which np.load "
        "reads: written to a temporary file in the same folder, fsync'd and renamed into place, "
        "so `path` holds the old file or the whole new one. clbuf.Error naming the path (a "
        "missing or unwritable folder, a full disk: the temporary file is removed).");
}

}  // namespace clbuf_python
