// SPDX-License-Identifier: MIT
// The seed's second case: two buffers on the device, the first copied into the second with no
// host round trip, then a byte range copied between buffers of different element types.
#include <clbuf/clbuf.hpp>

#include <cstdint>
#include <cstring>
#include <iostream>
#include <numeric>
#include <vector>

int main() try {
  clbuf::BufferManager manager;

  std::vector<std::int32_t> first(4096), second(4096);
  std::iota(first.begin(), first.end(), 1);
  std::iota(second.begin(), second.end(), 100000);

  auto a = manager.upload(first);
  auto b = manager.upload(second);
  manager.copy(a, b);  // b := a, on the device

  const bool identical = manager.download(a) == first && manager.download(b) == first;
  std::cout << "copy: both buffers identical: " << (identical ? "yes" : "NO") << "\n";

  // copy_bytes moves raw bytes, with offsets, between buffers of any element types.
  auto bytes = manager.allocate<std::uint8_t>(64);
  manager.copy_bytes(a, bytes, 64, /*src_offset_bytes=*/16, /*dst_offset_bytes=*/0);
  std::vector<std::uint8_t> raw = manager.download(bytes);
  const bool bytes_match = std::memcmp(raw.data(), first.data() + 4, 64) == 0;
  std::cout << "copy_bytes: 64 bytes at offset 16 match: " << (bytes_match ? "yes" : "NO") << "\n";

  try {
    manager.copy_bytes(a, a, 64, 0, 32);  // overlapping ranges of one buffer
  } catch (const clbuf::Error& e) {
    std::cout << "overlap rejected: " << e.what() << "\n";
  }
  return identical && bytes_match ? 0 : 1;
} catch (const clbuf::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
