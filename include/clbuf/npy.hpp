// SPDX-License-Identifier: MIT
// numpy's .npy files: BufferManager::load_npy / save_npy (manager.hpp) move a buffer's bytes
// between a .npy file and the device through pinned chunks; this header gives the dtype of an
// element type (NpyType<T>, detail/npy_format.hpp) and read_npy_header(), which says what a
// file holds before a buffer is made for it (the Python module's clbuf.load picks the dtype by
// it). docs/design.md "Files and checkpoints".
#ifndef CLBUF_NPY_HPP
#define CLBUF_NPY_HPP

#include <clbuf/detail/npy_io.hpp>
#include <clbuf/error.hpp>

#include <string>

namespace clbuf {

/// What the .npy file `path` holds: its dtype, order and shape, checked as load_npy() checks
/// them (the file's size agrees with its header). Reads the header only.
/// @throws Error CL_INVALID_VALUE naming the path and what is wrong.
inline NpyHeader read_npy_header(const std::string& path) {
  return detail::guard_host_memory(
      "read_npy_header", [&] { return detail::NpyFile::open("read_npy_header", path).header; });
}

}  // namespace clbuf

#endif  // CLBUF_NPY_HPP
