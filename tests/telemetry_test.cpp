// SPDX-License-Identifier: MIT
// Transfer telemetry: bytes and operations per direction, and the one-line summary.
#include "support/device_test.hpp"

namespace {

class TelemetryTest : public clbuf_test::DeviceTest {};

TEST_F(TelemetryTest, CountsBytesAndOperationsPerDirection) {
  manager().reset_stats();
  const auto data = random<float>(1000);
  auto a = manager().upload(data);
  auto b = manager().allocate<float>(1000);
  manager().copy(a, b);
  static_cast<void>(manager().download(b));  // counted, not checked
  manager().upload(b, data.data(), 10, 5);
  const auto stats = manager().stats();
  EXPECT_EQ(stats.upload.operations, 2u);
  EXPECT_EQ(stats.upload.bytes, 4040u);
  EXPECT_EQ(stats.download.operations, 1u);
  EXPECT_EQ(stats.download.bytes, 4000u);
  EXPECT_EQ(stats.copy.operations, 1u);
  EXPECT_EQ(stats.copy.bytes, 4000u);
}

TEST_F(TelemetryTest, AsyncTransfersAreCountedWhenStarted) {
  manager().reset_stats();
  auto future = manager().upload_async(random<double>(500));
  const auto buffer = future.get();
  auto down = manager().download_async(buffer);
  down.wait();
  const auto stats = manager().stats();
  EXPECT_EQ(stats.upload.operations, 1u);
  EXPECT_EQ(stats.upload.bytes, 4000u);
  EXPECT_EQ(stats.download.bytes, 4000u);
}

TEST_F(TelemetryTest, ZeroSizedWorkAndFailedChecksCountNothing) {
  manager().reset_stats();
  auto empty = manager().upload(std::vector<int>());
  static_cast<void>(manager().download(empty));
  auto small = manager().allocate<int>(4);
  EXPECT_THROW(manager().upload(small, std::vector<int>(5)), clbuf::Error);
  // The asynchronous forms of zero-sized work, and a fill and copies of none.
  manager().upload_async(std::vector<int>()).get();
  manager().upload_async(small, std::vector<int>()).get();
  manager().download_async(small, static_cast<int*>(nullptr), 0).get();
  static_cast<void>(manager().download_async(empty).get());
  manager().fill_async(small, 1, 0).get();
  manager().copy_bytes_async(small, small, 0).get();
  manager().copy_bytes(small, small, 0);
  const auto stats = manager().stats();
  EXPECT_EQ(stats.upload.operations, 0u);
  EXPECT_EQ(stats.upload.bytes, 0u);
  EXPECT_EQ(stats.download.operations, 0u);
  EXPECT_EQ(stats.copy.operations, 0u);
}

TEST_F(TelemetryTest, SummaryNamesEveryDirectionAndThePool) {
  static_cast<void>(manager().download(manager().upload(random<int>(256))));
  const std::string line = manager().stats().summary();
  EXPECT_TRUE(clbuf_test::has_fragments(
      line, {"upload 1 ops", "download 1 ops", "copy 0 ops", "GB/s", "pool"}))
      << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

}  // namespace
