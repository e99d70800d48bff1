// SPDX-License-Identifier: MIT
// Buffered uploads (Options::buffered_upload_max_bytes, discrete devices): a blocking upload of a
// few pageable bytes returns once they are in clbuf's pinned ring, before the device has them.
// The caller's memory is free at once, every later command of the manager's queue sees the data,
// and the ring never hands out bytes a write still reads. On the host and unified paths the same
// tests hold for plain blocking uploads. The failure side (a write that fails on the device) is
// in fault/fault_test.cpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_test::same_bytes;

class BufferedUploads : public clbuf_test::ModelTest {
 protected:
  static constexpr std::size_t bound = 4096;  // small, so that tests wrap the ring quickly
  void configure(clbuf::Options& options) override {
    options.buffered_upload_max_bytes = bound;
    options.staging_threshold_bytes = 64 << 10;
    options.staging_chunk_bytes = 16 << 10;
  }
  bool buffered() const { return GetParam() == MemoryModel::discrete; }
};

TEST_P(BufferedUploads, DefaultBoundIs64KiBAndLargerOnesAreClamped) {
  EXPECT_EQ(clbuf::Options{}.buffered_upload_max_bytes, std::size_t{64} << 10);
  EXPECT_EQ(paths().options().buffered_upload_max_bytes, bound);
  clbuf::Options huge;
  huge.memory = GetParam();
  huge.buffered_upload_max_bytes = clbuf::Options::automatic;
  clbuf::BufferManager clamped(std::string(), huge);
  EXPECT_EQ(clamped.options().buffered_upload_max_bytes, std::size_t{1} << 20)
      << "the pinned ring stays at most 16 MiB";
}

// A manager on the application's context and queue never buffers: another manager, or the
// application's own queue, on that context must see an upload's data once it has returned.
TEST_P(BufferedUploads, AdoptingManagersDoNotBuffer) {
  const cl::Context context = paths().context();
  const cl::Device device = context.getInfo<CL_CONTEXT_DEVICES>().at(0);
  clbuf::Options options;
  options.memory = GetParam();
  clbuf::BufferManager a(context, cl::CommandQueue(context, device), options);
  clbuf::BufferManager b(context, cl::CommandQueue(context, device), options);
  EXPECT_EQ(a.options().buffered_upload_max_bytes, 0u);
  for (int round = 0; round < 20; ++round) {
    const std::vector<float> data = random<float>(1000);
    auto buffer = a.upload(data);
    EXPECT_TRUE(same_bytes(data, b.download_async(buffer).get())) << round;
  }
}

// The caller overwrites (or frees) its memory the moment upload returns; the device holds what
// the memory held at the call, at every size around the bound.
TEST_P(BufferedUploads, CallerMemoryIsFreeOnReturn) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4}, std::size_t{63}, std::size_t{64},
                            std::size_t{65}, bound - 1, bound, bound + 1, std::size_t{20000}}) {
    SCOPED_TRACE(bytes);
    const std::vector<std::uint8_t> first = random<std::uint8_t>(bytes);
    const std::vector<std::uint8_t> second = random<std::uint8_t>(bytes);
    // Fresh buffer from a vector that is freed at once.
    auto caller = std::make_unique<std::vector<std::uint8_t>>(first);
    clbuf::DeviceBuffer<std::uint8_t> fresh = paths().upload(*caller);
    caller.reset();
    // Into an existing buffer, at an offset, from a vector overwritten at once.
    clbuf::DeviceBuffer<std::uint8_t> into = paths().allocate<std::uint8_t>(bytes + 3);
    paths().fill(into, std::uint8_t{0x5a});
    std::vector<std::uint8_t> reused = first;
    paths().upload(into, reused, 2);
    reused = second;
    std::vector<std::uint8_t> expected(bytes + 3, 0x5a);
    std::copy(first.begin(), first.end(), expected.begin() + 2);
    EXPECT_TRUE(same_bytes(first, paths().download(fresh)));
    EXPECT_TRUE(same_bytes(expected, paths().download(into)));
  }
}

// The proof that the upload does not wait for the device: with the manager's queue held by a
// user event, a buffered upload still returns; once released, the data is there. Unbuffered
// paths would wait for the queue, so only the discrete path runs it.
TEST_P(BufferedUploads, ReturnsWhileTheQueueIsHeld) {
  if (!buffered()) GTEST_SKIP() << "only a discrete device buffers uploads";
  const std::vector<float> data = random<float>(bound / sizeof(float));
  clbuf::DeviceBuffer<float> buffer = paths().allocate<float>(data.size());
  const cl::Context context = paths().context();
  const cl::CommandQueue queue = paths().queue();
  cl::UserEvent gate(context);
  const cl_event wait = gate();
  ASSERT_EQ(clEnqueueBarrierWithWaitList(queue(), 1, &wait, nullptr), CL_SUCCESS);
  auto returned = std::async(std::launch::async, [&] { paths().upload(buffer, data); });
  const bool in_time = returned.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  gate.setStatus(CL_COMPLETE);
  returned.get();
  EXPECT_TRUE(in_time) << "the upload waited for the held queue";
  EXPECT_TRUE(same_bytes(data, paths().download(buffer)));
}

// The ring holds 16 writes of the bound: with the queue held, 16 uploads return and the 17th
// waits for the oldest write (it must not overwrite bytes a write has yet to read); once the
// queue goes on, it returns and all 17 land.
TEST_P(BufferedUploads, AFullRingWaitsForTheOldestWrite) {
  if (!buffered()) GTEST_SKIP() << "only a discrete device buffers uploads";
  std::vector<std::vector<std::uint8_t>> data;
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> buffers;
  for (int i = 0; i < 17; ++i) {
    data.push_back(random<std::uint8_t>(bound));
    buffers.push_back(paths().allocate<std::uint8_t>(bound));
  }
  paths().finish();
  cl::UserEvent gate(paths().context());
  const cl_event wait = gate();
  ASSERT_EQ(clEnqueueBarrierWithWaitList(paths().queue()(), 1, &wait, nullptr), CL_SUCCESS);
  auto sixteen = std::async(std::launch::async, [&] {
    for (std::size_t i = 0; i < 16; ++i) paths().upload(buffers[i], data[i]);
  });
  const bool returned = sixteen.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  std::vector<std::uint8_t> reused = data[16];
  auto seventeenth = std::async(std::launch::async, [&] { paths().upload(buffers[16], reused); });
  const bool waited =
      seventeenth.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout;
  gate.setStatus(CL_COMPLETE);
  sixteen.get();
  seventeenth.get();
  reused.assign(reused.size(), 0);
  EXPECT_TRUE(returned) << "16 uploads of the bound did not fit the ring";
  EXPECT_TRUE(waited) << "the 17th returned while the ring was full";
  for (std::size_t i = 0; i < 17; ++i) {
    EXPECT_TRUE(same_bytes(data[i], paths().download(buffers[i]))) << i;
  }
}

// Wrapping around writes still held: 8 uploads, then the queue held, then 8 more (the ring
// full), then 2 that must wrap to the ring's start once the first 8 have run, into the gap
// before the held ones, and return while those are still held. All 18 land exactly.
TEST_P(BufferedUploads, TheRingWrapsAroundWritesStillHeld) {
  if (!buffered()) GTEST_SKIP() << "only a discrete device buffers uploads";
  std::vector<std::vector<std::uint8_t>> data;
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> buffers;
  for (int i = 0; i < 18; ++i) {
    data.push_back(random<std::uint8_t>(bound));
    buffers.push_back(paths().allocate<std::uint8_t>(bound));
  }
  paths().finish();
  for (std::size_t i = 0; i < 8; ++i) paths().upload(buffers[i], data[i]);
  cl::UserEvent gate(paths().context());
  const cl_event wait = gate();
  ASSERT_EQ(clEnqueueBarrierWithWaitList(paths().queue()(), 1, &wait, nullptr), CL_SUCCESS);
  auto later = std::async(std::launch::async, [&] {
    for (std::size_t i = 8; i < 18; ++i) paths().upload(buffers[i], data[i]);
  });
  const bool returned = later.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  gate.setStatus(CL_COMPLETE);
  later.get();
  EXPECT_TRUE(returned) << "uploads waited for held writes with room at the ring's start";
  for (std::size_t i = 0; i < 18; ++i) {
    EXPECT_TRUE(same_bytes(data[i], paths().download(buffers[i]))) << i;
  }
}

// Commands the application enqueues on the manager's queue after upload returns see the data
// (in-order queue): a copy and a read through the raw handles.
TEST_P(BufferedUploads, CommandsOnTheManagersQueueSeeTheData) {
  const std::vector<std::int32_t> data = random<std::int32_t>(777);
  clbuf::DeviceBuffer<std::int32_t> src = paths().allocate<std::int32_t>(data.size());
  clbuf::DeviceBuffer<std::int32_t> dst = paths().allocate<std::int32_t>(data.size());
  paths().upload(src, data);
  const cl::CommandQueue queue = paths().queue();
  const std::size_t bytes = data.size() * sizeof(std::int32_t);
  ASSERT_EQ(clEnqueueCopyBuffer(queue(), src.native()(), dst.native()(), 0, 0, bytes, 0, nullptr,
                                nullptr),
            CL_SUCCESS);
  std::vector<std::int32_t> out(data.size());
  ASSERT_EQ(clEnqueueReadBuffer(queue(), dst.native()(), CL_TRUE, 0, bytes, out.data(), 0, nullptr,
                                nullptr),
            CL_SUCCESS);
  EXPECT_TRUE(same_bytes(data, out));
}

// Hundreds of uploads of mixed sizes into many buffers, with no synchronising call between
// them: the ring (16 x the bound) wraps many times and never reuses bytes a write still reads.
TEST_P(BufferedUploads, ManyUploadsWrapTheRingExactly) {
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> buffers;
  std::vector<std::vector<std::uint8_t>> expected;
  for (std::size_t i = 0; i < 24; ++i) {
    expected.push_back(random<std::uint8_t>(bound));
    buffers.push_back(paths().upload(expected.back()));
  }
  for (std::size_t i = 0; i < 600; ++i) {
    const std::size_t which = static_cast<std::size_t>(rng_()) % buffers.size();
    const std::size_t bytes = 1 + static_cast<std::size_t>(rng_()) % bound;
    const std::size_t offset = static_cast<std::size_t>(rng_()) % (bound - bytes + 1);
    std::vector<std::uint8_t> patch = random<std::uint8_t>(bytes);
    paths().upload(buffers[which], patch, offset);
    std::copy(patch.begin(), patch.end(),
              expected[which].begin() + static_cast<std::ptrdiff_t>(offset));
    std::fill(patch.begin(), patch.end(), std::uint8_t{0});  // the caller's memory, reused
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(same_bytes(expected[i], paths().download(buffers[i])));
  }
}

// Threads uploading and reading back their own buffers at once share one ring.
TEST_P(BufferedUploads, ThreadsUploadingAtOnceStayExact) {
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) {
    const std::uint32_t seed = static_cast<std::uint32_t>(rng_());
    threads.emplace_back([this, seed, &wrong, &errors] {
      try {
        std::mt19937 rng(seed);
        clbuf::DeviceBuffer<std::uint32_t> mine = paths().allocate<std::uint32_t>(bound / 4);
        for (int i = 0; i < 150; ++i) {
          const std::size_t count = 1 + rng() % (bound / 4);
          const auto data = clbuf_test::random_bytes<std::uint32_t>(rng, count);
          paths().upload(mine, data);
          std::vector<std::uint32_t> out(count);
          paths().download(mine, out.data(), count);
          if (!same_bytes(data, out)) ++wrong;
        }
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

// Buffered writes still in flight when the manager ends: cleanup() and the destructor wait for
// them before freeing the ring (ASan and valgrind see any read of it afterwards); buffers made
// before stay valid.
TEST_P(BufferedUploads, CleanupAndDestructionWithUploadsInFlightAreClean) {
  const std::vector<std::uint16_t> data = random<std::uint16_t>(1000);
  clbuf::DeviceBuffer<std::uint16_t> kept;
  {
    clbuf::Options options = paths().options();
    clbuf::BufferManager local(std::string(), options);
    kept = local.upload(data);
    for (int i = 0; i < 40; ++i) (void)local.upload(data);  // dropped at once, writes in flight
    local.cleanup();
    EXPECT_CLBUF_ERROR(local.finish(), CL_SUCCESS, "finish: ", "cleanup");
  }
  {
    clbuf::BufferManager local(std::string(), paths().options());
    for (int i = 0; i < 40; ++i) (void)local.upload(data);  // destroyed with writes in flight
  }
  EXPECT_TRUE(kept.valid());
}

CLBUF_INSTANTIATE_MODELS(BufferedUploads);

}  // namespace
