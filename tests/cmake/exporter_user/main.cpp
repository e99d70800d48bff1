// SPDX-License-Identifier: MIT
#include <exporter.hpp>

#include <iostream>
#include <vector>

int main() try {
  clbuf::BufferManager manager;
  const std::vector<double> data{2.5, -0.125, 1e-300, 7.0};
  const bool same = exporter::round_trip(manager, data) == data;
  std::cout << "exporter on clbuf " << CLBUF_VERSION_MAJOR << "." << CLBUF_VERSION_MINOR << ": "
            << (same ? "ok" : "MISMATCH") << "\n";
  return same ? 0 : 1;
} catch (const clbuf::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
