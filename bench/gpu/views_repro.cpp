// SPDX-License-Identifier: MIT
// views_repro: does the segfault in the driver's clReleaseMemObject of an overlapping sub-buffer
// view come from clbuf (a release too many) or from the driver? Runs every variant below in a
// forked child (the parent never calls OpenCL), several times, and prints one line per child run
// and a summary table. Each child checks every byte it reads back and keeps a ledger of the
// application's cl_mem references (clCreateBuffer/clCreateSubBuffer/clRetainMemObject/
// clReleaseMemObject are interposed in this binary and forwarded to the ICD loader), so a release
// too many is reported by name *before* it reaches the driver.
//
// Build (Debian 12, in the project root):
//   mkdir -p build-gpu-repro
//   g++ -std=c++17 -O2 -g -I/work/main/include bench/gpu/views_repro.cpp -o
//   /work/main/build-gpu-repro/views_repro -lOpenCL -lpthread
//
// Run here on PoCL (the default MemoryModel::host there; --discrete forces clbuf's discrete-GPU
// path with pinned staging, as on the H200):
//   build-gpu-repro/views_repro
//   build-gpu-repro/views_repro --discrete
//
// Run on the H200 machine (the ICD loader from .dev/, see shared/GPU.md; carry .dev and
// build-gpu-repro there):
//   for f in .dev/*.deb; do dpkg -x $f /tmp/cl; done
//   mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
//   export OCL_ICD_VENDORS=/tmp/vend
//   LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH timeout 300
//   build-gpu-repro/views_repro 2>&1 | tee $OUT/views_repro.txt
//
// Options: --device SEL (as CLBUF_DEVICE: gpu, cpu, P:D, name part), --reps N (3),
//          --discrete (clbuf variants force MemoryModel::discrete; on the H200 the default
//          already is discrete), --verbose (every child line), --alarm S (60: per-child alarm),
//          --budget-s S (150: no child starts after that), --list (the variants),
//          VARIANT... (letters, e.g. "A E"; default A..M). Self-tests of the harness, run only
//          by name: Xsegv Xhang Xmism Xover Xerr, e.g.
//   build-gpu-repro/views_repro --alarm 2 --reps 1 Xsegv Xhang Xmism Xover Xerr
// Runs go round-robin (every variant once, then the second repetition, ...) so that a run cut
// short still has one repetition of each. Child exit codes: bit 1 data mismatch, bit 2 OpenCL or
// clbuf error, bit 4 a release of a cl_mem the ledger had at 0 (or never saw), bit 8 cl_mem
// references left at the end; a signal is printed by name (SIGALRM: the child hung 60 s).

#include <clbuf/clbuf.hpp>

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using Elem = std::uint32_t;
constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;
constexpr std::size_t kParentBytes = 32 * MiB;

struct Region {
  std::size_t offset, bytes;
};
// The finding's views: overlapping, all at multiples of 4096 bytes.
const std::vector<Region> kOverlapping = {{0, 8 * MiB},
                                          {4096, 8 * MiB},
                                          {12288, 16 * MiB + 4 * KiB},
                                          {28311552, 5 * MiB},
                                          {28672, 1 * MiB}};
// Same sizes where they fit (the third shrunk to 8 MiB), disjoint, at multiples of 1 MiB.
const std::vector<Region> kDisjoint = {{0, 8 * MiB},
                                       {8 * MiB, 8 * MiB},
                                       {16 * MiB, 8 * MiB},
                                       {24 * MiB, 5 * MiB},
                                       {29 * MiB, 1 * MiB}};

// ---- Child-side logging: straight write(2), so that nothing is lost in a stdio buffer when the
// child dies. Lines: "step ..." (progress; the parent shows the last ones when a child dies),
// "RESULT ...", and anything else (shown always: NOTE, MISMATCH, ERROR, OVERRELEASE, driver text).
void emit(const char* prefix, const char* fmt, va_list ap) {
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "%s", prefix);
  n += std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  if (n > static_cast<int>(sizeof buf) - 2) n = static_cast<int>(sizeof buf) - 2;
  buf[n++] = '\n';
  for (ssize_t off = 0; off < n;) {
    const ssize_t w = ::write(1, buf + off, n - off);
    if (w <= 0) break;
    off += w;
  }
}
__attribute__((format(printf, 2, 3))) void line(const char* prefix, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(prefix, fmt, ap);
  va_end(ap);
}
#define STEP(...) line("step ", __VA_ARGS__)
#define NOTE(...) line("NOTE ", __VA_ARGS__)

struct ClError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void ck(cl_int err, const char* what) {
  if (err != CL_SUCCESS) {
    throw ClError(std::string(what) + " -> " + clbuf::error_name(err) + " (" + std::to_string(err) +
                  ")");
  }
}

// ---- The cl_mem reference ledger ------------------------------------------------------------
namespace ledger {
struct Record {
  long count = 0;
  std::string name;  // set by the variant for the parent and the views; empty for the rest
};
std::mutex mutex;
std::unordered_map<cl_mem, Record>* records = nullptr;  // created in the child on first use
std::atomic<int> bad_releases{0};
std::atomic<int> pinned_created{0};  // CL_MEM_ALLOC_HOST_PTR buffers: staging was used

std::unordered_map<cl_mem, Record>& table() {
  if (records == nullptr) records = new std::unordered_map<cl_mem, Record>();
  return *records;
}
void created(cl_mem m) {
  if (m == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex);
  table()[m] = Record{1, {}};
}
void name(cl_mem m, const std::string& n) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = table().find(m);
  if (it != table().end()) it->second.name = n;
}
long count(cl_mem m) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = table().find(m);
  return it == table().end() ? -1 : it->second.count;
}
// References still held: (named objects listed).
long leftover(std::string& names) {
  std::lock_guard<std::mutex> lock(mutex);
  long total = 0;
  for (auto& [m, r] : table()) {
    if (r.count > 0) {
      total += r.count;
      names += (names.empty() ? "" : ",") + (r.name.empty() ? std::string("unnamed") : r.name) +
               "=" + std::to_string(r.count);
    }
  }
  return total;
}
}  // namespace ledger

cl_int driver_mem_refcount(cl_mem m) {
  cl_uint n = 0;
  if (::clGetMemObjectInfo(m, CL_MEM_REFERENCE_COUNT, sizeof n, &n, nullptr) != CL_SUCCESS)
    return -1;
  return static_cast<cl_int>(n);
}

}  // namespace

// Interposed entry points: every call from this binary (clbuf's and the Khronos C++ bindings'
// included) comes here first; the ICD loader's comes next (RTLD_NEXT). Hidden: not exported
// from the executable, so the driver and the loader never call these, only this binary does.
#define HIDDEN __attribute__((visibility("hidden")))
extern "C" {
HIDDEN cl_mem CL_API_CALL clCreateBuffer(cl_context context, cl_mem_flags flags, size_t size,
                                         void* host_ptr, cl_int* errcode_ret) {
  using Fn = cl_mem(CL_API_CALL*)(cl_context, cl_mem_flags, size_t, void*, cl_int*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "clCreateBuffer"));
  cl_mem m = real(context, flags, size, host_ptr, errcode_ret);
  ledger::created(m);
  if (m != nullptr && (flags & CL_MEM_ALLOC_HOST_PTR)) ++ledger::pinned_created;
  return m;
}
HIDDEN cl_mem CL_API_CALL clCreateSubBuffer(cl_mem buffer, cl_mem_flags flags,
                                            cl_buffer_create_type type, const void* info,
                                            cl_int* errcode_ret) {
  using Fn =
      cl_mem(CL_API_CALL*)(cl_mem, cl_mem_flags, cl_buffer_create_type, const void*, cl_int*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "clCreateSubBuffer"));
  cl_mem m = real(buffer, flags, type, info, errcode_ret);
  ledger::created(m);
  return m;
}
HIDDEN cl_int CL_API_CALL clRetainMemObject(cl_mem memobj) {
  using Fn = cl_int(CL_API_CALL*)(cl_mem);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "clRetainMemObject"));
  {
    std::lock_guard<std::mutex> lock(ledger::mutex);
    auto it = ledger::table().find(memobj);
    if (it == ledger::table().end()) {
      line("LEDGER ", "clRetainMemObject(%p) of a cl_mem the ledger does not know", (void*)memobj);
    } else {
      ++it->second.count;
    }
  }
  return real(memobj);
}
HIDDEN cl_int CL_API_CALL clReleaseMemObject(cl_mem memobj) {
  using Fn = cl_int(CL_API_CALL*)(cl_mem);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "clReleaseMemObject"));
  std::string name;
  long before = -1;
  {
    std::lock_guard<std::mutex> lock(ledger::mutex);
    auto it = ledger::table().find(memobj);
    if (it != ledger::table().end()) {
      before = it->second.count;
      name = it->second.name;
      if (before > 0) --it->second.count;
    }
  }
  if (before <= 0) {
    ++ledger::bad_releases;
    line("OVERRELEASE ", "clReleaseMemObject(%p %s) with ledger count %ld (a release too many)",
         (void*)memobj, name.empty() ? "unnamed" : name.c_str(), before);
  }
  if (!name.empty())
    STEP("clReleaseMemObject(%s) ledger %ld->%ld ...", name.c_str(), before, before - 1);
  const cl_int r = real(memobj);
  if (!name.empty()) STEP("clReleaseMemObject(%s) returned %d", name.c_str(), r);
  return r;
}
}  // extern "C"

namespace {

// ---- Data ----------------------------------------------------------------------------------
std::uint64_t g_seed = 1;
void fill_random(Elem* out, std::size_t count) {
  std::uint64_t s = (g_seed += 0x9E3779B97F4A7C15ull);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    out[i] = static_cast<Elem>(z ^ (z >> 31));
  }
}

int g_mismatches = 0;  // comparisons that failed
std::string g_refs;    // reference counts just before the views are destroyed, for RESULT
void compare(const char* what, const Elem* got, const Elem* want, std::size_t count,
             std::size_t base_byte) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (got[i] != want[i]) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) {
    STEP("%s: %zu bytes exact", what, count * sizeof(Elem));
    return;
  }
  ++g_mismatches;
  line("MISMATCH ", "%s: %zu of %zu words differ; first at parent byte %zu: got %08x want %08x",
       what, bad, count, base_byte + first * sizeof(Elem), got[first], want[first]);
}

// ---- Device selection (the device clbuf picks, without a context) -----------------------------
std::string g_selector;  // --device; empty: CLBUF_DEVICE, else clbuf's default
bool g_discrete = false;

clbuf::detail::DeviceEntry pick_device() {
  std::string origin;
  const std::string text = clbuf::detail::effective_selector(g_selector, origin);
  return clbuf::detail::select_device(text, origin, "views_repro").entry;
}

std::string device_string(cl_device_id d, cl_device_info what) {
  std::size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS) return "?";
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  return s.c_str();
}
template <class V>
V device_value(cl_device_id d, cl_device_info what) {
  V v{};
  clGetDeviceInfo(d, what, sizeof v, &v, nullptr);
  return v;
}

// ---- A raw imitation of clbuf's Stager (staging.hpp) ----------------------------------------
struct Geometry {
  unsigned threads;        // worker 0 is the calling thread
  std::size_t slots;       // pinned chunks in all, shared out evenly among the threads
  std::size_t slot_bytes;  // bytes per pinned chunk
  bool clbuf_chunking;     // chunk = clamp(round_4K(bytes / threads), 256 KiB, slot) as clbuf
  bool flush_reads;        // clFlush after each read enqueue too (clbuf only waits)
};

// clbuf's own numbers for this host (set_up_paths + Stager's constructor, default Options).
Geometry clbuf_geometry() {
  const unsigned copy_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 12u);
  const std::size_t slots = 24;
  const unsigned threads = static_cast<unsigned>(
      std::clamp<std::size_t>(copy_threads, 1, std::max<std::size_t>(slots / 2, 1)));
  return Geometry{threads, slots, 1 * MiB, true, false};
}

class RawStager {
 public:
  RawStager(cl_context context, cl_command_queue queue, Geometry g) : queue_(queue), g_(g) {
    per_worker_ = g_.slots / g_.threads;
    slots_.resize(per_worker_ * g_.threads);
    for (Slot& s : slots_) {
      cl_int err = CL_SUCCESS;
      s.buffer = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, g_.slot_bytes,
                                nullptr, &err);
      ck(err, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)");
      s.host = clEnqueueMapBuffer(queue_, s.buffer, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                  g_.slot_bytes, 0, nullptr, nullptr, &err);
      ck(err, "clEnqueueMapBuffer");
    }
    for (unsigned i = 1; i < g_.threads; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  RawStager(const RawStager&) = delete;
  RawStager& operator=(const RawStager&) = delete;
  ~RawStager() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : workers_) t.join();
    for (Slot& s : slots_) {
      if (s.host != nullptr) clEnqueueUnmapMemObject(queue_, s.buffer, s.host, 0, nullptr, nullptr);
    }
    clFinish(queue_);
    for (Slot& s : slots_) {
      if (s.buffer != nullptr) clReleaseMemObject(s.buffer);
    }
  }

  // Blocking: returns when the device (to_device) or `host` has the bytes.
  void run(bool to_device, cl_mem mem, std::size_t mem_offset, void* host, std::size_t bytes) {
    Job job;
    job.to_device = to_device;
    job.mem = mem;
    job.mem_offset = mem_offset;
    job.host = static_cast<char*>(host);
    job.bytes = bytes;
    if (g_.clbuf_chunking) {
      const std::size_t min_chunk = std::min<std::size_t>(256 * KiB, g_.slot_bytes);
      job.chunk = std::clamp<std::size_t>((bytes / g_.threads + 4095) / 4096 * 4096, min_chunk,
                                          g_.slot_bytes);
    } else {
      job.chunk = g_.slot_bytes;
    }
    job.chunks = (bytes + job.chunk - 1) / job.chunk;
    const unsigned helpers =
        static_cast<unsigned>(std::min<std::size_t>(g_.threads, job.chunks)) - 1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      active_ = helpers;
      pending_ = helpers;
      ++generation_;
    }
    start_.notify_all();
    work(0, job);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return pending_ == 0; });
      job_ = nullptr;
    }
    if (job.failed) throw ClError("staged transfer: " + job.error);
  }

 private:
  struct Slot {
    cl_mem buffer = nullptr;
    void* host = nullptr;
    cl_event busy = nullptr;
  };
  struct Job {
    bool to_device = true;
    cl_mem mem = nullptr;
    std::size_t mem_offset = 0;
    char* host = nullptr;
    std::size_t bytes = 0, chunk = 0, chunks = 0;
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::string error;  // under mutex_
  };

  void loop(unsigned index) {
    std::uint64_t seen = 0;
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (index > active_) continue;
        job = job_;
      }
      work(index, *job);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  bool ok(cl_int err, const char* call, Job& job) {
    if (err == CL_SUCCESS) return true;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!job.failed.exchange(true)) {
      job.error =
          std::string(call) + " -> " + clbuf::error_name(err) + " (" + std::to_string(err) + ")";
    }
    return false;
  }

  bool settle(Slot& slot, Job& job) {
    if (slot.busy == nullptr) return true;
    cl_int err = clWaitForEvents(1, &slot.busy);
    cl_int status = CL_COMPLETE;
    if (clGetEventInfo(slot.busy, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                       nullptr) == CL_SUCCESS &&
        status < 0) {
      err = status;
    }
    clReleaseEvent(slot.busy);
    slot.busy = nullptr;
    return ok(err, "a chunk's DMA", job);
  }

  void work(unsigned index, Job& job) {
    Slot* slots = &slots_[index * per_worker_];
    std::size_t turn = 0;
    for (std::size_t k; !job.failed && (k = job.next.fetch_add(1)) < job.chunks;) {
      Slot& slot = slots[turn++ % per_worker_];
      if (!settle(slot, job)) break;
      const std::size_t offset = k * job.chunk;
      const std::size_t length = std::min(job.chunk, job.bytes - offset);
      if (job.to_device) {
        std::memcpy(slot.host, job.host + offset, length);
        if (!ok(clEnqueueWriteBuffer(queue_, job.mem, CL_FALSE, job.mem_offset + offset, length,
                                     slot.host, 0, nullptr, &slot.busy),
                "clEnqueueWriteBuffer", job)) {
          break;
        }
        if (!ok(clFlush(queue_), "clFlush", job)) break;
      } else {
        if (!ok(clEnqueueReadBuffer(queue_, job.mem, CL_FALSE, job.mem_offset + offset, length,
                                    slot.host, 0, nullptr, &slot.busy),
                "clEnqueueReadBuffer", job)) {
          break;
        }
        if (g_.flush_reads && !ok(clFlush(queue_), "clFlush", job)) break;
        if (!settle(slot, job)) break;
        std::memcpy(job.host + offset, slot.host, length);
      }
    }
    for (std::size_t s = 0; s < per_worker_; ++s) settle(slots[s], job);
  }

  cl_command_queue queue_;
  Geometry g_;
  std::size_t per_worker_ = 1;
  std::vector<Slot> slots_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  Job* job_ = nullptr;
  unsigned active_ = 0, pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

// ---- Variants ------------------------------------------------------------------------------
enum class Kind { clbuf, raw, info };
enum class Order { forward, reverse, parent_first };
enum class Transfer { none, blocking, staged, clbuf_like };

struct Variant {
  const char* id;
  const char* what;
  Kind kind;
  const std::vector<Region>* layout = &kOverlapping;
  // clbuf
  bool staging_off = false;
  Order order = Order::forward;
  bool transfer_views = true;  // L: no download/upload of the views
  // raw
  Transfer transfer = Transfer::blocking;
  bool via_parent = false;     // F: address the parent at view offset + chunk offset
  bool one_at_a_time = false;  // I: create, read, write, release each sub-buffer in turn
  bool clbuf_refs = false;     // M: clbuf's retain/release sequence around each view
  // Self-tests of the harness (run only when named): 's' SIGSEGV after the views are made,
  // 'h' hang (SIGALRM), 'm' a corrupted byte (mismatch), 'o' a release too many, 'e' CL error.
  char fault = 0;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> list = [] {
    std::vector<Variant> v;
    Variant a{"A", "clbuf default: upload, 5 overlapping views, dl+ul each, destroy views in order",
              Kind::clbuf};
    v.push_back(a);
    Variant b = a;
    b.id = "B";
    b.what = "clbuf as A, staging off (staging_threshold_bytes = never)";
    b.staging_off = true;
    v.push_back(b);
    Variant c = a;
    c.id = "C";
    c.what = "clbuf as A, views destroyed in reverse order";
    c.order = Order::reverse;
    v.push_back(c);
    Variant d{"D", "raw: all 5 sub-buffers up front, blocking read+write from malloc, release",
              Kind::raw};
    d.transfer = Transfer::blocking;
    v.push_back(d);
    Variant e = d;
    e.id = "E";
    e.what = "raw: as D via pinned 1 MiB chunks, 8 threads, non-blocking+clFlush, one queue";
    e.transfer = Transfer::staged;
    v.push_back(e);
    Variant f = e;
    f.id = "F";
    f.what = "raw: as E but transfers address the PARENT at view offset (subs still made)";
    f.via_parent = true;
    v.push_back(f);
    Variant g = d;
    g.id = "G";
    g.what = "raw: create the 5 overlapping sub-buffers and release them, no transfer";
    g.transfer = Transfer::none;
    v.push_back(g);
    Variant h = e;
    h.id = "H";
    h.what = "raw: as E with 5 DISJOINT sub-buffers";
    h.layout = &kDisjoint;
    v.push_back(h);
    Variant i = d;
    i.id = "I";
    i.what = "raw: as D but create, read, write, release each sub-buffer in turn";
    i.one_at_a_time = true;
    v.push_back(i);
    Variant j = a;
    j.id = "J";
    j.what = "clbuf as A, parent DeviceBuffer destroyed before the views";
    j.order = Order::parent_first;
    v.push_back(j);
    Variant k = a;
    k.id = "K";
    k.what = "clbuf as A with 5 DISJOINT views (H's layout)";
    k.layout = &kDisjoint;
    v.push_back(k);
    Variant l = a;
    l.id = "L";
    l.what = "clbuf: upload parent, make the 5 overlapping views, destroy them, no view transfer";
    l.transfer_views = false;
    v.push_back(l);
    Variant m = d;
    m.id = "M";
    m.what = "raw replica of A: clbuf's stager geometry + 4 MiB threshold + retain/release order";
    m.transfer = Transfer::clbuf_like;
    m.clbuf_refs = true;
    v.push_back(m);
    // Self-tests, run only when named on the command line.
    const std::pair<const char*, char> faults[] = {
        {"Xsegv", 's'}, {"Xhang", 'h'}, {"Xmism", 'm'}, {"Xover", 'o'}, {"Xerr", 'e'}};
    for (const auto& [id, fault] : faults) {
      Variant x = d;
      x.id = id;
      x.what = "harness self-test (D with an injected fault)";
      x.fault = fault;
      v.push_back(x);
    }
    return v;
  }();
  return list;
}

void print_alignment(std::size_t align_bytes) {
  for (const auto* layout : {&kOverlapping, &kDisjoint}) {
    std::string s;
    for (std::size_t i = 0; i < layout->size(); ++i) {
      const Region& r = (*layout)[i];
      s += " v" + std::to_string(i) + "@" + std::to_string(r.offset) + "+" +
           std::to_string(r.bytes) + (r.offset % align_bytes == 0 ? ":aligned" : ":MISALIGNED");
    }
    NOTE("INFO %s layout vs MEM_BASE_ADDR_ALIGN %zu B:%s",
         layout == &kOverlapping ? "overlapping" : "disjoint", align_bytes, s.c_str());
  }
}

int run_info() {
  const clbuf::detail::DeviceEntry entry = pick_device();
  cl_device_id d = entry.device;
  std::size_t n = 0;
  std::string pname = entry.info.platform, pver;
  clGetPlatformInfo(entry.platform, CL_PLATFORM_VERSION, 0, nullptr, &n);
  pver.resize(n);
  clGetPlatformInfo(entry.platform, CL_PLATFORM_VERSION, n, pver.data(), nullptr);
  const cl_uint align_bits = device_value<cl_uint>(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN);
  NOTE("INFO platform: %s | %s", pname.c_str(), pver.c_str());
  NOTE("INFO device: %s | vendor %s | %s | driver %s", device_string(d, CL_DEVICE_NAME).c_str(),
       device_string(d, CL_DEVICE_VENDOR).c_str(), device_string(d, CL_DEVICE_VERSION).c_str(),
       device_string(d, CL_DRIVER_VERSION).c_str());
  NOTE(
      "INFO CL_DEVICE_MEM_BASE_ADDR_ALIGN: %u bits = %u bytes; host unified memory: %s; "
      "global %llu MiB; max alloc %llu MiB",
      align_bits, align_bits / 8,
      device_value<cl_bool>(d, CL_DEVICE_HOST_UNIFIED_MEMORY) ? "yes" : "no",
      static_cast<unsigned long long>(device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE) / MiB),
      static_cast<unsigned long long>(device_value<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE) /
                                      MiB));
  print_alignment(std::max<std::size_t>(1, align_bits / 8));
  {
    clbuf::Options options;
    if (g_discrete) options.memory = clbuf::MemoryModel::discrete;
    clbuf::BufferManager manager(g_selector, options);
    const clbuf::MemoryModel model = manager.memory_model();
    const Geometry g = clbuf_geometry();
    NOTE(
        "INFO clbuf picks: %s (%s); memory model %s; copy_threads %u; stager %u threads x %zu "
        "slots of %zu KiB; staging threshold %zu MiB; hardware_concurrency %u",
        manager.device().name.c_str(), manager.selection_reason().c_str(),
        model == clbuf::MemoryModel::discrete ? "discrete (staged)"
        : model == clbuf::MemoryModel::host   ? "host (memcpy, no staging)"
                                              : "unified (no staging)",
        manager.options().copy_threads, g.threads, g.slots / g.threads, g.slot_bytes / KiB,
        manager.options().staging_threshold_bytes / MiB, std::thread::hardware_concurrency());
  }
  return 0;
}

// Ledger and driver (CL_MEM_REFERENCE_COUNT) counts of the views and the parent, for RESULT and
// the step log. A view should be at 1/1 just before its one release.
void note_refs(const std::vector<cl_mem>& views, cl_mem parent) {
  std::string ledger_counts, driver_counts;
  for (cl_mem m : views) {
    ledger_counts +=
        (ledger_counts.empty() ? "" : ",") + (m ? std::to_string(ledger::count(m)) : "-");
    driver_counts +=
        (driver_counts.empty() ? "" : ",") + (m ? std::to_string(driver_mem_refcount(m)) : "-");
  }
  g_refs = "refs views " + ledger_counts + " (driver " + driver_counts + "), parent " +
           std::to_string(ledger::count(parent)) + " (driver " +
           std::to_string(driver_mem_refcount(parent)) + ")";
  STEP("%s", g_refs.c_str());
}

std::string region_name(std::size_t i, const Region& r) {
  return "view" + std::to_string(i) + "[off " + std::to_string(r.offset) + " size " +
         std::to_string(r.bytes) + "]";
}

int run_clbuf(const Variant& v) {
  clbuf::Options options;
  if (g_discrete) options.memory = clbuf::MemoryModel::discrete;
  if (v.staging_off) options.staging_threshold_bytes = clbuf::Options::never;
  const std::vector<Region>& layout = *v.layout;
  std::optional<clbuf::BufferManager> manager;
  manager.emplace(g_selector, options);
  STEP("manager on %s, model %d", manager->device().name.c_str(),
       static_cast<int>(manager->memory_model()));

  std::vector<Elem> shadow(kParentBytes / sizeof(Elem));
  fill_random(shadow.data(), shadow.size());
  std::optional<clbuf::DeviceBuffer<Elem>> parent;
  parent.emplace(manager->upload(shadow));
  ledger::name(parent->native()(), "parent");
  STEP("parent uploaded");

  std::vector<std::optional<clbuf::DeviceBuffer<Elem>>> views(layout.size());
  for (std::size_t i = 0; i < layout.size(); ++i) {
    views[i].emplace(
        manager->view(*parent, layout[i].offset / sizeof(Elem), layout[i].bytes / sizeof(Elem)));
    ledger::name(views[i]->native()(), "view" + std::to_string(i));
    STEP("made %s", region_name(i, layout[i]).c_str());
  }
  if (v.transfer_views) {
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const std::size_t first = layout[i].offset / sizeof(Elem),
                        count = layout[i].bytes / sizeof(Elem);
      const std::string label = region_name(i, layout[i]);
      std::vector<Elem> got = manager->download(*views[i]);
      compare(("download " + label).c_str(), got.data(), shadow.data() + first, count,
              layout[i].offset);
      std::vector<Elem> fresh(count);
      fill_random(fresh.data(), count);
      manager->upload(*views[i], fresh);
      std::copy(fresh.begin(), fresh.end(), shadow.begin() + static_cast<std::ptrdiff_t>(first));
      STEP("uploaded %s", label.c_str());
    }
    std::vector<Elem> all = manager->download(*parent);
    compare("download parent after the view uploads", all.data(), shadow.data(), shadow.size(), 0);
  }

  std::vector<cl_mem> handles;
  for (const auto& view : views) handles.push_back(view->native()());
  note_refs(handles, parent->native()());

  if (v.order == Order::parent_first) {
    STEP("destroy parent DeviceBuffer ...");
    parent.reset();
    STEP("destroyed parent DeviceBuffer");
  }
  for (std::size_t n = 0; n < views.size(); ++n) {
    const std::size_t i = v.order == Order::reverse ? views.size() - 1 - n : n;
    STEP("destroy %s ...", region_name(i, layout[i]).c_str());
    views[i].reset();
    STEP("destroyed view%zu", i);
  }
  if (parent) {
    STEP("destroy parent DeviceBuffer ...");
    parent.reset();
    STEP("destroyed parent DeviceBuffer");
  }
  STEP("destroy BufferManager ...");
  manager.reset();
  STEP("destroyed BufferManager");
  return 0;
}

int run_raw(const Variant& v) {
  const clbuf::detail::DeviceEntry entry = pick_device();
  cl_device_id device = entry.device;
  const std::vector<Region>& layout = *v.layout;
  const cl_context_properties props[] = {
      CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(entry.platform), 0};
  cl_int err = CL_SUCCESS;
  cl_context ctx = clCreateContext(props, 1, &device, nullptr, nullptr, &err);
  ck(err, "clCreateContext");
  cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
  ck(err, "clCreateCommandQueue");
  STEP("raw context on %s", entry.info.name.c_str());

  std::unique_ptr<RawStager> stager;
  std::size_t threshold = 0;  // staged transfers from this many bytes
  if (v.transfer == Transfer::staged) {
    stager = std::make_unique<RawStager>(ctx, q, Geometry{8, 16, 1 * MiB, false, true});
  } else if (v.transfer == Transfer::clbuf_like) {
    stager = std::make_unique<RawStager>(ctx, q, clbuf_geometry());
    threshold = 4 * MiB;
  }

  cl_mem parent = clCreateBuffer(ctx, CL_MEM_READ_WRITE, kParentBytes, nullptr, &err);
  ck(err, "clCreateBuffer(parent)");
  ledger::name(parent, "parent");
  if (v.clbuf_refs) {  // the parent DeviceBuffer's context_ retain
    ck(clRetainContext(ctx), "clRetainContext");
  }

  // Host memory: plain malloc, as a pageable application buffer.
  auto host_alloc = [](std::size_t bytes) {
    Elem* p = static_cast<Elem*>(std::malloc(bytes));
    if (p == nullptr) throw std::bad_alloc();
    return std::unique_ptr<Elem, decltype(&std::free)>(p, &std::free);
  };
  // Moves `bytes` between `host` and `mem` at `offset` the variant's way.
  auto move = [&](bool to_device, cl_mem mem, std::size_t offset, Elem* host, std::size_t bytes) {
    if (stager && bytes >= threshold) {
      stager->run(to_device, mem, offset, host, bytes);
    } else if (to_device) {
      ck(clEnqueueWriteBuffer(q, mem, CL_TRUE, offset, bytes, host, 0, nullptr, nullptr),
         "clEnqueueWriteBuffer");
    } else {
      ck(clEnqueueReadBuffer(q, mem, CL_TRUE, offset, bytes, host, 0, nullptr, nullptr),
         "clEnqueueReadBuffer");
    }
  };

  const std::size_t words = kParentBytes / sizeof(Elem);
  auto shadow = host_alloc(kParentBytes);
  fill_random(shadow.get(), words);
  if (v.transfer != Transfer::none) {
    move(true, parent, 0, shadow.get(), kParentBytes);
    STEP("parent uploaded");
  }

  std::vector<cl_mem> subs(layout.size(), nullptr);
  bool lease_retained = false;
  auto make_sub = [&](std::size_t i) {
    const cl_buffer_region area = {layout[i].offset, layout[i].bytes};
    subs[i] =
        clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &area, &err);
    ck(err, ("clCreateSubBuffer " + region_name(i, layout[i])).c_str());
    ledger::name(subs[i], "view" + std::to_string(i));
    if (v.clbuf_refs) {
      ck(clRetainMemObject(parent), "clRetainMemObject(root_)");  // result.root_
      ck(clRetainContext(ctx), "clRetainContext");                // result.context_
      if (!lease_retained) {  // parent.share_memory(): the Lease copies the Allocation
        ck(clRetainMemObject(parent), "clRetainMemObject(lease)");
        lease_retained = true;
      }
    }
    STEP("made %s", region_name(i, layout[i]).c_str());
  };
  auto release_sub = [&](std::size_t i) {
    STEP("release %s ...", region_name(i, layout[i]).c_str());
    if (v.clbuf_refs) {  // ~DeviceBuffer: members in reverse order: context_, root_, ..., memory_
      ck(clReleaseContext(ctx), "clReleaseContext");
      ck(clReleaseMemObject(parent), "clReleaseMemObject(root_)");
    }
    ck(clReleaseMemObject(subs[i]), "clReleaseMemObject(sub)");
    subs[i] = nullptr;
    STEP("released view%zu", i);
  };

  if (!v.one_at_a_time) {
    for (std::size_t i = 0; i < layout.size(); ++i) make_sub(i);
  }
  if (v.fault == 's') {
    STEP("self-test: SIGSEGV now (a write through a null pointer)");
    *static_cast<volatile int*>(nullptr) = 1;
  }
  if (v.fault == 'h') {
    STEP("self-test: hang now");
    for (;;) ::pause();
  }
  if (v.fault == 'e') {
    const cl_buffer_region bad = {1, 4096};  // misaligned on every device
    clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &bad, &err);
    ck(err, "self-test: clCreateSubBuffer at offset 1");
  }
  if (v.fault == 'm') shadow.get()[12345] ^= 1;
  if (v.transfer != Transfer::none) {
    for (std::size_t i = 0; i < layout.size(); ++i) {
      if (v.one_at_a_time) make_sub(i);
      const std::size_t first = layout[i].offset / sizeof(Elem),
                        count = layout[i].bytes / sizeof(Elem);
      const std::string label = region_name(i, layout[i]);
      cl_mem target = v.via_parent ? parent : subs[i];
      const std::size_t base = v.via_parent ? layout[i].offset : 0;
      auto got = host_alloc(layout[i].bytes);
      move(false, target, base, got.get(), layout[i].bytes);
      compare(("read " + label).c_str(), got.get(), shadow.get() + first, count, layout[i].offset);
      auto fresh = host_alloc(layout[i].bytes);
      fill_random(fresh.get(), count);
      move(true, target, base, fresh.get(), layout[i].bytes);
      std::memcpy(shadow.get() + first, fresh.get(), layout[i].bytes);
      STEP("wrote %s", label.c_str());
      if (v.one_at_a_time) release_sub(i);
    }
    auto all = host_alloc(kParentBytes);
    move(false, parent, 0, all.get(), kParentBytes);
    compare("read parent after the view writes", all.get(), shadow.get(), words, 0);
  }

  note_refs(subs, parent);
  if (v.fault == 'o') {  // self-test: a release too many, as a clbuf bug would make it
    STEP("self-test: release view0 once more ...");
    clRetainMemObject(parent);  // keep the parent alive whatever the driver does with it
    clReleaseMemObject(subs[0]);
  }

  for (std::size_t i = 0; i < subs.size(); ++i) {
    if (subs[i] != nullptr) release_sub(i);
  }
  STEP("release parent ...");
  if (v.clbuf_refs) {
    ck(clReleaseContext(ctx), "clReleaseContext");         // parent DeviceBuffer's context_
    ck(clReleaseMemObject(parent), "clReleaseMemObject");  // parent DeviceBuffer's memory_
  }
  if (!v.clbuf_refs) {
    ck(clReleaseMemObject(parent), "clReleaseMemObject(parent)");
  }
  STEP("released parent");
  STEP("destroy stager ...");
  stager.reset();
  STEP("destroyed stager");
  if (v.clbuf_refs) {  // the lease's copy went to clbuf's pool, released at manager cleanup
    ck(clReleaseMemObject(parent), "clReleaseMemObject(pooled parent)");
  }
  ck(clFinish(q), "clFinish");
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  STEP("released queue and context");
  return 0;
}

int child_main(const Variant* v) {
  int code = 0;
  try {
    if (v == nullptr) return run_info();
    code = v->kind == Kind::clbuf ? run_clbuf(*v) : run_raw(*v);
  } catch (const std::exception& e) {
    line("ERROR ", "%s", e.what());
    code |= 2;
  }
  if (g_mismatches != 0) code |= 1;
  if (ledger::bad_releases != 0) code |= 4;
  std::string names;
  const long left = ledger::leftover(names);
  if (left != 0 && !(code & 2)) {
    line("LEAK ", "cl_mem references left at the end: %s", names.c_str());
    code |= 8;
  }
  std::string verdict = code == 0 ? "exact data, ledger balanced" : "";
  if (code & 1) verdict += " DATA MISMATCH";
  if (code & 2) verdict += " ERROR";
  if (code & 4) verdict += " RELEASE TOO MANY";
  if (code & 8) verdict += " LEAK";
  line("RESULT ", "%s; %s; %d pinned buffers", verdict.c_str() + (verdict[0] == ' '),
       g_refs.empty() ? "refs not reached" : g_refs.c_str(), ledger::pinned_created.load());
  STEP("exit(%d) (process teardown, the driver's atexit included)", code);
  return code;
}

// ---- Parent: fork, capture, report -----------------------------------------------------------
struct Outcome {
  std::string cell;       // "ok", "SIGSEGV", "mismatch", ...
  std::string last_step;  // for a child that died
  double seconds = 0;
};

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGALRM:
      return "SIGALRM";
    case SIGKILL:
      return "SIGKILL";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "SIG" + std::to_string(sig);
  }
}

bool g_verbose = false;
unsigned g_alarm_s = 60;

Outcome run_child(const Variant* v, int rep, const std::string& tag) {
  std::fflush(stdout);
  std::fflush(stderr);
  int fds[2];
  if (::pipe(fds) != 0) {
    std::perror("pipe");
    std::exit(3);
  }
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(3);
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[1]);
    ::alarm(g_alarm_s);
    g_seed = 0x1234567ull * static_cast<std::uint64_t>(rep + 1) +
             (v ? static_cast<std::uint64_t>(v->id[0]) : 0);
    const int code = child_main(v);
    std::fflush(stdout);
    std::fflush(stderr);
    std::exit(code);  // normal teardown: a crash in the driver's exit handlers shows too
  }
  ::close(fds[1]);
  std::string out;
  int status = 0;
  bool reaped = false, eof = false, killed = false;
  while (!eof) {
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, 200);
    if (r > 0) {
      char buf[8192];
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) {
        eof = true;
      } else if (out.size() < (1u << 20)) {
        out.append(buf, static_cast<std::size_t>(n));
      }
    }
    if (!reaped && ::waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
    }
    if (reaped && r == 0) break;  // dead and nothing more to read (a grandchild may hold the pipe)
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!reaped && !killed && elapsed > 90) {  // alarm(60) failed to end it
      ::kill(pid, SIGKILL);
      killed = true;
    }
  }
  ::close(fds[0]);
  if (!reaped) ::waitpid(pid, &status, 0);
  Outcome o;
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::vector<std::string> lines;
  for (std::size_t pos = 0; pos < out.size();) {
    std::size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    lines.push_back(out.substr(pos, end - pos));
    pos = end + 1;
  }
  std::string result;
  std::vector<std::string> steps, shown;
  for (const std::string& l : lines) {
    if (l.rfind("step ", 0) == 0) {
      steps.push_back(l.substr(5));
    } else if (l.rfind("RESULT ", 0) == 0) {
      result = l.substr(7);
    } else if (!l.empty()) {
      shown.push_back(l);
    }
  }
  const bool died = WIFSIGNALED(status);
  std::string head;
  if (died) {
    o.cell = signal_name(WTERMSIG(status));
    head = o.cell + "(" + std::to_string(WTERMSIG(status)) + ")";
    o.last_step = steps.empty() ? "(none)" : steps.back();
    if (!result.empty()) o.last_step += " [after RESULT: " + result + "]";
  } else {
    const int code = WEXITSTATUS(status);
    head = "exit " + std::to_string(code);
    if (code == 0) {
      o.cell = "ok";
    } else {
      std::string c;
      if (code & 1) c += "mism,";
      if (code & 2) c += "err,";
      if (code & 4) c += "overrel,";
      if (code & 8) c += "leak,";
      if (code & ~15) c += "exit" + std::to_string(code) + ",";
      c.pop_back();
      o.cell = c;
      for (const std::string& l : shown) {
        if (o.last_step.empty() && (l.rfind("ERROR ", 0) == 0 || l.rfind("OVERRELEASE ", 0) == 0 ||
                                    l.rfind("MISMATCH ", 0) == 0)) {
          o.last_step = l;
        }
      }
    }
  }
  if (v != nullptr) {
    std::printf("%-9s %-5s %-12s %6.2fs  %s\n", tag.c_str(), v->id, head.c_str(), o.seconds,
                died ? ("died after: " + o.last_step).c_str() : result.c_str());
  }
  const std::size_t max_shown = g_verbose ? lines.size() : 24;
  std::size_t printed = 0;
  if (g_verbose) {
    for (const std::string& l : lines) {
      if (!l.empty()) std::printf("    | %s\n", l.c_str());
    }
  } else {
    for (const std::string& l : shown) {
      if (printed++ >= max_shown) break;
      std::printf("    %s\n", l.rfind("NOTE INFO ", 0) == 0 ? l.substr(10).c_str() : l.c_str());
    }
    if (died || (!died && WEXITSTATUS(status) & 2)) {
      const std::size_t from = steps.size() > 8 ? steps.size() - 8 : 0;
      for (std::size_t i = from; i < steps.size(); ++i) std::printf("    | %s\n", steps[i].c_str());
    }
  }
  if (v == nullptr && died) std::printf("info child died: %s\n", head.c_str());
  std::fflush(stdout);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  double budget_s = 150;  // no new child starts after this many seconds
  std::vector<std::string> wanted;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      g_selector = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--alarm" && i + 1 < argc) {
      g_alarm_s = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    } else if (a == "--budget-s" && i + 1 < argc) {
      budget_s = std::atof(argv[++i]);
    } else if (a == "--discrete") {
      g_discrete = true;
    } else if (a == "--verbose" || a == "-v") {
      g_verbose = true;
    } else if (a == "--list") {
      for (const Variant& v : variants()) std::printf("%-5s  %s\n", v.id, v.what);
      return 0;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: %s [--device SEL] [--reps N] [--discrete] [--verbose] [--alarm S] [--budget-s S] "
          "[--list] [VARIANT...]\n",
          argv[0]);
      return 0;
    } else {
      wanted.push_back(a);
    }
  }
  std::vector<const Variant*> chosen;
  for (const Variant& v : variants()) {
    bool take = wanted.empty();
    if (v.fault != 0) take = false;  // self-tests only by name
    for (const std::string& w : wanted) {
      take =
          take || w == v.id || (w.size() == 1 && v.id[1] == '\0' && std::toupper(w[0]) == v.id[0]);
    }
    if (take) chosen.push_back(&v);
  }
  if (chosen.empty()) {
    std::fprintf(stderr, "no such variant; --list shows them\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  std::printf("views_repro: parent 32 MiB (uint32 words); views (offset+bytes):");
  for (const Region& r : kOverlapping) std::printf(" %zu+%zu", r.offset, r.bytes);
  std::printf("; disjoint:");
  for (const Region& r : kDisjoint) std::printf(" %zu+%zu", r.offset, r.bytes);
  const char* env = std::getenv("CLBUF_DEVICE");
  std::printf("\nselector: %s; clbuf variants: %s; reps %d; pid %d\n",
              !g_selector.empty() ? g_selector.c_str()
              : env && *env       ? env
                                  : "(clbuf default)",
              g_discrete ? "--discrete (MemoryModel::discrete forced)" : "MemoryModel::automatic",
              reps, static_cast<int>(::getpid()));
  run_child(nullptr, 0, "info");

  std::map<std::string, std::vector<Outcome>> outcomes;
  const int total = reps * static_cast<int>(chosen.size());
  int n = 0;
  for (int rep = 0; rep < reps; ++rep) {
    for (const Variant* v : chosen) {
      char tag[32];
      std::snprintf(tag, sizeof tag, "[%d/%d]", ++n, total);
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (elapsed > budget_s) {
        std::printf("%-9s %-5s skipped: past --budget-s %.0f\n", tag, v->id, budget_s);
        outcomes[v->id].push_back(Outcome{"skipped", "", 0});
        continue;
      }
      outcomes[v->id].push_back(run_child(v, rep, tag));
    }
  }

  std::printf("\n==== summary (%d runs, %.1f s) ====\n", total,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::printf("%-5s", "");
  for (int r = 0; r < reps; ++r) std::printf(" %-9s", ("rep" + std::to_string(r + 1)).c_str());
  std::printf(" variant\n");
  for (const Variant* v : chosen) {
    std::printf("%-5s", v->id);
    std::string first_death;
    for (const Outcome& o : outcomes[v->id]) {
      std::printf(" %-9s", o.cell.c_str());
      if (first_death.empty() && !o.last_step.empty()) first_death = o.last_step;
    }
    std::printf(" %s\n", v->what);
    if (!first_death.empty()) std::printf("%-5s  first failure: %s\n", "", first_death.c_str());
  }
  int bad = 0;
  for (const auto& [id, list] : outcomes) {
    for (const Outcome& o : list) bad += o.cell != "ok" && o.cell != "skipped";
  }
  std::printf("%d of %d runs not ok\n", bad, total);
  return bad == 0 ? 0 : 1;
}
