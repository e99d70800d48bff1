// SPDX-License-Identifier: MIT
// Pure host arithmetic behind every pre-check: overflow-safe sizes, ranges and overlaps.
// No OpenCL here, so these functions can be fuzzed against a wide-integer reference.
#ifndef CLBUF_DETAIL_RANGE_HPP
#define CLBUF_DETAIL_RANGE_HPP

#include <cstddef>
#include <limits>
#include <vector>

namespace clbuf {
namespace detail {

/// a * b into `out`; false (and `out` untouched) when the product does not fit in size_t.
constexpr bool checked_multiply(std::size_t a, std::size_t b, std::size_t& out) noexcept {
  if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) return false;
  out = a * b;
  return true;
}

/// [offset, offset + length) lies inside [0, capacity). Written so that nothing wraps:
/// the naive `offset + length <= capacity` accepts offset = SIZE_MAX.
constexpr bool range_fits(std::size_t offset, std::size_t length, std::size_t capacity) noexcept {
  return offset <= capacity && length <= capacity - offset;
}

/// [a, a + length) and [b, b + length) share a byte. Both ranges must already fit in one buffer.
constexpr bool ranges_overlap(std::size_t a, std::size_t b, std::size_t length) noexcept {
  return length != 0 && (a < b ? b - a < length : a - b < length);
}

/// The product of a shape's extents into `out` (1 for a rank-0 shape); false on overflow.
inline bool shape_elements(const std::vector<std::size_t>& shape, std::size_t& out) noexcept {
  std::size_t product = 1;
  for (std::size_t extent : shape) {
    if (extent == 0) {  // a zero extent makes the product 0, even past an overflowing prefix
      out = 0;
      return true;
    }
  }
  for (std::size_t extent : shape) {
    if (!checked_multiply(product, extent, product)) return false;
  }
  out = product;
  return true;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_RANGE_HPP
