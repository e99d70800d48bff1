// SPDX-License-Identifier: MIT
// Fault injection: the Nth call of every OpenCL entry point clbuf uses fails, for every N the
// workload reaches, on every MemoryModel. Each injected failure must surface as a clbuf::Error
// (never cl::Error or another exception, never an abort) or be absorbed with correct data (a
// failure inside a destructor, or an allocation that clbuf retries); must leak no buffer; and
// must leave the manager usable (or, when the failure hit cleanup(), a new manager). Run under
// ASan+LSan by scripts/sanitize.sh.
#include "fault_hook.hpp"  // first: defines CLBUF_CL before clbuf is included

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../support/device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_fault::site_count;
using clbuf_fault::site_name;
using clbuf_fault::state;

/// Wrong data with no exception: the one outcome that is never acceptable.
struct Corruption : std::logic_error {
  using std::logic_error::logic_error;
};

/// Bug 1 (reported; see FaultCodes.FailedPlatformQueryKeepsItsCode): a failed clGetPlatformIDs
/// or clGetDeviceIDs makes list_devices() return an empty list instead of throwing.
struct SilentEmptyDeviceList : std::logic_error {
  using std::logic_error::logic_error;
};

/// Waits until every buffer the driver still holds for a finished command is released.
long settled_live_buffers() {
  for (int i = 0; i < 200 && state().live_buffers.load() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return state().live_buffers.load();
}

template <class T>
void verify(const std::vector<T>& expected, const T* actual, std::size_t count, const char* what) {
  if (std::memcmp(expected.data(), actual, count * sizeof(T)) != 0) {
    throw Corruption(std::string("data differ after ") + what);
  }
}
template <class T>
void verify(const std::vector<T>& expected, const std::vector<T>& actual, const char* what) {
  if (expected.size() != actual.size()) throw Corruption(std::string("size differs after ") + what);
  verify(expected, actual.data(), actual.size(), what);
}

constexpr std::size_t small = 100;    // 400 bytes: direct paths
constexpr std::size_t large = 10000;  // 40,000 bytes: ten staged chunks through three slots

/// Every path of the manager once: construction, allocate, upload (fresh, into, pinned),
/// download (vector, caller memory, pinned), copy, copy_bytes, the async variants, ready(),
/// finish, pool reuse, cleanup. `slot` holds the manager so the caller can test it afterwards.
void workload(MemoryModel model, std::unique_ptr<clbuf::BufferManager>& slot, std::uint32_t seed,
              bool adopt) {
  std::mt19937 rng(seed);
  if (adopt) {
    // The adopting constructor (clGetCommandQueueInfo, clGetDeviceInfo, enumeration).
    cl::Context context(CL_DEVICE_TYPE_ALL);
    cl::CommandQueue queue(context, context.getInfo<CL_CONTEXT_DEVICES>().at(0));
    slot = std::make_unique<clbuf::BufferManager>(context, queue, clbuf_test::fault_options(model));
  } else {
    slot = std::make_unique<clbuf::BufferManager>("", clbuf_test::fault_options(model));
  }
  clbuf::BufferManager& m = *slot;
  if (clbuf::list_devices().empty()) throw SilentEmptyDeviceList("list_devices() is empty");

  const auto a = clbuf_test::random_bytes<std::uint32_t>(rng, small);
  const auto big = clbuf_test::random_bytes<std::uint32_t>(rng, large);
  const auto big2 = clbuf_test::random_bytes<std::uint32_t>(rng, large);

  auto b0 = m.allocate<std::uint32_t>(small);
  m.upload(b0, a);  // into an existing buffer
  verify(a, m.download(b0), "upload into / download");

  auto b1 = m.upload(big);  // fresh, staged on a discrete model
  std::vector<std::uint32_t> out(large);
  m.download(b1, out.data(), out.size());  // caller memory, staged
  verify(big, out, "large upload / download into caller memory");
  m.upload(b1, big2.data(), big2.size());  // into existing, staged
  verify(big2, m.download(b1), "large upload into");

  auto pinned = m.allocate_pinned<std::uint32_t>(small);
  std::copy(a.begin(), a.end(), pinned.begin());
  auto b2 = m.upload(pinned);  // fresh from pinned memory
  auto pinned_out = m.allocate_pinned<std::uint32_t>(small);
  m.download(b2, pinned_out);  // into pinned memory
  verify(a, pinned_out.data(), small, "pinned round trip");
  m.upload(b0, pinned);  // into existing from pinned memory

  auto b3 = m.allocate<std::uint32_t>(large);
  m.copy(b1, b3);
  verify(big2, m.download(b3), "copy");
  m.copy_bytes(b1, b0, 64, 128, 16);
  std::vector<std::uint32_t> expected = a;
  std::memcpy(reinterpret_cast<char*>(expected.data()) + 16,
              reinterpret_cast<const char*>(big2.data()) + 128, 64);
  verify(expected, m.download(b0), "copy_bytes");

  auto f1 = m.upload_async(std::vector<std::uint32_t>(a));
  (void)f1.ready();
  auto b4 = f1.get();
  auto f2 = m.download_async(b4);
  (void)f2.ready();
  verify(a, f2.get(), "upload_async / download_async");
  auto f3 = m.upload_async(big.data(), big.size());
  auto b5 = f3.get();
  std::vector<std::uint32_t> out2(large);
  auto f4 = m.download_async(b5, out2.data(), out2.size());
  f4.wait();
  verify(big, out2, "upload_async from caller memory / download_async into caller memory");
  auto f5 = m.copy_bytes_async(b5, b3, large * sizeof(std::uint32_t));
  f5.get();
  verify(big, m.download(b3), "copy_bytes_async");
  auto f6 = m.fill_async(b3, 0x01020304u);
  auto f7 = m.download_async(b3, f6.wait_list());  // staged, after an event
  std::vector<std::uint32_t> filled(large, 0x01020304u);
  verify(filled, f7.get(), "fill_async / download_async after its event");
  clbuf::Region box;
  box.size = {10, 3, 1};
  box.src_extents = {20, 5, 1};
  box.dst_extents = {20, 5, 1};
  auto f8 = m.upload_rect_async(b0, a, box);
  auto f9 = m.copy_rect_async(b0, b4, box);
  std::vector<std::uint32_t> rect(small, 0);
  auto f10 = m.download_rect_async(b4, rect, box);
  f8.get();
  f9.get();
  f10.get();
  for (std::size_t y = 0; y < 3; ++y) {
    verify(std::vector<std::uint32_t>(a.begin() + static_cast<std::ptrdiff_t>(y * 20),
                                      a.begin() + static_cast<std::ptrdiff_t>(y * 20 + 10)),
           rect.data() + y * 20, 10, "upload_rect_async / copy_rect_async / download_rect_async");
  }
  clbuf::BufferManager second("", clbuf_test::fault_options(model));
  auto b7 = second.allocate<std::uint32_t>(large);
  auto f11 = second.copy_from_async(m, b5, b7);  // across contexts: the background thread
  f11.get();
  verify(big, second.download(b7), "copy_from_async");
  m.finish();

  {  // buffers back to the pool, then served again from it
    auto reuse = std::move(b1);
  }
  auto b6 = m.upload(big);
  verify(big, m.download(b6), "pooled upload");
  m.cleanup();
}

/// A round trip on `manager`, with no fault armed.
void round_trip(clbuf::BufferManager& manager, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (std::size_t n : {small, large}) {
    const auto data = clbuf_test::random_bytes<std::uint32_t>(rng, n);
    auto buffer = manager.upload(data);
    verify(data, manager.download(buffer), "the recovery round trip");
  }
}

/// CLBUF_FAULT_SHARD=i/n: a sweep runs only its trials i, i + n, i + 2n, ... (numbered in sweep
/// order), so that n processes given one CLBUF_TEST_SEED share a sweep between them (on NVIDIA's
/// driver one process takes more than a device call's ten minutes for the staged model's).
/// Unset: every trial.
struct Shard {
  long index = 0;
  long count = 1;
  bool mine(long trial) const { return trial % count == index; }
  std::string label() const {
    return count == 1 ? "" : " (shard " + std::to_string(index) + "/" + std::to_string(count) + ")";
  }
};

Shard fault_shard() {
  Shard shard;
  if (const char* value = std::getenv("CLBUF_FAULT_SHARD")) {
    long index = 0;
    long count = 0;
    char end = 0;
    if (std::sscanf(value, "%ld/%ld%c", &index, &count, &end) == 2 && count > 0 && index >= 0 &&
        index < count) {
      shard.index = index;
      shard.count = count;
    } else {
      ADD_FAILURE() << "CLBUF_FAULT_SHARD must be i/n with 0 <= i < n, not \"" << value << "\"";
    }
  }
  return shard;
}

struct Tally {
  long trials = 0;
  long raised = 0;    ///< failures that surfaced as clbuf::Error
  long absorbed = 0;  ///< failures clbuf absorbed with correct data (destructors, retries)
  long not_reached = 0;
  std::vector<std::string> problems;
  std::ostringstream per_site;
};

/// Arms (site, n), runs the workload, and checks the outcome; adds to `tally`.
/// `on_device`: the call is accepted and its command fails on the device, which clbuf must
/// report (as an Error of that call or of a later one), never absorb.
void trial(MemoryModel model, bool adopt, int site, long n, bool sticky, std::uint32_t seed,
           Tally& tally, bool on_device = false) {
  std::unique_ptr<clbuf::BufferManager> manager;
  std::string outcome;
  state().arm(site, n, sticky, on_device);
  try {
    workload(model, manager, seed, adopt);
    outcome = "completed";
  } catch (const clbuf::Error& error) {
    outcome = "error";
    if (std::string(error.what()).find(':') == std::string::npos) {
      tally.problems.push_back(std::string("malformed message: ") + error.what());
    }
  } catch (const SilentEmptyDeviceList& error) {
    outcome = std::string("failed query read as no device: ") + error.what();
  } catch (const Corruption& error) {
    outcome = std::string("CORRUPTION: ") + error.what();
  } catch (const cl::Error& error) {
    outcome = std::string("cl::Error escaped: ") + error.what();
  } catch (const std::exception& error) {
    outcome = std::string("non-clbuf exception: ") + error.what();
  } catch (...) {
    outcome = "unknown exception";
  }
  const long fired = [] {
    std::lock_guard<std::mutex> lock(state().mutex);
    return state().fired;
  }();
  state().disarm();

  const std::string where =
      std::string(clbuf::to_string(model)) + (adopt ? "/adopted " : " ") + site_name(site) + " #" +
      std::to_string(n) + (sticky ? " onwards" : "") + (on_device ? " failing on the device" : "");
  ++tally.trials;
  if (fired == 0) {
    ++tally.not_reached;
    if (outcome != "completed") tally.problems.push_back(where + ": " + outcome + " with no fault");
  } else if (outcome == "error") {
    ++tally.raised;
  } else if (outcome == "completed" && on_device) {
    tally.problems.push_back(where + ": the failure was never reported");
  } else if (outcome == "completed") {
    ++tally.absorbed;
  } else {
    tally.problems.push_back(where + ": " + outcome);
  }

  // The manager is still usable; after a failed cleanup() (or construction), a new one is.
  try {
    bool fresh = manager == nullptr;
    if (!fresh) {
      try {
        round_trip(*manager, seed + 1);
      } catch (const clbuf::Error& failure) {
        if (failure.code() != CL_SUCCESS) throw;  // only "cleaned up" allows a new manager
        fresh = true;
      }
    }
    if (fresh) {
      clbuf::BufferManager again("", clbuf_test::fault_options(model));
      round_trip(again, seed + 2);
    }
  } catch (const std::exception& failure) {
    tally.problems.push_back(where + ": not usable afterwards: " + failure.what());
  }
  manager.reset();

  // Nothing leaked: every buffer created during the trial has been destroyed. A command the
  // driver still holds releases its buffer when it completes, so allow it a moment.
  const long leaked = settled_live_buffers();
  if (leaked != 0) {
    tally.problems.push_back(where + ": " + std::to_string(leaked) + " buffers leaked");
    state().live_buffers -= leaked;
  }
}

class FaultInjection : public ::testing::TestWithParam<MemoryModel> {
 protected:
  void SetUp() override {
    try {
      clbuf::BufferManager probe;
      if (GetParam() == MemoryModel::host && probe.device().type != clbuf::DeviceType::cpu) {
        GTEST_SKIP() << "the host path needs a CPU device";
      }
    } catch (const clbuf::Error& error) {
      if (clbuf_test::device_required()) FAIL() << "no device: " << error.what();
      GTEST_SKIP() << "no OpenCL device: " << error.what();
    }
  }

  void sweep(bool adopt) {
    const MemoryModel model = GetParam();
    const std::uint32_t seed = clbuf_test::fresh_seed();
    // A clean run counts the calls of each entry point.
    std::unique_ptr<clbuf::BufferManager> manager;
    state().arm(-1, 0, false);
    workload(model, manager, seed, adopt);
    std::array<long, site_count> calls{};
    {
      std::lock_guard<std::mutex> lock(state().mutex);
      calls = state().calls;
    }
    state().disarm();
    manager.reset();

    ASSERT_EQ(settled_live_buffers(), 0) << "buffers alive before the sweep";
    Tally tally;
    long sites = 0;
    const Shard shard = fault_shard();
    long numbered = 0;
    for (int site = 0; site < site_count; ++site) {
      if (site == clbuf_fault::ReleaseMemObject) continue;  // counted, never failed
      for (long n = 1; n <= calls[static_cast<std::size_t>(site)]; ++n) {
        ++sites;
        if (shard.mine(numbered++)) trial(model, adopt, site, n, false, seed, tally);
      }
      // And the entry point failing from its first call on, for good.
      // An unmap that never succeeds cannot free the mapping's buffer (the destructors retry
      // once): only single unmap failures are swept.
      if (calls[static_cast<std::size_t>(site)] > 0 && site != clbuf_fault::EnqueueUnmapMemObject &&
          shard.mine(numbered++)) {
        trial(model, adopt, site, 1, true, seed, tally);
      }
    }
    std::cout << "[ fault    ] " << clbuf::to_string(model) << (adopt ? " (adopted)" : "")
              << shard.label() << ": fault sites swept " << sites
              << " (+ sticky per entry point), trials " << tally.trials << ": raised clbuf::Error "
              << tally.raised << ", absorbed with correct data " << tally.absorbed
              << ", not reached " << tally.not_reached << ", problems " << tally.problems.size()
              << "; seed " << seed << "\n";
    for (int site = 0; site < site_count; ++site) {
      if (calls[static_cast<std::size_t>(site)] > 0) {
        std::cout << "               " << site_name(site) << ": "
                  << calls[static_cast<std::size_t>(site)] << " calls\n";
      }
    }
    EXPECT_GT(sites, 0);
    for (const std::string& problem : tally.problems) ADD_FAILURE() << problem;
  }
};

TEST_P(FaultInjection, EveryCallSiteFailsCleanly) { sweep(false); }

TEST_P(FaultInjection, EveryCallSiteOfAnAdoptedManagerFailsCleanly) { sweep(true); }

// Every write of the workload accepted by the driver and then failing on the device (what only a
// buffered upload, which returns before its write runs, can meet late) is reported by clbuf:
// never lost silently.
TEST_P(FaultInjection, EveryWriteFailingOnTheDeviceIsReported) {
  const MemoryModel model = GetParam();
  const std::uint32_t seed = clbuf_test::fresh_seed();
  std::unique_ptr<clbuf::BufferManager> manager;
  state().arm(-1, 0, false);
  workload(model, manager, seed, false);
  const long writes = [] {
    std::lock_guard<std::mutex> lock(state().mutex);
    return state().calls[clbuf_fault::EnqueueWriteBuffer];
  }();
  state().disarm();
  manager.reset();
  Tally tally;
  const Shard shard = fault_shard();
  for (long n = 1; n <= writes; ++n) {
    if (shard.mine(n - 1)) {
      trial(model, false, clbuf_fault::EnqueueWriteBuffer, n, false, seed, tally, true);
    }
  }
  std::cout << "[ fault    ] " << clbuf::to_string(model) << shard.label() << ": " << writes
            << " writes failing on the device: raised clbuf::Error " << tally.raised
            << ", problems " << tally.problems.size() << "; seed " << seed << "\n";
  if (model != MemoryModel::host) {
    EXPECT_GT(writes, 0);
  }
  for (const std::string& problem : tally.problems) ADD_FAILURE() << problem;
}

CLBUF_INSTANTIATE_MODELS(FaultInjection);

// -----------------------------------------------------------------------------------------
// A failed call changes no data outside the range it was asked to write, and never its source;
// a call of one OpenCL command changes nothing at all. Every call of every entry point each
// operation reaches fails once; the destination and source are then read back unarmed.

/// One operation on `dst` (device buffer `device` or host array `host`) from `src`: writes the
/// elements [first, first + count) of its destination with new data.
struct DataOp {
  const char* name;
  bool into_host;    ///< the destination is `host`, else `device`
  bool one_command;  ///< one OpenCL command: all or nothing
  std::size_t first, count;
  std::function<void(clbuf::BufferManager&, clbuf::DeviceBuffer<std::uint32_t>& device,
                     std::vector<std::uint32_t>& host,
                     const clbuf::DeviceBuffer<std::uint32_t>& src,
                     const std::vector<std::uint32_t>& host_src)>
      run;
};

class FaultData : public FaultInjection {};  // the same device probe in SetUp()

TEST_P(FaultData, FailedCallsChangeNothingOutsideTheirDestination) {
  const bool discrete = GetParam() == MemoryModel::discrete;
  constexpr std::size_t total = 3 * large;
  std::mt19937 rng(clbuf_test::fresh_seed());
  const auto old_data = clbuf_test::random_bytes<std::uint32_t>(rng, total);
  const auto new_data = clbuf_test::random_bytes<std::uint32_t>(rng, total);
  clbuf::BufferManager m("", clbuf_test::fault_options(GetParam()));
  const auto source = m.upload(new_data);
  using Buffer = clbuf::DeviceBuffer<std::uint32_t>;
  using Host = std::vector<std::uint32_t>;
  const std::size_t at = large / 2;
  const std::vector<DataOp> ops = {
      {"upload (small)", false, true, at, small,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer&, const Host& hs) {
         mm.upload(d, hs.data() + at, small, at);
       }},
      {"upload (staged)", false, !discrete, at, large,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer&, const Host& hs) {
         mm.upload(d, hs.data() + at, large, at);
       }},
      {"download (small)", true, true, at, small,
       [&](clbuf::BufferManager& mm, Buffer&, Host& h, const Buffer& s, const Host&) {
         mm.download(s, h.data() + at, small, at);
       }},
      {"download (staged)", true, !discrete, at, large,
       [&](clbuf::BufferManager& mm, Buffer&, Host& h, const Buffer& s, const Host&) {
         mm.download(s, h.data() + at, large, at);
       }},
      {"download_async", true, !discrete, at, large,
       [&](clbuf::BufferManager& mm, Buffer&, Host& h, const Buffer& s, const Host&) {
         mm.download_async(s, h.data() + at, large, at).get();
       }},
      {"copy_bytes", false, true, at, large,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer& s, const Host&) {
         mm.copy_bytes(s, d, large * 4, at * 4, at * 4);
       }},
      {"fill", false, false, at, large,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer&, const Host&) {
         mm.fill(d, new_data[0], large, at);
       }},
      {"fill_async", false, false, at, large,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer&, const Host&) {
         mm.fill_async(d, new_data[0], large, at).get();
       }},
      {"copy_bytes_async", false, true, at, large,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer& s, const Host&) {
         mm.copy_bytes_async(s, d, large * 4, at * 4, at * 4).get();
       }},
      {"upload_async (small)", false, true, at, small,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer&, const Host& hs) {
         mm.upload_async(d, hs.data() + at, small, at).get();
       }},
      {"upload_async (staged)", false, !discrete, at, large,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer&, const Host& hs) {
         mm.upload_async(d, hs.data() + at, large, at).get();
       }},
      {"copy", false, true, 0, total,
       [&](clbuf::BufferManager& mm, Buffer& d, Host&, const Buffer& s, const Host&) {
         mm.copy(s, d);
       }},
  };
  long trials = 0;
  for (const DataOp& op : ops) {
    // The expected outcome of a completed call.
    Host done = old_data;
    for (std::size_t i = op.first; i < op.first + op.count; ++i) {
      done[i] = std::string(op.name).rfind("fill", 0) == 0 ? new_data[0] : new_data[i];
    }
    // A clean run counts the calls of each entry point.
    auto device = m.upload(old_data);
    Host host = old_data;
    state().arm(-1, 0, false);
    op.run(m, device, host, source, new_data);
    std::array<long, site_count> calls{};
    {
      std::lock_guard<std::mutex> lock(state().mutex);
      calls = state().calls;
    }
    state().disarm();
    for (int site = 0; site < site_count; ++site) {
      if (site == clbuf_fault::ReleaseMemObject) continue;
      for (long n = 1; n <= calls[static_cast<std::size_t>(site)]; ++n) {
        ++trials;
        device = m.upload(old_data);
        host = old_data;
        m.finish();
        state().arm(site, n, false);
        bool failed = false;
        try {
          op.run(m, device, host, source, new_data);
        } catch (const clbuf::Error&) {
          failed = true;
        }
        state().disarm();
        const Host after = op.into_host ? host : m.download(device);
        const std::string where = std::string(op.name) + " with " + site_name(site) + " #" +
                                  std::to_string(n) + " failing";
        ASSERT_TRUE(clbuf_test::same_bytes(new_data, m.download(source))) << where << ": source";
        for (std::size_t i = 0; i < total; ++i) {
          const bool inside = i >= op.first && i < op.first + op.count;
          if (!inside) {
            ASSERT_EQ(after[i], old_data[i]) << where << ": element " << i;
          }
        }
        if (!failed) {
          ASSERT_TRUE(clbuf_test::same_bytes(done, after)) << where << ": completed wrongly";
        } else if (op.one_command) {
          const bool unchanged = std::memcmp(after.data(), old_data.data(), total * 4) == 0;
          const bool whole = std::memcmp(after.data(), done.data(), total * 4) == 0;
          ASSERT_TRUE(unchanged || whole) << where << ": partly written";
        }
      }
    }
  }
  std::cout << "[ fault    ] " << clbuf::to_string(GetParam()) << ": " << trials
            << " failed calls, none changed data outside its destination\n";
  EXPECT_GT(trials, 0);
}

CLBUF_INSTANTIATE_MODELS(FaultData);

// -----------------------------------------------------------------------------------------
// Targeted checks: the failure surfaces where it should and carries the injected code.

class FaultCodes : public clbuf_test::DeviceTest {
 protected:
  /// Every memory model this device runs (the host model needs a CPU device).
  std::vector<MemoryModel> models_here() {
    std::vector<MemoryModel> models = {MemoryModel::discrete, MemoryModel::unified};
    if (manager().device().type == clbuf::DeviceType::cpu) models.push_back(MemoryModel::host);
    return models;
  }
};

TEST_F(FaultCodes, FailedAsyncDownloadSurfacesAtWaitAndGet) {
  const auto data = random<std::uint32_t>(1000);
  auto buffer = manager().upload(data);
  auto future = manager().download_async(buffer);
  state().arm(clbuf_fault::WaitForEvents, 1, false);
  EXPECT_CLBUF_ERROR(future.wait(), CL_OUT_OF_RESOURCES,
                     "download_async: ", "CL_OUT_OF_RESOURCES (-5)");
  state().disarm();
  EXPECT_TRUE(clbuf_test::same_bytes(data, manager().download(buffer)));
}

// A command that fails on the device fails clWaitForEvents (CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_
// WAIT_LIST); get() then reports the command's own code, its execution status.
TEST_F(FaultCodes, FailedEventStatusSurfacesAtGet) {
  for (const MemoryModel model : models_here()) {
    SCOPED_TRACE(clbuf::to_string(model));
    clbuf::BufferManager m("", clbuf_test::fault_options(model));
    const auto data = random<std::uint32_t>(1000);
    auto buffer = m.upload(data);
    m.finish();
    const auto other = random<std::uint32_t>(1000);
    state().arm(clbuf_fault::EnqueueWriteBuffer, 1, false, /*failing_on_device=*/true);
    auto future = m.upload_async(buffer, other);
    EXPECT_CLBUF_ERROR(future.get(), CL_OUT_OF_RESOURCES,
                       "upload_async: ", "the transfer failed on the device");
    state().disarm();
  }
}

// A box that clEnqueueCopyBufferRect cannot express (a view whose offset splits a row) is copied
// row by row. A row other than the last that fails on the device fails copy_rect and the
// Future of copy_rect_async: each row waits for the one before, and the driver (here the hook)
// fails a command behind a failed one. Before, only the last row's event was looked at, and
// the copy reported success with a row never copied (a HaloExchange pack then went out as it was).
TEST_F(FaultCodes, ARectCopyRowByRowReportsAFailedEarlierRow) {
  for (const MemoryModel model : models_here()) {
    SCOPED_TRACE(clbuf::to_string(model));
    clbuf::BufferManager m("", clbuf_test::fault_options(model));
    const auto data = random<std::uint32_t>(49);
    auto root = m.upload(data);
    const auto field = m.view(root, 1, 48);  // rows of 8 from element 1: the box wraps
    auto target = m.allocate<std::uint32_t>(24);
    clbuf::Region box;
    box.size = {8, 3, 1};
    box.src_extents = {8, 6, 1};
    box.dst_extents = {8, 3, 1};
    for (const bool async : {false, true}) {
      SCOPED_TRACE(async ? "copy_rect_async" : "copy_rect");
      m.finish();
      state().arm(clbuf_fault::EnqueueCopyBuffer, 1, false, /*failing_on_device=*/true);
      try {
        if (async) {
          m.copy_rect_async(field, target, box).wait();
        } else {
          m.copy_rect(field, target, box);
        }
        ADD_FAILURE() << "the failed first row was not reported";
      } catch (const clbuf::Error& e) {
        EXPECT_NE(std::string(e.what()).find(async ? "copy_rect_async" : "copy_rect"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(state().fired, 1);
      EXPECT_EQ(state().calls[clbuf_fault::EnqueueCopyBuffer], 3) << "one command a row";
      state().disarm();
    }
    m.copy_rect(field, target, box);  // exact once nothing fails
    const std::vector<std::uint32_t> expected(data.begin() + 1, data.begin() + 25);
    EXPECT_TRUE(clbuf_test::same_bytes(expected, m.download(target)));
  }
}

// A transfer that succeeded is not asked its status after the wait (a clGetEventInfo costs as
// much again as a small transfer's wait on NVIDIA's driver): clWaitForEvents would have failed.
TEST_F(FaultCodes, FutureThatSucceededAsksNoStatus) {
  for (const MemoryModel model : models_here()) {
    SCOPED_TRACE(clbuf::to_string(model));
    clbuf::BufferManager m("", clbuf_test::fault_options(model));
    const auto data = random<std::uint32_t>(small);
    auto buffer = m.allocate<std::uint32_t>(small);
    m.finish();
    std::vector<std::uint32_t> out(small);
    state().arm(-1, 0, false);  // counting only
    m.upload_async(buffer, data).get();
    m.download_async(buffer, out.data(), out.size()).get();
    const long status_calls = [] {
      std::lock_guard<std::mutex> lock(state().mutex);
      return state().calls[clbuf_fault::GetEventInfo];
    }();
    state().disarm();
    EXPECT_EQ(status_calls, 0);
    EXPECT_TRUE(clbuf_test::same_bytes(data, out));
  }
}

TEST_F(FaultCodes, FailedStagedChunkIsAnErrorOfTheTransfer) {
  clbuf::BufferManager staged("", clbuf_test::fault_options(MemoryModel::discrete));
  const auto data = random<std::uint32_t>(large);
  auto buffer = staged.upload(data);
  state().arm(clbuf_fault::GetEventInfo, 2, false);
  EXPECT_CLBUF_ERROR(staged.download(buffer), CL_OUT_OF_RESOURCES, "download: ");
  state().disarm();
  EXPECT_TRUE(clbuf_test::same_bytes(data, staged.download(buffer)));
}

// A buffered upload returns before its write has run; a write that then fails on the device is
// reported once, by the manager's next synchronising call, with its code and the upload named.
TEST_F(FaultCodes, FailedBufferedUploadSurfacesAtTheNextSynchronisingCall) {
  using Buffer = clbuf::DeviceBuffer<std::uint32_t>;
  struct Call {
    const char* name;
    std::function<void(clbuf::BufferManager&, Buffer&, Buffer&)> run;
  };
  const std::vector<Call> calls = {
      {"download",
       [](clbuf::BufferManager& m, Buffer&, Buffer& other) { (void)m.download(other); }},
      {"copy",
       [](clbuf::BufferManager& m, Buffer& target, Buffer& other) { m.copy(target, other); }},
      {"fill", [](clbuf::BufferManager& m, Buffer&, Buffer& other) { m.fill(other, 7u); }},
      {"finish", [](clbuf::BufferManager& m, Buffer&, Buffer&) { m.finish(); }},
      {"download_rect",
       [](clbuf::BufferManager& m, Buffer&, Buffer& other) {
         clbuf::Region box;
         box.size = {10, 2, 1};
         box.src_extents = {10, 10, 1};
         box.dst_extents = {10, 10, 1};
         std::vector<std::uint32_t> out(small);
         m.download_rect(other, out, box);
       }},
      {"map", [](clbuf::BufferManager& m, Buffer&, Buffer& other) { (void)m.map(other); }},
      {"upload",  // a blocking upload too large to be buffered: staged
       [](clbuf::BufferManager& m, Buffer&, Buffer&) {
         (void)m.upload(std::vector<std::uint32_t>(large, 3u));
       }},
      {"cleanup", [](clbuf::BufferManager& m, Buffer&, Buffer&) { m.cleanup(); }},
  };
  for (const Call& call : calls) {
    SCOPED_TRACE(call.name);
    clbuf::BufferManager m("", clbuf_test::fault_options(MemoryModel::discrete));
    const auto before = random<std::uint32_t>(small);
    Buffer target = m.upload(before);
    Buffer other = m.upload(random<std::uint32_t>(small));
    m.finish();
    const auto data = random<std::uint32_t>(small);
    state().arm(clbuf_fault::EnqueueWriteBuffer, 1, false, true);
    m.upload(target, data);  // returns: its write has not run yet
    EXPECT_CLBUF_ERROR(call.run(m, target, other), CL_OUT_OF_RESOURCES,
                       std::string(call.name) + ": ", "a buffered upload failed on the device",
                       "upload of 400 bytes at byte 0");
    state().disarm();
    if (std::string(call.name) == "cleanup") continue;
    m.finish();  // reported once: the manager goes on
    m.upload(target, data);
    EXPECT_TRUE(clbuf_test::same_bytes(data, m.download(target)));
  }
}

// Of many buffered uploads, the first that fails is reported, with how many failed after it.
TEST_F(FaultCodes, FailedBufferedUploadsAmongManyAreReportedTogether) {
  clbuf::BufferManager m("", clbuf_test::fault_options(MemoryModel::discrete));
  std::vector<clbuf::DeviceBuffer<std::uint32_t>> buffers;
  for (int i = 0; i < 10; ++i) buffers.push_back(m.allocate<std::uint32_t>(small));
  state().arm(clbuf_fault::EnqueueWriteBuffer, 3, true, true);  // the 3rd write on
  for (int i = 0; i < 10; ++i)
    m.upload(buffers[static_cast<std::size_t>(i)], random<std::uint32_t>(small));
  EXPECT_CLBUF_ERROR(m.finish(), CL_OUT_OF_RESOURCES,
                     "finish: ", "a buffered upload failed on the device",
                     "7 later buffered uploads failed too");
  state().disarm();
  EXPECT_NO_THROW(m.finish());
}

// A buffered upload that fails while the ring is full. With the manager's queue held, 16 uploads
// fill the ring (16 writes of the bound) and the 17th waits for the oldest write; the queue is
// let go once that wait has begun, so the ring was full for certain. Either the wait finds the
// oldest write failed (clWaitForEvents reports it: the write's own status is asked for its code),
// or a write in the middle fails on the device while the ring is full. Either way the next
// synchronising call reports it, once, with the write's code and the upload named, and every
// other write lands exactly.
TEST_F(FaultCodes, FailedBufferedUploadWhileTheRingIsFullIsReportedAndTheOthersLand) {
  constexpr std::size_t bound = 4096;
  constexpr std::size_t count = bound / sizeof(std::uint32_t);
  constexpr std::size_t writes = 20;
  struct Case {
    const char* name;
    int site;
    long call;
    bool on_device;
    std::size_t failed;  // the write that fails
  };
  const Case cases[] = {
      {"the wait for room finds the oldest write failed", clbuf_fault::WaitForEvents, 1, false, 0},
      {"the fifth write fails on the device", clbuf_fault::EnqueueWriteBuffer, 5, true, 4}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    clbuf::Options options = clbuf_test::fault_options(MemoryModel::discrete);
    options.buffered_upload_max_bytes = bound;
    clbuf::BufferManager m("", options);
    auto expected = random<std::uint32_t>(count * writes);
    auto buffer = m.upload(expected);
    m.finish();
    std::vector<std::vector<std::uint32_t>> data;
    for (std::size_t i = 0; i < writes; ++i) data.push_back(random<std::uint32_t>(count));
    cl::UserEvent gate(m.context());
    const cl_event held = gate();
    ASSERT_EQ(::clEnqueueBarrierWithWaitList(m.queue()(), 1, &held, nullptr), CL_SUCCESS);
    state().arm(c.site, c.call, false, c.on_device);
    std::atomic<bool> uploaded{false};
    std::atomic<bool> full{false};
    std::thread release([&] {
      while (!uploaded) {
        std::lock_guard<std::mutex> lock(state().mutex);
        if (state().calls[clbuf_fault::WaitForEvents] != 0) {
          full = true;
          break;
        }
      }
      gate.setStatus(CL_COMPLETE);
    });
    try {
      for (std::size_t i = 0; i < writes; ++i) m.upload(buffer, data[i], i * count);
    } catch (...) {
      uploaded = true;
      release.join();
      state().disarm();
      throw;
    }
    uploaded = true;
    release.join();
    EXPECT_TRUE(full) << "the uploads never waited for room: the ring of 16 was not full";
    EXPECT_CLBUF_ERROR(m.finish(), CL_OUT_OF_RESOURCES,
                       "finish: ", "a buffered upload failed on the device",
                       "upload of " + std::to_string(bound) + " bytes at byte " +
                           std::to_string(c.failed * bound) + " of its buffer");
    state().disarm();
    EXPECT_NO_THROW(m.finish()) << "reported once";
    const std::vector<std::uint32_t> got = m.download(buffer);
    for (std::size_t i = 0; i < writes; ++i) {
      if (i == c.failed) continue;  // its data is not promised
      std::copy(data[i].begin(), data[i].end(),
                expected.begin() + static_cast<std::ptrdiff_t>(i * count));
    }
    std::copy(got.begin() + static_cast<std::ptrdiff_t>(c.failed * count),
              got.begin() + static_cast<std::ptrdiff_t>((c.failed + 1) * count),
              expected.begin() + static_cast<std::ptrdiff_t>(c.failed * count));
    EXPECT_TRUE(clbuf_test::same_bytes(expected, got));
  }
}

// A blocking download waits for the buffered writes before it (its wait list), so when it
// succeeds clbuf knows they did and asks no write its status (clGetEventInfo costs 1.2 us a call
// on the H200); a failed one makes the download fail without touching the caller's memory, the
// upload named. Both download paths: bounced (a new vector) and the driver's (bounce off).
TEST_F(FaultCodes, DownloadAfterBufferedUploadsAsksNoStatus) {
  for (const std::size_t bounce : {clbuf::Options::automatic, std::size_t{0}}) {
    SCOPED_TRACE(bounce);
    clbuf::Options options = clbuf_test::fault_options(MemoryModel::discrete);
    options.bounce_max_bytes = bounce;
    clbuf::BufferManager m("", options);
    auto buffer = m.allocate<std::uint32_t>(small);
    m.finish();
    for (int round = 0; round < 3; ++round) {
      const auto data = random<std::uint32_t>(small);
      state().arm(-1, 0, false);  // counting only
      m.upload(buffer, data);
      m.upload(buffer, data.data(), 10, 5);  // two writes in the wait list
      std::vector<std::uint32_t> out(small);
      m.download(buffer, out.data(), out.size());
      const long status_calls = [] {
        std::lock_guard<std::mutex> lock(state().mutex);
        return state().calls[clbuf_fault::GetEventInfo];
      }();
      state().disarm();
      EXPECT_EQ(status_calls, 0) << "round " << round;
      auto expected = data;
      std::copy(data.begin(), data.begin() + 10, expected.begin() + 5);
      EXPECT_TRUE(clbuf_test::same_bytes(expected, out));
    }
  }
}

// Also with more writes pending than a wait list takes (12 > 8): the read then waits for the
// newest, settles, and never reads.
TEST_F(FaultCodes, DownloadWaitingForAFailedBufferedUploadChangesNoData) {
  for (const std::size_t bounce : {clbuf::Options::automatic, std::size_t{0}})
    for (const int writes : {1, 12}) {
      SCOPED_TRACE(std::to_string(bounce) + ", writes " + std::to_string(writes));
      clbuf::Options options = clbuf_test::fault_options(MemoryModel::discrete);
      options.bounce_max_bytes = bounce;
      clbuf::BufferManager m("", options);
      auto buffer = m.upload(random<std::uint32_t>(small));
      m.finish();
      state().arm(clbuf_fault::EnqueueWriteBuffer, 1, false, true);  // the first write fails
      for (int w = 0; w < writes; ++w) {
        m.upload(buffer, random<std::uint32_t>(small));  // returns: its write runs later
      }
      auto out = clbuf_test::sentinels<std::uint32_t>(small);
      EXPECT_CLBUF_ERROR(m.download(buffer, out.data(), out.size()), CL_OUT_OF_RESOURCES,
                         "download: ", "a buffered upload failed on the device",
                         "upload of 400 bytes at byte 0");
      state().disarm();
      EXPECT_TRUE(clbuf_test::all_sentinel(out.data(), out.size() * sizeof(std::uint32_t)));
      const auto data = random<std::uint32_t>(small);  // reported once: the manager goes on
      m.upload(buffer, data);
      EXPECT_TRUE(clbuf_test::same_bytes(data, m.download(buffer)));
    }
}

TEST_F(FaultCodes, FailedAllocationIsRetriedOnceAfterTrimmingThePool) {
  state().arm(clbuf_fault::CreateBuffer, 1, false);
  auto buffer = manager().allocate<std::uint32_t>(1000);  // the retry succeeds
  state().disarm();
  EXPECT_EQ(manager().stats().pool.retries, 1u);
  state().arm(clbuf_fault::CreateBuffer, 1, true);
  EXPECT_CLBUF_ERROR(manager().allocate<std::uint32_t>(100000), CL_MEM_OBJECT_ALLOCATION_FAILURE,
                     "allocate: ", "clCreateBuffer");
  state().disarm();
}

TEST_F(FaultCodes, FailedContextCreationKeepsItsCode) {
  state().arm(clbuf_fault::CreateContext, 1, false);
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(), CL_OUT_OF_HOST_MEMORY,
                     "BufferManager: ", "clCreateContext");
  state().disarm();
}

// A failing clGetPlatformIDs or clGetDeviceIDs is an error with its own code, never read as
// "no platform" or "no device".
TEST_F(FaultCodes, FailedPlatformQueryKeepsItsCode) {
  state().arm(clbuf_fault::GetPlatformIDs, 1, false);
  EXPECT_CLBUF_ERROR(clbuf::list_devices(), CL_OUT_OF_HOST_MEMORY,
                     "list_devices: ", "clGetPlatformIDs");
  state().disarm();
  state().arm(clbuf_fault::GetDeviceIDs, 1, false);
  EXPECT_CLBUF_ERROR(clbuf::list_devices(), CL_OUT_OF_RESOURCES,
                     "list_devices: ", "clGetDeviceIDs");
  state().disarm();
}

// A failed unmap in ~PinnedBuffer (or ~Stager) is retried once: on PoCL the mapping holds a
// reference, so a lost unmap would leak the buffer, its context and its queue.
TEST_F(FaultCodes, FailedUnmapInADestructorLeaksNothing) {
  const long before = settled_live_buffers();  // the fixture's manager holds its marker buffer
  {
    clbuf::BufferManager local;
    auto pinned = local.allocate_pinned<std::uint32_t>(1000);
    state().arm(clbuf_fault::EnqueueUnmapMemObject, 1, false);
  }  // ~PinnedBuffer's unmap fails
  state().disarm();
  EXPECT_EQ(settled_live_buffers(), before) << "the pinned buffer was never freed";
}

}  // namespace
