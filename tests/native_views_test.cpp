// SPDX-License-Identifier: MIT
// native() of views in kernels (issue 38): the OpenCL conformance suite's overlapping sub-buffer
// test (test_sub_buffers_overlapping) through clbuf: 16 overlapping views of one buffer at
// offsets and sizes that are multiples of CL_DEVICE_MEM_BASE_ADDR_ALIGN, each passed to a kernel
// by native(), checked, then destroyed; repeated, and from several threads. On NVIDIA's driver
// this pattern crashed inside clReleaseMemObject while each view released its own sub-buffer.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::same_bytes;

constexpr std::size_t kRootElements = std::size_t{1} << 16;  // 256 KiB of uint32
constexpr int kViews = 16;

class NativeViews : public clbuf_test::DeviceTest {
 protected:
  void SetUp() override {
    clbuf_test::DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    align_ = cl_device().getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() / 8 / sizeof(std::uint32_t);
    program_ = cl::Program(manager().context(),
                           "__kernel void copy(__global const uint* in, __global uint* out) {"
                           " size_t i = get_global_id(0); out[i] = in[i]; }");
    program_.build();
  }

  /// One round of test_sub_buffers_overlapping: kViews views of `root` (whose contents are
  /// `shadow`) at random offsets and sizes, multiples of the base alignment; each passed to a
  /// kernel by native() while all are alive, its bytes checked; then all destroyed, in creation
  /// order (round 0), reverse order (1) or a random order (2).
  void conformance_round(clbuf::DeviceBuffer<std::uint32_t>& root,
                         const std::vector<std::uint32_t>& shadow, std::mt19937& rng, int round) {
    const auto between = [&](std::size_t low, std::size_t high) {
      return std::uniform_int_distribution<std::size_t>(low, high)(rng);
    };
    cl::Kernel copy(program_, "copy");
    clbuf::DeviceBuffer<std::uint32_t> out = manager().allocate<std::uint32_t>(kRootElements);
    std::vector<clbuf::DeviceBuffer<std::uint32_t>> views;
    for (int i = 0; i < kViews; ++i) {
      const std::size_t offset = between(0, kRootElements / align_ - 1) * align_;
      const std::size_t count = between(1, (kRootElements - offset) / align_) * align_;
      views.push_back(manager().view(root, offset, count));
      copy.setArg(0, views.back().native());
      copy.setArg(1, out.native());
      cl::CommandQueue queue = manager().queue();
      ASSERT_EQ(queue.enqueueNDRangeKernel(copy, cl::NullRange, cl::NDRange(count)), CL_SUCCESS);
      std::vector<std::uint32_t> got(count);
      manager().download(out, got.data(), count);
      ASSERT_TRUE(same_bytes(shadow.data() + offset, got.data(), count * sizeof(std::uint32_t)))
          << "view " << i << " at element " << offset << ", " << count << " elements";
    }
    std::vector<std::size_t> order(views.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (round % 3 == 1) std::reverse(order.begin(), order.end());
    if (round % 3 == 2) std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i : order) views[i] = clbuf::DeviceBuffer<std::uint32_t>();
  }

  /// `rounds` conformance rounds on a root of random contents, which must be unchanged after.
  void conformance_rounds(clbuf::DeviceBuffer<std::uint32_t>& root,
                          const std::vector<std::uint32_t>& shadow, std::uint32_t seed,
                          int rounds) {
    std::mt19937 rng(seed);
    for (int round = 0; round < rounds; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      conformance_round(root, shadow, rng, round);
      if (HasFatalFailure()) return;
    }
    EXPECT_TRUE(same_bytes(shadow, manager().download(root)));
  }

  std::size_t align_ = 1;  // CL_DEVICE_MEM_BASE_ADDR_ALIGN in elements
  cl::Program program_;
};

TEST_F(NativeViews, ConformanceOverlappingPatternRunsRepeatedly) {
  const std::vector<std::uint32_t> shadow = random<std::uint32_t>(kRootElements);
  clbuf::DeviceBuffer<std::uint32_t> root = manager().upload(shadow);
  conformance_rounds(root, shadow, seed_, 12);
}

// Four threads, each on a root of its own, on one manager.
TEST_F(NativeViews, ConformanceOverlappingPatternRunsFromFourThreads) {
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      std::mt19937 rng(seed_ + t);
      const auto shadow = clbuf_test::random_values<std::uint32_t>(rng, kRootElements);
      clbuf::DeviceBuffer<std::uint32_t> root = manager().upload(shadow);
      conformance_rounds(root, shadow, seed_ + 100 + t, 6);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Four threads, each making its own 16 views of one shared root: every view overlaps views of
// the other threads too.
TEST_F(NativeViews, ConformanceOverlappingPatternOnOneSharedRootFromFourThreads) {
  const std::vector<std::uint32_t> shadow = random<std::uint32_t>(kRootElements);
  clbuf::DeviceBuffer<std::uint32_t> root = manager().upload(shadow);
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { conformance_rounds(root, shadow, seed_ + t, 6); });
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace
