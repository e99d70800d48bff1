// SPDX-License-Identifier: MIT
// Run with POCL_DEVICES=bogus (set by CMake): PoCL's platform is there but has no device.
// list_devices() is empty and constructing a manager throws CL_DEVICE_NOT_FOUND, saying how to
// install a driver. Skipped where another vendor's platform still lists devices.
#include <clbuf/clbuf.hpp>
#include <cstdlib>
#include <string>

#include "support/device_test.hpp"

namespace {

class NoDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("POCL_DEVICES") == nullptr) {
      GTEST_SKIP() << "run through CTest, which sets POCL_DEVICES=bogus";
    }
    std::vector<cl::Platform> platforms;
    if (cl::Platform::get(&platforms) != CL_SUCCESS || platforms.empty()) {
      GTEST_SKIP() << "no OpenCL platform at all";
    }
    if (!clbuf::list_devices().empty()) {
      GTEST_SKIP() << "a platform other than PoCL still has devices";
    }
  }
  clbuf_test::ScopedEnv no_selector_{"CLBUF_DEVICE", nullptr};
};

TEST_F(NoDevice, ListDevicesIsEmpty) { EXPECT_TRUE(clbuf::list_devices().empty()); }

TEST_F(NoDevice, DefaultConstructorThrowsDeviceNotFound) {
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(), CL_DEVICE_NOT_FOUND,
                     "BufferManager: ", "CL_DEVICE_NOT_FOUND (-1)", "pocl-opencl-icd");
}

TEST_F(NoDevice, SelectorConstructorThrowsDeviceNotFound) {
  EXPECT_CLBUF_ERROR(clbuf::BufferManager("cpu"), CL_DEVICE_NOT_FOUND,
                     "BufferManager: ", "CL_DEVICE_NOT_FOUND (-1)");
}

}  // namespace
