// SPDX-License-Identifier: MIT
// Every check a BufferManager call makes before OpenCL is called, as free functions on sizes,
// offsets and handles (testable without a device). A failed check throws the Error its factory
// in error.hpp words, and nothing has been changed.
#ifndef CLBUF_DETAIL_CHECKS_HPP
#define CLBUF_DETAIL_CHECKS_HPP

#include <clbuf/detail/pool.hpp>
#include <clbuf/detail/range.hpp>
#include <clbuf/error.hpp>
#include <clbuf/rect.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace clbuf {
namespace detail {

/// A buffer this manager may use: valid (not moved from) and of its context.
inline void check_buffer(const char* operation, bool valid, cl_context buffer_context,
                         cl_context context) {
  if (!valid) fail_invalid_buffer(operation);
  if (buffer_context != context) fail_other_context(operation);
}

inline void check_host_pointer(const char* operation, const void* pointer, std::size_t count) {
  if (pointer == nullptr && count != 0) fail_null_pointer(operation, count);
}

/// `count` elements at element `offset` lie within `size` elements; `access` names the use
/// ("read", "write", "view").
inline void check_range(const char* operation, const char* access, std::size_t count,
                        std::size_t offset, std::size_t size, std::size_t element_size) {
  if (!range_fits(offset, count, size)) {
    fail_range(operation, access, count, offset, size, element_size);
  }
}

/// count * element_size, which must neither overflow nor exceed the device's max allocation.
inline std::size_t checked_bytes(const char* operation, std::size_t count, std::size_t element_size,
                                 std::uint64_t max_alloc_bytes) {
  std::size_t bytes = 0;
  if (!checked_multiply(count, element_size, bytes)) fail_overflow(operation, count, element_size);
  if (bytes > max_alloc_bytes) fail_too_large(operation, bytes, max_alloc_bytes);
  return bytes;
}

/// Two byte ranges of one root buffer (views included, by absolute offset) share no byte.
inline void check_no_overlap(const char* operation, cl_mem src_root, std::size_t src_at,
                             cl_mem dst_root, std::size_t dst_at, std::size_t bytes) {
  if (src_root == dst_root && ranges_overlap(src_at, dst_at, bytes)) {
    fail_overlap(operation, src_at, dst_at, bytes);
  }
}

/// Whole-buffer copies need equal element counts.
inline void check_same_size(const char* operation, std::size_t src_count, std::size_t dst_count) {
  if (src_count != dst_count) {
    fail(operation, CL_INVALID_VALUE,
         "source has " + std::to_string(src_count) + " elements but destination has " +
             std::to_string(dst_count));
  }
}

/// A shape whose product is `count`.
inline void check_shape(const char* operation, const std::vector<std::size_t>& shape,
                        std::size_t count) {
  std::size_t elements = 0;
  const bool fits = shape_elements(shape, elements);
  if (fits && elements == count) return;
  std::string extents;
  for (std::size_t extent : shape)
    extents += (extents.empty() ? "" : ", ") + std::to_string(extent);
  fail(operation, CL_INVALID_VALUE,
       "shape [" + extents + "] holds " +
           (fits ? std::to_string(elements) : std::string("more than SIZE_MAX")) +
           " elements but the data has " + std::to_string(count));
}

/// An adopted buffer of `capacity` bytes (CL_MEM_SIZE) holds `count` elements.
inline void check_adopt_capacity(const char* operation, std::size_t count, std::size_t element_size,
                                 std::size_t capacity) {
  std::size_t bytes = 0;
  if (!checked_multiply(count, element_size, bytes)) fail_overflow(operation, count, element_size);
  if (bytes > capacity) {
    fail(operation, CL_INVALID_VALUE,
         std::to_string(count) + " elements of " + std::to_string(element_size) + " bytes need " +
             std::to_string(bytes) + " bytes but the buffer has " + std::to_string(capacity) +
             " (CL_MEM_SIZE)");
  }
}

/// The host may read (`read`) and write (`write`) a buffer whose CL_MEM_HOST_* flags are those
/// of `host_access` (0 for every buffer clbuf makes; an adopted buffer's own; other bits are
/// ignored). Checked by clbuf on
/// every vendor: some drivers (NVIDIA's) let a host-read-only buffer be mapped for writing.
CLBUF_DETAIL_COLD inline void check_host_access_flags(const char* operation,
                                                      cl_mem_flags host_access, bool read,
                                                      bool write) {
  const bool no_access = (host_access & CL_MEM_HOST_NO_ACCESS) != 0;
  const char* flag = no_access                                     ? "CL_MEM_HOST_NO_ACCESS"
                     : (host_access & CL_MEM_HOST_WRITE_ONLY) != 0 ? "CL_MEM_HOST_WRITE_ONLY"
                                                                   : "CL_MEM_HOST_READ_ONLY";
  if (read && (no_access || (host_access & CL_MEM_HOST_WRITE_ONLY) != 0)) {
    fail(operation, CL_INVALID_OPERATION,
         std::string("the buffer was created with ") + flag +
             ", so the host may not read it; copy it on the device (copy, copy_bytes) into a "
             "buffer the host may read, and read that");
  }
  if (write && (no_access || (host_access & CL_MEM_HOST_READ_ONLY) != 0)) {
    fail(operation, CL_INVALID_OPERATION,
         std::string("the buffer was created with ") + flag +
             ", so the host may not write it; write a buffer the host may write and copy it on "
             "the device (copy, copy_bytes), or fill() it");
  }
}
/// As check_host_access_flags(); inlined, and only a test of the flags for a buffer the host
/// may read and write (every buffer clbuf allocates), on every small call's path.
CLBUF_DETAIL_INLINE void check_host_access(const char* operation, cl_mem_flags host_access,
                                           bool read, bool write) {
  if ((host_access & (CL_MEM_HOST_NO_ACCESS | CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_READ_ONLY)) ==
      0) {
    return;
  }
  check_host_access_flags(operation, host_access, read, write);
}

/// The host memory of a transfer is not the buffer's own mapped memory (a live MappedView):
/// OpenCL leaves a transfer into or out of a mapped region undefined, and on a device that
/// shares host memory the copy would overlap itself. `lease` may be null (never mapped).
inline void check_not_mapped(const char* operation, Lease* lease, const void* host,
                             std::size_t count, std::size_t element_size) {
  std::size_t bytes = 0;
  if (lease != nullptr && checked_multiply(count, element_size, bytes) &&
      lease->maps_onto(host, bytes)) {
    fail(operation, CL_INVALID_OPERATION,
         "the " + std::to_string(bytes) +
             " bytes of host memory overlap a MappedView of the same buffer; unmap the view "
             "first, or copy from memory of your own");
  }
}

/// One side of a region, checked against `capacity` elements; `side` names it in messages.
inline RectSide rect_side(const char* operation, const char* side, const Extents& size,
                          const Offset& origin, const Extents& extents, std::size_t capacity,
                          std::size_t element_size) {
  RectSide geometry;
  const std::string problem =
      rect_side_problem(size, origin, extents, capacity, element_size, geometry);
  if (!problem.empty()) fail(operation, CL_INVALID_VALUE, side + (": " + problem));
  return geometry;
}

/// Regions of one buffer at absolute byte offsets `a` and `b` (checked sides) share no byte.
/// With equal pitches the test is exact; with different pitches the byte spans must be apart.
inline void check_rect_overlap(const char* operation, std::size_t a, const RectSide& from,
                               std::size_t b, const RectSide& to, const Extents& size,
                               std::size_t element_size) {
  const std::size_t width = size.x * element_size;
  bool overlap = false;
  if (from.row_pitch == to.row_pitch && from.slice_pitch == to.slice_pitch) {
    overlap = rect_rows_overlap(a, b, width, size.y, size.z, from.row_pitch, from.slice_pitch);
  } else {
    const std::size_t a_span =
        (size.z - 1) * from.slice_pitch + (size.y - 1) * from.row_pitch + width;
    const std::size_t b_span = (size.z - 1) * to.slice_pitch + (size.y - 1) * to.row_pitch + width;
    overlap = a < b ? b - a < a_span : a - b < b_span;
  }
  if (overlap) {
    fail(operation, CL_MEM_COPY_OVERLAP,
         "source region at byte " + std::to_string(a) + " and destination region at byte " +
             std::to_string(b) + " of one buffer share bytes (region of " + describe(size) +
             " elements, row pitches " + std::to_string(from.row_pitch) + " and " +
             std::to_string(to.row_pitch) + ", slice pitches " + std::to_string(from.slice_pitch) +
             " and " + std::to_string(to.slice_pitch) + " bytes)");
  }
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_CHECKS_HPP
