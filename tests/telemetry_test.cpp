// SPDX-License-Identifier: MIT
// Transfer telemetry: bytes, operations and paths per direction, and the one-line summary (the
// path at every threshold: paths_test.cpp, PathBoundaries).
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

// Every counted operation counts on exactly one path: a direction's paths add up to its
// operations, and reset_stats() zeroes them with the rest.
TEST_F(TelemetryTest, PathsAddUpToTheOperationsAndResetWithThem) {
  const auto sum = [](const clbuf::PathStats& p) {
    return p.host_copy + p.staged + p.buffered + p.bounced + p.relayed + p.direct;
  };
  manager().reset_stats();
  const auto data = random<float>(3000);
  auto a = manager().upload(data);
  auto b = manager().allocate<float>(3000);
  manager().upload(b, data.data(), 100, 7);
  manager().upload_async(b, data).wait();
  static_cast<void>(manager().download(a));
  static_cast<void>(manager().download_async(a).get());
  manager().copy(a, b);
  manager().copy_bytes_async(a, b, 400, 4, 8).wait();
  manager().fill(b, 2.5f);
  manager().fill_async(b, 1.5f).wait();
  auto pinned = manager().allocate_pinned<float>(3000);
  manager().download(a, pinned);
  manager().upload(b, pinned);
  const auto stats = manager().stats();
  for (const clbuf::DirectionStats* d : {&stats.upload, &stats.download, &stats.copy}) {
    EXPECT_GT(d->operations, 0u);
    EXPECT_EQ(sum(d->paths), d->operations);
  }
  EXPECT_EQ(stats.upload.operations, 6u);
  EXPECT_EQ(stats.download.operations, 3u);
  EXPECT_EQ(stats.copy.operations, 2u);
  manager().reset_stats();
  const auto zero = manager().stats();
  for (const clbuf::DirectionStats* d : {&zero.upload, &zero.download, &zero.copy}) {
    EXPECT_EQ(sum(d->paths), 0u);
  }
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
