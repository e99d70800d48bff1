// SPDX-License-Identifier: MIT
// Where the seed's round trip spends its time (issue 19): 1000 float32 up and back, clbuf against
// the careful hand-written round trip (clbuf_bench's clhpp_best: one buffer made once, a pinned
// CL_MEM_ALLOC_HOST_PTR block mapped once, a non-blocking write from it and a blocking read into
// it) and that round trip with one of clbuf's pieces added at a time: an event on the write, the
// write's fate learnt after the read (clbuf asks its status: that is how it learns that a buffered
// write failed; clWaitForEvents and the read's wait list are the other ways), a fresh buffer each
// time, the read into pageable memory, a clFlush after the write (what an asynchronous transfer's
// Future adds), the context retained and released (what a DeviceBuffer did until 8e8d231), and
// clbuf with a buffer from its pool. Every variant runs once per round, in turn,
// on the manager's own context and queue, so drift hits all alike; medians over the rounds.
//
//   seed_profile [--reps N (default 20000)] [--count N (default 1000)] [--device SELECTOR]
//                [--memory discrete]
//
// Output: one line per variant: median, 10th and 90th percentile in microseconds, and the
// median's difference from the hand-written round trip; every variant's bytes are checked.
#include <clbuf/clbuf.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Variant {
  std::string name;
  std::function<std::vector<float>(const std::vector<float>&)> run;  // the data back
  std::vector<double> us;
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20000;
  std::size_t count = 1000;
  std::string device;
  clbuf::Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(std::atoi(argv[++i]), 1);
    } else if (a == "--count" && i + 1 < argc) {
      count = static_cast<std::size_t>(std::max(std::atol(argv[++i]), 1L));
    } else if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--memory" && i + 1 < argc && std::string(argv[++i]) == "discrete") {
      options.memory = clbuf::MemoryModel::discrete;
    } else {
      std::fprintf(stderr,
                   "usage: seed_profile [--reps N] [--count N] [--device S] [--memory discrete]\n");
      return 2;
    }
  }
  try {
    clbuf::BufferManager m(device, options);
    const std::size_t bytes = count * sizeof(float);
    cl::Context ctx = m.context();
    cl::CommandQueue q = m.queue();
    cl::Buffer reused(ctx, CL_MEM_READ_WRITE, bytes);
    cl::Buffer pinned(ctx, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, bytes);
    auto* pin = static_cast<float*>(
        q.enqueueMapBuffer(pinned, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes));
    // A second pinned block, as clbuf has: its buffered writes leave from a ring, its bounced
    // reads land in a block of their own.
    cl::Buffer pinned2(ctx, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, bytes);
    auto* pin2 = static_cast<float*>(
        q.enqueueMapBuffer(pinned2, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes));
    auto existing = m.allocate<float>(count);

    // How the hand-written round trip learns the write's fate, if at all.
    enum class Fate { none, event, status, wait, wait_list };
    // The hand-written round trip, with an event on the write and its fate asked as `fate` says
    // (status: clGetEventInfo after the read; wait: clWaitForEvents after the read; wait_list: the
    // blocking read waits for it), and `fresh` (a buffer made for it).
    const auto by_hand = [&](Fate fate, bool fresh) {
      return [&, fate, fresh](const std::vector<float>& in) {
        cl::Buffer made = fresh ? cl::Buffer(ctx, CL_MEM_READ_WRITE, bytes) : reused;
        std::memcpy(pin, in.data(), bytes);
        std::vector<cl::Event> written(1);
        q.enqueueWriteBuffer(made, CL_FALSE, 0, bytes, pin, nullptr,
                             fate == Fate::none ? nullptr : &written[0]);
        q.enqueueReadBuffer(made, CL_TRUE, 0, bytes, pin,
                            fate == Fate::wait_list ? &written : nullptr);
        if (fate == Fate::status &&
            written[0].getInfo<CL_EVENT_COMMAND_EXECUTION_STATUS>() != CL_COMPLETE) {
          std::fprintf(stderr, "the write is not complete after the read\n");
          std::exit(1);
        }
        if (fate == Fate::wait) cl::WaitForEvents(written);
        return std::vector<float>(pin, pin + count);
      };
    };
    std::vector<Variant> variants;
    variants.push_back({"by hand (clhpp_best)", by_hand(Fate::none, false), {}});
    variants.push_back({"by hand + event on the write", by_hand(Fate::event, false), {}});
    variants.push_back({"by hand + event + its status after", by_hand(Fate::status, false), {}});
    variants.push_back({"by hand + event + clWaitForEvents after", by_hand(Fate::wait, false), {}});
    variants.push_back(
        {"by hand + event in the read's wait list", by_hand(Fate::wait_list, false), {}});
    variants.push_back({"by hand, fresh cl::Buffer", by_hand(Fate::none, true), {}});
    variants.push_back({"by hand + wait list, its event retained and released once more",
                        [&](const std::vector<float>& in) {
                          std::memcpy(pin, in.data(), bytes);
                          std::vector<cl::Event> written(1);
                          q.enqueueWriteBuffer(reused, CL_FALSE, 0, bytes, pin, nullptr,
                                               &written[0]);
                          const cl::Event held = written[0];  // clRetainEvent, as a Fence does
                          q.enqueueReadBuffer(reused, CL_TRUE, 0, bytes, pin, &written);
                          return std::vector<float>(pin, pin + count);
                        },
                        {}});
    // clbuf's OpenCL calls for a buffered upload and a bounced download, made by hand with none
    // of its bookkeeping: the write's event kept (the ring's record of it), retained once more
    // for the read's wait list (the Fence's copy), released twice; the write leaves one pinned
    // block, the read lands in another. clbuf's own variants minus this one are its CPU work.
    variants.push_back({"by hand, clbuf's OpenCL calls",
                        [&](const std::vector<float>& in) {
                          std::memcpy(pin2, in.data(), bytes);
                          cl_event written = nullptr;
                          CLBUF_CL(clEnqueueWriteBuffer)
                          (q(), reused(), CL_FALSE, 0, bytes, pin2, 0, nullptr, &written);
                          CLBUF_CL(clRetainEvent)(written);
                          CLBUF_CL(clEnqueueReadBuffer)
                          (q(), reused(), CL_TRUE, 0, bytes, pin, 1, &written, nullptr);
                          CLBUF_CL(clReleaseEvent)(written);
                          CLBUF_CL(clReleaseEvent)(written);
                          return std::vector<float>(pin, pin + count);
                        },
                        {}});
    variants.push_back({"by hand, write from one pinned block, read into another",
                        [&](const std::vector<float>& in) {
                          std::memcpy(pin2, in.data(), bytes);
                          q.enqueueWriteBuffer(reused, CL_FALSE, 0, bytes, pin2);
                          q.enqueueReadBuffer(reused, CL_TRUE, 0, bytes, pin);
                          return std::vector<float>(pin, pin + count);
                        },
                        {}});
    variants.push_back({"by hand + clFlush after the write",
                        [&](const std::vector<float>& in) {
                          std::memcpy(pin, in.data(), bytes);
                          q.enqueueWriteBuffer(reused, CL_FALSE, 0, bytes, pin);
                          q.flush();
                          q.enqueueReadBuffer(reused, CL_TRUE, 0, bytes, pin);
                          return std::vector<float>(pin, pin + count);
                        },
                        {}});
    // clbuf's own bookkeeping, priced on this host: the telemetry's clock reads (two per call)
    // and uncontended locks (the gate's shared lock, the pool's, the ring's, the bounce cache's).
    std::mutex lock_a;
    std::shared_mutex lock_b;
    variants.push_back({"by hand + 4 steady_clock::now()",
                        [&](const std::vector<float>& in) {
                          std::int64_t t = 0;
                          for (int i = 0; i < 4; ++i) {
                            t += Clock::now().time_since_epoch().count() & 1;
                          }
                          auto out = by_hand(Fate::none, false)(in);
                          out[0] += static_cast<float>(t & 0);  // keeps the reads
                          return out;
                        },
                        {}});
    variants.push_back({"by hand + 8 mutex and 2 shared_mutex locks",
                        [&](const std::vector<float>& in) {
                          for (int i = 0; i < 8; ++i) {
                            std::lock_guard<std::mutex> held(lock_a);
                          }
                          for (int i = 0; i < 2; ++i) {
                            std::shared_lock<std::shared_mutex> held(lock_b);
                          }
                          return by_hand(Fate::none, false)(in);
                        },
                        {}});
    variants.push_back({"by hand + clRetainContext/clReleaseContext",
                        [&](const std::vector<float>& in) {
                          CLBUF_CL(clRetainContext)(ctx());
                          auto out = by_hand(Fate::none, false)(in);
                          CLBUF_CL(clReleaseContext)(ctx());
                          return out;
                        },
                        {}});
    variants.push_back({"by hand, read into pageable",
                        [&](const std::vector<float>& in) {
                          std::memcpy(pin, in.data(), bytes);
                          q.enqueueWriteBuffer(reused, CL_FALSE, 0, bytes, pin);
                          std::vector<float> out(count);
                          q.enqueueReadBuffer(reused, CL_TRUE, 0, bytes, out.data());
                          return out;
                        },
                        {}});
    variants.push_back({"clbuf upload(vector) + download (the seed)",
                        [&](const std::vector<float>& in) {
                          auto buffer = m.upload(in);
                          return m.download(buffer);
                        },
                        {}});
    variants.push_back({"clbuf upload(buffer, vector) + download",
                        [&](const std::vector<float>& in) {
                          m.upload(existing, in);
                          return m.download(existing);
                        },
                        {}});
    variants.push_back({"clbuf allocate + upload(buffer, vector) + download",
                        [&](const std::vector<float>& in) {
                          auto buffer = m.allocate<float>(count);
                          m.upload(buffer, in);
                          return m.download(buffer);
                        },
                        {}});
    variants.push_back({"clbuf upload(buffer, vector) + download(into)",
                        [&](const std::vector<float>& in) {
                          m.upload(existing, in);
                          std::vector<float> out(count);
                          m.download(existing, out.data(), count);
                          return out;
                        },
                        {}});

    std::vector<float> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>(i) * 0.5f;
    const int warmup = std::max(reps / 20, 10);
    for (int r = -warmup; r < reps; ++r) {
      data[static_cast<std::size_t>(r + warmup) % count] += 1.0f;  // new bytes every round
      for (Variant& v : variants) {
        const auto t0 = Clock::now();
        const std::vector<float> out = v.run(data);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (out != data) {
          std::fprintf(stderr, "%s: wrong bytes\n", v.name.c_str());
          return 1;
        }
        if (r >= 0) v.us.push_back(us);
      }
    }
    q.enqueueUnmapMemObject(pinned, pin);
    q.enqueueUnmapMemObject(pinned2, pin2);
    q.finish();
    std::printf("# seed round trip, %zu float32 on %s (%s), %d rounds; microseconds\n", count,
                m.device().name.c_str(), clbuf::to_string(m.memory_model()), reps);
    std::printf("%-48s %9s %9s %9s %9s\n", "variant", "median", "p10", "p90", "vs_hand");
    const double hand = quantile(variants[0].us, 0.5);
    for (const Variant& v : variants) {
      const double median = quantile(v.us, 0.5);
      std::printf("%-48s %9.2f %9.2f %9.2f %+9.2f\n", v.name.c_str(), median, quantile(v.us, 0.1),
                  quantile(v.us, 0.9), median - hand);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seed_profile: %s\n", e.what());
    return 1;
  }
  return 0;
}
