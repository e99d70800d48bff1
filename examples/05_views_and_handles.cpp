// SPDX-License-Identifier: MIT
// Mapped views (RAII), sub-buffer views, raw OpenCL handles in and out, and a copy between two
// managers (run with POCL_DEVICES="pthread pthread" to see two PoCL devices).
#include <clbuf/clbuf.hpp>

#include <algorithm>
#include <iostream>
#include <vector>

int main() try {
  clbuf::BufferManager manager;
  std::vector<float> data(4096);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  auto buffer = manager.upload(data);

  // 1. A mapped view: the host reads and writes device memory in place; unmapped at scope end.
  {
    clbuf::MappedView<float> view = manager.map(buffer, clbuf::MapMode::read_write, 0, 16);
    for (float& x : view) x = -x;
  }
  bool ok = manager.download(buffer)[5] == -5.0f;

  // 2. A sub-buffer view of elements [1024, 2048), usable like any buffer; offsets must respect
  //    CL_DEVICE_MEM_BASE_ADDR_ALIGN (1024 floats are 4 KiB, aligned on every device).
  auto middle = manager.view(buffer, 1024, 1024);
  manager.fill(middle, 0.5f);
  ok = ok && manager.download(buffer)[1500] == 0.5f && manager.download(buffer)[2048] == 2048.0f;

  // 3. Raw handles: hand the buffer to OpenCL code, then adopt it back.
  cl::Buffer raw = manager.allocate<float>(256).release();  // yours now; never pooled again
  auto adopted = manager.adopt<float>(raw, 256);
  manager.fill(adopted, 2.0f);
  ok = ok && manager.download(adopted)[255] == 2.0f;

  // 4. A manager per device; copy_from() copies between them without a full host copy.
  const auto devices = clbuf::list_devices();
  const std::string second = devices.size() > 1 ? std::to_string(devices[1].platform_index) + ":" +
                                                      std::to_string(devices[1].device_index)
                                                : std::string();
  clbuf::BufferManager other(second);
  auto there = other.allocate<float>(buffer.size());
  other.copy_from(manager, buffer, there);
  ok = ok && other.download(there) == manager.download(buffer);
  std::cout << "devices: " << manager.device().name << " -> " << other.device().name << "\n"
            << "mapped, sub-buffer, adopted and cross-manager copies: " << (ok ? "ok" : "MISMATCH")
            << "\n";
  return ok ? 0 : 1;
} catch (const clbuf::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
