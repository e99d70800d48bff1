// SPDX-License-Identifier: MIT
// Device discovery and selection: list_devices(), the selector grammar of
// BufferManager(selector) and CLBUF_DEVICE, the GPU-first default, and its error messages.
#include "support/device_test.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace {

using clbuf_test::DeviceTest;
using clbuf_test::ScopedEnv;

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string swap_case(std::string text) {
  for (char& c : text) {
    const auto u = static_cast<unsigned char>(c);
    c = static_cast<char>(std::islower(u) ? std::toupper(u) : std::tolower(u));
  }
  return text;
}

bool any_name_contains(const std::vector<clbuf::DeviceInfo>& devices, const std::string& text) {
  return std::any_of(devices.begin(), devices.end(), [&](const clbuf::DeviceInfo& d) {
    return lower(d.name).find(lower(text)) != std::string::npos;
  });
}

const clbuf::DeviceInfo* first_of(const std::vector<clbuf::DeviceInfo>& devices,
                                  clbuf::DeviceType type) {
  for (const auto& d : devices) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

/// The device DESIGN.md's default rule picks: first GPU, else first CPU, else the first device.
const clbuf::DeviceInfo& expected_default(const std::vector<clbuf::DeviceInfo>& devices) {
  if (const auto* gpu = first_of(devices, clbuf::DeviceType::gpu)) return *gpu;
  if (const auto* cpu = first_of(devices, clbuf::DeviceType::cpu)) return *cpu;
  return devices.front();
}

::testing::AssertionResult is_device(const clbuf::DeviceInfo& actual,
                                     const clbuf::DeviceInfo& expected) {
  if (actual.platform_index != expected.platform_index ||
      actual.device_index != expected.device_index || actual.name != expected.name ||
      actual.platform != expected.platform) {
    return ::testing::AssertionFailure()
           << "got [" << actual.platform_index << ":" << actual.device_index << "] " << actual.name
           << " (" << actual.platform << "), expected [" << expected.platform_index << ":"
           << expected.device_index << "] " << expected.name << " (" << expected.platform << ")";
  }
  return ::testing::AssertionSuccess();
}

/// Device tests: the fixture proves a device exists; CLBUF_DEVICE is cleared for each test so
/// that selectors are seen alone.
class DeviceSelection : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    devices_ = clbuf::list_devices();
    ASSERT_FALSE(devices_.empty()) << "a manager exists, so list_devices() must list its device";
  }

  /// Expects BufferManager(selector) to throw CL_DEVICE_NOT_FOUND naming the selector and
  /// listing every device.
  void expect_not_found(const std::string& selector) {
    SCOPED_TRACE("selector \"" + selector + "\"");
    std::vector<std::string> fragments{
        "BufferManager: ", clbuf_test::code_text(CL_DEVICE_NOT_FOUND), selector};
    for (const auto& d : devices_) fragments.push_back(d.name);
    EXPECT_CLBUF_ERROR(clbuf::BufferManager(selector), CL_DEVICE_NOT_FOUND, fragments);
  }

  ScopedEnv no_env_{"CLBUF_DEVICE", nullptr};
  std::vector<clbuf::DeviceInfo> devices_;
};

TEST_F(DeviceSelection, ListDevicesFieldsAreFilledIn) {
  for (const auto& d : devices_) {
    SCOPED_TRACE(d.name);
    EXPECT_FALSE(d.platform.empty());
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.global_mem_bytes, 0u);
    EXPECT_GT(d.max_alloc_bytes, 0u);
    EXPECT_LE(d.max_alloc_bytes, d.global_mem_bytes);
    // Names come trimmed and without the C string terminator.
    EXPECT_EQ(d.name.find('\0'), std::string::npos);
    EXPECT_EQ(d.platform.find('\0'), std::string::npos);
  }
}

TEST_F(DeviceSelection, ListDevicesIndicesAreConsistent) {
  std::size_t platform = devices_.front().platform_index;
  std::size_t next_device = 0;
  for (const auto& d : devices_) {
    if (d.platform_index != platform) {
      EXPECT_GT(d.platform_index, platform) << "platforms are listed in order";
      platform = d.platform_index;
      next_device = 0;
    }
    EXPECT_EQ(d.device_index, next_device) << d.name;
    ++next_device;
  }
}

TEST_F(DeviceSelection, ListDevicesAgreesWithRawOpenCl) {
  std::vector<cl::Platform> platforms;
  ASSERT_EQ(cl::Platform::get(&platforms), CL_SUCCESS);
  std::size_t listed = 0;
  for (std::size_t p = 0; p < platforms.size(); ++p) {
    std::vector<cl::Device> devs;
    platforms[p].getDevices(CL_DEVICE_TYPE_ALL, &devs);  // a platform may have none
    for (std::size_t d = 0; d < devs.size(); ++d) {
      ASSERT_LT(listed, devices_.size());
      const auto& info = devices_[listed++];
      EXPECT_EQ(info.platform_index, p);
      EXPECT_EQ(info.device_index, d);
      EXPECT_EQ(info.max_alloc_bytes, devs[d].getInfo<CL_DEVICE_MAX_MEM_ALLOC_SIZE>());
      EXPECT_EQ(info.global_mem_bytes, devs[d].getInfo<CL_DEVICE_GLOBAL_MEM_SIZE>());
      const cl_device_type type = devs[d].getInfo<CL_DEVICE_TYPE>();
      if (type & CL_DEVICE_TYPE_GPU) {
        EXPECT_EQ(info.type, clbuf::DeviceType::gpu);
      } else if (type & CL_DEVICE_TYPE_CPU) {
        EXPECT_EQ(info.type, clbuf::DeviceType::cpu);
      } else if (type & CL_DEVICE_TYPE_ACCELERATOR) {
        EXPECT_EQ(info.type, clbuf::DeviceType::accelerator);
      }
    }
  }
  EXPECT_EQ(listed, devices_.size());
}

TEST_F(DeviceSelection, ManagerDeviceIsOneOfTheListed) {
  const auto& used = manager().device();
  bool found = false;
  for (const auto& d : devices_) found = found || is_device(used, d);
  EXPECT_TRUE(found) << used.name;
}

TEST_F(DeviceSelection, DefaultPrefersGpuElseCpu) {
  clbuf::BufferManager chosen;
  EXPECT_TRUE(is_device(chosen.device(), expected_default(devices_)));
  EXPECT_FALSE(chosen.selection_reason().empty());
}

TEST_F(DeviceSelection, DefaultPicksTheCpuWhenThereIsNoGpu) {
  if (first_of(devices_, clbuf::DeviceType::gpu) != nullptr) {
    GTEST_SKIP() << "this machine has a GPU";
  }
  const auto* cpu = first_of(devices_, clbuf::DeviceType::cpu);
  ASSERT_NE(cpu, nullptr) << "PoCL provides a CPU device here";
  clbuf::BufferManager chosen;
  EXPECT_EQ(chosen.device().type, clbuf::DeviceType::cpu);
  EXPECT_TRUE(is_device(chosen.device(), *cpu));
  EXPECT_FALSE(chosen.selection_reason().empty());
}

TEST_F(DeviceSelection, CpuSelectorPicksTheFirstCpu) {
  const auto* cpu = first_of(devices_, clbuf::DeviceType::cpu);
  if (cpu == nullptr) {
    expect_not_found("cpu");
    return;
  }
  clbuf::BufferManager chosen("cpu");
  EXPECT_TRUE(is_device(chosen.device(), *cpu));
  EXPECT_FALSE(chosen.selection_reason().empty());
}

TEST_F(DeviceSelection, TypeSelectorsIgnoreCase) {
  const auto* cpu = first_of(devices_, clbuf::DeviceType::cpu);
  if (cpu == nullptr) GTEST_SKIP() << "no CPU device";
  for (const char* selector : {"CPU", "Cpu", "cPU"}) {
    clbuf::BufferManager chosen(selector);
    EXPECT_TRUE(is_device(chosen.device(), *cpu)) << selector;
  }
}

TEST_F(DeviceSelection, GpuSelectorPicksAGpuOrReportsNone) {
  const auto* gpu = first_of(devices_, clbuf::DeviceType::gpu);
  if (gpu == nullptr) {
    expect_not_found("gpu");  // PoCL: no GPU, and no silent fallback for an explicit selector
    return;
  }
  clbuf::BufferManager chosen("gpu");
  EXPECT_TRUE(is_device(chosen.device(), *gpu));
}

TEST_F(DeviceSelection, AcceleratorSelectorPicksOneOrReportsNone) {
  const auto* accelerator = first_of(devices_, clbuf::DeviceType::accelerator);
  if (accelerator == nullptr) {
    expect_not_found("accelerator");
    return;
  }
  clbuf::BufferManager chosen("accelerator");
  EXPECT_TRUE(is_device(chosen.device(), *accelerator));
}

TEST_F(DeviceSelection, IndexSelectorPicksEveryListedDevice) {
  for (const auto& d : devices_) {
    const std::string selector =
        std::to_string(d.platform_index) + ":" + std::to_string(d.device_index);
    clbuf::BufferManager chosen(selector);
    EXPECT_TRUE(is_device(chosen.device(), d)) << selector;
    EXPECT_FALSE(chosen.selection_reason().empty());
  }
}

TEST_F(DeviceSelection, IndexSelectorZeroZeroPicksTheFirstDevice) {
  clbuf::BufferManager chosen("0:0");
  EXPECT_TRUE(is_device(chosen.device(), devices_.front()));
}

TEST_F(DeviceSelection, IndexSelectorOutOfRangeIsNotFound) {
  expect_not_found("9:9");
  const std::string past_last_device = std::to_string(devices_.back().platform_index) + ":" +
                                       std::to_string(devices_.back().device_index + 1);
  expect_not_found(past_last_device);
}

TEST_F(DeviceSelection, NameSubstringMatchesIgnoringCase) {
  const std::string& name = devices_.front().name;
  // A piece of the name that cannot be read as a type keyword or P:D.
  std::string piece = name.substr(0, std::min<std::size_t>(name.size(), 7));
  if (lower(piece) == "gpu" || lower(piece) == "cpu" || piece.find(':') != std::string::npos) {
    piece = name;
  }
  for (const std::string& selector : {piece, swap_case(piece), lower(piece)}) {
    clbuf::BufferManager chosen(selector);
    EXPECT_NE(lower(chosen.device().name).find(lower(piece)), std::string::npos)
        << "selector \"" << selector << "\" chose " << chosen.device().name;
    EXPECT_FALSE(chosen.selection_reason().empty());
  }
}

TEST_F(DeviceSelection, WholeNameInOtherCaseMatches) {
  const std::string& name = devices_.front().name;
  clbuf::BufferManager chosen(swap_case(name));
  EXPECT_EQ(lower(chosen.device().name), lower(name));
}

TEST_F(DeviceSelection, GarbageSelectorsAreNotFound) {
  for (const std::string selector :
       {"no-such-device-xyzzy", "0:x", "-1:0", "1:2:3", "gpu0", "cpux", "%%%"}) {
    if (any_name_contains(devices_, selector)) continue;
    expect_not_found(selector);
  }
}

// Control bytes of a selector are shown as escapes in the error and in the report, so a stray
// newline or tab (from a file or a shell variable) is visible where the text went wrong.
TEST_F(DeviceSelection, ControlBytesInASelectorAreShownEscaped) {
  const std::string selector = "no\nsuch\tdevice\x01\x1f\x7f";
  const std::string shown = "no\\nsuch\\tdevice\\x01\\x1f\\x7f";
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(selector), CL_DEVICE_NOT_FOUND, shown);
  const std::string report = clbuf::explain_selection(selector).to_string();
  EXPECT_NE(report.find(shown), std::string::npos) << report;
  EXPECT_EQ(report.find(selector), std::string::npos) << "the raw bytes are shown: " << report;
}

TEST_F(DeviceSelection, NotFoundMessageListsEveryDevice) {
  try {
    clbuf::BufferManager unused("no-such-device-xyzzy");
    ADD_FAILURE() << "did not throw";
  } catch (const clbuf::Error& error) {
    EXPECT_EQ(error.code(), CL_DEVICE_NOT_FOUND);
    const std::string message = error.what();
    for (const auto& d : devices_) {
      EXPECT_NE(message.find(d.name), std::string::npos) << message;
      EXPECT_NE(message.find(d.platform), std::string::npos) << message;
    }
  }
}

TEST_F(DeviceSelection, EnvironmentVariableIsReadAtEachConstruction) {
  {
    ScopedEnv env("CLBUF_DEVICE", "9:9");
    EXPECT_CLBUF_ERROR(clbuf::BufferManager(), CL_DEVICE_NOT_FOUND, "BufferManager: ", "9:9");
  }
  {
    ScopedEnv env("CLBUF_DEVICE", "0:0");
    clbuf::BufferManager chosen;
    EXPECT_TRUE(is_device(chosen.device(), devices_.front()));
  }
  {
    ScopedEnv env("CLBUF_DEVICE", "no-such-device-xyzzy");
    EXPECT_CLBUF_ERROR(clbuf::BufferManager(), CL_DEVICE_NOT_FOUND, "no-such-device-xyzzy");
  }
  // Unset again: the default rule, not a cached value.
  clbuf::BufferManager chosen;
  EXPECT_TRUE(is_device(chosen.device(), expected_default(devices_)));
}

TEST_F(DeviceSelection, EnvironmentVariableSelectsByTypeAndName) {
  const auto* cpu = first_of(devices_, clbuf::DeviceType::cpu);
  if (cpu != nullptr) {
    ScopedEnv env("CLBUF_DEVICE", "cpu");
    clbuf::BufferManager chosen;
    EXPECT_TRUE(is_device(chosen.device(), *cpu));
    EXPECT_FALSE(chosen.selection_reason().empty());
  }
  {
    ScopedEnv env("CLBUF_DEVICE", swap_case(devices_.back().name).c_str());
    clbuf::BufferManager chosen;
    EXPECT_EQ(lower(chosen.device().name), lower(devices_.back().name));
  }
  if (first_of(devices_, clbuf::DeviceType::gpu) == nullptr) {
    ScopedEnv env("CLBUF_DEVICE", "gpu");
    EXPECT_CLBUF_ERROR(clbuf::BufferManager(), CL_DEVICE_NOT_FOUND, "gpu");
  }
}

TEST_F(DeviceSelection, SelectedManagerTransfersData) {
  clbuf::BufferManager chosen("0:0");
  const auto data = random<float>(333);
  auto buffer = chosen.upload(data);
  EXPECT_TRUE(clbuf_test::same_bytes(data, chosen.download(buffer)));
}

TEST_F(DeviceSelection, SelectionReasonIsNonEmpty) {
  EXPECT_FALSE(manager().selection_reason().empty());
  clbuf::BufferManager by_index("0:0");
  EXPECT_FALSE(by_index.selection_reason().empty());
}

TEST_F(DeviceSelection, DeviceInfoSurvivesCleanup) {
  const clbuf::DeviceInfo before = manager().device();
  manager().cleanup();
  EXPECT_TRUE(is_device(manager().device(), before));
  EXPECT_EQ(manager().device().max_alloc_bytes, before.max_alloc_bytes);
}

TEST_F(DeviceSelection, ContextAndQueueUseTheSelectedDevice) {
  const cl::Device device = cl_device();
  EXPECT_NE(device.getInfo<CL_DEVICE_NAME>().find(manager().device().name), std::string::npos);
  EXPECT_EQ(manager().queue().getInfo<CL_QUEUE_DEVICE>()(), device());
  EXPECT_EQ(manager().queue().getInfo<CL_QUEUE_CONTEXT>()(), manager().context()());
  const cl_command_queue_properties props = manager().queue().getInfo<CL_QUEUE_PROPERTIES>();
  EXPECT_EQ(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, 0u) << "the queue must be in-order";
}

// The names messages and reports use for device types, and the OpenCL type bits behind them
// (a device may set several bits: GPU, then CPU, then accelerator decide; anything else is
// "other", e.g. CL_DEVICE_TYPE_CUSTOM, which PoCL does not offer).
TEST(DeviceTypeText, ToStringNamesEveryType) {
  EXPECT_STREQ(clbuf::to_string(clbuf::DeviceType::gpu), "gpu");
  EXPECT_STREQ(clbuf::to_string(clbuf::DeviceType::cpu), "cpu");
  EXPECT_STREQ(clbuf::to_string(clbuf::DeviceType::accelerator), "accelerator");
  EXPECT_STREQ(clbuf::to_string(clbuf::DeviceType::other), "other");
}

TEST(DeviceTypeText, OpenClTypeBitsMapToOneType) {
  using clbuf::DeviceType;
  using clbuf::detail::device_type_of;
  EXPECT_EQ(device_type_of(CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_DEFAULT), DeviceType::gpu);
  EXPECT_EQ(device_type_of(CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_CPU), DeviceType::gpu);
  EXPECT_EQ(device_type_of(CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_DEFAULT), DeviceType::cpu);
  EXPECT_EQ(device_type_of(CL_DEVICE_TYPE_ACCELERATOR), DeviceType::accelerator);
  EXPECT_EQ(device_type_of(CL_DEVICE_TYPE_CUSTOM), DeviceType::other);
  EXPECT_EQ(device_type_of(0), DeviceType::other);
}

}  // namespace
