// SPDX-License-Identifier: MIT
// Full duplex (issue 19): an upload and a download at once, in all (2 x bytes / time, GB/s),
// clbuf against plain OpenCL arrangements on the same device. Per size:
//   clbuf_sequential   upload(A) then download(B), one thread (no overlap: the reference)
//   clbuf_two_threads  upload(A) on one thread, download(B) on another, started together
//   clbuf_async_pair   upload_async(A), download_async(B), then both waited for
//   clbuf_upload / clbuf_download  each alone
//   raw_pinned_two_queues    non-blocking writes and reads from mapped CL_MEM_ALLOC_HOST_PTR
//                            blocks on two in-order queues of one context, both flushed, waited
//   raw_pageable_two_queues  the same from the caller's pageable memory
//   raw_pinned_two_threads   blocking calls from two threads on two queues (what NVIDIA does not
//                            overlap, measured in issue 19)
//   duplex [--sizes 64M,256M] [--reps N] [--device SELECTOR] [--memory discrete]
// (--memory discrete forces the discrete paths, staging from 1 MiB: the smoke test on PoCL)
// No timing is asserted; the smoke test checks the bytes.
#include <clbuf/clbuf.hpp>

#include "size_list.hpp"

#include <CL/opencl.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Runs a and b at once on two threads, released together; returns the seconds until both end.
double together(const std::function<void()>& a, const std::function<void()>& b) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  auto wrap = [&](const std::function<void()>& f) {
    ++ready;
    while (!go.load()) std::this_thread::yield();
    f();
  };
  std::thread ta(wrap, std::cref(a)), tb(wrap, std::cref(b));
  while (ready.load() < 2) std::this_thread::yield();
  const auto t0 = Clock::now();
  go = true;
  ta.join();
  tb.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double timed(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Mapped {
  cl::Buffer buffer;
  char* ptr = nullptr;
  cl::CommandQueue queue;
  Mapped(const cl::Context& ctx, const cl::CommandQueue& q, std::size_t bytes) : queue(q) {
    buffer = cl::Buffer(ctx, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, bytes);
    ptr = static_cast<char*>(
        queue.enqueueMapBuffer(buffer, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes));
    std::memset(ptr, 7, bytes);
  }
  ~Mapped() {
    try {
      queue.enqueueUnmapMemObject(buffer, ptr);
      queue.finish();
    } catch (...) {
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes = {std::size_t{64} << 20, std::size_t{256} << 20};
  int reps = 7;
  std::string device;
  clbuf::Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes = bench::parse_sizes(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--memory" && i + 1 < argc && std::string(argv[++i]) == "discrete") {
      options.memory = clbuf::MemoryModel::discrete;
      options.staging_threshold_bytes = std::size_t{1} << 20;
      options.staging_chunk_bytes = std::size_t{256} << 10;
    }
  }
  try {
    clbuf::BufferManager m(device, options);
    std::printf("# duplex on %s (%s), %d reps; aggregate GB/s = 2 x bytes / median time\n",
                m.device().name.c_str(), clbuf::to_string(m.memory_model()), reps);
    std::printf("%-26s %10s %10s %10s\n", "method", "MiB", "median_ms", "GB/s");
    const cl::Context ctx = m.context();
    const cl::Device dev = ctx.getInfo<CL_CONTEXT_DEVICES>().at(0);
    cl::CommandQueue q1(ctx, dev), q2(ctx, dev);
    int failures = 0;
    for (const std::size_t bytes : sizes) {
      const std::size_t count = bytes / sizeof(float);
      std::vector<float> up(count), down(count), expected(count);
      for (std::size_t i = 0; i < count; ++i) {
        up[i] = static_cast<float>(i % 1000);
        expected[i] = static_cast<float>((i * 7) % 1000);
      }
      auto a = m.allocate<float>(count);
      auto b = m.upload(expected);
      Mapped pin_up(ctx, q1, bytes), pin_down(ctx, q2, bytes);
      cl::Buffer raw_a(ctx, CL_MEM_READ_WRITE, bytes), raw_b(ctx, CL_MEM_READ_WRITE, bytes);
      q1.enqueueWriteBuffer(raw_b, CL_TRUE, 0, bytes, expected.data());
      const std::vector<std::pair<std::string, std::function<double()>>> methods = {
          {"clbuf_sequential",
           [&] {
             return timed([&] {
               m.upload(a, up);
               m.download(b, down.data(), count);
             });
           }},
          {"clbuf_two_threads",
           [&] {
             return together([&] { m.upload(a, up); }, [&] { m.download(b, down.data(), count); });
           }},
          {"clbuf_async_pair",
           [&] {
             return timed([&] {
               auto u = m.upload_async(a, up.data(), count);
               auto d = m.download_async(b, down.data(), count);
               u.get();
               d.get();
             });
           }},
          {"clbuf_upload", [&] { return timed([&] { m.upload(a, up); }) * 2; }},
          {"clbuf_download", [&] { return timed([&] { m.download(b, down.data(), count); }) * 2; }},
          {"raw_pinned_two_queues",
           [&] {
             return timed([&] {
               cl::Event w, r;
               q1.enqueueWriteBuffer(raw_a, CL_FALSE, 0, bytes, pin_up.ptr, nullptr, &w);
               q2.enqueueReadBuffer(raw_b, CL_FALSE, 0, bytes, pin_down.ptr, nullptr, &r);
               q1.flush();
               q2.flush();
               w.wait();
               r.wait();
             });
           }},
          {"raw_pageable_two_queues",
           [&] {
             return timed([&] {
               cl::Event w, r;
               q1.enqueueWriteBuffer(raw_a, CL_FALSE, 0, bytes, up.data(), nullptr, &w);
               q2.enqueueReadBuffer(raw_b, CL_FALSE, 0, bytes, down.data(), nullptr, &r);
               q1.flush();
               q2.flush();
               w.wait();
               r.wait();
             });
           }},
          {"raw_pinned_two_threads",
           [&] {
             return together([&] { q1.enqueueWriteBuffer(raw_a, CL_TRUE, 0, bytes, pin_up.ptr); },
                             [&] { q2.enqueueReadBuffer(raw_b, CL_TRUE, 0, bytes, pin_down.ptr); });
           }},
      };
      for (const auto& method : methods) {
        std::vector<double> seconds;
        for (int r = 0; r < reps + 1; ++r) {
          std::fill(down.begin(), down.end(), -1.0f);
          const double s = method.second();
          if (r > 0) seconds.push_back(s);  // the first is a warm-up
          const bool clbuf_method = method.first.rfind("clbuf", 0) == 0;
          if (clbuf_method && method.first != "clbuf_upload" && down != expected) {
            std::printf("WRONG DATA: %s\n", method.first.c_str());
            ++failures;
          }
        }
        std::sort(seconds.begin(), seconds.end());
        const double median = seconds[seconds.size() / 2];
        std::printf("%-26s %10zu %10.3f %10.2f\n", method.first.c_str(), bytes >> 20, median * 1e3,
                    2.0 * static_cast<double>(bytes) / median / 1e9);
        std::fflush(stdout);
      }
      if (m.download(a) != up) {
        std::printf("WRONG DATA: the uploads\n");
        ++failures;
      }
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "duplex: %s\n", e.what());
    return 1;
  }
}
