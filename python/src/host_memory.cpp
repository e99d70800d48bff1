// SPDX-License-Identifier: MIT
// Pinned numpy arrays and mappings (host_memory.hpp).
#include "host_memory.hpp"

#include <clbuf/detail/buffer_access.hpp>

namespace clbuf_python {

clbuf::PinnedBuffer<std::uint8_t>* pinned_block_of(const py::array& array) {
  const py::object base = array.base();
  if (!base || base.is_none() || !py::isinstance<PinnedMemory>(base)) return nullptr;
  const std::shared_ptr<PinnedMemory> pinned = held_object<PinnedMemory>(base);
  if (!pinned || pinned->block.data() != array.data() ||
      pinned->block.size_bytes() != static_cast<std::size_t>(array.nbytes())) {
    return nullptr;
  }
  return &pinned->block;  // alive: the array holds its base
}

py::array pinned_empty(clbuf::BufferManager& manager, const py::handle& shape,
                       const py::handle& dtype) {
  const char* op = "pinned_empty";
  const py::dtype type = as_dtype(op, dtype);
  const std::vector<py::ssize_t> extents = as_shape(op, shape);
  const std::size_t bytes = shape_bytes(op, extents, type);
  auto pinned = std::make_shared<PinnedMemory>();
  {
    NoGil release;
    pinned->block = manager.allocate_pinned<std::uint8_t>(bytes);
  }
  if (bytes == 0) return py::array(type, extents);
  // The array's base owns the block: the pinned memory lives as long as the array (and views).
  return py::array(type, extents, pinned->block.data(), py::cast(pinned));
}

clbuf::MapMode as_map_mode(const char* operation, const py::handle& mode) {
  if (py::isinstance<py::str>(mode)) {
    const std::string text = mode.cast<std::string>();
    if (text == "r") return clbuf::MapMode::read;
    if (text == "w") return clbuf::MapMode::write;
    if (text == "rw") return clbuf::MapMode::read_write;
  }
  fail(operation, CL_INVALID_VALUE, "mode must be \"r\", \"w\" or \"rw\", not " + short_repr(mode));
}

Mapping::Mapping(std::shared_ptr<Handle> handle, std::shared_ptr<clbuf::BufferManager> manager,
                 clbuf::MapMode mode)
    : handle_(std::move(handle)), manager_(std::move(manager)), mode_(mode) {}

std::string Mapping::mode() const {
  return mode_ == clbuf::MapMode::read ? "r" : mode_ == clbuf::MapMode::write ? "w" : "rw";
}

py::object Mapping::enter(const py::object& self) {
  const char* op = "map";
  if (entered_) fail(op, CL_INVALID_OPERATION, "this mapping was entered already; map() again");
  entered_ = true;
  Handle& h = *handle_;
  const std::size_t bytes = h.nbytes();
  void* data = nullptr;
  if (bytes == 0) {  // nothing to map, but checked as any call (a cleaned-up manager throws)
    NoGil release;
    static_cast<void>(manager_->map(h.memory, mode_));
  } else {
    NoGil release;
    clbuf::MappedView<std::uint8_t> view = manager_->map(h.memory, mode_);
    const clbuf::detail::Allocation& memory = clbuf::detail::BufferAccess::memory(h.memory);
    if (memory.host != nullptr && view.data() == static_cast<void*>(memory.host_at(0))) {
      // clbuf's own host block: valid until the buffer's cl_mem is released, and the array's
      // base (this Mapping) holds the buffer.
      zero_copy_ = true;
      view_ = std::move(view);
      data = view_.data();
    } else {
      view.unmap();
      copy_ = manager_->allocate_pinned<std::uint8_t>(bytes);
      if (mode_ != clbuf::MapMode::write) manager_->download(h.memory, copy_, 0);
      data = copy_.data();
    }
  }
  py::array array =
      data == nullptr ? py::array(h.dtype, h.shape) : py::array(h.dtype, h.shape, data, self);
  if (mode_ == clbuf::MapMode::read) {
    array.attr("flags").attr("writeable") = false;
  }
  return py::module_::import("clbuf._mapping").attr("MappedArray").attr("_wrap")(array, self);
}

void Mapping::close() {
  if (closed_) return;
  closed_ = true;
  if (!entered_ || handle_->nbytes() == 0) return;
  NoGil release;
  if (zero_copy_) {
    view_.unmap();
  } else if (mode_ != clbuf::MapMode::read) {
    manager_->upload(handle_->memory, copy_, 0);
  }
}

void bind_host_memory(py::module_& m) {
  python_class<PinnedMemory>(m, "_PinnedMemory",
                             "The pinned block of a BufferManager.pinned_empty() array.");
  python_class<Mapping>(
      m, "_Mapping",
      "What BufferManager.map() returns: `with bm.map(buf, mode) as a:` maps the buffer at "
      "entry and unmaps it (writes it back) at exit.")
      .def(
          "__enter__",
          [](Self<Mapping> self) -> MappedArrayResult {
            return reported<Mapping>("__enter__", [&] {
              return initialised(self, "__enter__")
                  ->enter(py::reinterpret_borrow<py::object>(self.object));
            });
          },
          "Maps the buffer: a clbuf.MappedArray of its shape and dtype over its bytes.")
      .def(
          "__exit__",
          [](Self<Mapping> self, const py::args&) {
            reported<Mapping>("__exit__", [&] { initialised(self, "__exit__")->close(); });
            return false;
          },
          "Unmaps the buffer (writing the array back for modes 'w' and 'rw').")
      .def("close", checked("close", &Mapping::close), "Unmaps now; idempotent.")
      .def_property_readonly("closed", checked("closed", &Mapping::closed),
                             "True once unmapped: the array then raises clbuf.Error on use.")
      .def_property_readonly("zero_copy", checked("zero_copy", &Mapping::zero_copy),
                             "True when the array is the device's own memory (no copy).")
      .def_property_readonly("mode", checked("mode", &Mapping::mode), "'r', 'w' or 'rw'.");
}

}  // namespace clbuf_python
