// SPDX-License-Identifier: MIT
// Does an asynchronous upload overlap a kernel? Times, each the median of interleaved
// repetitions: a kernel alone on a queue of the application's own, upload_async() of a pageable
// std::vector alone, and both started together. Overlap shows as together < kernel + upload.
//   async_overlap [--mib N] [--reps N] [--kernel-ms N] [--device SEL]
#include <clbuf/clbuf.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Spins each work-item `rounds` times over a float: device time that needs no memory traffic.
const char* const kSource = R"CLC(
__kernel void spin(__global float* out, int rounds) {
  float x = (float)get_global_id(0);
  for (int i = 0; i < rounds; ++i) x = x * 0.999f + 1.0f;
  out[get_global_id(0)] = x;
}
)CLC";

}  // namespace

int main(int argc, char** argv) try {
  std::size_t mib = 256;
  int reps = 7;
  double kernel_ms = 40.0;
  std::string device;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mib") mib = std::strtoul(argv[i + 1], nullptr, 10);
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    if (flag == "--kernel-ms") kernel_ms = std::atof(argv[i + 1]);
    if (flag == "--device") device = argv[i + 1];
  }
  clbuf::BufferManager manager(device);
  const std::size_t count = mib * (std::size_t{1} << 20) / sizeof(float);
  std::vector<float> host(count);
  for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<float>(i % 4099);
  auto target = manager.allocate<float>(count);

  cl::Context context = manager.context();
  cl::Device dev = context.getInfo<CL_CONTEXT_DEVICES>().at(0);
  cl::CommandQueue other(context, dev);  // the application's compute queue
  cl::Program program(context, kSource);
  program.build();
  cl::Kernel spin(program, "spin");
  const std::size_t items = std::size_t{1} << 16;
  cl::Buffer out(context, CL_MEM_WRITE_ONLY, items * sizeof(float));
  spin.setArg(0, out);

  auto run_kernel = [&](int rounds) {
    spin.setArg(1, rounds);
    cl::Event done;
    other.enqueueNDRangeKernel(spin, cl::NullRange, cl::NDRange(items), cl::NullRange, nullptr,
                               &done);
    other.flush();
    return done;
  };
  // Calibrate the kernel to about kernel_ms.
  int rounds = 1 << 12;
  for (int tries = 0; tries < 12; ++tries) {
    const auto start = Clock::now();
    run_kernel(rounds).wait();
    const double took = ms_since(start);
    if (took > kernel_ms * 0.8 && took < kernel_ms * 1.25) break;
    rounds = static_cast<int>(std::clamp(rounds * kernel_ms / std::max(took, 0.01), 16.0, 1e9));
  }

  std::vector<double> kernel_alone, upload_alone, together, blocking_upload;
  std::vector<double> together_blocking, together_raw, marker_done, together_chunked;
  std::vector<double> write_done, barrier_done;
  cl::Buffer fence(context, CL_MEM_READ_WRITE, sizeof(cl_uint));
  const cl_uint zero = 0;
  double raw_alone = 0;
  cl::CommandQueue raw(context, dev);
  cl::Buffer raw_target(context, CL_MEM_READ_WRITE, count * sizeof(float));
  cl::Buffer raw_pinned(context, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, count * sizeof(float));
  void* pinned = raw.enqueueMapBuffer(raw_pinned, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                      count * sizeof(float));
  std::memcpy(pinned, host.data(), count * sizeof(float));
  for (int r = 0; r < reps; ++r) {
    auto start = Clock::now();
    run_kernel(rounds).wait();
    kernel_alone.push_back(ms_since(start));

    start = Clock::now();
    manager.upload_async(target, host.data(), count).get();
    upload_alone.push_back(ms_since(start));

    start = Clock::now();
    manager.upload(target, host.data(), count);
    blocking_upload.push_back(ms_since(start));

    start = Clock::now();
    cl::Event kernel = run_kernel(rounds);
    auto upload = manager.upload_async(target, host.data(), count);
    const double returned_after = ms_since(start);
    upload.get();
    kernel.wait();
    together.push_back(ms_since(start));
    if (r == 0) std::printf("# upload_async returned after %.3f ms\n", returned_after);

    // Controls: does anything overlap this kernel? A blocking staged upload from another
    // thread, and by hand: one non-blocking write from mapped pinned memory on a queue of its own.
    start = Clock::now();
    kernel = run_kernel(rounds);
    std::thread blocking([&] { manager.upload(target, host.data(), count); });
    blocking.join();
    kernel.wait();
    together_blocking.push_back(ms_since(start));

    start = Clock::now();
    kernel = run_kernel(rounds);
    cl::Event written;
    raw.enqueueWriteBuffer(raw_target, CL_FALSE, 0, count * sizeof(float), pinned, nullptr,
                           &written);
    raw.flush();
    written.wait();
    kernel.wait();
    together_raw.push_back(ms_since(start));
    // Probes of where a staged upload waits: a marker on an idle queue of its own while the
    // kernel runs (clbuf's staged transfers wait for one on the manager's queue), and the raw
    // write cut into 1 MiB chunks as the staging pipeline cuts it.
    start = Clock::now();
    kernel = run_kernel(rounds);
    cl::Event marker;
    raw.enqueueMarkerWithWaitList(nullptr, &marker);
    raw.flush();
    marker.wait();
    marker_done.push_back(ms_since(start));
    kernel.wait();

    start = Clock::now();  // what clbuf's markers are: a 4-byte write on the queue
    kernel = run_kernel(rounds);
    cl::Event fenced;
    raw.enqueueWriteBuffer(fence, CL_FALSE, 0, sizeof(zero), &zero, nullptr, &fenced);
    raw.flush();
    fenced.wait();
    write_done.push_back(ms_since(start));
    kernel.wait();

    start = Clock::now();  // a barrier waiting for a completed user event (a Future's event)
    kernel = run_kernel(rounds);
    cl::UserEvent released(context);
    released.setStatus(CL_COMPLETE);
    const std::vector<cl::Event> released_list{released};
    cl::Event barrier;
    raw.enqueueBarrierWithWaitList(&released_list, &barrier);
    raw.flush();
    barrier.wait();
    barrier_done.push_back(ms_since(start));
    kernel.wait();

    start = Clock::now();
    kernel = run_kernel(rounds);
    const std::size_t chunk = std::size_t{1} << 20;
    for (std::size_t offset = 0; offset < count * sizeof(float); offset += chunk) {
      raw.enqueueWriteBuffer(raw_target, CL_FALSE, offset,
                             std::min(chunk, count * sizeof(float) - offset),
                             static_cast<char*>(pinned) + offset, nullptr, &written);
    }
    raw.flush();
    written.wait();
    kernel.wait();
    together_chunked.push_back(ms_since(start));
    if (r == 0) {
      start = Clock::now();
      raw.enqueueWriteBuffer(raw_target, CL_TRUE, 0, count * sizeof(float), pinned);
      raw_alone = ms_since(start);
    }
  }
  const double k = median(kernel_alone), u = median(upload_alone), t = median(together);
  const double b = median(blocking_upload);
  const double bytes = static_cast<double>(count * sizeof(float));
  std::printf("# device: %s (%s), %zu MiB pageable std::vector, %d reps, medians\n",
              manager.device().name.c_str(), clbuf::to_string(manager.memory_model()), mib, reps);
  std::printf("kernel alone          %9.3f ms\n", k);
  std::printf("upload_async alone    %9.3f ms  %6.2f GB/s\n", u, bytes / u / 1e6);
  std::printf("upload (blocking)     %9.3f ms  %6.2f GB/s  async/blocking time %.3f\n", b,
              bytes / b / 1e6, u / b);
  std::printf("kernel + upload_async %9.3f ms  (sum of the parts %.3f ms: %s, %.0f%% hidden)\n", t,
              k + u, t < 0.95 * (k + u) ? "overlapped" : "not overlapped",
              100.0 * (k + u - t) / std::min(k, u));
  std::printf("kernel + upload (blocking, another thread) %9.3f ms\n", median(together_blocking));
  std::printf("kernel + raw pinned write (own queue)     %9.3f ms  (raw write alone %.3f ms)\n",
              median(together_raw), raw_alone);
  std::printf("kernel + raw pinned write in 1 MiB chunks (own queue) %9.3f ms\n",
              median(together_chunked));
  std::printf(
      "a marker on an idle queue of its own, enqueued as the kernel starts, completes "
      "after %.3f ms\n",
      median(marker_done));
  std::printf("... a 4-byte write (clbuf's marker) completes after %.3f ms\n", median(write_done));
  std::printf("... a barrier waiting for a completed user event completes after %.3f ms\n",
              median(barrier_done));
  raw.enqueueUnmapMemObject(raw_pinned, pinned);
  raw.finish();
  const auto check = manager.download(target);
  if (std::memcmp(check.data(), host.data(), count * sizeof(float)) != 0) {
    std::fprintf(stderr, "data check failed\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
