// SPDX-License-Identifier: MIT
// clbuf.DeviceGroup, clbuf.ShardedBuffer and clbuf.ShardedHalo over clbuf::DeviceGroup,
// clbuf::ShardedBuffer and clbuf::ShardedHalo (issue 36). A ShardedBuffer of any dtype is the
// C++ ShardedBuffer<std::uint8_t> of its bytes, split in units of whole elements (the partition's
// unit times the itemsize), so every split, move and halo copy is the one the C++ group makes for
// that element type; fill writes each shard's elements through its typed alias.
#ifndef CLBUF_PYTHON_GROUP_HPP
#define CLBUF_PYTHON_GROUP_HPP

#include "common.hpp"

#include <clbuf/device_group.hpp>

namespace clbuf_python {

void bind_group(py::module_& m);

/// A clbuf.ShardedBuffer's C++ parts, for the library's calls on a sharded array of any dtype
/// (clbuf.Checkpoint): valid while the Python object lives (it keeps its group alive).
struct ShardedParts {
  clbuf::DeviceGroup* group = nullptr;
  clbuf::ShardedBuffer<std::uint8_t>* bytes = nullptr;
};

/// A clbuf.DeviceGroup's C++ group and its managers (each an aliasing pointer that keeps the
/// group alive), for the library's calls over a group (clbuf.stream_tiles).
struct GroupParts {
  clbuf::DeviceGroup* group = nullptr;
  std::vector<std::shared_ptr<clbuf::BufferManager>> managers;
};

/// True when `value` is a clbuf.DeviceGroup (initialised or not).
bool is_group(const py::handle& value);

/// The parts of `value`, a clbuf.DeviceGroup; clbuf.Error naming `operation` when it was never
/// initialised.
GroupParts group_parts(const char* operation, const py::handle& value);

/// `weights` (a sequence of ints or floats, one per device) as DeviceGroup.scatter reads them;
/// clbuf.Error naming `operation` otherwise.
std::vector<double> group_weights(const char* operation, const py::handle& weights);

/// True when `value` is a clbuf.ShardedBuffer (initialised or not).
bool is_sharded(const py::handle& value);

/// The parts of `value`, a clbuf.ShardedBuffer; clbuf.Error naming `operation` when it was never
/// initialised.
ShardedParts sharded_parts(const char* operation, const py::handle& value);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_GROUP_HPP
