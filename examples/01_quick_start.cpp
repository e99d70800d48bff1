// SPDX-License-Identifier: MIT
// The README's quick start: upload, copy on the device, download, check.
#include <clbuf/clbuf.hpp>

#include <iostream>
#include <random>
#include <vector>

int main() try {
  clbuf::BufferManager manager;  // a GPU if there is one, else the CPU; CLBUF_DEVICE overrides
  std::cout << "device: " << manager.device().name << " (" << manager.device().platform << ")\n";

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> data(1000);
  for (float& x : data) x = dist(rng);

  clbuf::DeviceBuffer<float> a = manager.upload(data);  // host -> device
  clbuf::DeviceBuffer<float> b = manager.allocate<float>(a.size());
  manager.copy(a, b);                             // device -> device, no host trip
  std::vector<float> back = manager.download(b);  // device -> host, same type and count

  const bool same = back == data;
  std::cout << "round trip of " << back.size() << " floats: " << (same ? "exact" : "MISMATCH")
            << "\n";
  return same ? 0 : 1;
} catch (const clbuf::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
