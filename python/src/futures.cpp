// SPDX-License-Identifier: MIT
// clbuf.Future (futures.hpp).
#include "futures.hpp"

#include "interop.hpp"

namespace clbuf_python {

void bind_futures(py::module_& m) {
  python_class<Pending>(
      m, "Future",
      "An asynchronous operation in flight, from the *_async() calls. The host array it reads "
      "or writes must not be modified until wait() returns; dropping a Future waits for it.")
      .def("wait", waiting("wait", &Pending::wait),
           "Blocks until the operation is done (the GIL is released).")
      .def("ready", waiting("ready", &Pending::ready), "True once the operation is done.")
      .def("get", waiting("get", &Pending::get),
           "wait(), then the result: a DeviceBuffer for upload_async, the array for "
           "download_async, None for the others.")
      .def_property_readonly(
          "event",
          [](Self<Pending> self) -> PyopenclEvent {
            return to_pyopencl_event("Future.event", initialised(self, "event")->event());
          },
          "A pyopencl.Event that completes with the operation, for a pyopencl kernel's "
          "wait_for (None when nothing was left to wait for). Needs pyopencl.")
      .def_property_readonly(
          "event_int_ptr",
          [](Self<Pending> self) { return int_ptr(initialised(self, "event_int_ptr")->event()); },
          "The cl_event of `event` as an int (0 when none); valid while this Future lives.");
}

}  // namespace clbuf_python
