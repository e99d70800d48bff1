// SPDX-License-Identifier: MIT
// What a small call costs the host, clbuf against the same call written by hand (issue 47): the
// seed round trip (4000 B) against the careful hand-written one (clbuf_bench's clhpp_best),
// upload_async and download_async at 4 B, 64 B and 4 KiB against naive CLHPP (a non-blocking
// write or read with an event, then a wait), download into a new vector (4 B) and into caller
// memory (4 KiB) against the careful version (a read into a mapped pinned block, then a copy):
// the rows of clbuf_bench's every_size that were above 1.03 on the H100.
//
//   small_calls [--device SEL] [--memory discrete|default] [--rows a,b] [--calls N (200)]
//               [--rounds N (9, timing only)] [--list]
//
// Under callgrind (bench/small_call_instructions.sh runs it so, with --collect-atstart=no), each
// row and method runs after a warm-up in two collected segments of N and 3N calls, each ended
// by a dump named "<row> <method> <calls>"; the script takes the difference of the two
// segments over 2N calls, so one-time costs cancel: instructions per call of the calling thread
// (the OpenCL calls included; PoCL's own threads are not counted). Without callgrind, each
// row's methods run interleaved for --rounds rounds of 3N calls and the program prints the
// median nanoseconds per call and the ratio clbuf / hand (for a GPU, where time is what counts).
// Every segment's bytes are checked after it; a wrong result exits 1. Memory model default:
// discrete (the GPU's paths, on any device).
#include <clbuf/clbuf.hpp>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define CLBUF_BENCH_CALLGRIND 1
#endif
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using T = float;
using Clock = std::chrono::steady_clock;

bool under_callgrind() {
#ifdef CLBUF_BENCH_CALLGRIND
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}

// Brackets one collected segment: collection on, `calls` calls, collection off, a dump named
// `label` (callgrind's totals of the segment).
// With `all_threads` (callgrind run with --collect-atstart=yes), collection stays on in every
// thread and the segment is the calls' instructions in all threads: the OpenCL library's own
// threads (PoCL's pthread device runs each command on one) included.
void collect(bool on, const std::string& label, bool all_threads) {
#ifdef CLBUF_BENCH_CALLGRIND
  if (on) {
    CALLGRIND_ZERO_STATS;
    if (!all_threads) CALLGRIND_TOGGLE_COLLECT;
  } else {
    if (!all_threads) CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS_AT(label.c_str());
  }
#else
  (void)on;
  (void)label;
  (void)all_threads;
#endif
}

// A mapped CL_MEM_ALLOC_HOST_PTR block, as a careful hand-writer keeps one.
struct Pinned {
  cl::CommandQueue queue;
  cl::Buffer buf;
  T* ptr = nullptr;
  Pinned(const cl::Context& ctx, const cl::CommandQueue& q, std::size_t count) : queue(q) {
    buf = cl::Buffer(ctx, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, count * sizeof(T));
    ptr = static_cast<T*>(
        queue.enqueueMapBuffer(buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, count * sizeof(T)));
  }
  ~Pinned() {
    try {
      queue.enqueueUnmapMemObject(buf, ptr);
      queue.finish();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

// One method of one row: run(p) is one call with pattern p (0/1, alternating, so a stale result
// fails the check); check(p) says whether the last call's result is right.
struct Method {
  std::string name;
  std::function<void(int)> run;
  std::function<bool(int)> check;
};

struct Row {
  std::string name;
  std::string peer;             // which hand-written version
  std::vector<Method> methods;  // [0] clbuf, [1] by hand, [2] (some rows) by hand, another way
};

struct Setup {
  clbuf::BufferManager& m;
  cl::Context ctx;
  cl::CommandQueue q;
};

std::vector<T> pattern(std::size_t count, int p) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<T>(i * 3 + 1 + 7 * p);
  return v;
}

Row seed_row(Setup& s) {
  const std::size_t count = 1000, bytes = count * sizeof(T);
  auto src = std::make_shared<std::vector<std::vector<T>>>();
  src->push_back(pattern(count, 0));
  src->push_back(pattern(count, 1));
  auto out = std::make_shared<std::vector<T>>();
  auto check = [src, out](int p) { return *out == (*src)[static_cast<std::size_t>(p)]; };
  Row row{"roundtrip_seed 4000 B", "clhpp_best", {}};
  clbuf::BufferManager& m = s.m;
  row.methods.push_back({"clbuf",
                         [&m, src, out](int p) {
                           auto buffer = m.upload((*src)[static_cast<std::size_t>(p)]);
                           *out = m.download(buffer);
                         },
                         check});
  auto buf = std::make_shared<cl::Buffer>(s.ctx, CL_MEM_READ_WRITE, bytes);
  auto pin = std::make_shared<Pinned>(s.ctx, s.q, count);
  cl::CommandQueue q = s.q;
  row.methods.push_back({"hand",
                         [q, src, out, buf, pin, count, bytes](int p) mutable {
                           std::memcpy(pin->ptr, (*src)[static_cast<std::size_t>(p)].data(), bytes);
                           q.enqueueWriteBuffer(*buf, CL_FALSE, 0, bytes, pin->ptr);
                           q.enqueueReadBuffer(*buf, CL_TRUE, 0, bytes, pin->ptr);
                           *out = std::vector<T>(pin->ptr, pin->ptr + count);
                         },
                         check});
  // The careful version with clbuf's promise for the write it does not wait for: its event asked
  // for, the read waiting for it (a failed write fails the read, CL_EXEC_STATUS_ERROR_FOR_
  // EVENTS_IN_WAIT_LIST), then released. Timed beside the two; not a peer of the goal.
  row.methods.push_back({"hand_event",
                         [q, src, out, buf, pin, count, bytes](int p) mutable {
                           std::memcpy(pin->ptr, (*src)[static_cast<std::size_t>(p)].data(), bytes);
                           cl::Event written;
                           q.enqueueWriteBuffer(*buf, CL_FALSE, 0, bytes, pin->ptr, nullptr,
                                                &written);
                           const std::vector<cl::Event> wait{written};
                           q.enqueueReadBuffer(*buf, CL_TRUE, 0, bytes, pin->ptr, &wait);
                           *out = std::vector<T>(pin->ptr, pin->ptr + count);
                         },
                         check});
  return row;
}

Row upload_async_row(Setup& s, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(T);
  auto src = std::make_shared<std::vector<std::vector<T>>>();
  src->push_back(pattern(count, 0));
  src->push_back(pattern(count, 1));
  Row row{"upload_async " + std::to_string(bytes) + " B", "clhpp_naive", {}};
  clbuf::BufferManager& m = s.m;
  auto dst = std::make_shared<clbuf::DeviceBuffer<T>>(m.allocate<T>(count));
  row.methods.push_back(
      {"clbuf",
       [&m, src, dst, count](int p) {
         m.upload_async(*dst, (*src)[static_cast<std::size_t>(p)].data(), count).get();
       },
       [&m, src, dst](int p) { return m.download(*dst) == (*src)[static_cast<std::size_t>(p)]; }});
  auto buf = std::make_shared<cl::Buffer>(s.ctx, CL_MEM_READ_WRITE, bytes);
  cl::CommandQueue q = s.q;
  row.methods.push_back({"hand",
                         [q, src, buf, bytes](int p) mutable {
                           cl::Event done;
                           q.enqueueWriteBuffer(*buf, CL_FALSE, 0, bytes,
                                                (*src)[static_cast<std::size_t>(p)].data(), nullptr,
                                                &done);
                           done.wait();
                         },
                         [q, src, buf, count, bytes](int p) mutable {
                           std::vector<T> back(count);
                           q.enqueueReadBuffer(*buf, CL_TRUE, 0, bytes, back.data());
                           return back == (*src)[static_cast<std::size_t>(p)];
                         }});
  return row;
}

// Two device buffers holding the two patterns, clbuf's and OpenCL's.
struct Sources {
  std::vector<std::vector<T>> data;
  std::vector<clbuf::DeviceBuffer<T>> clbuf;
  std::vector<cl::Buffer> cl;
};

std::shared_ptr<Sources> sources(Setup& s, std::size_t count) {
  auto out = std::make_shared<Sources>();
  for (int p = 0; p < 2; ++p) {
    out->data.push_back(pattern(count, p));
    out->clbuf.push_back(s.m.upload(out->data.back()));
    out->cl.emplace_back(s.ctx, CL_MEM_READ_WRITE, count * sizeof(T));
    s.q.enqueueWriteBuffer(out->cl.back(), CL_TRUE, 0, count * sizeof(T), out->data.back().data());
  }
  return out;
}

Row download_async_row(Setup& s, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(T);
  auto src = sources(s, count);
  auto out = std::make_shared<std::vector<T>>(count);
  auto check = [src, out](int p) { return *out == src->data[static_cast<std::size_t>(p)]; };
  Row row{"download_async " + std::to_string(bytes) + " B", "clhpp_naive", {}};
  clbuf::BufferManager& m = s.m;
  row.methods.push_back(
      {"clbuf",
       [&m, src, out, count](int p) {
         m.download_async(src->clbuf[static_cast<std::size_t>(p)], out->data(), count).get();
       },
       check});
  cl::CommandQueue q = s.q;
  row.methods.push_back({"hand",
                         [q, src, out, bytes](int p) mutable {
                           cl::Event done;
                           q.enqueueReadBuffer(src->cl[static_cast<std::size_t>(p)], CL_FALSE, 0,
                                               bytes, out->data(), nullptr, &done);
                           done.wait();
                         },
                         check});
  return row;
}

Row download_new_row(Setup& s, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(T);
  auto src = sources(s, count);
  auto out = std::make_shared<std::vector<T>>();
  auto check = [src, out](int p) { return *out == src->data[static_cast<std::size_t>(p)]; };
  Row row{"download_new " + std::to_string(bytes) + " B", "clhpp_best", {}};
  clbuf::BufferManager& m = s.m;
  row.methods.push_back(
      {"clbuf",
       [&m, src, out](int p) { *out = m.download(src->clbuf[static_cast<std::size_t>(p)]); },
       check});
  auto pin = std::make_shared<Pinned>(s.ctx, s.q, count);
  cl::CommandQueue q = s.q;
  row.methods.push_back({"hand",
                         [q, src, out, pin, count, bytes](int p) mutable {
                           q.enqueueReadBuffer(src->cl[static_cast<std::size_t>(p)], CL_TRUE, 0,
                                               bytes, pin->ptr);
                           *out = std::vector<T>(pin->ptr, pin->ptr + count);
                         },
                         check});
  return row;
}

Row download_caller_row(Setup& s, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(T);
  auto src = sources(s, count);
  auto out = std::make_shared<std::vector<T>>(count);
  auto check = [src, out](int p) { return *out == src->data[static_cast<std::size_t>(p)]; };
  Row row{"download_caller " + std::to_string(bytes) + " B", "clhpp_best", {}};
  clbuf::BufferManager& m = s.m;
  row.methods.push_back({"clbuf",
                         [&m, src, out, count](int p) {
                           m.download(src->clbuf[static_cast<std::size_t>(p)], out->data(), count);
                         },
                         check});
  auto pin = std::make_shared<Pinned>(s.ctx, s.q, count);
  cl::CommandQueue q = s.q;
  row.methods.push_back({"hand",
                         [q, src, out, pin, bytes](int p) mutable {
                           q.enqueueReadBuffer(src->cl[static_cast<std::size_t>(p)], CL_TRUE, 0,
                                               bytes, pin->ptr);
                           std::memcpy(out->data(), pin->ptr, bytes);
                         },
                         check});
  return row;
}

// `calls` calls of `method`, patterns alternating from `first`; the last call's result checked.
bool run_calls(const Method& method, int calls, int first) {
  for (int i = 0; i < calls; ++i) method.run((first + i) & 1);
  return method.check((first + calls - 1) & 1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device;
  clbuf::Options options;
  options.memory = clbuf::MemoryModel::discrete;
  int calls = 200;
  int rounds = 9;
  bool list = false;
  bool all_threads = false;
  std::vector<std::string> wanted;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--memory" && i + 1 < argc) {
      const std::string v = argv[++i];
      options.memory =
          v == "discrete" ? clbuf::MemoryModel::discrete : clbuf::MemoryModel::automatic;
    } else if (a == "--calls" && i + 1 < argc) {
      calls = std::max(std::atoi(argv[++i]), 1);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(std::atoi(argv[++i]), 1);
    } else if (a == "--rows" && i + 1 < argc) {
      wanted = split(argv[++i]);
    } else if (a == "--list") {
      list = true;
    } else if (a == "--all-threads") {
      all_threads = true;
    } else {
      std::fprintf(stderr,
                   "usage: small_calls [--device S] [--memory discrete|default] [--rows a,b] "
                   "[--calls N] [--rounds N] [--list]\n");
      return 2;
    }
  }
  try {
    clbuf::BufferManager m(device, options);
    Setup s{m, m.context(), m.queue()};
    std::vector<Row> rows;
    rows.push_back(seed_row(s));
    for (std::size_t bytes : {std::size_t{4}, std::size_t{64}, std::size_t{4096}}) {
      rows.push_back(upload_async_row(s, bytes));
    }
    for (std::size_t bytes : {std::size_t{4}, std::size_t{64}, std::size_t{4096}}) {
      rows.push_back(download_async_row(s, bytes));
    }
    rows.push_back(download_new_row(s, 4));
    rows.push_back(download_caller_row(s, 4096));
    if (list) {
      for (const Row& row : rows) std::printf("%s\n", row.name.c_str());
      return 0;
    }
    const bool counting = under_callgrind();
    if (!counting) {
      std::printf("# small calls on %s (%s), %d rounds of %d calls; ns per call, median\n",
                  m.device().name.c_str(), clbuf::to_string(m.memory_model()), rounds, 3 * calls);
      std::printf("%-26s %-12s %10s %10s %8s\n", "row", "peer", "clbuf", "hand", "ratio");
    }
    for (const Row& row : rows) {
      if (!wanted.empty()) {
        bool match = false;
        for (const std::string& w : wanted) match = match || row.name.find(w) == 0;
        if (!match) continue;
      }
      for (const Method& method : row.methods) {  // warm-up: pools, rings, caches
        if (!run_calls(method, 20, 0)) {
          std::fprintf(stderr, "%s %s: wrong bytes\n", row.name.c_str(), method.name.c_str());
          return 1;
        }
      }
      if (counting) {
        for (const Method& method : row.methods) {
          for (int n : {calls, 3 * calls}) {
            collect(true, "", all_threads);
            for (int i = 0; i < n; ++i) method.run(i & 1);
            collect(false, row.name + "|" + method.name + "|" + std::to_string(n), all_threads);
            if (!method.check((n - 1) & 1)) {
              std::fprintf(stderr, "%s %s: wrong bytes\n", row.name.c_str(), method.name.c_str());
              return 1;
            }
          }
        }
        continue;
      }
      std::vector<std::vector<double>> ns(row.methods.size());
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t k = 0; k < row.methods.size(); ++k) {
          const auto t0 = Clock::now();
          for (int i = 0; i < 3 * calls; ++i) row.methods[k].run(i & 1);
          const double total = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
          ns[k].push_back(total / (3 * calls));
          if (!row.methods[k].check((3 * calls - 1) & 1)) {
            std::fprintf(stderr, "%s %s: wrong bytes\n", row.name.c_str(),
                         row.methods[k].name.c_str());
            return 1;
          }
        }
      }
      const double a = median(ns[0]), b = median(ns[1]);
      std::printf("%-26s %-12s %10.0f %10.0f %8.3f", row.name.c_str(), row.peer.c_str(), a, b,
                  a / b);
      for (std::size_t k = 2; k < row.methods.size(); ++k) {  // clbuf / that one
        std::printf("  %s %.0f (clbuf/it %.3f)", row.methods[k].name.c_str(), median(ns[k]),
                    a / median(ns[k]));
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "small_calls: %s\n", e.what());
    return 1;
  }
  return 0;
}
