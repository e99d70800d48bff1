// SPDX-License-Identifier: MIT
// detail::ranges_overlap(a, b, length) against 128-bit interval arithmetic, for ranges that fit
// in one buffer of `capacity` bytes (the function's precondition) and for any inputs.
#include <algorithm>

#include <clbuf/clbuf.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  using namespace clbuf_fuzz;
  DataProvider data(bytes, size);
  const std::size_t capacity = pick(data);
  const std::size_t length = pick(data, capacity / 2);
  const std::size_t a = pick(data, capacity - length);
  const std::size_t b = pick(data, a + length);  // the edges: b == a + length - 1, a + length
  // [a, a + length) and [b, b + length) share a byte.
  const bool expected = length != 0 && u128{std::max(a, b)} < u128{std::min(a, b)} + u128{length};
  if (clbuf::detail::ranges_overlap(a, b, length) != expected) {
    mismatch("ranges_overlap", a, b, length);
  }
  // Within one buffer, the edge cases by construction.
  if (length != 0 && clbuf::detail::range_fits(a, length, capacity) &&
      clbuf::detail::range_fits(b, length, capacity)) {
    if (!clbuf::detail::ranges_overlap(a, a, length)) mismatch("same start", a, a, length);
    if (a <= size_max - length && !clbuf::detail::ranges_overlap(a, a + length - 1, length)) {
      mismatch("dst == src + n - 1", a, a + length - 1, length);
    }
    if (a <= size_max - length && clbuf::detail::ranges_overlap(a, a + length, length)) {
      mismatch("dst == src + n", a, a + length, length);
    }
  }
  return 0;
}
