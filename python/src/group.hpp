// SPDX-License-Identifier: MIT
// clbuf.DeviceGroup, clbuf.ShardedBuffer and clbuf.ShardedHalo over clbuf::DeviceGroup,
// clbuf::ShardedBuffer and clbuf::ShardedHalo (issue 36). A ShardedBuffer of any dtype is the
// C++ ShardedBuffer<std::uint8_t> of its bytes, split in units of whole elements (the partition's
// unit times the itemsize), so every split, move and halo copy is the one the C++ group makes for
// that element type; fill writes each shard's elements through its typed alias.
#ifndef CLBUF_PYTHON_GROUP_HPP
#define CLBUF_PYTHON_GROUP_HPP

#include "common.hpp"

namespace clbuf_python {

void bind_group(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_GROUP_HPP
