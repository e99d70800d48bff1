// SPDX-License-Identifier: MIT
// Asynchronous transfers: Futures own the host memory they touch, complete in queue order, hand
// their result over once, and wait when dropped unwaited.
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::DeviceTest;
using clbuf_test::same_bytes;

static_assert(
    std::is_same<decltype(std::declval<clbuf::BufferManager&>().upload_async(std::vector<int>{})),
                 clbuf::Future<clbuf::DeviceBuffer<int>>>::value,
    "upload_async gives a Future of a buffer");
static_assert(std::is_same<decltype(std::declval<clbuf::BufferManager&>().download_async(
                               std::declval<const clbuf::DeviceBuffer<float>&>())),
                           clbuf::Future<std::vector<float>>>::value,
              "download_async gives a Future of a vector");

class Async : public DeviceTest {
 protected:
  /// Polls ready() for up to 30 s.
  template <class R>
  bool becomes_ready(const clbuf::Future<R>& future) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!future.ready()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }

  /// Scribbles over freshly freed heap memory, so a transfer still reading a released vector
  /// would read garbage.
  static void churn_heap() {
    for (int i = 0; i < 8; ++i) {
      std::vector<std::uint8_t> junk(std::size_t{1} << 20, static_cast<std::uint8_t>(0x5A + i));
      static_cast<void>(junk.data());
    }
  }
};

TEST_F(Async, UploadFromATemporarySurvivesTheTemporary) {
  const auto expected = random<float>(1 << 18);
  auto future = manager().upload_async(std::vector<float>(expected));  // a temporary copy
  churn_heap();
  const auto buffer = future.get();
  EXPECT_EQ(buffer.size(), expected.size());
  EXPECT_TRUE(same_bytes(expected, manager().download(buffer)));
}

TEST_F(Async, UploadFromAMovedVectorSurvivesIt) {
  auto data = random<double>(100000);
  const auto expected = data;
  std::optional<clbuf::Future<clbuf::DeviceBuffer<double>>> future;
  {
    std::vector<double> local = std::move(data);
    future.emplace(manager().upload_async(std::move(local)));
  }
  churn_heap();
  EXPECT_TRUE(same_bytes(expected, manager().download(future->get())));
}

TEST_F(Async, ReadyBecomesTrue) {
  auto up = manager().upload_async(random<std::int32_t>(5000));
  EXPECT_TRUE(becomes_ready(up));
  const auto buffer = up.get();
  auto down = manager().download_async(buffer);
  EXPECT_TRUE(becomes_ready(down));
  EXPECT_EQ(down.get().size(), 5000u);
}

TEST_F(Async, ReadyStaysTrueAfterWait) {
  const auto data = random<std::uint8_t>(1000);
  const auto buffer = manager().upload(data);
  auto future = manager().download_async(buffer);
  future.wait();
  EXPECT_TRUE(future.ready());
  future.wait();  // waiting again is harmless
  EXPECT_TRUE(same_bytes(data, future.get()));
}

TEST_F(Async, GetHandsTheResultOverOnce) {
  const auto data = random<float>(64);
  const auto buffer = manager().upload(data);
  auto future = manager().download_async(buffer);
  EXPECT_TRUE(same_bytes(data, future.get()));
  EXPECT_THROW(future.get(), clbuf::Error);
}

TEST_F(Async, UploadGetHandsTheBufferOverOnce) {
  auto future = manager().upload_async(random<std::int16_t>(10));
  const auto buffer = future.get();
  EXPECT_TRUE(buffer.valid());
  EXPECT_THROW(static_cast<void>(future.get()), clbuf::Error);
}

TEST_F(Async, DroppedDownloadFutureWaitsAndDoesNotCrash) {
  const auto data = random<std::uint32_t>(1 << 18);
  const auto buffer = manager().upload(data);
  for (int i = 0; i < 8; ++i) {
    auto dropped = manager().download_async(buffer);
  }
  static_cast<void>(manager().download_async(buffer));  // a temporary, dropped at once
  churn_heap();
  EXPECT_TRUE(same_bytes(data, manager().download(buffer)));
}

TEST_F(Async, DroppedUploadFutureDoesNotCrash) {
  for (int i = 0; i < 8; ++i) {
    auto dropped = manager().upload_async(random<float>(10000));
  }
  static_cast<void>(manager().upload_async(random<float>(10000)));
  churn_heap();
  manager().finish();
}

TEST_F(Async, OrderingUploadCopyDownloadWithoutWaits) {
  const std::size_t n = 1 << 16;
  const auto first = random<float>(n);
  const auto second = random<float>(n);
  auto a = manager().allocate<float>(n);
  auto b = manager().allocate<float>(n);
  auto c = manager().allocate<float>(n);
  manager().upload(a, first);
  manager().copy(a, b);
  manager().copy_bytes(b, c, n * sizeof(float));
  auto from_c = manager().download_async(c);
  // Queued after the download: must not be seen by it.
  manager().upload(c, second);
  auto c_later = manager().download_async(c);
  EXPECT_TRUE(same_bytes(second, c_later.get()));
  EXPECT_TRUE(same_bytes(first, from_c.get()));
  EXPECT_TRUE(same_bytes(first, manager().download(b)));
}

TEST_F(Async, OrderingAsyncUploadThenCopyThenAsyncDownload) {
  const auto data = random<std::int64_t>(50000);
  auto uploaded = manager().upload_async(data);
  const auto src = uploaded.get();
  auto dst = manager().allocate<std::int64_t>(data.size());
  manager().copy(src, dst);
  auto downloaded = manager().download_async(dst);
  EXPECT_TRUE(same_bytes(data, downloaded.get()));
}

TEST_F(Async, SeveralFuturesInFlight) {
  constexpr int count = 12;
  std::vector<std::vector<std::uint16_t>> inputs;
  std::vector<clbuf::Future<clbuf::DeviceBuffer<std::uint16_t>>> uploads;
  for (int i = 0; i < count; ++i) {
    inputs.push_back(random<std::uint16_t>(pick(1, 40000)));
    uploads.push_back(manager().upload_async(inputs.back()));
  }
  std::vector<clbuf::DeviceBuffer<std::uint16_t>> buffers;
  for (auto& future : uploads) buffers.push_back(future.get());
  std::vector<clbuf::Future<std::vector<std::uint16_t>>> downloads;
  for (const auto& buffer : buffers) downloads.push_back(manager().download_async(buffer));
  // Taken in reverse order of issue.
  for (int i = count - 1; i >= 0; --i) {
    const auto index = static_cast<std::size_t>(i);
    EXPECT_TRUE(same_bytes(inputs[index], downloads[index].get())) << "transfer " << i;
  }
}

TEST_F(Async, DownloadSurvivesItsBufferBeingDestroyed) {
  const auto data = random<float>(1 << 16);
  auto buffer = std::make_unique<clbuf::DeviceBuffer<float>>(manager().upload(data));
  auto future = manager().download_async(*buffer);
  buffer.reset();
  // New memory of the same size may reuse the freed buffer; the queue keeps the order.
  const auto other = manager().upload(random<float>(1 << 16));
  EXPECT_TRUE(same_bytes(data, future.get()));
  static_cast<void>(other);
}

TEST_F(Async, MovedFutureDeliversTheResult) {
  const auto data = random<std::uint8_t>(4096);
  const auto buffer = manager().upload(data);
  auto future = manager().download_async(buffer);
  clbuf::Future<std::vector<std::uint8_t>> moved(std::move(future));
  std::vector<clbuf::Future<std::vector<std::uint8_t>>> holder;
  holder.push_back(std::move(moved));
  EXPECT_TRUE(same_bytes(data, holder.front().get()));
}

TEST_F(Async, EmptyTransfersAreReadyAtOnce) {
  auto up = manager().upload_async(std::vector<double>{});
  EXPECT_TRUE(becomes_ready(up));
  const auto buffer = up.get();
  EXPECT_TRUE(buffer.valid());
  EXPECT_TRUE(buffer.empty());
  auto down = manager().download_async(buffer);
  EXPECT_TRUE(becomes_ready(down));
  EXPECT_TRUE(down.get().empty());
}

TEST_F(Async, AsyncRoundTripsAtBoundarySizes) {
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{4095}, std::size_t{4096},
                        std::size_t{4097}, (std::size_t{1} << 20) + 1}) {
    const auto data = random_raw<std::uint8_t>(n);
    const auto buffer = manager().upload_async(data).get();
    ASSERT_TRUE(same_bytes(data, manager().download_async(buffer).get())) << n << " bytes";
  }
}

}  // namespace
