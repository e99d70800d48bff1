// SPDX-License-Identifier: MIT
// detail::shape_elements(shape, out) against a 128-bit product: 0 when any extent is 0, else the
// product when it fits in size_t, else false.
#include <vector>

#include <clbuf/clbuf.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  using namespace clbuf_fuzz;
  DataProvider data(bytes, size);
  std::vector<std::size_t> shape(data.integral_in_range<std::size_t>(0, 8));
  for (std::size_t& extent : shape) extent = pick(data, 2);
  bool zero = false;
  bool overflow = false;
  u128 product = 1;
  for (std::size_t extent : shape) zero = zero || extent == 0;
  if (!zero) {
    for (std::size_t extent : shape) {
      product *= extent;  // every extent >= 1: once past SIZE_MAX the product stays past it
      if (product > u128{size_max}) {
        overflow = true;
        break;
      }
    }
  }
  std::size_t out = 12345;
  const bool ok = clbuf::detail::shape_elements(shape, out);
  const std::size_t rank = shape.size();
  if (zero) {
    if (!ok || out != 0) mismatch("shape_elements zero extent", rank, ok, out);
  } else if (overflow) {
    if (ok) mismatch("shape_elements overflow accepted", rank, ok, out);
  } else if (!ok || u128{out} != product) {
    mismatch("shape_elements product", rank, ok, out);
  }
  return 0;
}
