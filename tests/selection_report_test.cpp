// SPDX-License-Identifier: MIT
// explain_selection(): every device considered, the one picked with the manager's own reason,
// every other with why it was rejected; CLBUF_DEVICE honoured; CLBUF_DEBUG=1 logs the report.
#include <string>

#include "support/device_test.hpp"

namespace {

using clbuf_test::DeviceTest;
using clbuf_test::has_fragments;
using clbuf_test::ScopedEnv;

class SelectionReport : public DeviceTest {};

TEST_F(SelectionReport, DefaultPicksWhatTheManagerPicksForTheSameReason) {
  ScopedEnv no_override("CLBUF_DEVICE", nullptr);
  const clbuf::SelectionReport report = clbuf::explain_selection();
  const clbuf::BufferManager chosen;
  ASSERT_EQ(report.devices.size(), clbuf::list_devices().size());
  const clbuf::DeviceVerdict* picked = report.picked();
  ASSERT_NE(picked, nullptr);
  EXPECT_EQ(picked->device.name, chosen.device().name);
  EXPECT_EQ(picked->device.platform_index, chosen.device().platform_index);
  EXPECT_EQ(picked->device.device_index, chosen.device().device_index);
  EXPECT_EQ(picked->reason, chosen.selection_reason());
  EXPECT_EQ(report.origin, "default");
  EXPECT_TRUE(report.problem.empty());
  std::size_t picked_count = 0;
  for (const clbuf::DeviceVerdict& verdict : report.devices) {
    picked_count += verdict.picked ? 1 : 0;
    EXPECT_FALSE(verdict.reason.empty());
  }
  EXPECT_EQ(picked_count, 1u);
  EXPECT_TRUE(has_fragments(
      report.to_string(),
      {"clbuf device selection by the default (GPU preferred)", "picked: ", picked->device.name}));
}

TEST_F(SelectionReport, ASelectorThatMatchesNothingRejectsEveryDeviceWithAReason) {
  const clbuf::SelectionReport report = clbuf::explain_selection("no-such-device-xyz");
  EXPECT_EQ(report.picked(), nullptr);
  EXPECT_EQ(report.origin, "selector");
  ASSERT_FALSE(report.devices.empty());
  for (const clbuf::DeviceVerdict& verdict : report.devices) {
    EXPECT_FALSE(verdict.picked);
    EXPECT_EQ(verdict.reason, "its name does not contain \"no-such-device-xyz\" (from selector)");
  }
  EXPECT_EQ(report.problem, "no device matches \"no-such-device-xyz\" (from selector)");
  EXPECT_TRUE(has_fragments(report.to_string(),
                            {"rejected: its name does not contain", "nothing picked: "}));
}

TEST_F(SelectionReport, ATypeSelectorSaysWhyOtherTypesAreRejected) {
  const clbuf::DeviceType present = manager().device().type;
  const char* absent = present == clbuf::DeviceType::accelerator ? "gpu" : "accelerator";
  const clbuf::SelectionReport report = clbuf::explain_selection(absent);
  bool any_other = false;
  for (const clbuf::DeviceVerdict& verdict : report.devices) {
    if (verdict.device.type == present) {
      any_other = true;
      EXPECT_TRUE(has_fragments(verdict.reason, {std::string("a ") + clbuf::to_string(present) +
                                                 " device, not the " + absent + " device"}));
    }
  }
  EXPECT_TRUE(any_other);
}

TEST_F(SelectionReport, IndexSelectorAndEnvironment) {
  const std::string index = std::to_string(manager().device().platform_index) + ":" +
                            std::to_string(manager().device().device_index);
  ScopedEnv device("CLBUF_DEVICE", index.c_str());
  const clbuf::SelectionReport report = clbuf::explain_selection();
  EXPECT_EQ(report.origin, "CLBUF_DEVICE");
  EXPECT_EQ(report.selector, index);
  ASSERT_NE(report.picked(), nullptr);
  EXPECT_EQ(report.picked()->device.name, manager().device().name);
  EXPECT_TRUE(has_fragments(report.picked()->reason, {"as \"" + index + "\" (from CLBUF_DEVICE)"}));
  // An explicit selector wins over the environment, as in BufferManager(selector).
  EXPECT_EQ(clbuf::explain_selection("none-such").origin, "selector");
}

TEST_F(SelectionReport, DebugSwitchLogsTheReportAtConstruction) {
  {
    ScopedEnv debug("CLBUF_DEBUG", "1");
    ::testing::internal::CaptureStderr();
    const clbuf::BufferManager logged;
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(
        has_fragments(log, {"clbuf device selection by ", "picked: " + logged.selection_reason()}));
  }
  ScopedEnv quiet("CLBUF_DEBUG", nullptr);
  ::testing::internal::CaptureStderr();
  const clbuf::BufferManager silent;
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
