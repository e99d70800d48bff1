// SPDX-License-Identifier: MIT
// Mapped views (RAII), views at any offset, raw OpenCL handles in and out, and a copy between two
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

  // 2. A view of elements [1023, 2047), at any offset, usable like any buffer. For a kernel,
  //    native_root() and native_offset_bytes() / sizeof(float) reach it with no sub-buffer;
  //    set_view_args() sets both as a kernel's arguments (a buffer and a ulong offset).
  auto middle = manager.view(buffer, 1023, 1024);
  manager.fill(middle, 0.5f);
  ok = ok && manager.download(buffer)[1023] == 0.5f && manager.download(buffer)[2047] == 2047.0f;
  ok = ok && middle.native_root()() == buffer.native()() &&
       middle.native_offset_bytes() == 1023 * sizeof(float);
  cl::Program program(manager.context(),
                      "__kernel void twice(__global float* v, ulong at) {"
                      " v[at + get_global_id(0)] *= 2; }");
  program.build();
  cl::Kernel twice(program, "twice");
  clbuf::set_view_args(twice, 0, middle);
  manager.queue().enqueueNDRangeKernel(twice, cl::NullRange, cl::NDRange(middle.size()));
  const std::vector<float> after = manager.download(buffer);
  ok = ok && after[1022] == 1022.0f && after[1023] == 1.0f && after[2046] == 1.0f &&
       after[2047] == 2047.0f;

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
            << "mapped, view, adopted and cross-manager copies: " << (ok ? "ok" : "MISMATCH")
            << "\n";
  return ok ? 0 : 1;
} catch (const clbuf::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
