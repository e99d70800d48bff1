// SPDX-License-Identifier: MIT
// Out of host memory inside clbuf: the Nth C++ heap allocation (operator new, on any thread) made
// while a workload of clbuf calls runs fails, for every N the workload reaches, on every
// MemoryModel. README "Errors": each such failure is a clbuf::Error with CL_OUT_OF_HOST_MEMORY
// or is absorbed with correct data (a job run in place of a thread, a record that is not kept),
// never std::bad_alloc, never an abort; a call that completes has exact data; after a failure
// the buffers the failed call did not write still hold their data, the manager still works, and
// no device buffer leaks. The workload's own vectors are made before the allocations are
// counted, and allocations inside OpenCL calls (the driver's own, made holding its locks) are
// not, so every allocation failed is clbuf's. Run under ASan+LSan by scripts/sanitize.sh (label
// fault).
#define CL_HPP_TARGET_OPENCL_VERSION 120
#define CL_HPP_MINIMUM_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/opencl.hpp>

#include <atomic>

#include "../support/failing_heap.hpp"

/// Buffers made are counted until the driver destroys them (the leak check).
namespace heap_fault {
std::atomic<long> live_buffers{0};

inline void CL_CALLBACK buffer_destroyed(cl_mem, void*) { --live_buffers; }
template <>
struct Driver<&::clCreateBuffer> {
  static cl_mem call(cl_context context, cl_mem_flags flags, size_t size, void* host, cl_int* err) {
    ++in_driver;
    const cl_mem memory = ::clCreateBuffer(context, flags, size, host, err);
    if (memory != nullptr) {
      ++live_buffers;
      ::clSetMemObjectDestructorCallback(memory, buffer_destroyed, nullptr);
    }
    --in_driver;
    return memory;
  }
};
}  // namespace heap_fault

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/device_test.hpp"
namespace {

using clbuf::MemoryModel;

constexpr std::size_t small = 100;    // 400 bytes: direct (or buffered) paths
constexpr std::size_t large = 10000;  // 40,000 bytes: staged through three slots

using Data = std::vector<std::uint32_t>;
using Buffer = std::optional<clbuf::DeviceBuffer<std::uint32_t>>;

/// Everything a trial uses, made before allocations are counted; run() calls every public
/// function of the manager once, in steps, and counts the steps that complete.
struct Trial : heap_fault::Steps {
  explicit Trial(std::uint32_t seed) {
    std::mt19937 rng(seed);
    a = clbuf_test::random_bytes<std::uint32_t>(rng, small);
    big = clbuf_test::random_bytes<std::uint32_t>(rng, large);
    a_copied = a;  // b0 after copy_bytes(b1, b0, 64 bytes from byte 128 to byte 16)
    std::memcpy(reinterpret_cast<char*>(a_copied.data()) + 16,
                reinterpret_cast<const char*>(big.data()) + 128, 64);
    big_viewed = big;  // b3 after the upload of a[0, 10) into its view [1, 11)
    std::copy(a.begin(), a.begin() + 10, big_viewed.begin() + 1);
    for (Data* each : {&out, &out2, &out3, &mapped, &mapped2, &rect, &rect2})
      each->assign(large, 0);
    b8_filled.assign(small, 7u);  // b8 after fill(7), fill(9, count 10, offset 5)
    std::fill(b8_filled.begin() + 5, b8_filled.begin() + 15, 9u);
    b8_final = b8_filled;            // after the rect uploads of a's box (10 x 3 of a 20 x 5 array)
    rect_expected.assign(large, 0);  // the rect downloads of that box
    b0_final = a_copied;             // b0 after copy_rect(b8, b0, box)
    for (std::size_t y = 0; y < 3; ++y) {
      for (std::size_t x = 0; x < 10; ++x) {
        b8_final[y * 20 + x] = rect_expected[y * 20 + x] = b0_final[y * 20 + x] = a[y * 20 + x];
      }
    }
    a_async = a;
    a_async2 = a;
    shape = {10, 10};
    box.size = {10, 3, 1};
    box.src_extents = {20, 5, 1};
    box.dst_extents = {20, 5, 1};
    add("list_devices", [this] { devices = clbuf::list_devices().size(); });
    add("explain_selection", [this] { picked = clbuf::explain_selection().picked() != nullptr; });
    add("BufferManager()", [this] { m.emplace("", options); });
    add("allocate", [this] { b0.emplace(m->allocate<std::uint32_t>(small)); });
    add("upload(dst, vector)", [this] { m->upload(*b0, a); });
    add("download(buffer)", [this] { got0 = m->download(*b0); });
    add("upload(vector) large", [this] { b1.emplace(m->upload(big)); });
    add("download(buffer, T*) large", [this] { m->download(*b1, out.data(), large); });
    add("allocate_pinned", [this] {
      pinned.emplace(m->allocate_pinned<std::uint32_t>(small));
      std::copy(a.begin(), a.end(), pinned->begin());
      pinned_out.emplace(m->allocate_pinned<std::uint32_t>(small));
    });
    add("upload(pinned)", [this] { b2.emplace(m->upload(*pinned)); });
    add("download(buffer, pinned)", [this] { m->download(*b2, *pinned_out); });
    add("upload(dst, pinned)", [this] { m->upload(*b2, *pinned); });
    add("upload(T*, count)", [this] { b3.emplace(m->upload(big.data(), large)); });
    add("upload(vector, shape)", [this] { b4.emplace(m->upload(a, std::move(shape))); });
    add("upload(dst, T*) large", [this] { m->upload(*b3, big.data(), large); });
    add("copy", [this] { m->copy(*b1, *b3); });
    add("copy_bytes", [this] { m->copy_bytes(*b1, *b0, 64, 128, 16); });
    add("view, upload into it", [this] {
      clbuf::DeviceBuffer<std::uint32_t> view = m->view(*b3, 1, 10);
      m->upload(view, a.data(), 10);
    });
    add("map", [this] {
      clbuf::MappedView<std::uint32_t> view = m->map(*b0, clbuf::MapMode::read);
      std::copy(view.begin(), view.end(), mapped.begin());
    });
    add("map(offset, count)", [this] {
      clbuf::MappedView<std::uint32_t> view = m->map(*b0, clbuf::MapMode::read, 0, small);
      std::copy(view.begin(), view.end(), mapped2.begin());
    });
    add("upload_async(T*) large", [this] { b5.emplace(m->upload_async(big.data(), large).get()); });
    add("upload_async(vector)", [this] { b6.emplace(m->upload_async(std::move(a_async)).get()); });
    add("upload_async(dst, T*)", [this] { m->upload_async(*b6, a.data(), small).get(); });
    add("upload_async(dst, vector)", [this] { m->upload_async(*b6, std::move(a_async2)).get(); });
    add("download_async(buffer, T*) large",
        [this] { m->download_async(*b5, out2.data(), large).wait(); });
    add("download_async(buffer)", [this] { got3 = m->download_async(*b3).get(); });
    add(
        "copy_bytes_async", [this] { m->copy_bytes_async(*b5, *b7, large * 4).get(); },
        [this] { b7.emplace(m->allocate<std::uint32_t>(large)); });
    add(
        "fill", [this] { m->fill(*b8, 7u); },
        [this] { b8.emplace(m->allocate<std::uint32_t>(small)); });
    add("fill(count, offset)", [this] { m->fill(*b8, 9u, 10, 5); });
    add("fill_async", [this] { m->fill_async(*b8, 7u).get(); });
    add("fill_async(count, offset)", [this] { m->fill_async(*b8, 9u, 10, 5).get(); });
    add("upload_rect(vector)", [this] { m->upload_rect(*b8, a, box); });
    add("upload_rect(T*)", [this] { m->upload_rect(*b8, a.data(), small, box); });
    add("upload_rect_async(vector)", [this] { m->upload_rect_async(*b8, a, box).get(); });
    add("upload_rect_async(T*)", [this] { m->upload_rect_async(*b8, a.data(), small, box).get(); });
    add("download_rect(vector)", [this] { m->download_rect(*b8, rect, box); });
    add("download_rect(T*)", [this] { m->download_rect(*b8, rect2.data(), large, box); });
    add("download_rect_async(vector)", [this] { m->download_rect_async(*b8, rect, box).get(); });
    add("download_rect_async(T*)",
        [this] { m->download_rect_async(*b8, rect2.data(), large, box).get(); });
    add("copy_rect", [this] { m->copy_rect(*b8, *b0, box); });
    add("copy_rect_async", [this] { m->copy_rect_async(*b8, *b0, box).get(); });
    add("adopt", [this] {
      adopted.emplace(m->adopt<std::uint32_t>(
          cl::Buffer(m->context(), CL_MEM_READ_WRITE, small * sizeof(std::uint32_t)), small));
      m->upload(*adopted, a);
    });
    add("stats", [this] { (void)m->stats(); });
    add(
        "BufferManager(context, queue)",
        [this] {
          third.emplace(m->context(), adopted_queue, options);
          (void)third->queue();
          b10.emplace(third->upload(a));
        },
        [this] {
          const cl::Context context = m->context();
          adopted_queue = cl::CommandQueue(context, context.getInfo<CL_CONTEXT_DEVICES>().at(0));
        });
    add("a second BufferManager", [this] {
      second.emplace("", options);
      b9.emplace(second->allocate<std::uint32_t>(large));
    });
    add("copy_from", [this] { second->copy_from(*m, *b5, *b9); });
    add("copy_from_async", [this] { second->copy_from_async(*m, *b1, *b9).get(); });
    add("finish", [this] { m->finish(); });
    add("cleanup", [this] { third->cleanup(); });
  }

  Data a, big, a_copied, big_viewed, a_async, a_async2, b8_filled, b8_final, rect_expected,
      b0_final;
  Data got0, out, out2, out3, mapped, mapped2, got3, rect, rect2;  // what the calls returned
  std::size_t devices = 0;
  bool picked = false;
  std::vector<std::size_t> shape;
  clbuf::Region box;
  clbuf::Options options;
  cl::CommandQueue adopted_queue;
  std::optional<clbuf::BufferManager> m, second, third;
  Buffer b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, adopted;
  std::optional<clbuf::PinnedBuffer<std::uint32_t>> pinned, pinned_out;
  std::vector<std::function<void()>> steps, setups;  // setups: unarmed, before their step

  void add(const char* name, std::function<void()> step, std::function<void()> setup = {}) {
    names.push_back(name);
    steps.push_back(std::move(step));
    setups.push_back(std::move(setup));
  }

  /// The workload, armed: each step's calls (a step's set-up runs unarmed first).
  void run(MemoryModel model) {
    options = clbuf_test::fault_options(model, 2);
    for (done = 0; done < steps.size(); ++done) {
      if (setups[done]) {
        heap_fault::armed = false;
        setups[done]();
        heap_fault::armed = true;
      }
      steps[done]();
    }
  }

  /// With nothing armed: what the completed steps returned is exact, and every buffer holds
  /// what the completed steps put there, except the failed step's destination (an operation of
  /// several commands may have written part of it). Returns the first difference, or "".
  std::string check() {
    const auto differs = [](const Data& expected, const Data& actual, std::size_t n) {
      return actual.size() < n || !std::equal(expected.data(), expected.data() + n, actual.data());
    };
    if (completed("list_devices") && devices == 0) return "list_devices() found no device";
    if (completed("explain_selection") && !picked) return "explain_selection() picked none";
    if (completed("download(buffer)") && differs(a, got0, small))
      return "download returned other data";
    if (completed("download(buffer, T*) large") && differs(big, out, large))
      return "download(T*) differs";
    if (completed("download(buffer, pinned)") &&
        !std::equal(a.begin(), a.end(), pinned_out->begin())) {
      return "download into pinned differs";
    }
    if (completed("map") && differs(a_copied, mapped, small)) return "map showed other data";
    if (completed("map(offset, count)") && differs(a_copied, mapped2, small))
      return "map(n) differs";
    if (completed("download_async(buffer, T*) large") && differs(big, out2, large)) {
      return "download_async(T*) differs";
    }
    if (completed("download_async(buffer)") && differs(big_viewed, got3, large)) {
      return "download_async differs";
    }
    // The buffers, each unless the failed step wrote it.
    const auto holds = [&](const Buffer& buffer, const Data& expected, std::size_t n) {
      return !buffer || differs(expected, m->download(*buffer), n) == false;
    };
    const std::size_t failed = done;
    if (completed("upload(dst, vector)") && failed != step("copy_bytes") &&
        failed < step("copy_rect") && !holds(b0, completed("copy_bytes") ? a_copied : a, small)) {
      return "b0 changed";
    }
    if (!holds(b1, big, large)) return "b1 changed";
    if (completed("upload(dst, pinned)") && !holds(b2, a, small)) return "b2 changed";
    if (completed("upload(dst, T*) large") && failed != step("copy") &&
        failed != step("view, upload into it") &&
        !holds(b3, completed("view, upload into it") ? big_viewed : big, large)) {
      return "b3 changed";
    }
    if (!holds(b4, a, small)) return "b4 changed";
    if (!holds(b5, big, large)) return "b5 changed";
    if (b6 && failed != step("upload_async(dst, T*)") &&
        failed != step("upload_async(dst, vector)") && !holds(b6, a, small)) {
      return "b6 changed";
    }
    if (completed("copy_bytes_async") && !holds(b7, big, large)) return "b7 differs";
    if (completed("fill_async(count, offset)") && failed < step("upload_rect(vector)") &&
        !holds(b8, b8_filled, small)) {
      return "b8 after the fills differs";
    }
    if (completed("upload_rect_async(T*)") && !holds(b8, b8_final, small)) {
      return "b8 after the rect uploads differs";
    }
    if (completed("download_rect_async(vector)") && differs(rect_expected, rect, large)) {
      return "download_rect(vector) differs";
    }
    if (completed("download_rect_async(T*)") && differs(rect_expected, rect2, large)) {
      return "download_rect(T*) differs";
    }
    if (completed("copy_rect_async") && !holds(b0, b0_final, small)) return "copy_rect differs";
    if (completed("adopt") && !holds(adopted, a, small)) return "the adopted buffer differs";
    if (b10 && !completed("cleanup") && differs(a, third->download(*b10), small)) {
      return "the adopting manager's buffer differs";
    }
    if (b9 && completed("copy_from") && failed != step("copy_from_async") &&
        differs(big, second->download(*b9), large)) {
      return "b9 differs";
    }
    return "";
  }

  void reset() {
    b9.reset();
    second.reset();
    b10.reset();
    third.reset();
    for (Buffer* buffer : {&b0, &b1, &b2, &b3, &b4, &b5, &b6, &b7, &b8, &adopted}) buffer->reset();
    pinned.reset();
    pinned_out.reset();
    m.reset();
  }
};

long settled_live_buffers() {
  for (int i = 0; i < 200 && heap_fault::live_buffers.load() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return heap_fault::live_buffers.load();
}

/// One trial: the allocation numbered `fail_at` fails (0: none fails; the count is returned).
/// Appends what went wrong to `problems`; counts the outcomes.
struct Tally {
  long errors = 0;
  long absorbed = 0;
  long not_reached = 0;
  std::vector<std::string> problems;
};

long trial(MemoryModel model, std::uint32_t seed, long fail_at, Tally& tally) {
  Trial t(seed);
  heap_fault::reset(fail_at);
  const std::string outcome = heap_fault::outcome_of(
      [&] {
        heap_fault::armed = true;
        t.run(model);
      },
      tally.errors);
  const long counted = heap_fault::count.load();
  const long fired = heap_fault::fired.load();
  const std::string where = std::string(clbuf::to_string(model)) + " allocation #" +
                            std::to_string(fail_at) + " (in \"" + t.step_name() + "\")";
  if (fail_at != 0 && fired == 0) ++tally.not_reached;
  if (fired != 0 && t.done == t.steps.size()) ++tally.absorbed;
  if (!outcome.empty()) tally.problems.push_back(where + ": " + outcome);
  try {
    const std::string wrong = t.check();
    if (!wrong.empty()) tally.problems.push_back(where + ": " + wrong);
    if (t.m) {  // the manager still works
      const clbuf::DeviceBuffer<std::uint32_t> again = t.m->upload(t.big);
      if (t.m->download(again) != t.big) tally.problems.push_back(where + ": no round trip after");
    }
  } catch (const std::exception& error) {
    tally.problems.push_back(where + ": the checks after it threw: " + error.what());
  }
  t.reset();
  if (const long live = settled_live_buffers(); live != 0) {
    tally.problems.push_back(where + ": " + std::to_string(live) + " device buffers leaked");
    heap_fault::live_buffers = 0;
  }
  return counted;
}

class HeapFault : public ::testing::TestWithParam<MemoryModel> {};

// Every allocation clbuf makes in the workload, failed one at a time.
TEST_P(HeapFault, EveryAllocationFailingIsAnErrorOrAbsorbed) {
  const MemoryModel model = GetParam();
  if (model == MemoryModel::host &&
      clbuf::BufferManager().device().type != clbuf::DeviceType::cpu) {
    GTEST_SKIP() << "MemoryModel::host needs a CPU device";
  }
  const std::uint32_t seed = clbuf_test::fresh_seed();
  Tally tally;
  const long total = trial(model, seed, 0, tally);
  ASSERT_TRUE(tally.problems.empty()) << tally.problems.front();
  ASSERT_GT(total, 20) << "the workload allocates; the counter does not see it";
  // Allocations on clbuf's threads may come in another order from run to run: sweep past the
  // count, and let the last trials find nothing to fail.
  for (long n = 1; n <= total + 10; ++n) trial(model, seed, n, tally);
  std::ostringstream report;
  for (std::size_t i = 0; i < tally.problems.size() && i < 40; ++i) {
    report << "\n  " << tally.problems[i];
  }
  EXPECT_TRUE(tally.problems.empty()) << tally.problems.size() << " problems:" << report.str();
  std::cout << "[ heap     ] " << clbuf::to_string(model) << ": " << total << " allocations, "
            << tally.errors << " errors, " << tally.absorbed << " absorbed, " << tally.not_reached
            << " not reached\n";
}

CLBUF_INSTANTIATE_MODELS(HeapFault);

}  // namespace
