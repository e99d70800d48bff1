// SPDX-License-Identifier: MIT
// What waiting costs on a device (issue 19): the latency of one small command completed in
// different ways, and what the host-side pieces of clbuf's paths cost on this host (thread
// wake-up, memcpy with 1..N threads into and out of pinned memory, and with the DMA engine
// moving pinned memory at the same time; clbuf's staging pattern by hand, with and without the
// DMA; a buffer over the caller's pages). Plain OpenCL and clbuf's
// own WorkerPool and ParallelCopier, no BufferManager: each line is one mechanism, so a path's time
// can be predicted from its parts before it is changed.
//
//   wait_latency [--reps N] [--device P:D] [--big-mib M (default 256; 0: skip the ceiling)]
//                [--sections DIGITS (default 123456: which numbered sections below run)]
//
// Output: one line per mechanism, median and 10th/90th percentile in microseconds.
#include <clbuf/detail/host_memory.hpp>
#include <clbuf/detail/worker_pool.hpp>

#include <CL/cl.h>

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

void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "%s failed: %d\n", what, err);
    std::exit(1);
  }
}

void report(const std::string& name, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  const auto at = [&](double q) {
    return us[static_cast<std::size_t>(q * static_cast<double>(us.size() - 1))];
  };
  std::printf("%-58s %9.2f %9.2f %9.2f\n", name.c_str(), at(0.5), at(0.1), at(0.9));
  std::fflush(stdout);
}

template <class F>
void measure(const std::string& name, int reps, F&& f) {
  for (int i = 0; i < std::max(reps / 10, 3); ++i) f();  // warm-up
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  report(name, us);
}

enum class Wait { blocking, wait_events, finish, spin, spin_yield };
const char* wait_name(Wait w) {
  switch (w) {
    case Wait::blocking:
      return "blocking call";
    case Wait::wait_events:
      return "non-blocking + clWaitForEvents";
    case Wait::finish:
      return "non-blocking + clFinish";
    case Wait::spin:
      return "non-blocking + clFlush + poll status";
    case Wait::spin_yield:
      return "non-blocking + clFlush + poll, yield";
  }
  return "";
}

void complete(cl_command_queue q, cl_event e, Wait w) {
  switch (w) {
    case Wait::blocking:
      break;
    case Wait::wait_events:
      check(clWaitForEvents(1, &e), "clWaitForEvents");
      break;
    case Wait::finish:
      check(clFinish(q), "clFinish");
      break;
    case Wait::spin:
    case Wait::spin_yield: {
      check(clFlush(q), "clFlush");
      cl_int status = CL_QUEUED;
      do {
        check(clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr),
              "clGetEventInfo");
        if (w == Wait::spin_yield && status > CL_COMPLETE) std::this_thread::yield();
      } while (status > CL_COMPLETE);
      break;
    }
  }
  if (e != nullptr) clReleaseEvent(e);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 2000;
  std::string sections = "123456";
  const auto runs = [&](char section) { return sections.find(section) != std::string::npos; };
  std::size_t big_bytes = std::size_t{256} << 20;
  unsigned platform_index = 0, device_index = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (a == "--sections" && i + 1 < argc) sections = argv[++i];
    if (a == "--big-mib" && i + 1 < argc) {
      big_bytes = static_cast<std::size_t>(std::atoll(argv[++i])) << 20;
    }
    if (a == "--device" && i + 1 < argc) {
      std::sscanf(argv[++i], "%u:%u", &platform_index, &device_index);
    }
  }
  cl_uint n = 0;
  check(clGetPlatformIDs(0, nullptr, &n), "clGetPlatformIDs");
  std::vector<cl_platform_id> platforms(n);
  check(clGetPlatformIDs(n, platforms.data(), nullptr), "clGetPlatformIDs");
  cl_platform_id platform = platforms.at(platform_index);
  check(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &n), "clGetDeviceIDs");
  std::vector<cl_device_id> devices(n);
  check(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n, devices.data(), nullptr), "clGetDeviceIDs");
  cl_device_id device = devices.at(device_index);
  char name[256] = {};
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, nullptr);
  std::printf("# wait_latency on %s, %d reps, %u host threads\n", name, reps,
              std::thread::hardware_concurrency());
  std::printf("%-58s %9s %9s %9s\n", "mechanism", "median_us", "p10_us", "p90_us");
  cl_int err = CL_SUCCESS;
  cl_context ctx = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err);
  check(err, "clCreateContext");
  cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
  check(err, "clCreateCommandQueue");
  const std::size_t max_bytes = std::size_t{4} << 20;
  cl_mem dev = clCreateBuffer(ctx, CL_MEM_READ_WRITE, max_bytes, nullptr, &err);
  check(err, "clCreateBuffer");
  cl_mem dev2 = clCreateBuffer(ctx, CL_MEM_READ_WRITE, max_bytes, nullptr, &err);
  check(err, "clCreateBuffer");
  cl_mem pinned_buf = clCreateBuffer(ctx, CL_MEM_ALLOC_HOST_PTR, max_bytes, nullptr, &err);
  check(err, "clCreateBuffer(ALLOC_HOST_PTR)");
  auto* pinned = static_cast<char*>(clEnqueueMapBuffer(
      q, pinned_buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, max_bytes, 0, nullptr, nullptr, &err));
  check(err, "clEnqueueMapBuffer");
  std::vector<char> pageable(max_bytes, 1), other(max_bytes, 2);
  std::memset(pinned, 3, max_bytes);

  // 1. One command, completed each way.
  if (runs('1')) {
    const Wait waits[] = {Wait::blocking, Wait::wait_events, Wait::finish, Wait::spin,
                          Wait::spin_yield};
    for (const std::size_t bytes : {std::size_t{4}, std::size_t{4096}, std::size_t{65536}}) {
      for (const bool pin : {false, true}) {
        char* host = pin ? pinned : pageable.data();
        for (const Wait w : waits) {
          const cl_bool blocking = w == Wait::blocking ? CL_TRUE : CL_FALSE;
          const std::string what = std::to_string(bytes) + " B " + (pin ? "pinned " : "pageable ");
          measure("read " + what + wait_name(w), reps, [&] {
            cl_event e = nullptr;
            check(clEnqueueReadBuffer(q, dev, blocking, 0, bytes, host, 0, nullptr,
                                      w == Wait::blocking ? nullptr : &e),
                  "clEnqueueReadBuffer");
            complete(q, e, w);
          });
          measure("write " + what + wait_name(w), reps, [&] {
            cl_event e = nullptr;
            check(clEnqueueWriteBuffer(q, dev, blocking, 0, bytes, host, 0, nullptr,
                                       w == Wait::blocking ? nullptr : &e),
                  "clEnqueueWriteBuffer");
            complete(q, e, w);
          });
        }
      }
    }
    for (const Wait w : {Wait::wait_events, Wait::finish, Wait::spin}) {
      measure(std::string("copy 4 B ") + wait_name(w), reps, [&] {
        cl_event e = nullptr;
        check(clEnqueueCopyBuffer(q, dev, dev2, 0, 0, 4, 0, nullptr, &e), "clEnqueueCopyBuffer");
        complete(q, e, w);
      });
      measure(std::string("marker on an idle queue ") + wait_name(w), reps, [&] {
        cl_event e = nullptr;
        check(clEnqueueMarkerWithWaitList(q, 0, nullptr, &e), "clEnqueueMarkerWithWaitList");
        complete(q, e, w);
      });
    }
    measure("clFlush of an empty queue", reps, [&] { check(clFlush(q), "clFlush"); });
    measure("clFinish of an empty queue", reps, [&] { check(clFinish(q), "clFinish"); });
    measure("enqueue a non-blocking 4 B pinned write (call only)", reps, [&] {
      check(clEnqueueWriteBuffer(q, dev, CL_FALSE, 0, 4, pinned, 0, nullptr, nullptr), "write");
    });
    clFinish(q);
    measure("enqueue a non-blocking 4 B pinned write + clFlush", reps, [&] {
      check(clEnqueueWriteBuffer(q, dev, CL_FALSE, 0, 4, pinned, 0, nullptr, nullptr), "write");
      check(clFlush(q), "clFlush");
    });
    clFinish(q);
  }
  // 2. Host-side pieces: waking the copy threads, and memcpy with 1..N threads.
  if (runs('2')) {
    for (const unsigned threads : {2u, 4u, 8u, 12u}) {
      clbuf::detail::WorkerPool pool(threads);
      std::atomic<unsigned> ran{0};
      auto task = [&](unsigned) noexcept { ran.fetch_add(1, std::memory_order_relaxed); };
      measure("WorkerPool::run, empty task, " + std::to_string(threads) + " threads", reps,
              [&] { pool.run(threads, task); });
    }
    for (const std::size_t bytes :
         {std::size_t{64} << 10, std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{2} << 20,
          std::size_t{4} << 20}) {
      for (const unsigned threads : {1u, 2u, 4u, 8u, 12u}) {
        if (threads > 1 && bytes < (std::size_t{256} << 10)) continue;
        // clbuf's own copier, in one part per thread (one memcpy on one thread).
        clbuf::detail::ParallelCopier copier(threads);
        const std::size_t part = std::max<std::size_t>(bytes / threads, 4096);
        for (const bool to_pinned : {true, false}) {
          char* dst = to_pinned ? pinned : other.data();
          const char* src = to_pinned ? pageable.data() : pinned;
          measure("memcpy " + std::to_string(bytes >> 10) + " KiB " +
                      (to_pinned ? "pageable->pinned " : "pinned->pageable ") +
                      std::to_string(threads) + " threads",
                  std::max(reps / 4, 50), [&] { copier.copy(dst, src, bytes, part); });
        }
      }
    }
  }
  // 3. The host's copy ceiling for large transfers, what bounds a staged pageable transfer (each
  // byte read from pageable memory, written to pinned memory, read again by the DMA): one
  // direction's copy on 1..16 threads, and both directions at once (as an upload and a
  // download through the two staging lanes), GB/s of bytes copied.
  if (big_bytes > 0) {
    cl_mem big_pin[2];
    char* big_pinned[2];
    for (int k = 0; k < 2; ++k) {
      big_pin[k] = clCreateBuffer(ctx, CL_MEM_ALLOC_HOST_PTR, big_bytes, nullptr, &err);
      check(err, "clCreateBuffer(ALLOC_HOST_PTR, big)");
      big_pinned[k] =
          static_cast<char*>(clEnqueueMapBuffer(q, big_pin[k], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                                0, big_bytes, 0, nullptr, nullptr, &err));
      check(err, "clEnqueueMapBuffer(big)");
      std::memset(big_pinned[k], 5, big_bytes);
    }
    std::vector<char> big_up(big_bytes, 1), big_down(big_bytes, 2);
    // The median of 5 timed runs of `f` (after one warm-up), in microseconds.
    const auto median_us = [](const auto& f) {
      std::vector<double> us;
      for (int r = 0; r <= 5; ++r) {
        const auto t0 = Clock::now();
        f();
        if (r > 0)
          us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    const std::size_t part = std::size_t{1} << 20;
    for (const unsigned threads : {1u, 4u, 8u, 12u, 16u}) {
      if (!runs('3')) break;
      clbuf::detail::ParallelCopier copier(threads);
      const double us =
          median_us([&] { copier.copy(big_pinned[0], big_up.data(), big_bytes, part); });
      std::printf("%-58s %9.2f GB/s\n",
                  ("copy ceiling " + std::to_string(big_bytes >> 20) + " MiB pageable->pinned, " +
                   std::to_string(threads) + " threads")
                      .c_str(),
                  static_cast<double>(big_bytes) / us / 1e3);
    }
    for (const unsigned threads : {4u, 8u, 12u}) {
      if (!runs('3')) break;
      clbuf::detail::ParallelCopier up(threads), down(threads);
      const double us = median_us([&] {
        std::thread downloader([&] { down.copy(big_down.data(), big_pinned[1], big_bytes, part); });
        up.copy(big_pinned[0], big_up.data(), big_bytes, part);
        downloader.join();
      });
      std::printf(
          "%-58s %9.2f GB/s\n",
          ("copy ceiling both ways at once, " + std::to_string(threads) + " threads each (in all)")
              .c_str(),
          2.0 * static_cast<double>(big_bytes) / us / 1e3);
    }
    // 4. The same copies while the DMA engine moves other pinned memory at the same time, as it
    // does in a staged transfer (the copy and the DMA share the host's memory): a thread keeps
    // 4 MiB pinned DMAs (four in flight, a queue of their own) going between big_pinned[1] and a
    // device buffer, towards the device while the copy is pageable->pinned (an upload's two
    // halves) and from it while the copy is pinned->pageable (a download's). A staged transfer
    // cannot run faster than the slower of the two lines of one row.
    cl_mem big_dev = clCreateBuffer(ctx, CL_MEM_READ_WRITE, big_bytes, nullptr, &err);
    check(err, "clCreateBuffer(big device)");
    cl_command_queue dma_q = clCreateCommandQueue(ctx, device, 0, &err);
    check(err, "clCreateCommandQueue(dma)");
    const std::size_t piece = std::min<std::size_t>(std::size_t{4} << 20, big_bytes);
    // DMAs in a loop until `stop`; returns GB/s moved.
    const auto dma_loop = [&](bool to_device, const std::atomic<bool>& stop) {
      std::vector<cl_event> in_flight;
      std::size_t moved = 0, k = 0;
      const std::size_t pieces = big_bytes / piece;
      const auto t0 = Clock::now();
      const auto retire = [&] {
        check(clWaitForEvents(1, &in_flight.front()), "clWaitForEvents(dma)");
        clReleaseEvent(in_flight.front());
        in_flight.erase(in_flight.begin());
        moved += piece;
      };
      while (!stop.load()) {
        const std::size_t at = (k++ % pieces) * piece;
        cl_event e = nullptr;
        check(to_device ? clEnqueueWriteBuffer(dma_q, big_dev, CL_FALSE, at, piece,
                                               big_pinned[1] + at, 0, nullptr, &e)
                        : clEnqueueReadBuffer(dma_q, big_dev, CL_FALSE, at, piece,
                                              big_pinned[1] + at, 0, nullptr, &e),
              "DMA");
        check(clFlush(dma_q), "clFlush(dma)");
        in_flight.push_back(e);
        if (in_flight.size() >= 4) retire();
      }
      while (!in_flight.empty()) retire();
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      return static_cast<double>(moved) / us / 1e3;
    };
    for (const bool to_device : {true, false}) {
      if (!runs('4')) break;
      {
        std::atomic<bool> stop{false};
        double dma_gbps = 0;
        std::thread dma([&] { dma_gbps = dma_loop(to_device, stop); });
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        stop = true;
        dma.join();
        std::printf("%-58s %9.2f GB/s\n",
                    (std::string("pinned DMA ") + (to_device ? "to" : "from") + " the device alone")
                        .c_str(),
                    dma_gbps);
      }
      for (const unsigned threads : {8u, 12u, 16u}) {
        clbuf::detail::ParallelCopier copier(threads);
        std::atomic<bool> stop{false};
        double dma_gbps = 0;
        std::thread dma([&] { dma_gbps = dma_loop(to_device, stop); });
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const double us = median_us([&] {
          if (to_device) {
            copier.copy(big_pinned[0], big_up.data(), big_bytes, part);
          } else {
            copier.copy(big_down.data(), big_pinned[0], big_bytes, part);
          }
        });
        stop = true;
        dma.join();
        const std::string row = std::string(to_device ? "pageable->pinned" : "pinned->pageable") +
                                ", " + std::to_string(threads) + " threads, DMA " +
                                (to_device ? "to" : "from") + " device";
        std::printf("%-58s %9.2f GB/s\n", ("copy during DMA: " + row).c_str(),
                    static_cast<double>(big_bytes) / us / 1e3);
        std::printf("%-58s %9.2f GB/s\n", ("  the DMA meanwhile: " + row).c_str(), dma_gbps);
      }
    }
    // 5. clbuf's staging pattern, by hand: T threads (clbuf's WorkerPool) take 1 MiB chunks of a
    // pageable array from a shared counter, each copying through two 1 MiB pinned slots of its
    // own, as detail/staging.hpp does. Copy only (no DMA) is what the host's copy allows in that
    // very pattern, the ceiling of a staged transfer (section 3 streams into one big pinned
    // buffer instead, which the host's caches do not hold); with the DMA (an upload copies into
    // a slot, enqueues a non-blocking write and flushes, waiting for a slot's last write before
    // reusing it; a download reads into a slot, waits, copies out) is the pipeline by hand, with
    // none of clbuf's bookkeeping; staggered, the same with smaller first chunks (below). GB/s of
    // payload, median of 5 after a warm-up.
    {
      const std::size_t chunk = std::size_t{1} << 20;
      const unsigned max_threads = 16;
      cl_mem slot_buf =
          clCreateBuffer(ctx, CL_MEM_ALLOC_HOST_PTR, 2 * max_threads * chunk, nullptr, &err);
      check(err, "clCreateBuffer(ALLOC_HOST_PTR, slots)");
      auto* slots = static_cast<char*>(
          clEnqueueMapBuffer(q, slot_buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                             2 * max_threads * chunk, 0, nullptr, nullptr, &err));
      check(err, "clEnqueueMapBuffer(slots)");
      std::memset(slots, 7, 2 * max_threads * chunk);
      std::vector<std::size_t> sizes{std::min(std::size_t{64} << 20, big_bytes)};
      if (big_bytes > sizes.front()) sizes.push_back(big_bytes);
      for (const std::size_t bytes : sizes) {
        for (const bool to_device : {true, false}) {
          for (const int mode : {0, 1, 2}) {  // copy only; with the DMA; the same, staggered
            const bool dma = mode > 0;
            for (const unsigned threads : {8u, 12u, 16u}) {
              clbuf::detail::WorkerPool pool(threads);
              // Where each chunk starts: 1 MiB apart, or (staggered) the first `threads` chunks
              // 1/threads, 2/threads, .. of a chunk, so that the threads finish their chunks
              // spread over a chunk's copy time instead of all at once (the DMA engine then gets
              // a chunk at a time, and the first one sooner).
              std::vector<std::size_t> starts{0};
              for (unsigned k = 0; mode == 2 && k < threads && starts.back() < bytes; ++k) {
                starts.push_back(starts.back() +
                                 clbuf::detail::round_up((k + 1) * chunk / threads, 4096));
              }
              while (starts.back() < bytes) starts.push_back(starts.back() + chunk);
              starts.back() = bytes;
              const std::size_t chunks = starts.size() - 1;
              const double us = median_us([&] {
                std::atomic<std::size_t> next{0};
                auto task = [&](unsigned index) noexcept {
                  char* mine[2] = {slots + 2 * index * chunk, slots + (2 * index + 1) * chunk};
                  cl_event busy[2] = {nullptr, nullptr};
                  const auto settle = [&](int s) {
                    if (busy[s] == nullptr) return;
                    check(clWaitForEvents(1, &busy[s]), "clWaitForEvents(slot)");
                    clReleaseEvent(busy[s]);
                    busy[s] = nullptr;
                  };
                  int turn = 0;
                  for (std::size_t k; (k = next.fetch_add(1)) < chunks; turn ^= 1) {
                    const std::size_t at = starts[k];
                    const std::size_t length = starts[k + 1] - at;
                    settle(turn);
                    if (to_device) {
                      std::memcpy(mine[turn], big_up.data() + at, length);
                      if (!dma) continue;
                      check(clEnqueueWriteBuffer(dma_q, big_dev, CL_FALSE, at, length, mine[turn],
                                                 0, nullptr, &busy[turn]),
                            "clEnqueueWriteBuffer(slot)");
                      check(clFlush(dma_q), "clFlush(slot)");
                    } else {
                      if (dma) {
                        check(clEnqueueReadBuffer(dma_q, big_dev, CL_FALSE, at, length, mine[turn],
                                                  0, nullptr, &busy[turn]),
                              "clEnqueueReadBuffer(slot)");
                        settle(turn);
                      }
                      std::memcpy(big_down.data() + at, mine[turn], length);
                    }
                  }
                  settle(0);
                  settle(1);
                };
                pool.run(static_cast<unsigned>(std::min<std::size_t>(threads, chunks)), task);
              });
              std::printf("%-58s %9.2f GB/s\n",
                          ("pattern " + std::to_string(bytes >> 20) + " MiB " +
                           (to_device ? "up" : "down") +
                           (mode == 0   ? ", copy only, "
                            : mode == 1 ? ", with DMA, "
                                        : ", staggered, ") +
                           std::to_string(threads) + " threads")
                              .c_str(),
                          static_cast<double>(bytes) / us / 1e3);
              std::fflush(stdout);
            }
          }
        }
      }
      clEnqueueUnmapMemObject(q, slot_buf, slots, 0, nullptr, nullptr);
      clFinish(q);
      clReleaseMemObject(slot_buf);
    }
    // 6. The driver's own use of the caller's pages: a buffer made with CL_MEM_USE_HOST_PTR over
    // page-aligned pageable memory, copied to (or from, then mapped) the device buffer, made and
    // released each time as a transfer would. A driver that pins the pages in place would move
    // them at DMA speed with no host copy; one that copies them does not beat the pageable
    // write (the first line). GB/s of payload, median of 5 after a warm-up.
    if (runs('6')) {
      const std::size_t bytes = std::min<std::size_t>(std::size_t{64} << 20, big_bytes);
      auto* host = static_cast<char*>(std::aligned_alloc(4096, bytes));
      if (host == nullptr) check(CL_OUT_OF_HOST_MEMORY, "aligned_alloc");
      std::memset(host, 9, bytes);
      const auto gbps = [&](double us) { return static_cast<double>(bytes) / us / 1e3; };
      std::printf(
          "%-58s %9.2f GB/s\n",
          ("pageable write " + std::to_string(bytes >> 20) + " MiB (blocking)").c_str(),
          gbps(median_us([&] {
            check(clEnqueueWriteBuffer(q, big_dev, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr),
                  "clEnqueueWriteBuffer(pageable)");
          })));
      for (const bool to_device : {true, false}) {
        const double us = median_us([&] {
          cl_int e = CL_SUCCESS;
          cl_mem wrap = clCreateBuffer(ctx, CL_MEM_USE_HOST_PTR, bytes, host, &e);
          check(e, "clCreateBuffer(USE_HOST_PTR)");
          if (to_device) {
            check(clEnqueueCopyBuffer(q, wrap, big_dev, 0, 0, bytes, 0, nullptr, nullptr),
                  "clEnqueueCopyBuffer(to device)");
            check(clFinish(q), "clFinish");
          } else {
            check(clEnqueueCopyBuffer(q, big_dev, wrap, 0, 0, bytes, 0, nullptr, nullptr),
                  "clEnqueueCopyBuffer(from device)");
            void* mapped = clEnqueueMapBuffer(q, wrap, CL_TRUE, CL_MAP_READ, 0, bytes, 0, nullptr,
                                              nullptr, &e);
            check(e, "clEnqueueMapBuffer(USE_HOST_PTR)");
            check(clEnqueueUnmapMemObject(q, wrap, mapped, 0, nullptr, nullptr), "unmap");
            check(clFinish(q), "clFinish");
          }
          check(clReleaseMemObject(wrap), "clReleaseMemObject(USE_HOST_PTR)");
        });
        std::printf(
            "%-58s %9.2f GB/s\n",
            ("CL_MEM_USE_HOST_PTR buffer made, copied " + std::string(to_device ? "to" : "from") +
             " device, released, " + std::to_string(bytes >> 20) + " MiB")
                .c_str(),
            gbps(us));
      }
      std::free(host);
    }
    clReleaseCommandQueue(dma_q);
    clReleaseMemObject(big_dev);
    for (int k = 0; k < 2; ++k) {
      clEnqueueUnmapMemObject(q, big_pin[k], big_pinned[k], 0, nullptr, nullptr);
      clFinish(q);
      clReleaseMemObject(big_pin[k]);
    }
  }

  clEnqueueUnmapMemObject(q, pinned_buf, pinned, 0, nullptr, nullptr);
  clFinish(q);
  clReleaseMemObject(pinned_buf);
  clReleaseMemObject(dev2);
  clReleaseMemObject(dev);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
