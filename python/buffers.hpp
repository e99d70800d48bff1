// SPDX-License-Identifier: MIT
// clbuf.DeviceBuffer: device memory with the numpy dtype and shape of its contents.
#ifndef CLBUF_PYTHON_BUFFERS_HPP
#define CLBUF_PYTHON_BUFFERS_HPP

#include "common.hpp"

namespace clbuf_python {

/// Device memory holding an array's bytes, with the dtype and shape it was uploaded with.
struct Handle {
  clbuf::DeviceBuffer<std::uint8_t> memory;
  py::dtype dtype;
  std::vector<py::ssize_t> shape;

  std::size_t nbytes() const noexcept { return memory.size_bytes(); }
  std::size_t size() const noexcept {
    const auto item = static_cast<std::size_t>(dtype.itemsize());
    return item == 0 ? 0 : nbytes() / item;
  }
};

template <>
struct PythonName<Handle> {
  static constexpr const char* name = "DeviceBuffer";
  static constexpr const char* made_by =
      "DeviceBuffers come from upload_to_device() and upload_async()";
};

template <>
struct PythonName<clbuf::DeviceInfo> {
  static constexpr const char* name = "DeviceInfo";
  static constexpr const char* made_by =
      "DeviceInfos come from BufferManager.device and list_devices()";
};

/// `value` as a clbuf.DeviceBuffer; clbuf.Error (CL_INVALID_MEM_OBJECT) for anything else.
std::shared_ptr<Handle> as_handle(const char* operation, const py::handle& value, const char* what);

void bind_buffers(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_BUFFERS_HPP
