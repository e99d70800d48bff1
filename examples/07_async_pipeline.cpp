// SPDX-License-Identifier: MIT
// Upload -> kernel -> download with no host wait in between, and a second batch uploading while
// the first one's kernel runs. The kernel is the application's own (a cl::Program built on the
// manager's context); clbuf's Futures hand it the events to wait for, and take its event back.
#include <clbuf/clbuf.hpp>

#include <cmath>
#include <iostream>
#include <vector>

namespace {

const char* const kSource = R"CLC(
__kernel void saxpy(float a, __global const float* x, __global float* y) {
  const size_t i = get_global_id(0);
  y[i] = a * x[i] + y[i];
}
)CLC";

}  // namespace

int main() try {
  clbuf::BufferManager manager;
  std::cout << "device: " << manager.device().name << " ("
            << clbuf::to_string(manager.memory_model()) << " memory)\n";

  cl::Program program(manager.context(), kSource);
  try {
    program.build();
  } catch (...) {
    std::cerr << program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(
        manager.context().getInfo<CL_CONTEXT_DEVICES>()[0]);
    throw;
  }
  cl::Kernel saxpy(program, "saxpy");
  cl::CommandQueue queue = manager.queue();  // the kernels run on the manager's in-order queue

  const std::size_t n = std::size_t{1} << 22;  // 16 MiB of float per array
  const std::size_t batches = 3;
  std::vector<std::vector<float>> results(batches, std::vector<float>(n));
  std::vector<clbuf::Future<void>> pending;
  for (std::size_t b = 0; b < batches; ++b) {
    std::vector<float> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i % 1000);
      y[i] = static_cast<float>(b);
    }
    clbuf::DeviceBuffer<float> x_dev = manager.allocate<float>(n);
    clbuf::DeviceBuffer<float> y_dev = manager.allocate<float>(n);
    // Both uploads return at once; the Futures own the vectors until the bytes have landed.
    auto x_up = manager.upload_async(x_dev, std::move(x));
    auto y_up = manager.upload_async(y_dev, std::move(y));
    // The kernel waits for both uploads' events: needed on a queue of the application's own,
    // harmless on the manager's in-order queue, where it would wait anyway.
    std::vector<cl::Event> inputs = x_up.wait_list();
    for (const cl::Event& e : y_up.wait_list()) inputs.push_back(e);
    saxpy.setArg(0, 2.0f);
    saxpy.setArg(1, x_dev.native());
    saxpy.setArg(2, y_dev.native());
    cl::Event ran;
    queue.enqueueNDRangeKernel(saxpy, cl::NullRange, cl::NDRange(n), cl::NullRange, &inputs, &ran);
    manager.trace_command("saxpy", ran);  // on the timeline when CLBUF_TRACE is set, else nothing
    // The download waits for the kernel's event; nothing on the host has waited yet. The
    // buffers may go out of scope: the kernel runs on the manager's queue, so whatever reuses
    // their memory next is queued behind it.
    pending.push_back(manager.download_async(y_dev, results[b].data(), n, 0, {ran}));
    pending.push_back(std::move(x_up));
    pending.push_back(std::move(y_up));
  }
  for (auto& future : pending) future.get();  // the first and only host wait

  for (std::size_t b = 0; b < batches; ++b) {
    for (std::size_t i = 0; i < n; i += 9973) {
      const float expected = 2.0f * static_cast<float>(i % 1000) + static_cast<float>(b);
      if (std::fabs(results[b][i] - expected) > 0.0f) {
        std::cerr << "batch " << b << " element " << i << ": " << results[b][i]
                  << " != " << expected << "\n";
        return 1;
      }
    }
  }
  std::cout << batches << " batches of saxpy over " << n << " floats: correct\n"
            << manager.stats().summary() << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
