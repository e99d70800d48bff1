// SPDX-License-Identifier: MIT
// The random workloads that the transfer suite (on the default manager) and the stress suite (on
// every MemoryModel) share, each checked byte for byte against a host model:
//   RandomWindows     random windows of one buffer uploaded and downloaded, against a host shadow,
//                     with sentinels on both sides of every host window;
//   RandomOperations  random operations on several byte buffers against a host model: fresh
//                     uploads, windows, copy_bytes (rejected exactly when the ranges of one buffer
//                     overlap), whole copies, out-of-range calls rejected with nothing changed,
//                     async downloads and copies, partial downloads.
// Each is parameterised by its sizes and counts and by a seed; run() returns the first mismatch
// with the step, the operation and the operations before it.
#ifndef CLBUF_TESTS_SUPPORT_RANDOM_WORKLOAD_HPP
#define CLBUF_TESTS_SUPPORT_RANDOM_WORKLOAD_HPP

#include <gtest/gtest.h>

#include <algorithm>
#include <clbuf/clbuf.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_test.hpp"

namespace clbuf_test {
namespace workload_detail {

/// The last few operations of a workload, for its failure message.
class History {
 public:
  void add(std::string operation) {
    if (last_.size() == kept) last_.pop_front();
    last_.push_back(std::move(operation));
  }
  const std::string& current() const { return last_.back(); }
  /// The operations before the current one, oldest first, a line each.
  std::string before() const {
    if (last_.size() < 2) return {};
    std::string text = "\n  the operations before it, oldest first:";
    for (std::size_t i = 0; i + 1 < last_.size(); ++i) text += "\n    " + last_[i];
    return text;
  }

 private:
  static constexpr std::size_t kept = 8;
  std::deque<std::string> last_;
};

/// The step, its operation, the operations before it, and the seed that repeats the run.
inline ::testing::AssertionResult failed(const char* workload, std::uint32_t seed, std::size_t step,
                                         const History& history, const std::string& what) {
  return ::testing::AssertionFailure()
         << workload << " (seed " << seed << "), step " << step << ": " << history.current() << ": "
         << what << history.before();
}

/// Runs `statement`; success when it throws a clbuf::Error with `code` whose message contains
/// `fragment`.
template <class Statement>
::testing::AssertionResult rejected(Statement&& statement, cl_int code, const char* fragment) {
  try {
    statement();
  } catch (const clbuf::Error& error) {
    if (error.code() != code) {
      return ::testing::AssertionFailure()
             << "expected " << clbuf::error_name(code) << ", got " << error.what();
    }
    return has_fragments(error.what(), {fragment});
  } catch (const std::exception& error) {
    return ::testing::AssertionFailure() << "threw a non-clbuf exception: " << error.what();
  }
  return ::testing::AssertionFailure()
         << "was not rejected (" << clbuf::error_name(code) << " expected)";
}

}  // namespace workload_detail

/// Random windows of one buffer of `elements` std::uint32_t: even iterations upload a random
/// window from host memory with sentinels on both sides (the host memory must stay as it was),
/// odd ones download a random window into host memory with sentinels on both sides (the window
/// must match the shadow, the sentinels must stay). The whole buffer is compared every
/// `check_every` iterations (0: only at the end) and at the end.
struct RandomWindows {
  std::size_t elements = 4099;
  std::size_t iterations = 1000;
  std::size_t check_every = 100;

  ::testing::AssertionResult run(clbuf::BufferManager& manager, std::uint32_t seed) const {
    using workload_detail::failed;
    std::mt19937 rng(seed);
    const auto pick = [&rng](std::size_t low, std::size_t high) {
      return std::uniform_int_distribution<std::size_t>(low, high)(rng);
    };
    workload_detail::History history;
    std::size_t step = 0;
    try {
      history.add("upload of " + std::to_string(elements) + " elements");
      std::vector<std::uint32_t> shadow = random_values<std::uint32_t>(rng, elements);
      clbuf::DeviceBuffer<std::uint32_t> buffer = manager.upload(shadow);
      for (step = 0; step < iterations; ++step) {
        const std::size_t offset = pick(0, elements);
        const std::size_t count = pick(0, elements - offset);
        const bool upload = step % 2 == 0;
        history.add(std::string(upload ? "upload" : "download") + " of " + std::to_string(count) +
                    " elements at " + std::to_string(offset));
        std::vector<std::uint32_t> host = sentinels<std::uint32_t>(count + 2);
        if (upload) {
          const std::vector<std::uint32_t> patch = random_values<std::uint32_t>(rng, count);
          std::copy(patch.begin(), patch.end(), host.begin() + 1);
          manager.upload(buffer, &host[1], count, offset);
          std::copy(patch.begin(), patch.end(),
                    shadow.begin() + static_cast<std::ptrdiff_t>(offset));
          const auto kept = same_bytes(patch.data(), &host[1], count * sizeof(std::uint32_t));
          if (!kept) return failed("RandomWindows", seed, step, history, kept.message());
        } else {
          manager.download(buffer, &host[1], count, offset);
          const auto same =
              same_bytes(shadow.data() + offset, &host[1], count * sizeof(std::uint32_t));
          if (!same) return failed("RandomWindows", seed, step, history, same.message());
        }
        const auto before = all_sentinel(&host[0], sizeof(std::uint32_t));
        const auto after = all_sentinel(&host[count + 1], sizeof(std::uint32_t));
        if (!before) return failed("RandomWindows", seed, step, history, before.message());
        if (!after) return failed("RandomWindows", seed, step, history, after.message());
        if (check_every != 0 && step % check_every == check_every - 1) {
          const auto whole = same_bytes(shadow, manager.download(buffer));
          if (!whole) {
            return failed("RandomWindows", seed, step, history,
                          std::string("whole buffer: ") + whole.message());
          }
        }
      }
      history.add("download of the whole buffer at the end");
      const auto whole = same_bytes(shadow, manager.download(buffer));
      if (!whole) return failed("RandomWindows", seed, step, history, whole.message());
    } catch (const std::exception& error) {
      return failed("RandomWindows", seed, step, history, std::string("threw ") + error.what());
    }
    return ::testing::AssertionSuccess();
  }
};

/// `operations` random operations on `buffers` byte buffers of up to `max_bytes` bytes each,
/// checked against a host model: every successful operation changes the model as the device
/// should change, every rejected one (overlap, size mismatch, out of range) must throw its code
/// and change nothing, and every read compares byte for byte, with sentinels around partial
/// reads. Every buffer is compared at the end.
struct RandomOperations {
  std::size_t buffers = 8;
  std::size_t operations = 500;
  std::size_t max_bytes = 3000;

  ::testing::AssertionResult run(clbuf::BufferManager& manager, std::uint32_t seed) const {
    using workload_detail::failed;
    using workload_detail::rejected;
    using Bytes = std::vector<std::uint8_t>;
    std::mt19937 rng(seed);
    const auto pick = [&rng](std::size_t low, std::size_t high) {
      return std::uniform_int_distribution<std::size_t>(low, high)(rng);
    };
    workload_detail::History history;
    std::size_t step = 0;
    std::vector<Bytes> model;
    std::vector<clbuf::DeviceBuffer<std::uint8_t>> device;
    // The device buffer `i` holds exactly model[i].
    const auto matches = [&](std::size_t i) {
      return same_bytes(model[i], manager.download(device[i]));
    };
    try {
      for (std::size_t i = 0; i < buffers; ++i) {
        history.add("upload of buffer " + std::to_string(i));
        model.push_back(random_values<std::uint8_t>(rng, pick(1, max_bytes)));
        device.push_back(manager.upload(model.back()));
      }
      for (step = 0; step < operations; ++step) {
        const std::size_t a = pick(0, buffers - 1);
        const std::size_t b = pick(0, buffers - 1);
        const std::string ab = std::to_string(a) + " -> " + std::to_string(b);
        const std::size_t size_a = model[a].size();
        const std::size_t size_b = model[b].size();
        ::testing::AssertionResult ok = ::testing::AssertionSuccess();
        switch (pick(0, 8)) {
          case 0: {  // replace with a fresh upload of a new size (pool reuse), blocking or async
            Bytes fresh = random_values<std::uint8_t>(rng, pick(0, max_bytes));
            const bool async = pick(0, 1) == 1;
            history.add(std::string(async ? "upload_async" : "upload") + " of " +
                        std::to_string(fresh.size()) + " bytes replacing buffer " +
                        std::to_string(a));
            device[a] = async ? manager.upload_async(fresh).get() : manager.upload(fresh);
            model[a] = std::move(fresh);
            break;
          }
          case 1: {  // upload a window from host memory with sentinels around it
            const std::size_t offset = pick(0, size_a);
            const std::size_t length = pick(0, size_a - offset);
            history.add("upload of " + std::to_string(length) + " bytes at " +
                        std::to_string(offset) + " into buffer " + std::to_string(a));
            const Bytes patch = random_values<std::uint8_t>(rng, length);
            Bytes host = sentinels<std::uint8_t>(length + 2);
            std::copy(patch.begin(), patch.end(), host.begin() + 1);
            manager.upload(device[a], &host[1], length, offset);
            std::copy(patch.begin(), patch.end(),
                      model[a].begin() + static_cast<std::ptrdiff_t>(offset));
            ok = same_bytes(patch.data(), &host[1], length);
            if (ok) ok = all_sentinel(&host[0], 1);
            if (ok) ok = all_sentinel(&host[length + 1], 1);
            break;
          }
          case 2: {  // copy_bytes, rejected exactly when the ranges of one buffer overlap
            const std::size_t limit = std::min(size_a, size_b);
            const std::size_t bytes = pick(0, pick(0, 1) == 0 ? limit : limit / 2);
            const std::size_t src = pick(0, size_a - bytes);
            const std::size_t dst = pick(0, size_b - bytes);
            history.add("copy_bytes " + ab + " of " + std::to_string(bytes) + " bytes from " +
                        std::to_string(src) + " to " + std::to_string(dst));
            const bool overlaps =
                a == b && bytes != 0 && (src < dst ? dst - src < bytes : src - dst < bytes);
            if (overlaps) {
              ok = rejected([&] { manager.copy_bytes(device[a], device[b], bytes, src, dst); },
                            CL_MEM_COPY_OVERLAP, "copy_bytes: ");
              if (ok) ok = matches(a);
            } else {
              manager.copy_bytes(device[a], device[b], bytes, src, dst);
              // An empty buffer's model has no storage: memmove(nullptr, ...) is undefined.
              if (bytes != 0) std::memmove(model[b].data() + dst, model[a].data() + src, bytes);
            }
            break;
          }
          case 3: {  // whole copy: onto itself or between different sizes rejected, else done
            history.add("copy " + ab + " (" + std::to_string(size_a) + " and " +
                        std::to_string(size_b) + " bytes)");
            if (a == b) {
              if (size_a != 0) {
                ok = rejected([&] { manager.copy(device[a], device[a]); }, CL_MEM_COPY_OVERLAP,
                              "copy: ");
              } else {
                manager.copy(device[a], device[a]);
              }
              if (ok) ok = matches(a);
              break;
            }
            if (size_a != size_b) {
              ok =
                  rejected([&] { manager.copy(device[a], device[b]); }, CL_INVALID_VALUE, "copy: ");
              if (ok) ok = matches(b);
              if (!ok) break;
              model[b] = random_values<std::uint8_t>(rng, size_a);
              device[b] = manager.upload(model[b]);
            }
            manager.copy(device[a], device[b]);
            model[b] = model[a];
            break;
          }
          case 4: {  // an out-of-range upload or download is rejected and changes nothing
            const std::size_t offset = pick(0, size_a + 2);
            const std::size_t length = size_a - std::min(size_a, offset) + pick(1, 3);
            Bytes host = sentinels<std::uint8_t>(length);
            if (pick(0, 1) == 0) {
              history.add("upload of " + std::to_string(length) + " bytes at " +
                          std::to_string(offset) + " past the end of buffer " + std::to_string(a));
              ok = rejected([&] { manager.upload(device[a], host.data(), length, offset); },
                            CL_INVALID_VALUE, "upload: ");
            } else {
              history.add("download of " + std::to_string(length) + " bytes at " +
                          std::to_string(offset) + " past the end of buffer " + std::to_string(a));
              ok = rejected([&] { manager.download(device[a], host.data(), length, offset); },
                            CL_INVALID_VALUE, "download: ");
              if (ok) ok = all_sentinel(host);
            }
            if (ok) ok = matches(a);
            break;
          }
          case 5: {  // async download of a whole buffer
            history.add("download_async of buffer " + std::to_string(a));
            auto future = manager.download_async(device[a]);
            ok = same_bytes(model[a], future.get());
            break;
          }
          case 6: {  // async copy of a window between different buffers
            if (a == b) {
              history.add("nothing (copy_bytes_async of a buffer onto itself)");
              break;
            }
            const std::size_t bytes = pick(0, std::min(size_a, size_b));
            const std::size_t src = pick(0, size_a - bytes);
            const std::size_t dst = pick(0, size_b - bytes);
            history.add("copy_bytes_async " + ab + " of " + std::to_string(bytes) + " bytes from " +
                        std::to_string(src) + " to " + std::to_string(dst));
            manager.copy_bytes_async(device[a], device[b], bytes, src, dst).wait();
            if (bytes != 0) std::memcpy(model[b].data() + dst, model[a].data() + src, bytes);
            break;
          }
          case 7: {  // a partial download, blocking or async, into host memory with sentinels
            const std::size_t offset = pick(0, size_a);
            const std::size_t length = pick(0, size_a - offset);
            const bool async = pick(0, 1) == 1;
            history.add(std::string(async ? "download_async" : "download") + " of " +
                        std::to_string(length) + " bytes at " + std::to_string(offset) +
                        " of buffer " + std::to_string(a));
            Bytes host = sentinels<std::uint8_t>(length + 2);
            if (async) {
              manager.download_async(device[a], &host[1], length, offset).wait();
            } else {
              manager.download(device[a], &host[1], length, offset);
            }
            ok = same_bytes(model[a].data() + offset, &host[1], length);
            if (ok) ok = all_sentinel(&host[0], 1);
            if (ok) ok = all_sentinel(&host[length + 1], 1);
            break;
          }
          default: {  // download a whole buffer
            history.add("download of buffer " + std::to_string(a));
            ok = matches(a);
          }
        }
        if (!ok) return failed("RandomOperations", seed, step, history, ok.message());
      }
      for (std::size_t i = 0; i < buffers; ++i) {
        history.add("download of buffer " + std::to_string(i) + " at the end");
        const auto same = matches(i);
        if (!same) return failed("RandomOperations", seed, step, history, same.message());
      }
    } catch (const std::exception& error) {
      return failed("RandomOperations", seed, step, history, std::string("threw ") + error.what());
    }
    return ::testing::AssertionSuccess();
  }
};

}  // namespace clbuf_test

#endif  // CLBUF_TESTS_SUPPORT_RANDOM_WORKLOAD_HPP
