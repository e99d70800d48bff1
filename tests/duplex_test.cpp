// SPDX-License-Identifier: MIT
// Staged transfers in both directions at once (issue 19, full duplex): uploads and downloads run
// in two lanes, each with its own queue, pinned slots and threads, so an upload and a download
// from two threads overlap on the bus. What must still hold: every byte exact in both lanes, a
// transfer never interleaves with an overlapping one of the other lane (ordering by device
// bytes), the manager's queue order for asynchronous staged transfers, and cleanup() while
// both lanes are busy. A discrete manager with a small staging threshold, so that PoCL runs the
// staged code; the tsan label runs it under ThreadSanitizer.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::DeviceTest;
using clbuf_test::same_bytes;

class Duplex : public DeviceTest {
 protected:
  static constexpr std::size_t chunk = 64 << 10;
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    clbuf::Options options;
    options.memory = clbuf::MemoryModel::discrete;
    options.staging_threshold_bytes = 2 * chunk;
    options.staging_chunk_bytes = chunk;
    options.staging_chunks = 8;
    options.copy_threads = 4;
    staged_ = std::make_unique<clbuf::BufferManager>(std::string(), options);
  }
  clbuf::BufferManager& staged() { return *staged_; }
  std::unique_ptr<clbuf::BufferManager> staged_;
};

// Runs `upload` and `download` on two threads at once and returns how many clbuf::Errors they
// threw; `upload_done`, when given, is set once `upload` has returned or thrown.
int on_two_threads(const std::function<void()>& upload, const std::function<void()>& download,
                   std::atomic<bool>* upload_done = nullptr) {
  std::atomic<int> errors{0};
  std::thread uploader([&] {
    try {
      upload();
    } catch (const clbuf::Error&) {
      ++errors;
    }
    if (upload_done != nullptr) *upload_done = true;
  });
  std::thread downloader([&] {
    try {
      download();
    } catch (const clbuf::Error&) {
      ++errors;
    }
  });
  uploader.join();
  downloader.join();
  return errors;
}

// Whether the `count` values at `values` are all one value (a whole upload, not a mix of two).
bool uniform(const std::uint32_t* values, std::size_t count) {
  return std::all_of(values, values + count, [&](std::uint32_t v) { return v == values[0]; });
}

TEST_F(Duplex, UploadsAndDownloadsOnTwoThreadsStayExact) {
  const std::size_t count = 300000;  // 1.2 MiB: ~18 chunks each way
  const auto source = random<std::uint32_t>(count);
  const auto fixed = staged().upload(source);
  auto target = staged().allocate<std::uint32_t>(count);
  std::vector<std::vector<std::uint32_t>> rounds;
  for (int i = 0; i < 8; ++i) rounds.push_back(random<std::uint32_t>(count));
  int wrong = 0;
  const int errors = on_two_threads(
      [&] {
        for (const auto& data : rounds) staged().upload(target, data);
      },
      [&] {
        std::vector<std::uint32_t> out(count);
        for (int i = 0; i < 8; ++i) {
          staged().download(fixed, out.data(), count);
          if (out != source) ++wrong;
        }
      });
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(errors, 0);
  EXPECT_TRUE(same_bytes(rounds.back(), staged().download(target)));
}

// The two lanes order by device bytes: a download of the buffer being uploaded from another
// thread sees one whole upload, never chunks of two (the rule a single lane gave by running one
// transfer at a time). Each upload writes one value everywhere.
TEST_F(Duplex, ADownloadNeverInterleavesWithAnOverlappingUpload) {
  const std::size_t count = 200000;
  auto buffer = staged().upload(std::vector<std::uint32_t>(count, 0));
  std::atomic<bool> done{false};
  int torn = 0, downloads = 0;
  const int errors = on_two_threads(
      [&] {
        for (std::uint32_t value = 1; value <= 30; ++value) {
          staged().upload(buffer, std::vector<std::uint32_t>(count, value));
        }
      },
      [&] {
        std::vector<std::uint32_t> out(count);
        for (; !done; ++downloads) {
          staged().download(buffer, out.data(), count);
          if (!uniform(out.data(), count)) ++torn;
        }
      },
      &done);
  EXPECT_EQ(torn, 0) << "of " << downloads << " downloads";
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(staged().download(buffer), std::vector<std::uint32_t>(count, 30));
}

// The ordering by device bytes sees through an adopted sub-buffer to its parent: a download of
// the parent never interleaves with an upload into the sub-buffer from another thread.
TEST_F(Duplex, AnAdoptedSubBufferOrdersWithItsParent) {
  const std::size_t total = 1 << 20, begin = 256 << 10, length = 512 << 10;  // bytes
  cl::Buffer parent(staged().context(), CL_MEM_READ_WRITE, total);
  const cl_buffer_region area = {begin, length};
  cl_int err = CL_SUCCESS;
  cl::Buffer sub =
      parent.createSubBuffer(CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &area, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  auto whole = staged().adopt<std::uint32_t>(parent, total / 4);
  auto part = staged().adopt<std::uint32_t>(sub, length / 4);
  staged().upload(whole, std::vector<std::uint32_t>(total / 4, 0));
  std::atomic<bool> done{false};
  int torn = 0;
  const int errors = on_two_threads(
      [&] {
        for (std::uint32_t value = 1; value <= 20; ++value) {
          staged().upload(part, std::vector<std::uint32_t>(length / 4, value));
        }
      },
      [&] {
        std::vector<std::uint32_t> out(total / 4);
        while (!done) {
          staged().download(whole, out.data(), out.size());
          if (!uniform(out.data() + begin / 4, length / 4)) ++torn;
        }
      },
      &done);
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(errors, 0);
  std::vector<std::uint32_t> expected(total / 4, 0);
  std::fill(expected.begin() + begin / 4, expected.begin() + (begin + length) / 4, 20u);
  EXPECT_TRUE(same_bytes(expected, staged().download(whole)));
}

// Disjoint parts of one buffer (a view each) move both ways at once, exact, and neither
// touches the other's bytes.
TEST_F(Duplex, ViewsOfOneBufferMoveBothWaysAtOnce) {
  const std::size_t half = 150000;
  const auto initial = random<std::uint32_t>(2 * half);
  auto buffer = staged().upload(initial);
  auto low = staged().view(buffer, 0, half);
  auto high = staged().view(buffer, half, half);
  const auto fresh = random<std::uint32_t>(half);
  std::vector<std::uint32_t> out(half);
  const int errors = on_two_threads(
      [&] {
        for (int i = 0; i < 5; ++i) staged().upload(low, fresh);
      },
      [&] {
        for (int i = 0; i < 5; ++i) staged().download(high, out.data(), half);
      });
  EXPECT_EQ(errors, 0);
  EXPECT_TRUE(same_bytes(initial.data() + half, out.data(), half * sizeof(std::uint32_t)));
  std::vector<std::uint32_t> expected(fresh);
  expected.insert(expected.end(), initial.begin() + half, initial.end());
  EXPECT_TRUE(same_bytes(expected, staged().download(buffer)));
}

// Asynchronous staged transfers keep the queue's order across lanes: an upload, then a download
// of the same bytes, then another upload, started back to back with no wait between.
TEST_F(Duplex, AsynchronousTransfersKeepQueueOrderAcrossLanes) {
  const std::size_t count = 200000;
  const auto first = random<std::uint32_t>(count);
  const auto second = random<std::uint32_t>(count);
  auto buffer = staged().allocate<std::uint32_t>(count);
  std::vector<std::uint32_t> seen(count);
  auto up1 = staged().upload_async(buffer, first.data(), count);
  auto down = staged().download_async(buffer, seen.data(), count);
  auto up2 = staged().upload_async(buffer, second.data(), count);
  up1.get();
  down.get();
  up2.get();
  EXPECT_TRUE(same_bytes(first, seen));
  EXPECT_TRUE(same_bytes(second, staged().download(buffer)));
}

// Asynchronous transfers of both lanes, on the same bytes and on others, with a copy between
// contexts (also a job of the background thread) among them, see one another in call order.
TEST_F(Duplex, AsynchronousJobsOfBothLanesAndACopyBetweenContextsKeepCallOrder) {
  const std::size_t count = 200000;
  const auto first = random<std::uint32_t>(count);
  const auto second = random<std::uint32_t>(count);
  const auto copied = random<std::uint32_t>(count);
  const auto other_data = random<std::uint32_t>(count);
  clbuf::BufferManager other;  // a context of its own
  const auto source = other.upload(copied);
  auto shared = staged().allocate<std::uint32_t>(count);
  auto apart = staged().upload(other_data);
  std::vector<std::uint32_t> seen_apart(count), seen_copy(count);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    auto up1 = staged().upload_async(shared, first.data(), count);
    auto down_apart = staged().download_async(apart, seen_apart.data(), count);
    auto copy = staged().copy_from_async(other, source, shared);
    auto down_copy = staged().download_async(shared, seen_copy.data(), count);
    auto up2 = staged().upload_async(shared, second.data(), count);
    up2.get();
    down_copy.get();
    copy.get();
    down_apart.get();
    up1.get();
    EXPECT_TRUE(same_bytes(other_data, seen_apart));
    EXPECT_TRUE(same_bytes(copied, seen_copy));
    EXPECT_TRUE(same_bytes(second, staged().download(shared)));
  }
}

// cleanup() while both lanes are busy on other threads: every call either completes exactly or
// throws clbuf::Error; nothing hangs or crashes.
TEST_F(Duplex, CleanupWhileBothLanesAreBusy) {
  const std::size_t count = 200000;
  const auto data = random<std::uint32_t>(count);
  auto source = staged().upload(data);
  auto target = staged().allocate<std::uint32_t>(count);
  std::atomic<int> wrong{0};
  std::thread uploader([&] {
    try {
      for (int i = 0; i < 20; ++i) staged().upload(target, data);
    } catch (const clbuf::Error&) {
    }
  });
  std::thread downloader([&] {
    try {
      std::vector<std::uint32_t> out(count);
      for (int i = 0; i < 20; ++i) {
        staged().download(source, out.data(), count);
        if (out != data) ++wrong;
      }
    } catch (const clbuf::Error&) {
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  staged().cleanup();
  uploader.join();
  downloader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_THROW(static_cast<void>(staged().download(source)), clbuf::Error);
}

}  // namespace
