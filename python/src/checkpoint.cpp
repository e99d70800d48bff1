// SPDX-License-Identifier: MIT
// clbuf.Checkpoint over clbuf::Checkpoint (clbuf/checkpoint.hpp): a named set of DeviceBuffers
// and ShardedBuffers saved to a folder and loaded back, atomic and checked. Every rule (names,
// shapes, the files, the manifest and its checksums, the renames, what a load refuses) is the
// library's; this file only hands it the buffers.
//
// The library keeps pointers to the buffers given to add(). A DeviceBuffer's bytes are handed to
// it as a typed buffer of the same memory (typed_alias(): adopted by the checkpoint's manager,
// which refuses memory of another context), whose element type carries the numpy dtype
// (with_numpy_element(): float32 is written '<f4', int32 '<i4'); the Checkpoint holds that
// alias and the Python object added, so a buffer deleted in Python after add() stays valid. A
// ShardedBuffer is its C++ ShardedBuffer of bytes: each shard's file holds the shard's bytes
// (dtype uint8; np.load(file).view(dtype) reads its elements, ghost elements included).
#include "buffers.hpp"
#include "dtype_dispatch.hpp"
#include "group.hpp"
#include "manager.hpp"

#include <clbuf/checkpoint.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace clbuf_python {

namespace names {
inline constexpr char checkpoint[] = "clbuf.Checkpoint";
inline constexpr char buffer_or_sharded[] = "Union[clbuf.DeviceBuffer, clbuf.ShardedBuffer]";
}  // namespace names

using AnyCheckpoint = Typed<names::checkpoint>;
using BufferOrSharded = Typed<names::buffer_or_sharded>;

/// clbuf.Checkpoint over one clbuf::Checkpoint of one manager.
class PyCheckpoint {
 public:
  PyCheckpoint(std::shared_ptr<clbuf::BufferManager> manager, const std::string& folder)
      : manager_(std::move(manager)),
        cpp_(std::make_unique<clbuf::Checkpoint>(*manager_, folder)) {}

  void add(const std::string& name, const py::handle& buffer, const py::handle& shape) {
    const char* op = "Checkpoint.add";
    if (is_sharded(buffer)) {
      if (!shape.is_none()) {
        fail(op, CL_INVALID_VALUE,
             "shape applies to a DeviceBuffer; a ShardedBuffer's shards are saved as they are");
      }
      const ShardedParts parts = sharded_parts(op, buffer);
      NoGil release;
      std::lock_guard<std::mutex> lock(mutex_);
      cpp_->add(name, *parts.group, *parts.bytes);
    } else {
      const std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
      if (!handle->manager) fail(op, CL_INVALID_MEM_OBJECT, "the buffer has no memory");
      std::vector<std::size_t> extents;
      for (const py::ssize_t extent : shape.is_none() ? handle->shape : as_shape(op, shape)) {
        extents.push_back(static_cast<std::size_t>(extent));
      }
      with_numpy_element(op, handle->dtype, "checkpoint", [&](auto tag) {
        using E = decltype(tag);
        auto typed = std::make_shared<clbuf::DeviceBuffer<E>>(typed_of<E>(op, *handle));
        NoGil release;
        std::lock_guard<std::mutex> lock(mutex_);
        cpp_->add(name, *typed, extents);
        typed_.push_back(std::move(typed));
      });
    }
    kept_.push_back(py::reinterpret_borrow<py::object>(buffer));
  }

  void save() {
    NoGil release;
    std::lock_guard<std::mutex> lock(mutex_);
    cpp_->save();
  }

  void load() {
    NoGil release;
    std::lock_guard<std::mutex> lock(mutex_);
    cpp_->load();
  }

  std::size_t arrays() const noexcept { return kept_.size(); }

 private:
  /// The handle's bytes as elements E, adopted by the checkpoint's manager (an empty buffer:
  /// a new empty buffer of it, which the library saves as an array of no element).
  template <class E>
  clbuf::DeviceBuffer<E> typed_of(const char* op, const Handle& handle) {
    if (handle.nbytes() == 0) return manager_->allocate<E>(0);
    return typed_alias<E>(op, *manager_, handle.memory);
  }

  std::shared_ptr<clbuf::BufferManager> manager_;
  // The typed buffers the library points to, and the Python objects added: declared before the
  // library's Checkpoint, so destroyed after it.
  std::vector<std::shared_ptr<void>> typed_;
  std::vector<py::object> kept_;
  std::mutex mutex_;  // the library's Checkpoint is not for several threads at once
  std::unique_ptr<clbuf::Checkpoint> cpp_;
};

template <>
struct PythonName<PyCheckpoint> {
  static constexpr const char* name = "Checkpoint";
  static constexpr const char* scope = "Checkpoint.";
  static constexpr const char* made_by = "create one with clbuf.Checkpoint(manager, folder)";
};

void bind_checkpoint(py::module_& m) {
  python_class<PyCheckpoint>(
      m, "Checkpoint",
      "A named set of DeviceBuffers and ShardedBuffers saved to a folder and loaded back "
      "(clbuf::Checkpoint): save() is atomic (written into folder.tmp, every file and the folder "
      "fsync'd, then renamed into place; a process killed at any instant leaves the previous "
      "checkpoint loadable), and load() checks every file (the manifest's dtype, shape and "
      "CRC32C of each array's bytes) before it writes any buffer. The folder holds one .npy file "
      "per array, which np.load reads, and the manifest.")
      .def(py::init([](Self<Manager> manager, const std::string& folder) {
             const std::shared_ptr<Manager>& held = initialised(manager, "Checkpoint");
             return reported<PyCheckpoint>("__init__", [&] {
               return std::make_shared<PyCheckpoint>(held->shared(), folder);
             });
           }),
           py::arg("manager"), py::arg("folder"),
           "The checkpoint of `manager`'s buffers in the folder `folder` (made by save(); its "
           "parent folder must exist). Nothing is read or written until save() or load().")
      .def(
          "add",
          [](Self<PyCheckpoint> self, const std::string& name, const BufferOrSharded& buffer,
             const OptionalShape& shape) -> AnyCheckpoint {
            reported<PyCheckpoint>("add",
                                   [&] { initialised(self, "add")->add(name, buffer, shape); });
            return AnyCheckpoint(py::reinterpret_borrow<py::object>(self.object));
          },
          py::arg("name"), py::arg("buffer"), py::arg("shape") = py::none(),
          "Adds `buffer` as the array `name` (1-200 of [A-Za-z0-9_-], unique) and returns the "
          "Checkpoint. A DeviceBuffer (a view too) of a numeric dtype in the host's byte order, "
          "of `manager`'s context, is saved as `name`.npy of its dtype and of `shape` (None: its "
          "shape; a 0-d buffer as shape (1,)); a ShardedBuffer as one file per shard, "
          "`name`-shard<k>.npy, holding the shard's bytes with its ghost elements (dtype uint8), "
          "each through its own device's manager, as the C++ add(name, group, sharded). The "
          "Checkpoint keeps every buffer added alive. clbuf.Error for a bad or repeated name, a "
          "shape that does not hold the buffer's elements, a buffer of another context.")
      .def("save", checked("save", &PyCheckpoint::save),
           "Writes every array added, atomically: `folder` holds the previous checkpoint until "
           "this one is whole. clbuf.Error naming the file (a full disk, no permission, a "
           "folder of that name that is not a checkpoint); the previous checkpoint is kept and "
           "the temporary folder removed.")
      .def("load", checked("load", &PyCheckpoint::load),
           "Loads every array into the buffers added, once every file has been checked against "
           "the manifest (dtype, shape, size, CRC32C). clbuf.Error naming the file and what "
           "differs (missing, truncated, corrupted, another dtype or shape than the buffer "
           "added); the buffers are then unchanged.")
      .def_property_readonly("arrays", checked("arrays", &PyCheckpoint::arrays),
                             "How many buffers and ShardedBuffers were added.")
      .def_static(
          "complete_folder",
          [](const std::string& folder) { return clbuf::Checkpoint::complete_folder(folder); },
          py::arg("folder"),
          "The folder a load() of `folder` reads: `folder`, or `folder`.old where a save was "
          "cut off between its two renames; '' when neither exists.");
}

}  // namespace clbuf_python
