// SPDX-License-Identifier: MIT
// GPU preferred over the CPU (RELIABILITY.md group B): run with OCL_ICD_VENDORS naming both
// PoCL (a CPU) and oclgrind (a simulator whose device says it is a GPU), listed so that the CPU
// comes first (OCL_ICD_PLATFORM_SORT=none keeps that order). The default BufferManager must pick
// the GPU; "cpu" still picks the CPU. Skips when the two devices are not both visible (oclgrind is
// not installed).
#include <algorithm>
#include <iostream>
#include <string>

#include "support/device_test.hpp"

namespace {

TEST(GpuPreferred, DefaultManagerPicksTheGpuOverTheCpu) {
  const auto devices = clbuf::list_devices();
  std::size_t first_cpu = devices.size(), first_gpu = devices.size();
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].type == clbuf::DeviceType::cpu && first_cpu == devices.size()) first_cpu = i;
    if (devices[i].type == clbuf::DeviceType::gpu && first_gpu == devices.size()) first_gpu = i;
  }
  if (first_cpu == devices.size() || first_gpu == devices.size()) {
    GTEST_SKIP() << "needs a CPU and a GPU device (PoCL and oclgrind through OCL_ICD_VENDORS)";
  }
  // With OCL_ICD_PLATFORM_SORT=none the loader keeps the vendor folder's order and PoCL's CPU
  // is listed first, so "the first device" and "the first GPU" differ.
  std::cout << "[ devices  ] first CPU at " << first_cpu << ", first GPU at " << first_gpu << "\n";
  clbuf::BufferManager manager;
  EXPECT_EQ(manager.device().type, clbuf::DeviceType::gpu) << manager.device().name;
  EXPECT_EQ(manager.device().name, devices[first_gpu].name);
  EXPECT_NE(manager.selection_reason().find("GPU"), std::string::npos);
  clbuf::BufferManager cpu("cpu");
  EXPECT_EQ(cpu.device().type, clbuf::DeviceType::cpu);
}

// MemoryModel::host writes a buffer's memory as plain host memory, which only a CPU device
// reads: on oclgrind's GPU it is refused at construction, naming the device and its type.
TEST(GpuPreferred, HostMemoryModelOnAGpuIsInvalidValue) {
  const auto devices = clbuf::list_devices();
  const auto gpu = std::find_if(devices.begin(), devices.end(), [](const clbuf::DeviceInfo& d) {
    return d.type == clbuf::DeviceType::gpu;
  });
  if (gpu == devices.end()) GTEST_SKIP() << "needs a GPU device (oclgrind through OCL_ICD_VENDORS)";
  clbuf::Options options;
  options.memory = clbuf::MemoryModel::host;
  EXPECT_CLBUF_ERROR(clbuf::BufferManager("gpu", options), CL_INVALID_VALUE, "BufferManager: ",
                     "MemoryModel::host needs a CPU device; " + gpu->name + " is a gpu",
                     "(use MemoryModel::automatic)");
  options.memory = clbuf::MemoryModel::automatic;
  clbuf::BufferManager automatic("gpu", options);  // the same device is fine otherwise
  EXPECT_NE(automatic.memory_model(), clbuf::MemoryModel::host);
}

}  // namespace
