// SPDX-License-Identifier: MIT
// Rectangular 2D/3D regions of row-major arrays, in elements: clbuf::Extents, clbuf::Offset,
// clbuf::Region, and the pure checks behind upload_rect/download_rect/copy_rect (bounds and
// overlap, overflow-safe, no OpenCL here). Pitches are always derived from the extents.
#ifndef CLBUF_RECT_HPP
#define CLBUF_RECT_HPP

#include <clbuf/detail/range.hpp>

#include <cstddef>
#include <string>

namespace clbuf {

/// The size of a row-major array or of a region, in elements: `x` elements per row, `y` rows per
/// slice, `z` slices. A 2D array is {width, height}; a 1D array {length}.
struct Extents {
  std::size_t x = 1;  ///< elements per row
  std::size_t y = 1;  ///< rows per slice
  std::size_t z = 1;  ///< slices
};

/// A position in a row-major array, in elements (column x, row y, slice z).
struct Offset {
  std::size_t x = 0;  ///< column (element within its row)
  std::size_t y = 0;  ///< row within its slice
  std::size_t z = 0;  ///< slice
};

/// A box of `size` elements copied from `src_origin` of an array laid out as `src_extents` to
/// `dst_origin` of an array laid out as `dst_extents`. Row and slice pitches are derived from
/// the extents (row pitch = extents.x * sizeof(T), slice pitch = row pitch * extents.y); each
/// array must fit in the buffer or host memory it describes.
struct Region {
  Extents size;         ///< the box copied, in elements
  Offset src_origin;    ///< where the box starts in the source array
  Extents src_extents;  ///< the source array's layout
  Offset dst_origin;    ///< where the box goes in the destination array
  Extents dst_extents;  ///< the destination array's layout
};

namespace detail {

inline std::string describe(const Extents& e) {
  return std::to_string(e.x) + "x" + std::to_string(e.y) + "x" + std::to_string(e.z);
}

inline std::string describe(const Offset& o) {
  return "(" + std::to_string(o.x) + ", " + std::to_string(o.y) + ", " + std::to_string(o.z) + ")";
}

/// The byte geometry of one side of a region, derived from its extents.
struct RectSide {
  std::size_t row_pitch = 0;     ///< bytes per row of the whole array
  std::size_t slice_pitch = 0;   ///< bytes per slice of the whole array
  std::size_t array_bytes = 0;   ///< bytes of the whole array
  std::size_t origin_bytes = 0;  ///< byte offset of the region's first element
};

/// Why a side of a region does not fit, or "" when it does. `capacity` is the number of elements
/// the buffer or host memory holds. On success fills `side` (every product is overflow-checked).
inline std::string rect_side_problem(const Extents& size, const Offset& origin,
                                     const Extents& extents, std::size_t capacity,
                                     std::size_t element_size, RectSide& side) {
  const std::size_t origins[3] = {origin.x, origin.y, origin.z};
  const std::size_t sizes[3] = {size.x, size.y, size.z};
  const std::size_t limits[3] = {extents.x, extents.y, extents.z};
  const char* axes = "xyz";
  for (int d = 0; d < 3; ++d) {
    if (!range_fits(origins[d], sizes[d], limits[d])) {
      return std::string("region of ") + describe(size) + " at " + describe(origin) +
             " leaves an array of " + describe(extents) + " elements along " + axes[d];
    }
  }
  std::size_t elements = 0;
  if (!checked_multiply(extents.x, extents.y, elements) ||
      !checked_multiply(elements, extents.z, elements) ||
      !checked_multiply(elements, element_size, side.array_bytes)) {
    return "array of " + describe(extents) + " elements of " + std::to_string(element_size) +
           " bytes overflows size_t";
  }
  if (elements > capacity) {
    return "array of " + describe(extents) + " elements (" + std::to_string(elements) +
           ") is larger than the " + std::to_string(capacity) + " elements it describes";
  }
  side.row_pitch = extents.x * element_size;
  side.slice_pitch = side.row_pitch * extents.y;
  side.origin_bytes =
      origin.z * side.slice_pitch + origin.y * side.row_pitch + origin.x * element_size;
  return {};
}

/// The region moves no element.
constexpr bool rect_empty(const Extents& size) noexcept {
  return size.x == 0 || size.y == 0 || size.z == 0;
}

/// Rows of `width` bytes starting at base + z * slice + y * row (y < rows, z < slices), for two
/// bases `a` and `b` with the same pitches: does any byte belong to both? Exact, with no
/// signed arithmetic and no overflow, for regions that fit in one buffer (rect_side_problem):
/// then rows * row <= slice and width <= row, so only slice pairs whose starts differ by less
/// than one slice pitch, and within them the two nearest row pairs, can share a byte.
inline bool rect_rows_overlap(std::size_t a, std::size_t b, std::size_t width, std::size_t rows,
                              std::size_t slices, std::size_t row, std::size_t slice) noexcept {
  if (width == 0 || rows == 0 || slices == 0) return false;
  if (a < b) {
    const std::size_t t = a;
    a = b;
    b = t;
  }
  // Now a >= b. Slice starts differ by |gap - j * slice| for some j in (-slices, slices); rows
  // within two slices at distance g differ by |g - k * row| for k in (-rows, rows).
  const std::size_t gap = a - b;
  auto slices_share = [&](std::size_t g) {
    std::size_t k = g / row;
    if (k > rows - 1) k = rows - 1;
    for (std::size_t next = k; next <= k + 1 && next <= rows - 1; ++next) {
      const std::size_t shift = next * row;
      if ((shift <= g ? g - shift : shift - g) < width) return true;
    }
    return false;
  };
  const std::size_t q = gap / slice;
  for (std::size_t j = q == 0 ? 0 : q - 1; j <= q + 1 && j <= slices - 1; ++j) {
    const std::size_t shift = j * slice;
    if (slices_share(shift <= gap ? gap - shift : shift - gap)) return true;
  }
  return false;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_RECT_HPP
