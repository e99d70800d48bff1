// SPDX-License-Identifier: MIT
// Asynchronous forms of every operation (issue 11) on every transfer path, the staged one
// included: exact data, order against blocking calls and later work on the queue, events in
// (`after`) and out (Future::event()), dropping a Future, and bad input. Staging is forced onto
// small sizes here (64 KiB threshold and chunks), so the pinned pipeline runs on any device.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_test::ModelTest;
using clbuf_test::same_bytes;

constexpr std::size_t kStagedBytes = std::size_t{64} << 10;

/// Sizes around the staging threshold and the chunk size, odd ones included.
std::vector<std::size_t> element_counts(std::size_t element_size) {
  const std::size_t chunk = kStagedBytes / element_size;
  return {0, 1, 7, chunk - 1, chunk, chunk + 1, 3 * chunk + 5, 37 * chunk + 11};
}

class AsyncOps : public ModelTest {
 protected:
  void configure(clbuf::Options& options) override {
    options.staging_threshold_bytes = kStagedBytes;
    options.staging_chunk_bytes = kStagedBytes;
    options.staging_chunks = 6;
  }

  /// A kernel that doubles every uint of a buffer (wrapping, as unsigned arithmetic does in C++
  /// too), built for the manager's context.
  cl::Kernel doubler() {
    cl::Program program(paths().context(),
                        "__kernel void twice(__global uint* v) { size_t i = get_global_id(0);"
                        " v[i] = 2 * v[i]; }");
    program.build();
    return cl::Kernel(program, "twice");
  }
};

TEST_P(AsyncOps, UploadAsyncOfAVectorIsExactAtEverySize) {
  for (std::size_t count : element_counts(sizeof(std::uint32_t))) {
    const auto expected = random<std::uint32_t>(count);
    auto future = paths().upload_async(expected);
    const auto buffer = future.get();
    ASSERT_EQ(buffer.size(), count);
    EXPECT_TRUE(same_bytes(expected, paths().download(buffer))) << count << " elements";
  }
}

TEST_P(AsyncOps, UploadAsyncFromAPointerIsExactAtEverySize) {
  for (std::size_t count : element_counts(sizeof(double))) {
    const auto expected = random<double>(count);
    auto future = paths().upload_async(expected.data(), expected.size());
    const auto buffer = future.get();
    EXPECT_TRUE(same_bytes(expected, paths().download(buffer))) << count << " elements";
  }
}

TEST_P(AsyncOps, UploadAsyncIntoABufferIsExactAtEverySizeAndOffset) {
  for (std::size_t count : element_counts(sizeof(std::uint16_t))) {
    const auto initial = random<std::uint16_t>(count + 9);
    const auto data = random<std::uint16_t>(count);
    auto owned = paths().upload(initial);
    auto borrowed = paths().upload(initial);
    auto a = paths().upload_async(owned, std::vector<std::uint16_t>(data), 4);
    auto b = paths().upload_async(borrowed, data.data(), count, 5);
    a.get();
    b.get();
    auto expected_a = initial;
    auto expected_b = initial;
    std::copy(data.begin(), data.end(), expected_a.begin() + 4);
    std::copy(data.begin(), data.end(), expected_b.begin() + 5);
    EXPECT_TRUE(same_bytes(expected_a, paths().download(owned))) << count;
    EXPECT_TRUE(same_bytes(expected_b, paths().download(borrowed))) << count;
  }
  auto buffer = paths().allocate<int>(10);
  EXPECT_CLBUF_ERROR((void)paths().upload_async(buffer, std::vector<int>(8), 3), CL_INVALID_VALUE,
                     "upload_async");
}

TEST_P(AsyncOps, UploadKernelDownloadChainNeedsNoHostWait) {
  const std::size_t count = 7 * kStagedBytes / sizeof(int) + 3;
  const auto data = random<std::uint32_t>(count);
  auto buffer = paths().allocate<std::uint32_t>(count);
  cl::CommandQueue mine(paths().context(), cl_device());
  cl::Kernel twice = doubler();
  twice.setArg(0, buffer.native());
  auto up = paths().upload_async(buffer, data.data(), count);
  const std::vector<cl::Event> uploaded = up.wait_list();
  cl::Event doubled;
  mine.enqueueNDRangeKernel(twice, cl::NullRange, cl::NDRange(count), cl::NullRange, &uploaded,
                            &doubled);
  mine.flush();
  auto down = paths().download_async(buffer, {doubled});
  std::vector<std::uint32_t> expected(count);
  for (std::size_t i = 0; i < count; ++i) expected[i] = 2u * data[i];
  EXPECT_EQ(down.get(), expected);
  up.get();
}

TEST_P(AsyncOps, DownloadAsyncIsExactAtEverySizeAndOffset) {
  for (std::size_t count : element_counts(sizeof(float))) {
    const auto data = random<float>(count + 9);
    const auto buffer = paths().upload(data);
    auto whole = paths().download_async(buffer);
    std::vector<float> part(count + 2, -1.0f);
    auto into = paths().download_async(buffer, part.data() + 1, count, 9);
    EXPECT_TRUE(same_bytes(data, whole.get())) << count;
    into.get();
    EXPECT_EQ(part.front(), -1.0f);
    EXPECT_EQ(part.back(), -1.0f);
    EXPECT_TRUE(same_bytes(data.data() + 9, part.data() + 1, count * sizeof(float))) << count;
  }
}

TEST_P(AsyncOps, AsyncDownloadsSeeExactlyTheBlockingCallsBeforeThem) {
  // Blocking uploads between async downloads of one buffer: each download sees what was there
  // at its call, never a later upload (staged: the blocking call waits for its turn behind the
  // async transfer, and nothing deadlocks).
  const std::size_t count = 5 * kStagedBytes / sizeof(int) + 3;
  std::vector<std::vector<int>> versions;
  for (int v = 0; v < 4; ++v) versions.push_back(random<int>(count));
  auto buffer = paths().upload(versions[0]);
  std::vector<clbuf::Future<std::vector<int>>> seen;
  for (std::size_t v = 1; v < 4; ++v) {
    seen.push_back(paths().download_async(buffer));
    paths().upload(buffer, versions[v]);
  }
  seen.push_back(paths().download_async(buffer));
  for (std::size_t v = 0; v < 4; ++v) EXPECT_TRUE(same_bytes(versions[v], seen[v].get())) << v;
}

TEST_P(AsyncOps, LaterWorkOnTheQueueWaitsForAnAsyncDownload) {
  // A fill queued right after download_async must not reach the bytes the download reads.
  const std::size_t count = 9 * kStagedBytes / sizeof(std::uint16_t) + 1;
  const auto data = random<std::uint16_t>(count);
  auto buffer = paths().upload(data);
  auto before = paths().download_async(buffer);
  paths().fill(buffer, std::uint16_t{0xBEEF});
  auto after = paths().download_async(buffer);
  EXPECT_TRUE(same_bytes(data, before.get()));
  EXPECT_EQ(after.get(), std::vector<std::uint16_t>(count, 0xBEEF));
}

TEST_P(AsyncOps, ManyTransfersInFlightCompleteInOrder) {
  const std::size_t count = 3 * kStagedBytes / sizeof(int) + 1;
  std::vector<std::vector<int>> data;
  std::vector<clbuf::Future<clbuf::DeviceBuffer<int>>> uploads;
  for (int i = 0; i < 12; ++i) {
    data.push_back(random<int>(count + static_cast<std::size_t>(i)));
    uploads.push_back(paths().upload_async(data.back()));
  }
  std::vector<clbuf::DeviceBuffer<int>> buffers;
  for (auto& upload : uploads) buffers.push_back(upload.get());
  std::vector<clbuf::Future<std::vector<int>>> downloads;
  for (const auto& buffer : buffers) downloads.push_back(paths().download_async(buffer));
  for (std::size_t i = 0; i < downloads.size(); ++i) {
    EXPECT_TRUE(same_bytes(data[i], downloads[i].get())) << i;
  }
}

TEST_P(AsyncOps, ADroppedFutureWaitsUntilTheCallersMemoryIsWritten) {
  const std::size_t count = 6 * kStagedBytes / sizeof(std::int64_t) + 5;
  const auto data = random<std::int64_t>(count);
  const auto buffer = paths().upload(data);
  std::vector<std::int64_t> out(count, 0);
  { auto dropped = paths().download_async(buffer, out.data(), count); }
  EXPECT_TRUE(same_bytes(data, out));  // the Future's destructor waited for the last chunk
  std::vector<std::int64_t> source = random<std::int64_t>(count);
  const auto copy = source;
  { auto dropped = paths().upload_async(source.data(), count); }
  source.assign(count, 0);  // the upload has finished reading: changing it now is allowed
  paths().finish();
}

TEST_P(AsyncOps, AnOperationWaitsForTheEventsItIsGiven) {
  const std::size_t count = 4 * kStagedBytes / sizeof(int) + 1;
  const auto data = random<int>(count);
  auto buffer = paths().upload(data);
  cl::UserEvent gate(paths().context());
  auto download = paths().download_async(buffer, {gate});
  auto upload = paths().upload_async(data, {gate});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(download.ready()) << "the download ran before the event it waits for";
  EXPECT_FALSE(upload.ready()) << "the upload ran before the event it waits for";
  gate.setStatus(CL_COMPLETE);
  EXPECT_TRUE(same_bytes(data, download.get()));
  EXPECT_TRUE(same_bytes(data, paths().download(upload.get())));
}

// An event of `after` that fails (the application's kernel failed; here a user event set to an
// error) fails the operation waiting for it: its Future throws a clbuf::Error naming it, the
// process lives on (PoCL 3.1 aborts in clSetUserEventStatus when a barrier waiting for the event
// has been released: clbuf keeps it until it has ended), and the manager works afterwards.
TEST_P(AsyncOps, AnOperationWhoseEventFailsIsAnErrorAndTheManagerGoesOn) {
  if (clbuf_test::thread_sanitizer) {
    GTEST_SKIP() << "PoCL's own lock order when an event fails (clbuf_test::thread_sanitizer)";
  }
  const std::size_t count = 3 * kStagedBytes / sizeof(int) + 1;
  const auto data = random<int>(count);
  auto buffer = paths().upload(data);
  auto other = paths().allocate<int>(count);
  std::vector<int> out(count, -1);
  const auto fails = [&](const char* op, const auto& start) {
    cl::UserEvent gate(paths().context());
    auto future = start(std::vector<cl::Event>{gate});
    gate.setStatus(-5);
    try {
      future.wait();
      ADD_FAILURE() << op << " did not fail";
    } catch (const clbuf::Error& e) {
      EXPECT_LT(e.code(), 0) << e.what();
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
    }
  };
  fails("download_async",
        [&](const std::vector<cl::Event>& after) { return paths().download_async(buffer, after); });
  fails("download_async", [&](const std::vector<cl::Event>& after) {
    return paths().download_async(buffer, out.data(), count, 0, after);
  });
  fails("upload_async",
        [&](const std::vector<cl::Event>& after) { return paths().upload_async(data, after); });
  fails("upload_async", [&](const std::vector<cl::Event>& after) {
    return paths().upload_async(other, data, 0, after);
  });
  fails("fill_async",
        [&](const std::vector<cl::Event>& after) { return paths().fill_async(other, 7, after); });
  fails("copy_bytes_async", [&](const std::vector<cl::Event>& after) {
    return paths().copy_bytes_async(buffer, other, count * sizeof(int), 0, 0, after);
  });
  paths().finish();
  // The manager goes on: every path exact.
  auto again = paths().upload(data);
  EXPECT_TRUE(same_bytes(data, paths().download(again)));
  paths().copy(again, other);
  EXPECT_TRUE(same_bytes(data, paths().download_async(other).get()));
}

// A copy between two managers (two contexts) whose source queue holds a failed command (an
// operation waiting for an application's event that failed) fails with a clbuf::Error; no
// process abort (the barriers waiting for clbuf's own user events are kept until those
// complete), and both managers work afterwards.
TEST_P(AsyncOps, ACopyBetweenManagersBehindAFailedEventIsAnError) {
  if (clbuf_test::thread_sanitizer) {
    GTEST_SKIP() << "PoCL's own lock order when an event fails (clbuf_test::thread_sanitizer)";
  }
  clbuf::BufferManager target;
  ASSERT_NE(target.context()(), paths().context()());
  const std::size_t count = 3 * kStagedBytes / sizeof(int) + 1;
  const auto data = random<int>(count);
  auto src = paths().upload(data);
  auto dst = target.allocate<int>(count);
  cl::UserEvent gate(paths().context());
  auto fill = paths().fill_async(src, 5, {gate});
  auto copy = target.copy_from_async(paths(), src, dst);
  gate.setStatus(-5);
  EXPECT_THROW(fill.wait(), clbuf::Error);
  try {
    copy.wait();
  } catch (const clbuf::Error& e) {  // the copy waited for the failed fill: it may fail too
    EXPECT_NE(std::string(e.what()).find("copy_from_async"), std::string::npos) << e.what();
  }
  paths().finish();
  target.finish();
  auto again = paths().upload(data);
  target.copy_from(paths(), again, dst);
  EXPECT_TRUE(same_bytes(data, target.download(dst)));
}

// A failed event of `after` fails only the call that waited for it: a call queued on the manager
// behind it before the event failed still runs. PoCL and NVIDIA fail every command queued behind
// a failed one on an in-order queue (NVIDIA now and then also one queued just after), so clbuf
// gives a call with `after` a queue of its own, and the manager's queue waits only for events of
// clbuf's, which never fail (detail/gated.hpp, docs/repro/nvidia_failed_events.cpp).
TEST_P(AsyncOps, CallsQueuedBehindAFailingEventStillRun) {
  if (clbuf_test::thread_sanitizer) {
    GTEST_SKIP() << "PoCL's own lock order when an event fails (clbuf_test::thread_sanitizer)";
  }
  const std::size_t count = 3 * kStagedBytes / sizeof(int) + 1;
  const auto data = random<int>(count);
  const auto more = random<int>(count);
  auto buffer = paths().upload(data);
  auto other = paths().allocate<int>(count);
  cl::UserEvent gate(paths().context());
  auto gated = paths().fill_async(buffer, 7, {gate});
  auto behind = paths().upload_async(other, more);
  auto copy = paths().copy_bytes_async(buffer, other, sizeof(int));  // after the failed fill
  gate.setStatus(-5);
  EXPECT_THROW(gated.wait(), clbuf::Error);
  EXPECT_NO_THROW(behind.wait());
  EXPECT_NO_THROW(copy.wait());
  EXPECT_TRUE(same_bytes(data, paths().download(buffer)));  // the failed fill wrote nothing
  auto expected = more;
  expected[0] = data[0];
  EXPECT_TRUE(same_bytes(expected, paths().download(other)));
}

TEST_P(AsyncOps, NullEventsInAfterAreSkipped) {
  auto buffer = paths().upload(random<int>(100));
  auto fill = paths().fill_async(buffer, 3, {cl::Event(), cl::Event()});
  fill.get();
  EXPECT_EQ(paths().download(buffer), std::vector<int>(100, 3));
}

TEST_P(AsyncOps, AnEventOfAnotherContextIsRejectedBeforeAnythingRuns) {
  clbuf::BufferManager other;
  ASSERT_NE(other.context()(), paths().context()());
  cl::UserEvent foreign(other.context());
  const auto data = random<int>(1000);
  auto buffer = paths().upload(data);
  EXPECT_CLBUF_ERROR((void)paths().fill_async(buffer, 1, {foreign}), CL_INVALID_CONTEXT,
                     "fill_async", "event 0 of `after`");
  EXPECT_CLBUF_ERROR(((void)paths().download_async(buffer, {cl::Event(), foreign})),
                     CL_INVALID_CONTEXT, "download_async", "event 1 of `after`");
  EXPECT_CLBUF_ERROR((void)paths().upload_async(data, {foreign}), CL_INVALID_CONTEXT,
                     "upload_async");
  foreign.setStatus(CL_COMPLETE);
  EXPECT_TRUE(same_bytes(data, paths().download(buffer)));  // nothing changed
}

TEST_P(AsyncOps, AKernelOnAnotherQueueRunsBetweenAsyncOperationsWithNoHostWait) {
  // fill_async -> a kernel on a queue of the application's (waiting for the fill's event) ->
  // download_async waiting for the kernel's event.
  const std::size_t count = 3 * kStagedBytes / sizeof(std::uint32_t) + 7;
  auto buffer = paths().allocate<std::uint32_t>(count);
  cl::CommandQueue mine(paths().context(), cl_device());
  cl::Kernel twice = doubler();
  twice.setArg(0, buffer.native());
  auto fill = paths().fill_async(buffer, std::uint32_t{21});
  const std::vector<cl::Event> filled = fill.wait_list();
  cl::Event doubled;
  mine.enqueueNDRangeKernel(twice, cl::NullRange, cl::NDRange(count), cl::NullRange, &filled,
                            &doubled);
  mine.flush();
  auto result = paths().download_async(buffer, {doubled});
  EXPECT_EQ(result.get(), std::vector<std::uint32_t>(count, 42));
  fill.get();
}

TEST_P(AsyncOps, FillAsyncIsExactForEveryPatternSize) {
  struct Three {
    std::uint8_t b[3];
  };
  struct Twelve {
    std::uint32_t w[3];
  };
  const std::size_t count = 20000;
  auto bytes = paths().upload(std::vector<std::uint8_t>(count, 1));
  auto f1 = paths().fill_async(bytes, std::uint8_t{0xA5}, count - 10, 5);
  auto doubles = paths().upload(std::vector<double>(count, 1.0));
  auto f8 = paths().fill_async(doubles, 2.5);
  auto threes = paths().upload(std::vector<Three>(count, Three{{1, 2, 3}}));
  auto f3 = paths().fill_async(threes, Three{{7, 8, 9}}, count / 2, count / 4);
  auto twelves = paths().upload(std::vector<Twelve>(count, Twelve{{1, 2, 3}}));
  auto f12 = paths().fill_async(twelves, Twelve{{4, 5, 6}});
  f1.get();
  f8.get();
  f3.get();
  f12.get();
  std::vector<std::uint8_t> expected_bytes(count, 1);
  std::fill(expected_bytes.begin() + 5, expected_bytes.end() - 5, std::uint8_t{0xA5});
  EXPECT_EQ(paths().download(bytes), expected_bytes);
  EXPECT_EQ(paths().download(doubles), std::vector<double>(count, 2.5));
  const auto got3 = paths().download(threes);
  for (std::size_t i = 0; i < count; ++i) {
    const bool inside = i >= count / 4 && i < count / 4 + count / 2;
    ASSERT_EQ(got3[i].b[0], inside ? 7 : 1) << i;
    ASSERT_EQ(got3[i].b[2], inside ? 9 : 3) << i;
  }
  for (const Twelve& t : paths().download(twelves)) ASSERT_EQ(t.w[2], 6u);
}

TEST_P(AsyncOps, RectAsyncFormsMatchTheBlockingOnes) {
  const clbuf::Extents box{5, 4, 3};
  clbuf::Region region;
  region.size = box;
  region.src_origin = {1, 2, 1};
  region.src_extents = {9, 7, 5};
  region.dst_origin = {2, 0, 1};
  region.dst_extents = {8, 6, 4};
  const auto host = random<float>(9 * 7 * 5);
  const auto initial = random<float>(8 * 6 * 4);
  auto blocking = paths().upload(initial);
  auto started = paths().upload(initial);
  paths().upload_rect(blocking, host, region);
  auto up = paths().upload_rect_async(started, host, region);
  up.get();
  EXPECT_TRUE(same_bytes(paths().download(blocking), paths().download(started)));

  clbuf::Region back;
  back.size = box;
  back.src_origin = region.dst_origin;
  back.src_extents = region.dst_extents;
  back.dst_origin = region.src_origin;
  back.dst_extents = region.src_extents;
  std::vector<float> out_blocking(9 * 7 * 5, 0.0f), out_async(9 * 7 * 5, 0.0f);
  paths().download_rect(blocking, out_blocking, back);
  auto down = paths().download_rect_async(started, out_async, back);
  down.get();
  EXPECT_TRUE(same_bytes(out_blocking, out_async));

  auto target_blocking = paths().upload(initial);
  auto target_async = paths().upload(initial);
  clbuf::Region device_box;
  device_box.size = {3, 3, 2};
  device_box.src_origin = {0, 1, 0};
  device_box.src_extents = region.dst_extents;
  device_box.dst_origin = {4, 2, 2};
  device_box.dst_extents = region.dst_extents;
  paths().copy_rect(blocking, target_blocking, device_box);
  auto copied = paths().copy_rect_async(started, target_async, device_box);
  copied.get();
  EXPECT_TRUE(same_bytes(paths().download(target_blocking), paths().download(target_async)));
}

TEST_P(AsyncOps, AnEmptyRectOrFillIsReadyAtOnceAndGetWorks) {
  auto buffer = paths().upload(random<int>(16));
  clbuf::Region empty;
  empty.size = {0, 3, 1};
  empty.src_extents = {4, 4, 1};
  empty.dst_extents = {4, 4, 1};
  std::vector<int> host(16);
  auto up = paths().upload_rect_async(buffer, host, empty);
  auto fill = paths().fill_async(buffer, 5, 0, 10);
  EXPECT_TRUE(up.ready());
  EXPECT_TRUE(fill.ready());
  EXPECT_TRUE(up.wait_list().empty());
  up.get();
  fill.get();
}

TEST_P(AsyncOps, AsyncCallsCheckTheirInputLikeTheBlockingOnes) {
  auto buffer = paths().upload(random<int>(10));
  EXPECT_CLBUF_ERROR((void)paths().fill_async(buffer, 1, 11, 0), CL_INVALID_VALUE, "fill_async");
  std::vector<int> small(4);
  clbuf::Region region;
  region.size = {5, 1, 1};
  region.src_extents = {5, 1, 1};
  region.dst_extents = {10, 1, 1};
  EXPECT_CLBUF_ERROR((void)paths().upload_rect_async(buffer, small, region), CL_INVALID_VALUE,
                     "upload_rect_async");
  EXPECT_CLBUF_ERROR(((void)paths().copy_rect_async(buffer, buffer,
                                                    [] {
                                                      clbuf::Region r;
                                                      r.size = {4, 1, 1};
                                                      r.src_extents = {10, 1, 1};
                                                      r.dst_origin = {2, 0, 0};
                                                      r.dst_extents = {10, 1, 1};
                                                      return r;
                                                    }())),
                     CL_MEM_COPY_OVERLAP, "copy_rect_async");
  clbuf::DeviceBuffer<int> moved_from = std::move(buffer);
  EXPECT_CLBUF_ERROR((void)paths().fill_async(buffer, 1), CL_INVALID_MEM_OBJECT, "fill_async");
}

TEST_P(AsyncOps, CopyFromAsyncAcrossContextsIsExactAndOrderedOnBothQueues) {
  clbuf::BufferManager other;  // a context of its own
  ASSERT_NE(other.context()(), paths().context()());
  for (std::size_t count : element_counts(sizeof(std::uint32_t))) {
    const auto data = random<std::uint32_t>(count);
    auto src = paths().upload(data);
    auto dst = other.allocate<std::uint32_t>(count);
    auto copy = other.copy_from_async(paths(), src, dst);
    // Later work on either queue follows the copy: overwriting the source changes nothing
    // copied, and a download from the destination sees the copy.
    if (count > 0) paths().fill(src, 0xFFFFFFFFu);
    EXPECT_TRUE(same_bytes(data, other.download(dst))) << count << " elements";
    copy.get();
  }
}

TEST_P(AsyncOps, CopyFromAsyncInOneContextIsExactAndOrdered) {
  clbuf::BufferManager sharer(paths().context(), cl::CommandQueue(paths().context(), cl_device()));
  const std::size_t count = 5 * kStagedBytes / sizeof(int) + 1;
  const auto data = random<int>(count);
  auto src = paths().upload(data);
  auto dst = sharer.allocate<int>(count);
  auto copy = sharer.copy_from_async(paths(), src, dst);
  paths().fill(src, -1);  // queued on the source's queue after the call: runs after the copy
  EXPECT_TRUE(same_bytes(data, sharer.download(dst)));
  copy.get();
}

TEST_P(AsyncOps, FutureEventIsNullOnlyWhenNothingIsLeftToWaitFor) {
  const auto data = random<int>(3 * kStagedBytes / sizeof(int));
  auto buffer = paths().upload(data);
  auto download = paths().download_async(buffer);
  ASSERT_NE(download.event()(), nullptr);
  EXPECT_EQ(download.wait_list().size(), 1u);
  EXPECT_TRUE(same_bytes(data, download.get()));
  auto empty = paths().download_async(paths().allocate<int>(0));
  EXPECT_EQ(empty.event()(), nullptr);
  EXPECT_TRUE(empty.wait_list().empty());
}

TEST_P(AsyncOps, ThreadsSharingAManagerMixStagedAsyncAndBlockingTransfers) {
  const std::size_t count = 4 * kStagedBytes / sizeof(std::uint32_t) + 3;
  std::vector<std::vector<std::uint32_t>> inputs;
  for (std::size_t t = 0; t < 4; ++t) inputs.push_back(random<std::uint32_t>(count));
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 6; ++round) {
        auto up = paths().upload_async(inputs[t]);
        auto buffer = up.get();
        auto async_back = paths().download_async(buffer);
        std::vector<std::uint32_t> blocking_back(count);
        paths().download(buffer, blocking_back.data(), count);
        if (async_back.get() != inputs[t] || blocking_back != inputs[t]) ++failures[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

TEST_P(AsyncOps, AsyncTransfersStartedFromManyThreadsAtOnceAllComplete) {
  // Regression (a deadlock seen on the H200): a staged transfer took its place in the order of
  // staged transfers and its place on the background thread under different locks, so two threads
  // starting one each could leave the background thread waiting for a turn whose job was queued
  // behind it. Each thread here keeps many staged transfers in flight; every one must complete.
  const std::size_t count = kStagedBytes / sizeof(std::uint32_t) + 5;
  const auto data = random<std::uint32_t>(count);
  constexpr int kThreads = 6;
  constexpr int kRounds = 40;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto buffer = paths().allocate<std::uint32_t>(count);
      std::vector<clbuf::Future<void>> uploads;
      std::vector<clbuf::Future<std::vector<std::uint32_t>>> downloads;
      for (int round = 0; round < kRounds; ++round) {
        uploads.push_back(paths().upload_async(buffer, data.data(), count));
        downloads.push_back(paths().download_async(buffer));
      }
      for (auto& upload : uploads) upload.get();
      for (auto& download : downloads) wrong[static_cast<std::size_t>(t)] += download.get() != data;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(kThreads, 0));
}

TEST_P(AsyncOps, CopiesAcrossContextsAndStagedTransfersStartedFromManyThreadsAllComplete) {
  // As above, with copy_from_async between contexts in the mix: its markers and barriers on both
  // queues and its place on the background thread must come in one order with everyone else's.
  clbuf::BufferManager other;  // a context of its own
  const std::size_t count = kStagedBytes / sizeof(std::uint32_t) + 5;
  const auto data = random<std::uint32_t>(count);
  constexpr int kThreads = 4;
  constexpr int kRounds = 20;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto src = other.upload(data);
      auto dst = paths().allocate<std::uint32_t>(count);
      auto back = other.allocate<std::uint32_t>(count);
      std::vector<clbuf::Future<void>> steps;
      std::vector<clbuf::Future<std::vector<std::uint32_t>>> downloads;
      for (int round = 0; round < kRounds; ++round) {
        steps.push_back(paths().copy_from_async(other, src, dst));
        downloads.push_back(paths().download_async(dst));
        steps.push_back(paths().upload_async(dst, data.data(), count));
        steps.push_back(other.copy_from_async(paths(), dst, back));
      }
      for (auto& step : steps) step.get();
      for (auto& download : downloads) wrong[static_cast<std::size_t>(t)] += download.get() != data;
      wrong[static_cast<std::size_t>(t)] += other.download(back) != data;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(kThreads, 0));
}

TEST_P(AsyncOps, CleanupWaitsForStagedTransfersInFlight) {
  const std::size_t count = 8 * kStagedBytes / sizeof(int) + 1;
  const auto data = random<int>(count);
  auto buffer = paths().upload(data);
  std::vector<int> out(count, 0);
  auto download = paths().download_async(buffer, out.data(), count);
  auto upload = paths().upload_async(data);
  paths().cleanup();
  EXPECT_TRUE(download.ready());
  EXPECT_TRUE(same_bytes(data, out));
  download.get();
  upload.get();
}

CLBUF_INSTANTIATE_MODELS(AsyncOps);

TEST(StreamingCopy, CopiesExactlyAtEveryAlignmentAndSizeAndNothingElse) {
  // The staging chunks' copy (streaming stores on x86-64, as this test is built): head up to
  // 16-byte alignment, 64-byte body, tail; the bytes around the destination stay as they were.
  std::mt19937 rng(7);
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{4095},
                            std::size_t{4096}, std::size_t{4097}, std::size_t{4096 + 63},
                            std::size_t{65536 + 17}, (std::size_t{1} << 20) + 37}) {
    for (std::size_t dst_shift = 0; dst_shift < 18; dst_shift += 5) {
      for (std::size_t src_shift = 0; src_shift < 18; src_shift += 3) {
        std::vector<unsigned char> src(bytes + 32), dst(bytes + 64, 0xEE);
        for (auto& b : src) b = static_cast<unsigned char>(rng());
        clbuf::detail::copy_streaming(dst.data() + 16 + dst_shift, src.data() + src_shift, bytes);
        ASSERT_EQ(std::memcmp(dst.data() + 16 + dst_shift, src.data() + src_shift, bytes), 0)
            << bytes << " bytes, shifts " << dst_shift << "/" << src_shift;
        for (std::size_t i = 0; i < 16 + dst_shift; ++i) ASSERT_EQ(dst[i], 0xEE) << i;
        for (std::size_t i = 16 + dst_shift + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xEE);
      }
    }
  }
}

}  // namespace
