// Run with OCL_ICD_VENDORS pointing at an empty folder (set by CMake): the ICD loader then finds
// no OpenCL platform at all. list_devices() is empty and every constructor that must pick a
// device throws CL_PLATFORM_NOT_FOUND_KHR (-1001), saying how to install a driver.
#include <clbuf/clbuf.hpp>
#include <cstdlib>
#include <string>

#include "support/device_test.hpp"

namespace {

class NoPlatform : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("OCL_ICD_VENDORS") == nullptr) {
      GTEST_SKIP() << "run through CTest, which points OCL_ICD_VENDORS at an empty folder";
    }
  }
  clbuf_test::ScopedEnv no_selector_{"CLBUF_DEVICE", nullptr};
};

TEST_F(NoPlatform, ListDevicesIsEmpty) { EXPECT_TRUE(clbuf::list_devices().empty()); }

TEST_F(NoPlatform, DefaultConstructorThrowsPlatformNotFound) {
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(), -1001,
                     "BufferManager: ", "CL_PLATFORM_NOT_FOUND_KHR (-1001)", "pocl-opencl-icd");
}

TEST_F(NoPlatform, SelectorConstructorThrowsPlatformNotFound) {
  EXPECT_CLBUF_ERROR(clbuf::BufferManager("cpu"), -1001,
                     "BufferManager: ", "CL_PLATFORM_NOT_FOUND_KHR (-1001)", "pocl-opencl-icd");
  EXPECT_CLBUF_ERROR(clbuf::BufferManager("0:0"), -1001, "CL_PLATFORM_NOT_FOUND_KHR (-1001)");
}

TEST_F(NoPlatform, EnvironmentSelectorThrowsPlatformNotFound) {
  clbuf_test::ScopedEnv env("CLBUF_DEVICE", "gpu");
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(), -1001, "CL_PLATFORM_NOT_FOUND_KHR (-1001)");
}

}  // namespace
