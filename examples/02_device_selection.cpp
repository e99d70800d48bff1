// SPDX-License-Identifier: MIT
// What list_devices() sees, which device the default selection picks, and why: the full report of
// explain_selection() (every device, picked or why rejected; CLBUF_DEBUG=1 logs the same report
// whenever a BufferManager is made). Pass a selector as the first argument ("gpu", "cpu", "0:0",
// part of a name) to try it.
#include <clbuf/clbuf.hpp>

#include <iostream>
#include <string>

int main(int argc, char** argv) try {
  const auto devices = clbuf::list_devices();
  std::cout << devices.size() << " OpenCL device(s):\n";
  for (const clbuf::DeviceInfo& d : devices) {
    std::cout << "  [" << d.platform_index << ":" << d.device_index << "] " << d.platform << " / "
              << d.name << "  type=" << clbuf::to_string(d.type)
              << "  global=" << d.global_mem_bytes / (1024 * 1024) << " MiB"
              << "  max_alloc=" << d.max_alloc_bytes / (1024 * 1024) << " MiB\n";
  }

  const std::string selector = argc > 1 ? argv[1] : "";
  std::cout << clbuf::explain_selection(selector).to_string();

  const clbuf::BufferManager manager =
      argc > 1 ? clbuf::BufferManager(std::string(argv[1])) : clbuf::BufferManager();
  std::cout << "picked [" << manager.device().platform_index << ":" << manager.device().device_index
            << "] " << manager.device().name << "\n"
            << "because: " << manager.selection_reason() << "\n";
  return 0;
} catch (const clbuf::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
