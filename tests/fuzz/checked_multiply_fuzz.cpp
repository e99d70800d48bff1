// SPDX-License-Identifier: MIT
// detail::checked_multiply(a, b, out) against 128-bit arithmetic: the product when it fits in
// size_t, else false with `out` untouched.
#include <clbuf/clbuf.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  using namespace clbuf_fuzz;
  DataProvider data(bytes, size);
  const std::size_t a = pick(data);
  const std::size_t b = pick(data, a == 0 ? 0 : size_max / a);
  const u128 product = u128{a} * u128{b};
  const std::size_t untouched = 0x5A5A5A5A5A5A5A5Aull;
  std::size_t out = untouched;
  const bool fits = clbuf::detail::checked_multiply(a, b, out);
  if (fits != (product <= u128{size_max})) mismatch("checked_multiply fits", a, b, out);
  if (fits && u128{out} != product) mismatch("checked_multiply product", a, b, out);
  if (!fits && out != untouched) mismatch("checked_multiply touched out", a, b, out);
  return 0;
}
