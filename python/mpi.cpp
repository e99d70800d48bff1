// SPDX-License-Identifier: MIT
// clbuf.mpi (python/clbuf/mpi.py): Communicator over the C++ clbuf::mpi::Communicator, on the
// MPI_Comm of an mpi4py communicator (MPI._handleof). Built where CMake finds MPI
// (CLBUF_PYTHON_MPI). Buffers travel as their bytes; allreduce uses the buffer's dtype.
#include <clbuf/mpi.hpp>

#include "manager.hpp"

namespace clbuf_python {
namespace {

class Communicator;

/// clbuf.mpi.Request: an isend or irecv in flight; keeps its buffer alive.
class Request {
 public:
  Request(clbuf::mpi::Request request, std::shared_ptr<Handle> buffer)
      : request_(std::move(request)), buffer_(std::move(buffer)) {}
  ~Request() {
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      NoGil release;
      request_ = clbuf::mpi::Request();
    }
  }
  void wait() {
    NoGil release;
    request_.wait();
  }
  bool test() {
    NoGil release;
    return request_.test();
  }

 private:
  clbuf::mpi::Request request_;
  std::shared_ptr<Handle> buffer_;
};

clbuf::mpi::Op as_op(const py::handle& op) {
  if (py::isinstance<py::str>(op)) {
    const std::string text = op.cast<std::string>();
    if (text == "sum") return clbuf::mpi::Op::sum;
    if (text == "min") return clbuf::mpi::Op::min;
    if (text == "max") return clbuf::mpi::Op::max;
  }
  fail("allreduce", CL_INVALID_VALUE,
       "op must be \"sum\", \"min\" or \"max\", not " + short_repr(op));
}

template <class T>
void allreduce_as(clbuf::mpi::Communicator& comm, Handle& handle, clbuf::mpi::Op op) {
  clbuf::DeviceBuffer<T> alias = typed_alias<T>("allreduce", *handle.manager, handle.memory);
  if (!alias.valid()) alias = handle.manager->allocate<T>(0);
  comm.allreduce(alias, op);
}

class Communicator {
 public:
  Communicator(std::shared_ptr<Manager> manager, std::uintptr_t comm)
      : manager_(std::move(manager)) {
    NoGil release;
    comm_ = std::make_unique<clbuf::mpi::Communicator>(manager_->cpp(),
                                                       reinterpret_cast<MPI_Comm>(comm));
  }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  void send(const py::handle& buffer, int dest, int tag) {
    auto h = as_handle("send", buffer, "buffer");
    NoGil release;
    comm_->send(h->memory, dest, tag);
  }
  void recv(const py::handle& buffer, int source, int tag) {
    auto h = as_handle("recv", buffer, "buffer");
    NoGil release;
    comm_->recv(h->memory, source, tag);
  }
  void sendrecv(const py::handle& out, int dest, const py::handle& in, int source, int tag) {
    auto o = as_handle("sendrecv", out, "out");
    auto i = as_handle("sendrecv", in, "in_");
    NoGil release;
    comm_->sendrecv(o->memory, dest, i->memory, source, tag);
  }
  std::shared_ptr<Request> isend(const py::handle& buffer, int dest, int tag) {
    auto h = as_handle("isend", buffer, "buffer");
    clbuf::mpi::Request request;
    {
      NoGil release;
      request = comm_->isend(h->memory, dest, tag);
    }
    return std::make_shared<Request>(std::move(request), h);
  }
  std::shared_ptr<Request> irecv(const py::handle& buffer, int source, int tag) {
    auto h = as_handle("irecv", buffer, "buffer");
    clbuf::mpi::Request request;
    {
      NoGil release;
      request = comm_->irecv(h->memory, source, tag);
    }
    return std::make_shared<Request>(std::move(request), h);
  }
  void broadcast(const py::handle& buffer, int root) {
    auto h = as_handle("broadcast", buffer, "buffer");
    NoGil release;
    comm_->broadcast(h->memory, root);
  }
  void allreduce(const py::handle& buffer, const py::handle& op) {
    auto h = as_handle("allreduce", buffer, "buffer");
    const clbuf::mpi::Op reduction = as_op(op);
    const char kind = h->dtype.kind();
    const std::size_t item = h->itemsize();
    NoGil release;
    if (kind == 'f' && item == 4) return allreduce_as<float>(*comm_, *h, reduction);
    if (kind == 'f' && item == 8) return allreduce_as<double>(*comm_, *h, reduction);
    if (kind == 'i' && item == 1) return allreduce_as<std::int8_t>(*comm_, *h, reduction);
    if (kind == 'i' && item == 2) return allreduce_as<std::int16_t>(*comm_, *h, reduction);
    if (kind == 'i' && item == 4) return allreduce_as<std::int32_t>(*comm_, *h, reduction);
    if (kind == 'i' && item == 8) return allreduce_as<std::int64_t>(*comm_, *h, reduction);
    if (kind == 'u' && item == 1) return allreduce_as<std::uint8_t>(*comm_, *h, reduction);
    if (kind == 'u' && item == 2) return allreduce_as<std::uint16_t>(*comm_, *h, reduction);
    if (kind == 'u' && item == 4) return allreduce_as<std::uint32_t>(*comm_, *h, reduction);
    if (kind == 'u' && item == 8) return allreduce_as<std::uint64_t>(*comm_, *h, reduction);
    fail("allreduce", CL_INVALID_VALUE,
         "allreduce takes int8-int64, uint8-uint64, float32 and float64 buffers");
  }
  void barrier() {
    NoGil release;
    comm_->barrier();
  }

 private:
  std::shared_ptr<Manager> manager_;  // the C++ communicator must not outlive it
  std::unique_ptr<clbuf::mpi::Communicator> comm_;
};

}  // namespace

template <>
struct PythonName<Communicator> {
  static constexpr const char* name = "mpi.Communicator";
  static constexpr const char* made_by = "create one with clbuf.mpi.Communicator(bm, comm)";
};
template <>
struct PythonName<Request> {
  static constexpr const char* name = "mpi.Request";
  static constexpr const char* made_by = "requests come from isend() and irecv()";
};

void bind_mpi(py::module_& m) {
  py::class_<Request, std::shared_ptr<Request>>(m, "_MpiRequest",
                                                "An isend or irecv in flight (clbuf.mpi).")
      .def("wait", checked("wait", &Request::wait), "Blocks until the transfer has completed.")
      .def("test", checked("test", &Request::test), "True once the transfer has completed.");
  py::class_<Communicator, std::shared_ptr<Communicator>>(
      m, "_MpiCommunicator", "clbuf.mpi.Communicator: DeviceBuffers between MPI ranks.")
      .def(py::init([](const py::handle& bm, std::uintptr_t comm) {
             if (!py::isinstance<Manager>(bm)) {
               fail("Communicator", CL_INVALID_VALUE,
                    "bm must be a clbuf.BufferManager, not " + type_name(bm));
             }
             std::shared_ptr<Manager> manager = held_object<Manager>(bm);
             if (!manager) fail_uninitialised<Manager>("Communicator");
             return std::make_shared<Communicator>(std::move(manager), comm);
           }),
           py::arg("bm"), py::arg("comm"))
      .def_property_readonly("rank", checked("rank", &Communicator::rank))
      .def_property_readonly("size", checked("size", &Communicator::size))
      .def("send", checked("send", &Communicator::send), py::arg("buffer"), py::arg("dest"),
           py::arg("tag") = 0)
      .def("recv", checked("recv", &Communicator::recv), py::arg("buffer"), py::arg("source"),
           py::arg("tag") = 0)
      .def("sendrecv", checked("sendrecv", &Communicator::sendrecv), py::arg("out"),
           py::arg("dest"), py::arg("in_"), py::arg("source"), py::arg("tag") = 0)
      .def("isend", checked("isend", &Communicator::isend), py::arg("buffer"), py::arg("dest"),
           py::arg("tag") = 0)
      .def("irecv", checked("irecv", &Communicator::irecv), py::arg("buffer"), py::arg("source"),
           py::arg("tag") = 0)
      .def("broadcast", checked("broadcast", &Communicator::broadcast), py::arg("buffer"),
           py::arg("root"))
      .def("allreduce", checked("allreduce", &Communicator::allreduce), py::arg("buffer"),
           py::arg("op") = "sum")
      .def("barrier", checked("barrier", &Communicator::barrier));
}

}  // namespace clbuf_python
