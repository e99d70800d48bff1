// SPDX-License-Identifier: MIT
// numpy's .npy files: BufferManager::load_npy / save_npy (manager.hpp) move a buffer's bytes
// between a .npy file and the device through pinned chunks; this header gives the dtype of an
// element type (NpyType<T>, detail/npy_format.hpp) and read_npy_header(), which says what a
// file holds before a buffer is made for it (the Python module's clbuf.load picks the dtype by
// it). docs/design.md "Files and checkpoints".
#ifndef CLBUF_NPY_HPP
#define CLBUF_NPY_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/buffer_access.hpp>
#include <clbuf/detail/npy_io.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace clbuf {

/// What the .npy file `path` holds: its dtype, order and shape, checked as load_npy() checks
/// them (the file's size agrees with its header). Reads the header only.
/// @throws Error CL_INVALID_VALUE naming the path and what is wrong.
inline NpyHeader read_npy_header(const std::string& path) {
  return detail::guard_host_memory(
      "read_npy_header", [&] { return detail::NpyFile::open("read_npy_header", path).header; });
}

/// For front ends that carry the dtype themselves (the Python module's clbuf.load): the array of
/// the .npy file `path`, of any dtype NpyHeader reads, as a new buffer of its bytes (in the
/// host's byte order: a big-endian file is swapped), its header in `header`. As load_npy()
/// otherwise (pinned chunks, errors; cleanup() waits for it).
inline DeviceBuffer<std::uint8_t> load_npy_bytes(BufferManager& manager, const std::string& path,
                                                 NpyHeader& header) {
  return detail::guard_host_memory("load", [&] {
    const char* op = "load";
    const auto entry = detail::ManagerAccess::enter(manager, op);
    detail::NpyFile npy = detail::NpyFile::open(op, path);
    if (npy.header.fortran_order) npy.check_type(op, npy.header.kind, npy.header.item_bytes);
    DeviceBuffer<std::uint8_t> bytes = manager.allocate<std::uint8_t>(npy.header.data_bytes);
    detail::npy_read(detail::ManagerAccess::engine(manager), op, npy,
                     detail::BufferAccess::memory(bytes), true);
    header = npy.header;
    header.byte_order = header.item_bytes == 1 ? '|' : '<';  // as the bytes are now
    return bytes;
  });
}

/// For front ends: `bytes` (a buffer or a view) as the .npy file `path` of `descr` (numpy's
/// dtype.str: "<f4", "|b1", ">i8" for bytes held big-endian) and `shape`, atomically as
/// save_npy(). @throws Error CL_INVALID_VALUE for a descr clbuf does not read or a shape whose
/// bytes are not bytes.size(); as save_npy().
inline void save_npy_bytes(BufferManager& manager, const std::string& path,
                           const DeviceBuffer<std::uint8_t>& bytes, const std::string& descr,
                           const std::vector<std::size_t>& shape) {
  detail::guard_host_memory("save", [&] {
    const char* op = "save";
    const auto entry = detail::ManagerAccess::enter(manager, op);
    if (!bytes.valid()) detail::fail_invalid_buffer(op);
    const std::string header = detail::format_npy_header(descr, shape);
    NpyHeader parsed;
    const std::string why = detail::parse_npy_header(
        reinterpret_cast<const unsigned char*>(header.data()), header.size(), parsed);
    if (!why.empty()) detail::fail(op, CL_INVALID_VALUE, why);
    if (parsed.data_bytes != bytes.size_bytes()) {
      detail::fail(op, CL_INVALID_VALUE,
                   "shape " + detail::shape_text(shape) + " of " + descr + " is " +
                       std::to_string(parsed.data_bytes) + " bytes, the buffer " +
                       std::to_string(bytes.size_bytes()));
    }
    detail::AtomicFile out(op, path);
    detail::npy_write(detail::ManagerAccess::engine(manager), op, out.file(), header,
                      detail::BufferAccess::memory(bytes), bytes.size_bytes(), parsed.item_bytes);
    out.commit(op);
  });
}

}  // namespace clbuf

#endif  // CLBUF_NPY_HPP
