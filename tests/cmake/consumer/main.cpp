// SPDX-License-Identifier: MIT
#include <clbuf/clbuf.hpp>

#include <iostream>
#include <vector>

int main() try {
  clbuf::BufferManager manager;
  const std::vector<double> data{3.5, -1.25, 1e300, 42.0};
  const std::vector<double> back = manager.download(manager.upload(data));
  std::cout << "clbuf " << CLBUF_VERSION_MAJOR << "." << CLBUF_VERSION_MINOR << " on "
            << manager.device().name << ": " << (back == data ? "ok" : "MISMATCH") << "\n";
  return back == data ? 0 : 1;
} catch (const clbuf::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
