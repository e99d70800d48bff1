// SPDX-License-Identifier: MIT
// No OpenCL platform at all: before main() runs, and so before the ICD loader reads its
// configuration, this program points OCL_ICD_VENDORS at an empty folder of its own, so it needs
// no environment from CTest and runs the same on any machine (the H200's run script sets
// OCL_ICD_VENDORS to NVIDIA's driver). list_devices() is empty and every constructor that must
// pick a device throws CL_PLATFORM_NOT_FOUND_KHR (-1001), saying how to install a driver.
#include <unistd.h>
#include <clbuf/clbuf.hpp>

#include <cstdlib>
#include <string>

#include "support/device_test.hpp"

namespace {

/// An empty vendor folder made before any OpenCL call; empty when it could not be made.
const std::string empty_vendors = [] {
  char folder[] = "/tmp/clbuf_no_vendors_XXXXXX";
  if (::mkdtemp(folder) == nullptr) return std::string();
  ::setenv("OCL_ICD_VENDORS", folder, 1);
  ::unsetenv("OPENCL_VENDOR_PATH");
  std::atexit([] {
    if (const char* path = std::getenv("OCL_ICD_VENDORS")) ::rmdir(path);
  });
  return std::string(folder);
}();

class NoPlatform : public ::testing::Test {
 protected:
  void SetUp() override {
    if (empty_vendors.empty()) GTEST_SKIP() << "could not make an empty vendor folder in /tmp";
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

// The report never throws for a missing platform: it lists nothing and says why.
TEST_F(NoPlatform, ExplainSelectionReportsNoDeviceAndHowToInstallOne) {
  const clbuf::SelectionReport report = clbuf::explain_selection("cpu");
  EXPECT_TRUE(report.devices.empty());
  EXPECT_NE(report.problem.find("no OpenCL device on any platform"), std::string::npos)
      << report.problem;
  EXPECT_NE(report.problem.find("pocl-opencl-icd"), std::string::npos) << report.problem;
  EXPECT_NE(report.to_string().find("nothing picked: no OpenCL device"), std::string::npos)
      << report.to_string();
}

TEST_F(NoPlatform, EnvironmentSelectorThrowsPlatformNotFound) {
  clbuf_test::ScopedEnv env("CLBUF_DEVICE", "gpu");
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(), -1001, "CL_PLATFORM_NOT_FOUND_KHR (-1001)");
}

}  // namespace
