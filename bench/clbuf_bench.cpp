// SPDX-License-Identifier: MIT
// clbuf_bench: clbuf against hand-written OpenCL-CLHPP (naive and best practice), Boost.Compute
// and a single-thread memcpy, in one process, interleaved, on the same device and queue.
//
// Rules (../shared/PERF.md): methods run interleaved A B C A B C after warm-up; every timed
// repetition is followed by an untimed byte-exact check of its result against random non-zero
// data; the report is the median per method and the ratio clbuf/method (time, lower is better).
// Objects an operation creates (a fresh device buffer, a new vector) are destroyed on the clock
// too, after the check: a loop of fresh uploads pays for both, and a pool is credited for it.
//
//   clbuf_bench [--device SEL] [--sizes 4,4K,64K,1M,16M,256M] [--ops a,b] [--gib] [--smoke]
//               [--csv PATH] [--target-s 0.3] [--max-reps N] [--min-reps N]
//   clbuf_bench [--device SEL] --rss-roundtrip METHOD [--rss-bytes N]

#include <clbuf/clbuf.hpp>

#include <boost/compute/algorithm/copy.hpp>
#include <boost/compute/command_queue.hpp>
#include <boost/compute/container/vector.hpp>
#include <boost/compute/context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace compute = boost::compute;

namespace {

using Clock = std::chrono::steady_clock;
using T = float;  // the seed's element type

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t GiB = 1024 * MiB;

// ---------------------------------------------------------------- data

// Random bytes, none of them zero (every byte has its low bit set), so a destination that was
// zeroed before the call cannot pass the check by accident.
void fill_random(std::vector<T>& v, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  auto* bytes = reinterpret_cast<unsigned char*>(v.data());
  const std::size_t n = v.size() * sizeof(T);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const std::uint64_t w = x | 0x0101010101010101ULL;
    std::memcpy(bytes + i, &w, 8);
  }
  for (; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    bytes[i] = static_cast<unsigned char>(x | 1U);
  }
}

std::string size_name(std::size_t bytes) {
  std::ostringstream os;
  if (bytes >= GiB && bytes % GiB == 0) {
    os << bytes / GiB << " GiB";
  } else if (bytes >= MiB && bytes % MiB == 0) {
    os << bytes / MiB << " MiB";
  } else if (bytes >= KiB && bytes % KiB == 0) {
    os << bytes / KiB << " KiB";
  } else {
    os << bytes << " B";
  }
  return os.str();
}

std::size_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  const double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    mult = static_cast<double>(KiB);
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    mult = static_cast<double>(MiB);
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    mult = static_cast<double>(GiB);
  } else {
    throw std::invalid_argument("bad size: " + s);
  }
  const auto bytes = static_cast<std::size_t>(v * mult);
  if (bytes == 0 || bytes % sizeof(T) != 0) {
    throw std::invalid_argument("size must be a positive multiple of 4 bytes: " + s);
  }
  return bytes;
}

// A bound in bytes for an Options field: a size as above, or 0 (off).
std::size_t parse_bound(const std::string& s) { return s == "0" ? 0 : parse_size(s); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// ---------------------------------------------------------------- environment shared by cases

struct Env {
  clbuf::BufferManager* mgr = nullptr;
  cl::Context ctx;
  cl::CommandQueue queue;
  compute::context bctx;
  compute::command_queue bqueue;
  std::vector<T> scratch;  // read-back buffer for checks

  // Reads a device buffer back with a plain blocking read and compares it with `want`.
  bool device_equals(const cl::Buffer& buf, const std::vector<T>& want) {
    if (scratch.size() < want.size()) scratch.resize(want.size());
    std::fill_n(scratch.begin(), want.size(), T{});
    queue.enqueueReadBuffer(buf, CL_TRUE, 0, want.size() * sizeof(T), scratch.data());
    return std::memcmp(scratch.data(), want.data(), want.size() * sizeof(T)) == 0;
  }
  cl::Buffer make_buffer(const std::vector<T>& content) {
    cl::Buffer b(ctx, CL_MEM_READ_WRITE, content.size() * sizeof(T));
    queue.enqueueWriteBuffer(b, CL_TRUE, 0, content.size() * sizeof(T), content.data());
    return b;
  }
};

bool same(const T* a, const std::vector<T>& want) {
  return std::memcmp(a, want.data(), want.size() * sizeof(T)) == 0;
}

// The two source patterns of one (operation, size); repetitions alternate between them so that
// a stale result (a no-op transfer, a pooled buffer with old content) fails the check.
struct Data {
  std::vector<T> src[2];
  explicit Data(std::size_t count) {
    src[0].resize(count);
    src[1].resize(count);
    fill_random(src[0], 2 * count + 1);
    fill_random(src[1], 2 * count + 2);
  }
};

// One method's work for one (operation, size).
struct Case {
  std::function<void(int)> prepare;  // untimed, before each repetition (arg: pattern 0/1)
  std::function<void(int)> run;      // timed
  std::function<bool(int)> verify;   // untimed
  std::function<void()> release;     // timed: destroys what run() created
};

// ---------------------------------------------------------------- operations

const std::vector<std::string> kAllOps = {"upload_fresh",
                                          "upload_existing",
                                          "download_caller",
                                          "download_new",
                                          "d2d_copy",
                                          "roundtrip_seed",
                                          "upload_fresh_repeat_64MiB",
                                          "upload_pinned",
                                          "download_pinned",
                                          "upload_async",
                                          "download_async"};
const std::vector<std::string> kMethods = {"clbuf", "clhpp_naive", "clhpp_best", "boost_compute",
                                           "memcpy"};

// Pinned staging a careful hand-writer keeps: a CL_MEM_ALLOC_HOST_PTR buffer mapped once.
struct Pinned {
  cl::CommandQueue queue;
  cl::Buffer buf;
  T* ptr = nullptr;
  Pinned(Env& env, std::size_t count) : queue(env.queue) {
    buf = cl::Buffer(env.ctx, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, count * sizeof(T));
    ptr = static_cast<T*>(
        queue.enqueueMapBuffer(buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, count * sizeof(T)));
  }
  ~Pinned() {
    try {
      queue.enqueueUnmapMemObject(buf, ptr);
      queue.finish();
    } catch (...) {
    }
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

Case make_clbuf(Env& env, const std::string& op, std::size_t count, Data& d) {
  auto& m = *env.mgr;
  Case c;
  if (op == "upload_fresh" || op == "upload_fresh_repeat_64MiB") {
    auto out = std::make_shared<clbuf::DeviceBuffer<T>>();
    c.run = [&m, &d, out](int p) { *out = m.upload(d.src[p]); };
    c.verify = [&env, &d, out](int p) { return env.device_equals(out->native(), d.src[p]); };
    c.release = [out] { *out = clbuf::DeviceBuffer<T>(); };
  } else if (op == "upload_existing" || op == "upload_async") {
    // upload_async: the same upload, started and then waited for.
    const bool async = op == "upload_async";
    auto dst = std::make_shared<clbuf::DeviceBuffer<T>>(m.template allocate<T>(count));
    c.run = [&m, &d, dst, async](int p) {
      if (async) {
        m.upload_async(*dst, d.src[p].data(), d.src[p].size()).get();
      } else {
        m.upload(*dst, d.src[p]);
      }
    };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(dst->native(), d.src[p]); };
  } else if (op == "download_caller" || op == "download_async") {
    const bool async = op == "download_async";
    auto src = std::make_shared<std::vector<clbuf::DeviceBuffer<T>>>();
    src->push_back(m.upload(d.src[0]));
    src->push_back(m.upload(d.src[1]));
    auto out = std::make_shared<std::vector<T>>(count);
    c.prepare = [out](int) { std::fill(out->begin(), out->end(), T{}); };
    c.run = [&m, src, out, async](int p) {
      const auto& from = (*src)[static_cast<std::size_t>(p)];
      if (async) {
        m.download_async(from, out->data(), out->size()).get();
      } else {
        m.download(from, out->data(), out->size());
      }
    };
    c.verify = [&d, out](int p) { return same(out->data(), d.src[p]); };
  } else if (op == "download_new") {
    auto src = std::make_shared<std::vector<clbuf::DeviceBuffer<T>>>();
    src->push_back(m.upload(d.src[0]));
    src->push_back(m.upload(d.src[1]));
    auto out = std::make_shared<std::vector<T>>();
    c.run = [&m, src, out](int p) { *out = m.download((*src)[static_cast<std::size_t>(p)]); };
    c.verify = [&d, out](int p) {
      return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
    };
    c.release = [out] { std::vector<T>().swap(*out); };
  } else if (op == "d2d_copy") {
    auto src = std::make_shared<std::vector<clbuf::DeviceBuffer<T>>>();
    src->push_back(m.upload(d.src[0]));
    src->push_back(m.upload(d.src[1]));
    auto dst = std::make_shared<clbuf::DeviceBuffer<T>>(m.template allocate<T>(count));
    // copy() returns when the copy is done; no finish() needed.
    c.run = [&m, src, dst](int p) { m.copy((*src)[static_cast<std::size_t>(p)], *dst); };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(dst->native(), d.src[p]); };
  } else if (op == "upload_pinned") {
    // Pinned host memory the application fills itself: clbuf's DMA path, no staging copy.
    auto pin = std::make_shared<std::vector<clbuf::PinnedBuffer<T>>>();
    for (int p = 0; p < 2; ++p) {
      pin->push_back(m.template allocate_pinned<T>(count));
      std::memcpy(pin->back().data(), d.src[p].data(), count * sizeof(T));
    }
    auto dst = std::make_shared<clbuf::DeviceBuffer<T>>(m.template allocate<T>(count));
    c.run = [&m, pin, dst](int p) { m.upload(*dst, (*pin)[static_cast<std::size_t>(p)]); };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(dst->native(), d.src[p]); };
  } else if (op == "download_pinned") {
    auto src = std::make_shared<std::vector<clbuf::DeviceBuffer<T>>>();
    src->push_back(m.upload(d.src[0]));
    src->push_back(m.upload(d.src[1]));
    auto out = std::make_shared<clbuf::PinnedBuffer<T>>(m.template allocate_pinned<T>(count));
    c.prepare = [out](int) { std::fill(out->begin(), out->end(), T{}); };
    c.run = [&m, src, out](int p) { m.download((*src)[static_cast<std::size_t>(p)], *out); };
    c.verify = [&d, out](int p) { return same(out->data(), d.src[p]); };
  } else if (op == "roundtrip_seed") {
    auto out = std::make_shared<std::vector<T>>();
    c.run = [&m, &d, out](int p) {
      auto buf = m.upload(d.src[p]);
      *out = m.download(buf);
    };
    c.verify = [&d, out](int p) {
      return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
    };
    c.release = [out] { std::vector<T>().swap(*out); };
  }
  return c;
}

Case make_naive(Env& env, const std::string& op, std::size_t count, Data& d) {
  const std::size_t bytes = count * sizeof(T);
  Case c;
  if (op == "upload_fresh" || op == "upload_fresh_repeat_64MiB") {
    auto out = std::make_shared<cl::Buffer>();
    c.run = [&env, &d, out, bytes](int p) {
      *out = cl::Buffer(env.ctx, CL_MEM_READ_WRITE, bytes);
      env.queue.enqueueWriteBuffer(*out, CL_TRUE, 0, bytes, d.src[p].data());
    };
    c.verify = [&env, &d, out](int p) { return env.device_equals(*out, d.src[p]); };
    c.release = [out] { *out = cl::Buffer(); };
  } else if (op == "upload_existing" || op == "upload_async") {
    // upload_async by hand: a non-blocking write of the pageable vector, then a wait.
    const cl_bool blocking = op == "upload_existing" ? CL_TRUE : CL_FALSE;
    auto dst = std::make_shared<cl::Buffer>(env.ctx, CL_MEM_READ_WRITE, bytes);
    c.run = [&env, &d, dst, bytes, blocking](int p) {
      cl::Event done;
      env.queue.enqueueWriteBuffer(*dst, blocking, 0, bytes, d.src[p].data(), nullptr, &done);
      if (!blocking) done.wait();
    };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(*dst, d.src[p]); };
  } else if (op == "download_caller" || op == "download_async") {
    const cl_bool blocking = op == "download_caller" ? CL_TRUE : CL_FALSE;
    auto src = std::make_shared<std::vector<cl::Buffer>>();
    src->push_back(env.make_buffer(d.src[0]));
    src->push_back(env.make_buffer(d.src[1]));
    auto out = std::make_shared<std::vector<T>>(count);
    c.prepare = [out](int) { std::fill(out->begin(), out->end(), T{}); };
    c.run = [&env, src, out, bytes, blocking](int p) {
      cl::Event done;
      env.queue.enqueueReadBuffer((*src)[static_cast<std::size_t>(p)], blocking, 0, bytes,
                                  out->data(), nullptr, &done);
      if (!blocking) done.wait();
    };
    c.verify = [&d, out](int p) { return same(out->data(), d.src[p]); };
  } else if (op == "download_new") {
    auto src = std::make_shared<std::vector<cl::Buffer>>();
    src->push_back(env.make_buffer(d.src[0]));
    src->push_back(env.make_buffer(d.src[1]));
    auto out = std::make_shared<std::vector<T>>();
    c.run = [&env, src, out, count, bytes](int p) {
      std::vector<T> v(count);
      env.queue.enqueueReadBuffer((*src)[static_cast<std::size_t>(p)], CL_TRUE, 0, bytes, v.data());
      *out = std::move(v);
    };
    c.verify = [&d, out](int p) {
      return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
    };
    c.release = [out] { std::vector<T>().swap(*out); };
  } else if (op == "d2d_copy") {
    auto src = std::make_shared<std::vector<cl::Buffer>>();
    src->push_back(env.make_buffer(d.src[0]));
    src->push_back(env.make_buffer(d.src[1]));
    auto dst = std::make_shared<cl::Buffer>(env.ctx, CL_MEM_READ_WRITE, bytes);
    c.run = [&env, src, dst, bytes](int p) {
      env.queue.enqueueCopyBuffer((*src)[static_cast<std::size_t>(p)], *dst, 0, 0, bytes);
      env.queue.finish();
    };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(*dst, d.src[p]); };
  } else if (op == "roundtrip_seed") {
    auto out = std::make_shared<std::vector<T>>();
    c.run = [&env, &d, out, count, bytes](int p) {
      cl::Buffer buf(env.ctx, CL_MEM_READ_WRITE, bytes);
      env.queue.enqueueWriteBuffer(buf, CL_TRUE, 0, bytes, d.src[p].data());
      std::vector<T> v(count);
      env.queue.enqueueReadBuffer(buf, CL_TRUE, 0, bytes, v.data());
      *out = std::move(v);
    };
    c.verify = [&d, out](int p) {
      return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
    };
    c.release = [out] { std::vector<T>().swap(*out); };
  }
  return c;
}

// Best practice by hand: device buffers made once and reused (a "fresh" upload reuses a cached
// buffer of the right size, which is what a hand-written pool does), and every host<->device
// transfer goes through a mapped CL_MEM_ALLOC_HOST_PTR buffer (pinned on discrete GPUs).
Case make_best(Env& env, const std::string& op, std::size_t count, Data& d) {
  const std::size_t bytes = count * sizeof(T);
  Case c;
  if (op == "upload_pinned") {  // the raw pinned limit: DMA from mapped memory, no host copy
    auto dst = std::make_shared<cl::Buffer>(env.ctx, CL_MEM_READ_WRITE, bytes);
    auto pin = std::make_shared<std::vector<std::unique_ptr<Pinned>>>();
    for (int p = 0; p < 2; ++p) {
      pin->push_back(std::make_unique<Pinned>(env, count));
      std::memcpy(pin->back()->ptr, d.src[p].data(), bytes);
    }
    c.run = [&env, dst, pin, bytes](int p) {
      env.queue.enqueueWriteBuffer(*dst, CL_TRUE, 0, bytes,
                                   (*pin)[static_cast<std::size_t>(p)]->ptr);
    };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(*dst, d.src[p]); };
    return c;
  }
  if (op == "download_pinned") {
    auto src = std::make_shared<std::vector<cl::Buffer>>();
    src->push_back(env.make_buffer(d.src[0]));
    src->push_back(env.make_buffer(d.src[1]));
    auto pin = std::make_shared<Pinned>(env, count);
    c.prepare = [pin, count](int) { std::fill(pin->ptr, pin->ptr + count, T{}); };
    c.run = [&env, src, pin, bytes](int p) {
      env.queue.enqueueReadBuffer((*src)[static_cast<std::size_t>(p)], CL_TRUE, 0, bytes, pin->ptr);
    };
    c.verify = [&d, pin](int p) { return same(pin->ptr, d.src[p]); };
    return c;
  }
  if (op == "upload_fresh" || op == "upload_fresh_repeat_64MiB" || op == "upload_existing") {
    auto dst = std::make_shared<cl::Buffer>(env.ctx, CL_MEM_READ_WRITE, bytes);
    auto pin = std::make_shared<Pinned>(env, count);
    c.run = [&env, &d, dst, pin, bytes](int p) {
      std::memcpy(pin->ptr, d.src[p].data(), bytes);
      env.queue.enqueueWriteBuffer(*dst, CL_TRUE, 0, bytes, pin->ptr);
    };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(*dst, d.src[p]); };
  } else if (op == "download_caller" || op == "download_new") {
    auto src = std::make_shared<std::vector<cl::Buffer>>();
    src->push_back(env.make_buffer(d.src[0]));
    src->push_back(env.make_buffer(d.src[1]));
    auto pin = std::make_shared<Pinned>(env, count);
    auto out = std::make_shared<std::vector<T>>();
    if (op == "download_caller") {
      out->resize(count);
      c.prepare = [out](int) { std::fill(out->begin(), out->end(), T{}); };
      c.run = [&env, src, pin, out, bytes](int p) {
        env.queue.enqueueReadBuffer((*src)[static_cast<std::size_t>(p)], CL_TRUE, 0, bytes,
                                    pin->ptr);
        std::memcpy(out->data(), pin->ptr, bytes);
      };
    } else {
      c.run = [&env, src, pin, out, count, bytes](int p) {
        env.queue.enqueueReadBuffer((*src)[static_cast<std::size_t>(p)], CL_TRUE, 0, bytes,
                                    pin->ptr);
        *out = std::vector<T>(pin->ptr, pin->ptr + count);
      };
      c.release = [out] { std::vector<T>().swap(*out); };
    }
    c.verify = [&d, out](int p) {
      return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
    };
  } else if (op == "d2d_copy") {
    auto src = std::make_shared<std::vector<cl::Buffer>>();
    src->push_back(env.make_buffer(d.src[0]));
    src->push_back(env.make_buffer(d.src[1]));
    auto dst = std::make_shared<cl::Buffer>(env.ctx, CL_MEM_READ_WRITE, bytes);
    c.run = [&env, src, dst, bytes](int p) {
      cl::Event e;
      env.queue.enqueueCopyBuffer((*src)[static_cast<std::size_t>(p)], *dst, 0, 0, bytes, nullptr,
                                  &e);
      e.wait();
    };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(*dst, d.src[p]); };
  } else if (op == "roundtrip_seed") {
    auto buf = std::make_shared<cl::Buffer>(env.ctx, CL_MEM_READ_WRITE, bytes);
    auto pin = std::make_shared<Pinned>(env, count);
    auto out = std::make_shared<std::vector<T>>();
    c.run = [&env, &d, buf, pin, out, count, bytes](int p) {
      std::memcpy(pin->ptr, d.src[p].data(), bytes);
      env.queue.enqueueWriteBuffer(*buf, CL_FALSE, 0, bytes, pin->ptr);
      env.queue.enqueueReadBuffer(*buf, CL_TRUE, 0, bytes, pin->ptr);
      *out = std::vector<T>(pin->ptr, pin->ptr + count);
    };
    c.verify = [&d, out](int p) {
      return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
    };
    c.release = [out] { std::vector<T>().swap(*out); };
  }
  return c;
}

cl::Buffer wrap(const compute::vector<T>& v) {
  return cl::Buffer(v.get_buffer().get(), /*retainObject=*/true);
}

Case make_boost(Env& env, const std::string& op, std::size_t count, Data& d) {
  Case c;
  auto& q = env.bqueue;
  if (op == "upload_fresh" || op == "upload_fresh_repeat_64MiB") {
    auto out = std::make_shared<std::unique_ptr<compute::vector<T>>>();
    c.run = [&q, &d, out](int p) {
      *out = std::make_unique<compute::vector<T>>(d.src[p].begin(), d.src[p].end(), q);
    };
    c.verify = [&env, &d, out](int p) { return env.device_equals(wrap(**out), d.src[p]); };
    c.release = [out] { out->reset(); };
  } else if (op == "upload_existing") {
    auto dst = std::make_shared<compute::vector<T>>(count, env.bctx);
    c.run = [&q, &d, dst](int p) {
      compute::copy(d.src[p].begin(), d.src[p].end(), dst->begin(), q);
    };
    c.verify = [&env, &d, dst](int p) { return env.device_equals(wrap(*dst), d.src[p]); };
  } else if (op == "download_caller" || op == "download_new" || op == "d2d_copy") {
    auto src = std::make_shared<std::vector<compute::vector<T>>>();
    src->emplace_back(d.src[0].begin(), d.src[0].end(), q);
    src->emplace_back(d.src[1].begin(), d.src[1].end(), q);
    if (op == "download_caller") {
      auto out = std::make_shared<std::vector<T>>(count);
      c.prepare = [out](int) { std::fill(out->begin(), out->end(), T{}); };
      c.run = [&q, src, out](int p) {
        auto& s = (*src)[static_cast<std::size_t>(p)];
        compute::copy(s.begin(), s.end(), out->begin(), q);
      };
      c.verify = [&d, out](int p) { return same(out->data(), d.src[p]); };
    } else if (op == "download_new") {
      auto out = std::make_shared<std::vector<T>>();
      c.run = [&q, src, out, count](int p) {
        auto& s = (*src)[static_cast<std::size_t>(p)];
        std::vector<T> v(count);
        compute::copy(s.begin(), s.end(), v.begin(), q);
        *out = std::move(v);
      };
      c.verify = [&d, out](int p) {
        return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
      };
      c.release = [out] { std::vector<T>().swap(*out); };
    } else {
      auto dst = std::make_shared<compute::vector<T>>(count, env.bctx);
      c.run = [&q, src, dst](int p) {
        auto& s = (*src)[static_cast<std::size_t>(p)];
        compute::copy(s.begin(), s.end(), dst->begin(), q);
        q.finish();
      };
      c.verify = [&env, &d, dst](int p) { return env.device_equals(wrap(*dst), d.src[p]); };
    }
  } else if (op == "roundtrip_seed") {
    auto out = std::make_shared<std::vector<T>>();
    c.run = [&q, &d, out, count](int p) {
      compute::vector<T> dv(d.src[p].begin(), d.src[p].end(), q);
      std::vector<T> v(count);
      compute::copy(dv.begin(), dv.end(), v.begin(), q);
      *out = std::move(v);
    };
    c.verify = [&d, out](int p) {
      return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
    };
    c.release = [out] { std::vector<T>().swap(*out); };
  }
  return c;
}

// Host-only limit: the same movement of bytes as a single-thread memcpy (fresh destinations are
// fresh here too, so first touch of new pages is in the baseline).
Case make_memcpy(Env&, const std::string& op, std::size_t count, Data& d) {
  const std::size_t bytes = count * sizeof(T);
  Case c;
  auto out = std::make_shared<std::vector<T>>();
  auto check = [&d, out](int p) {
    return out->size() == d.src[p].size() && same(out->data(), d.src[p]);
  };
  auto drop = [out] { std::vector<T>().swap(*out); };
  if (op == "upload_fresh" || op == "upload_fresh_repeat_64MiB" || op == "download_new" ||
      op == "roundtrip_seed") {
    const bool twice = op == "roundtrip_seed";
    c.run = [&d, out, count, bytes, twice](int p) {
      std::unique_ptr<T[]> mid;
      const T* from = d.src[p].data();
      if (twice) {
        mid.reset(new T[count]);
        std::memcpy(mid.get(), from, bytes);
        from = mid.get();
      }
      *out = std::vector<T>(from, from + count);
    };
    c.verify = check;
    c.release = drop;
  } else {  // into / out of reused memory
    out->resize(count);
    c.prepare = [out](int) { std::fill(out->begin(), out->end(), T{}); };
    c.run = [&d, out, bytes](int p) { std::memcpy(out->data(), d.src[p].data(), bytes); };
    c.verify = check;
  }
  return c;
}

Case make_case(const std::string& method, Env& env, const std::string& op, std::size_t count,
               Data& d) {
  if (method == "clbuf") return make_clbuf(env, op, count, d);
  if (method == "clhpp_naive") return make_naive(env, op, count, d);
  if (method == "clhpp_best") return make_best(env, op, count, d);
  if (method == "boost_compute") return make_boost(env, op, count, d);
  if (method == "memcpy") return make_memcpy(env, op, count, d);
  throw std::invalid_argument("unknown method " + method);
}

// ---------------------------------------------------------------- harness

struct Options {
  std::string device;
  std::vector<std::size_t> sizes = {4, 4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB};
  std::vector<std::string> ops = kAllOps;
  std::vector<std::string> methods = kMethods;
  bool smoke = false;
  std::string csv;
  double target_s = 0.3;
  int min_reps = 5;
  int max_reps = 2000;
  double case_budget_s = 40.0;  // cap per (op, size) for all methods together
  std::string rss_method;
  std::size_t rss_bytes = 256 * MiB;
  clbuf::Options clbuf;  // --staging-threshold, --chunk, --chunks, --copy-threads, --memory,
                         // --bounce-max, --buffered-max
};

struct Result {
  std::string op;
  std::size_t bytes = 0;
  std::string method;
  std::vector<double> us;
  bool ok = true;
  std::string error;
  double median() const {
    if (us.empty()) return 0;
    std::vector<double> s = us;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  }
  double quantile(double q) const {
    if (us.empty()) return 0;
    std::vector<double> s = us;
    std::sort(s.begin(), s.end());
    const double pos = q * static_cast<double>(s.size() - 1);
    const auto lo = static_cast<std::size_t>(pos);
    const std::size_t hi = std::min(lo + 1, s.size() - 1);
    return s[lo] + (s[hi] - s[lo]) * (pos - static_cast<double>(lo));
  }
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<Result> run_one(Env& env, const Options& o, const std::string& op, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(T);
  Data data(count);
  const std::size_t nm = o.methods.size();
  std::vector<Result> res(nm);
  std::vector<Case> cases(nm);
  std::vector<double> spent(nm, 0);
  for (std::size_t i = 0; i < nm; ++i) {
    res[i].op = op;
    res[i].bytes = bytes;
    res[i].method = o.methods[i];
    try {
      cases[i] = make_case(o.methods[i], env, op, count, data);
      if (!cases[i].run) {
        res[i].ok = false;
        res[i].error = "not applicable";
      }
    } catch (const std::exception& e) {
      res[i].ok = false;
      res[i].error = std::string("setup: ") + e.what();
    }
  }
  // Each step is one repetition of one method; returns the timed seconds, or throws.
  auto step = [&](std::size_t i, int pattern) {
    Case& c = cases[i];
    if (c.prepare) c.prepare(pattern);
    auto t0 = Clock::now();
    c.run(pattern);
    double t = seconds_since(t0);
    if (!c.verify(pattern)) throw std::runtime_error("result differs from the source data");
    if (c.release) {
      t0 = Clock::now();
      c.release();
      t += seconds_since(t0);
    }
    return t;
  };
  const int warmup = o.smoke ? 1 : (bytes >= 64 * MiB ? 1 : 3);
  const int min_reps = o.smoke ? 3 : o.min_reps;
  const int max_reps = o.smoke ? 3 : o.max_reps;
  const double target = o.smoke ? 0.0 : o.target_s;
  for (int w = 0; w < warmup; ++w) {
    for (std::size_t i = 0; i < nm; ++i) {
      if (!res[i].ok) continue;
      try {
        step(i, w & 1);
      } catch (const std::exception& e) {
        res[i].ok = false;
        res[i].error = std::string("warm-up: ") + e.what();
      }
    }
  }
  const auto start = Clock::now();
  for (int rep = 0;; ++rep) {
    bool more = false;
    for (std::size_t k = 0; k < nm; ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(rep)) % nm;  // rotate who goes first
      if (!res[i].ok) continue;
      const int n = static_cast<int>(res[i].us.size());
      if (n >= max_reps) continue;
      if (n >= min_reps && (spent[i] >= target || seconds_since(start) > o.case_budget_s)) continue;
      more = true;
      try {
        const double t = step(i, rep & 1);
        spent[i] += t;
        res[i].us.push_back(t * 1e6);
      } catch (const std::exception& e) {
        res[i].ok = false;
        res[i].error = e.what();
      }
    }
    if (!more) break;
  }
  return res;
}

double gbps(std::size_t bytes, double us) {
  return us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0;
}

void print_header() {
  std::printf("%-26s %9s  %-14s %6s %12s %12s %12s %9s %11s\n", "operation", "size", "method",
              "reps", "median_us", "q1_us", "q3_us", "GB/s", "clbuf/this");
}

void print_rows(const std::vector<Result>& rs) {
  double clbuf_med = 0;
  for (const auto& r : rs) {
    if (r.method == "clbuf" && r.ok) clbuf_med = r.median();
  }
  for (const auto& r : rs) {
    if (!r.ok) {
      std::printf("%-26s %9s  %-14s  %s\n", r.op.c_str(), size_name(r.bytes).c_str(),
                  r.method.c_str(),
                  (r.error == "not applicable" ? "n/a" : ("FAILED: " + r.error).c_str()));
      continue;
    }
    const double m = r.median();
    std::printf("%-26s %9s  %-14s %6zu %12.2f %12.2f %12.2f %9.3f %11.3f\n", r.op.c_str(),
                size_name(r.bytes).c_str(), r.method.c_str(), r.us.size(), m, r.quantile(0.25),
                r.quantile(0.75), gbps(r.bytes, m), clbuf_med > 0 && m > 0 ? clbuf_med / m : 0.0);
  }
  std::fflush(stdout);
}

// ---------------------------------------------------------------- peak RSS mode

// One 256 MiB round trip (fresh upload, download into a new vector, check) and nothing else, so
// `/usr/bin/time -v` reports its peak RSS. Method "none" holds the same host data and an
// initialised OpenCL context but moves nothing: the baseline to subtract.
// VmHWM of this process (Linux), so machines without /usr/bin/time can report peak RSS too.
long peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

int rss_roundtrip(Env& env, const Options& o) {
  const std::size_t count = o.rss_bytes / sizeof(T);
  std::vector<T> src(count);
  fill_random(src, 7);
  std::vector<T> back;
  const std::string& m = o.rss_method;
  if (m == "none") {
    back = src;
  } else if (m == "clbuf") {
    auto buf = env.mgr->upload(src);
    back = env.mgr->download(buf);
  } else if (m == "clhpp_naive") {
    cl::Buffer buf(env.ctx, CL_MEM_READ_WRITE, o.rss_bytes);
    env.queue.enqueueWriteBuffer(buf, CL_TRUE, 0, o.rss_bytes, src.data());
    back.resize(count);
    env.queue.enqueueReadBuffer(buf, CL_TRUE, 0, o.rss_bytes, back.data());
  } else if (m == "clhpp_best") {
    cl::Buffer buf(env.ctx, CL_MEM_READ_WRITE, o.rss_bytes);
    Pinned pin(env, count);
    std::memcpy(pin.ptr, src.data(), o.rss_bytes);
    env.queue.enqueueWriteBuffer(buf, CL_TRUE, 0, o.rss_bytes, pin.ptr);
    env.queue.enqueueReadBuffer(buf, CL_TRUE, 0, o.rss_bytes, pin.ptr);
    back.assign(pin.ptr, pin.ptr + count);
  } else if (m == "boost_compute") {
    compute::vector<T> dv(src.begin(), src.end(), env.bqueue);
    back.resize(count);
    compute::copy(dv.begin(), dv.end(), back.begin(), env.bqueue);
  } else {
    std::fprintf(stderr, "unknown method for --rss-roundtrip: %s\n", m.c_str());
    return 2;
  }
  const bool ok = back.size() == src.size() && same(back.data(), src);
  std::printf("rss_roundtrip method=%s bytes=%zu ok=%d peak_rss_kib=%ld\n", m.c_str(), o.rss_bytes,
              ok ? 1 : 0, peak_rss_kib());
  return ok ? 0 : 1;
}

void usage() {
  std::puts(
      "usage: clbuf_bench [--device SEL] [--sizes LIST] [--ops LIST] [--methods LIST] [--gib]\n"
      "                   [--smoke] [--csv PATH] [--target-s S] [--min-reps N] [--max-reps N]\n"
      "                   [--case-budget-s S] [--staging-threshold SIZE|never] [--chunk SIZE]\n"
      "                   [--chunks N] [--copy-threads N] [--memory host|unified|discrete]\n"
      "                   [--bounce-max SIZE|0] [--buffered-max SIZE|0]\n"
      "       clbuf_bench [--device SEL] --rss-roundtrip METHOD [--rss-bytes SIZE]\n"
      "sizes: 4,4K,64K,1M,16M,256M (default); --gib adds 1G\n"
      "ops: upload_fresh upload_existing download_caller download_new d2d_copy roundtrip_seed\n"
      "     upload_fresh_repeat_64MiB upload_pinned download_pinned upload_async download_async\n"
      "methods: clbuf clhpp_naive clhpp_best boost_compute memcpy\n"
      "rss methods: none clbuf clhpp_naive clhpp_best boost_compute");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool gib = false;
  bool sizes_given = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
        return argv[++i];
      };
      if (a == "--device") {
        o.device = next();
      } else if (a == "--sizes") {
        o.sizes.clear();
        for (const auto& s : split(next(), ',')) o.sizes.push_back(parse_size(s));
        sizes_given = true;
      } else if (a == "--ops") {
        o.ops = split(next(), ',');
      } else if (a == "--methods") {
        o.methods = split(next(), ',');
      } else if (a == "--gib") {
        gib = true;
      } else if (a == "--smoke") {
        o.smoke = true;
      } else if (a == "--csv") {
        o.csv = next();
      } else if (a == "--target-s") {
        o.target_s = std::stod(next());
      } else if (a == "--min-reps") {
        o.min_reps = std::stoi(next());
      } else if (a == "--max-reps") {
        o.max_reps = std::stoi(next());
      } else if (a == "--case-budget-s") {
        o.case_budget_s = std::stod(next());
      } else if (a == "--rss-roundtrip") {
        o.rss_method = next();
      } else if (a == "--rss-bytes") {
        o.rss_bytes = parse_size(next());
      } else if (a == "--staging-threshold") {
        const std::string v = next();
        o.clbuf.staging_threshold_bytes = v == "never" ? clbuf::Options::never : parse_size(v);
      } else if (a == "--bounce-max") {
        o.clbuf.bounce_max_bytes = parse_bound(next());
      } else if (a == "--buffered-max") {
        o.clbuf.buffered_upload_max_bytes = parse_bound(next());
      } else if (a == "--chunk") {
        o.clbuf.staging_chunk_bytes = parse_size(next());
      } else if (a == "--chunks") {
        o.clbuf.staging_chunks = static_cast<std::size_t>(std::stoul(next()));
      } else if (a == "--copy-threads") {
        o.clbuf.copy_threads = static_cast<unsigned>(std::stoul(next()));
      } else if (a == "--memory") {
        const std::string v = next();
        o.clbuf.memory = v == "host"       ? clbuf::MemoryModel::host
                         : v == "unified"  ? clbuf::MemoryModel::unified
                         : v == "discrete" ? clbuf::MemoryModel::discrete
                                           : clbuf::MemoryModel::automatic;
      } else if (a == "-h" || a == "--help") {
        usage();
        return 0;
      } else {
        throw std::invalid_argument("unknown argument " + a);
      }
    }
    if (gib) o.sizes.push_back(GiB);
    if (o.smoke && !sizes_given) o.sizes = {4, 4 * KiB};
    for (const auto& m : o.methods) {
      if (std::find(kMethods.begin(), kMethods.end(), m) == kMethods.end()) {
        throw std::invalid_argument("unknown method " + m);
      }
    }
    for (const auto& op : o.ops) {
      if (std::find(kAllOps.begin(), kAllOps.end(), op) == kAllOps.end()) {
        throw std::invalid_argument("unknown operation " + op);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clbuf_bench: %s\n", e.what());
    usage();
    return 2;
  }

  try {
    auto mgr = std::make_unique<clbuf::BufferManager>(o.device, o.clbuf);
    Env env;
    env.mgr = mgr.get();
    env.ctx = mgr->context();
    env.queue = mgr->queue();
    // Boost.Compute on the very same context and queue (retained, not copied).
    env.bctx = compute::context(env.ctx(), /*retain=*/true);
    env.bqueue = compute::command_queue(env.queue(), /*retain=*/true);

    if (!o.rss_method.empty()) return rss_roundtrip(env, o);

    const auto& dev = mgr->device();
    cl::Device cldev = env.queue.getInfo<CL_QUEUE_DEVICE>();
    const bool unified = cldev.getInfo<CL_DEVICE_HOST_UNIFIED_MEMORY>() != CL_FALSE;
    std::printf("# device: %s / %s (%zu:%zu), unified host memory: %s\n", dev.platform.c_str(),
                dev.name.c_str(), dev.platform_index, dev.device_index, unified ? "yes" : "no");
    const clbuf::MemoryModel model = mgr->memory_model();
    std::printf(
        "# clbuf paths: %s; staging threshold %zu, chunk %zu x %zu, copy threads %u, bounce up to "
        "%zu, buffered uploads up to %zu%s\n",
        model == clbuf::MemoryModel::host      ? "host (CPU device)"
        : model == clbuf::MemoryModel::unified ? "unified"
                                               : "discrete (pinned staging)",
        mgr->options().staging_threshold_bytes, mgr->options().staging_chunk_bytes,
        mgr->options().staging_chunks, mgr->options().copy_threads, mgr->options().bounce_max_bytes,
        mgr->options().buffered_upload_max_bytes,
        model == clbuf::MemoryModel::discrete ? "" : " (discrete devices only: unused here)");
    std::printf(
        "# median of interleaved repetitions; clbuf/this = time ratio (lower is better for "
        "clbuf)\n");
    std::printf("# GB/s = payload bytes / median time (d2d counts the bytes once)\n");
    print_header();

    std::vector<Result> all;
    bool failed = false;
    for (const auto& op : o.ops) {
      std::vector<std::size_t> sizes = o.sizes;
      if (op == "roundtrip_seed") sizes = {1000 * sizeof(T)};
      if (op == "upload_fresh_repeat_64MiB") {
        if (o.smoke) continue;
        sizes = {64 * MiB};
      }
      for (std::size_t bytes : sizes) {
        auto rs = run_one(env, o, op, bytes);
        print_rows(rs);
        for (auto& r : rs) {
          if (!r.ok && r.error != "not applicable") failed = true;
          all.push_back(std::move(r));
        }
      }
    }

    if (!o.csv.empty()) {
      std::ofstream f(o.csv);
      f << "op,bytes,method,reps,median_us,q1_us,q3_us,gbps,ok,device\n";
      for (const auto& r : all) {
        if (r.error == "not applicable") continue;
        f << r.op << ',' << r.bytes << ',' << r.method << ',' << r.us.size() << ',' << r.median()
          << ',' << r.quantile(0.25) << ',' << r.quantile(0.75) << ',' << gbps(r.bytes, r.median())
          << ',' << (r.ok ? 1 : 0) << ",\"" << dev.name << "\"\n";
      }
    }
    if (failed) {
      std::fprintf(stderr, "clbuf_bench: some results were wrong or failed (see FAILED rows)\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clbuf_bench: %s\n", e.what());
    return 1;
  }
}
