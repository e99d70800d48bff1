// SPDX-License-Identifier: MIT
// clbuf.Future (futures.hpp).
#include "futures.hpp"

namespace clbuf_python {

void bind_futures(py::module_& m) {
  py::class_<Pending, std::shared_ptr<Pending>>(
      m, "Future",
      "An asynchronous transfer in flight. The host array it reads or writes "
      "must not be modified until wait() returns.")
      .def("wait", checked("wait", &Pending::wait),
           "Blocks until the transfer is done (the GIL is released).")
      .def("ready", checked("ready", &Pending::ready), "True once the transfer is done.")
      .def("get", checked("get", &Pending::get),
           "wait(), then the result: a DeviceBuffer for upload_async, an ndarray for "
           "download_async.");
}

}  // namespace clbuf_python
