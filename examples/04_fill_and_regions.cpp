// SPDX-License-Identifier: MIT
// Fill a buffer with one value, then move rectangular tiles of a 2D image between the host and
// the device and within the device: pitches come from the extents, never computed by hand.
#include <clbuf/clbuf.hpp>

#include <cstdint>
#include <iostream>
#include <numeric>
#include <vector>

int main() try {
  clbuf::BufferManager manager;
  const std::size_t width = 64, height = 48;

  // A 64x48 image on the device, cleared to 7 (clEnqueueFillBuffer where the device has it).
  auto image = manager.allocate<std::uint16_t>(width * height);
  manager.fill(image, std::uint16_t{7});

  // Upload a 16x8 tile of a 20x10 host array into the image at column 30, row 12.
  std::vector<std::uint16_t> host(20 * 10);
  std::iota(host.begin(), host.end(), std::uint16_t{1000});
  clbuf::Region tile;
  tile.size = {16, 8};
  tile.src_origin = {2, 1};
  tile.src_extents = {20, 10};
  tile.dst_origin = {30, 12};
  tile.dst_extents = {width, height};
  manager.upload_rect(image, host, tile);

  // Copy that tile to the top-left corner of the same image, on the device.
  clbuf::Region move;
  move.size = {16, 8};
  move.src_origin = {30, 12};
  move.src_extents = move.dst_extents = {width, height};
  manager.copy_rect(image, image, move);

  // Download the corner into a 16x8 array.
  std::vector<std::uint16_t> corner(16 * 8);
  clbuf::Region back;
  back.size = {16, 8};
  back.src_extents = {width, height};
  back.dst_extents = {16, 8};
  manager.download_rect(image, corner, back);

  bool ok = corner[0] == host[1 * 20 + 2] && corner[16 * 8 - 1] == host[8 * 20 + 17];
  const std::vector<std::uint16_t> all = manager.download(image);
  ok = ok && all[width * height - 1] == 7;  // untouched pixels keep the fill value
  std::cout << "fill + 2D tiles: " << (ok ? "ok" : "MISMATCH") << "\n";

  // A region that leaves its array is refused before OpenCL is called.
  try {
    move.src_origin = {60, 0};
    manager.copy_rect(image, image, move);
  } catch (const clbuf::Error& e) {
    std::cout << "rejected: " << e.what() << "\n";
  }
  return ok ? 0 : 1;
} catch (const clbuf::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
