// SPDX-License-Identifier: MIT
// The test cases of the two-device suites, shared by multi_device_test.cpp (two PoCL devices of
// one platform, suite MultiDevice) and multi_platform_test.cpp (PoCL and oclgrind as two
// platforms, suite MultiPlatform): a manager per device and copy_from() between managers, same
// context (a device copy) and different contexts (pinned chunks, or straight into or out of a CPU
// device's memory), on every pair of transfer paths; bad input rejected with nothing changed; the
// selection report with two devices. The including file defines CLBUF_MULTI_SUITE, the suite's
// name, and includes this header once.
#ifndef CLBUF_TESTS_SUPPORT_MULTI_DEVICE_CASES_HPP
#define CLBUF_TESTS_SUPPORT_MULTI_DEVICE_CASES_HPP

#ifndef CLBUF_MULTI_SUITE
#error "define CLBUF_MULTI_SUITE (the test suite's name) before including multi_device_cases.hpp"
#endif

#include <cstdint>
#include <vector>

#include "device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_test::code_text;
using clbuf_test::same_bytes;

class MultiDeviceFixture : public clbuf_test::DeviceTest {
 protected:
  void SetUp() override {
    clbuf_test::DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    devices_ = clbuf::list_devices();
    if (devices_.size() < 2) GTEST_SKIP() << "needs two devices (POCL_DEVICES=\"pthread pthread\")";
  }

  static std::string index(const clbuf::DeviceInfo& d) {
    return std::to_string(d.platform_index) + ":" + std::to_string(d.device_index);
  }

  clbuf::BufferManager on(std::size_t device, MemoryModel model) {
    clbuf::Options options;
    options.memory = model;
    options.staging_chunk_bytes = 4096;  // many chunks per copy between contexts
    return clbuf::BufferManager(index(devices_[device]), options);
  }

  /// Skips unless the first two devices are of one platform (and of one type, if `same_type`).
  bool two_of_one_platform(bool same_type) {
    return devices_[0].platform_index == devices_[1].platform_index &&
           (!same_type || devices_[0].type == devices_[1].type);
  }

  std::vector<clbuf::DeviceInfo> devices_;
};

using CLBUF_MULTI_SUITE = MultiDeviceFixture;

TEST_F(CLBUF_MULTI_SUITE, CopiesBetweenContextsOnEveryPairOfPaths) {
  const MemoryModel models[] = {MemoryModel::host, MemoryModel::unified, MemoryModel::discrete};
  for (MemoryModel from_model : models) {
    for (MemoryModel to_model : models) {
      if ((from_model == MemoryModel::host && devices_[0].type != clbuf::DeviceType::cpu) ||
          (to_model == MemoryModel::host && devices_[1].type != clbuf::DeviceType::cpu)) {
        continue;
      }
      clbuf::BufferManager a = on(0, from_model);
      clbuf::BufferManager b = on(1, to_model);
      ASSERT_NE(a.context()(), b.context()());
      for (std::size_t count : {1u, 1023u, 1024u, 25000u}) {  // up to ~25 chunks of 4 KiB
        const std::vector<std::uint32_t> data = random<std::uint32_t>(count);
        const clbuf::DeviceBuffer<std::uint32_t> src = a.upload(data);
        clbuf::DeviceBuffer<std::uint32_t> dst = b.upload(random<std::uint32_t>(count));
        b.copy_from(a, src, dst);
        ASSERT_TRUE(same_bytes(data, b.download(dst)))
            << "count " << count << ", models " << static_cast<int>(from_model) << " -> "
            << static_cast<int>(to_model);
        ASSERT_TRUE(same_bytes(data, a.download(src)));
      }
    }
  }
}

TEST_F(CLBUF_MULTI_SUITE, SameContextIsOneDeviceCopy) {
  if (!two_of_one_platform(false)) GTEST_SKIP() << "needs two devices of one platform";
  std::vector<cl::Device> both = {manager().context().getInfo<CL_CONTEXT_DEVICES>().at(0)};
  // One context holding both devices of the platform.
  cl::Platform platform(both[0].getInfo<CL_DEVICE_PLATFORM>());
  std::vector<cl::Device> devices;
  platform.getDevices(CL_DEVICE_TYPE_ALL, &devices);
  ASSERT_GE(devices.size(), 2u);
  cl::Context shared(std::vector<cl::Device>{devices[0], devices[1]});
  clbuf::BufferManager a(shared, cl::CommandQueue(shared, devices[0]));
  clbuf::BufferManager b(shared, cl::CommandQueue(shared, devices[1]));
  const std::vector<double> data = random<double>(5000);
  const clbuf::DeviceBuffer<double> src = a.upload(data);
  clbuf::DeviceBuffer<double> dst = b.allocate<double>(5000);
  const clbuf::TransferStats before = b.stats();
  b.copy_from(a, src, dst);
  EXPECT_TRUE(same_bytes(data, b.download(dst)));
  EXPECT_EQ(b.stats().copy.operations, before.copy.operations + 1);
  // In one context a buffer of `a` is also a buffer of `b`: one buffer onto itself overlaps.
  clbuf::DeviceBuffer<double> self = a.upload(data);
  EXPECT_CLBUF_ERROR(b.copy_from(a, self, self), CL_MEM_COPY_OVERLAP,
                     "copy_from: " + code_text(CL_MEM_COPY_OVERLAP), "of one buffer overlap");
}

TEST_F(CLBUF_MULTI_SUITE, BadInputIsRejectedAndChangesNothing) {
  clbuf::BufferManager a = on(0, MemoryModel::discrete);
  clbuf::BufferManager b = on(1, MemoryModel::discrete);
  const std::vector<int> data = random<int>(100);
  const std::vector<int> old = random<int>(100);
  const clbuf::DeviceBuffer<int> src = a.upload(data);
  clbuf::DeviceBuffer<int> dst = b.upload(old);
  clbuf::DeviceBuffer<int> small = b.upload(random<int>(99));
  EXPECT_CLBUF_ERROR(b.copy_from(a, src, small), CL_INVALID_VALUE,
                     "copy_from: " + code_text(CL_INVALID_VALUE),
                     "source has 100 elements but destination has 99");
  // The buffers swapped: src is not of the source manager.
  EXPECT_CLBUF_ERROR(b.copy_from(b, src, dst), CL_INVALID_CONTEXT,
                     "copy_from: " + code_text(CL_INVALID_CONTEXT), "another OpenCL context");
  clbuf::DeviceBuffer<int> foreign = a.upload(old);
  EXPECT_CLBUF_ERROR(b.copy_from(a, src, foreign), CL_INVALID_CONTEXT, "copy_from: ");
  EXPECT_TRUE(same_bytes(old, b.download(dst)));
  EXPECT_TRUE(same_bytes(old, a.download(foreign)));
  a.cleanup();
  EXPECT_CLBUF_ERROR(b.copy_from(a, src, dst), CL_SUCCESS, "copy_from: ", "cleanup()");
  EXPECT_TRUE(same_bytes(old, b.download(dst)));
  // Zero elements: nothing to do.
  clbuf::BufferManager c = on(0, MemoryModel::discrete);
  const clbuf::DeviceBuffer<int> none = c.allocate<int>(0);
  clbuf::DeviceBuffer<int> none_too = b.allocate<int>(0);
  b.copy_from(c, none, none_too);
}

TEST_F(CLBUF_MULTI_SUITE, SelectionReportRejectsTheLaterDevice) {
  if (!two_of_one_platform(true)) GTEST_SKIP() << "needs two CPU devices of one platform";
  clbuf_test::ScopedEnv no_override("CLBUF_DEVICE", nullptr);
  if (devices_[0].type != clbuf::DeviceType::cpu) GTEST_SKIP() << "needs CPU devices";
  const clbuf::SelectionReport report = clbuf::explain_selection("cpu");
  ASSERT_GE(report.devices.size(), 2u);
  EXPECT_TRUE(report.devices[0].picked);
  EXPECT_FALSE(report.devices[1].picked);
  EXPECT_EQ(report.devices[1].reason, "a later cpu device; [0:0] comes first");
  const clbuf::SelectionReport by_index = clbuf::explain_selection("0:1");
  EXPECT_FALSE(by_index.devices[0].picked);
  EXPECT_EQ(by_index.devices[0].reason, "not platform 0, device 1 of \"0:1\" (from selector)");
  EXPECT_TRUE(by_index.devices[1].picked);
}

}  // namespace

#endif  // CLBUF_TESTS_SUPPORT_MULTI_DEVICE_CASES_HPP
