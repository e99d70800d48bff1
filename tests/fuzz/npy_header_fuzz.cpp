// SPDX-License-Identifier: MIT
// detail::parse_npy_header(bytes) on any bytes (issue 44): it never reads past them, and what it
// accepts is consistent (a numeric dtype, the array inside size_t, the data after the header);
// an accepted C-order header formatted again by format_npy_header parses to the same array.
#include <cstring>
#include <memory>
#include <string>

#include <clbuf/clbuf.hpp>
#include <clbuf/detail/npy_format.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  using namespace clbuf_fuzz;
  // A copy of exactly `size` bytes on the heap, so a read past them is an ASan report.
  std::unique_ptr<unsigned char[]> copy(new unsigned char[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(copy.get(), bytes, size);
  clbuf::NpyHeader header;
  const std::string why = clbuf::detail::parse_npy_header(copy.get(), size, header);
  if (!why.empty()) return 0;
  const std::size_t item = header.item_bytes;
  const bool known = (header.kind == 'b' && item == 1) ||
                     ((header.kind == 'i' || header.kind == 'u') &&
                      (item == 1 || item == 2 || item == 4 || item == 8)) ||
                     (header.kind == 'f' && (item == 2 || item == 4 || item == 8)) ||
                     (header.kind == 'c' && (item == 8 || item == 16));
  if (!known) mismatch("npy dtype", static_cast<unsigned char>(header.kind), item, size);
  if (u128{header.elements} * item != u128{header.data_bytes}) {
    mismatch("npy data bytes", header.elements, item, header.data_bytes);
  }
  if (header.data_offset > size || header.data_offset < 10) {
    mismatch("npy data offset", header.data_offset, size, 0);
  }
  if (!header.fortran_order) {
    const std::string again = clbuf::detail::format_npy_header(header.descr(), header.shape);
    clbuf::NpyHeader reparsed;
    const std::string why_again = clbuf::detail::parse_npy_header(
        reinterpret_cast<const unsigned char*>(again.data()), again.size(), reparsed);
    if (!why_again.empty() || reparsed.shape != header.shape ||
        reparsed.descr() != header.descr() || again.size() % 64 != 0) {
      mismatch("npy format round trip", header.shape.size(), again.size(), size);
    }
  }
  return 0;
}
