// SPDX-License-Identifier: MIT
// detail::range_fits(offset, length, capacity) against 128-bit arithmetic.
#include <clbuf/clbuf.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  using namespace clbuf_fuzz;
  DataProvider data(bytes, size);
  const std::size_t capacity = pick(data);
  const std::size_t offset = pick(data, capacity);
  const std::size_t length = pick(data, capacity - offset);
  const bool expected = u128{offset} + u128{length} <= u128{capacity};
  if (clbuf::detail::range_fits(offset, length, capacity) != expected) {
    mismatch("range_fits", offset, length, capacity);
  }
  return 0;
}
