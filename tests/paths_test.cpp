// SPDX-License-Identifier: MIT
// Every transfer path gives the same bytes: the CPU device's host blocks, the unified path and
// the discrete path with pinned staging (forced on PoCL with tiny chunks, so that transfers span
// many chunks, several threads share them and each wraps around its slots).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_test::same_bytes;

class PathTest : public clbuf_test::ModelTest {
 protected:
  void configure(clbuf::Options& options) override {
    options.staging_threshold_bytes = 1;  // stage everything the discrete path moves
    options.staging_chunk_bytes = 4096;   // the minimum: many chunks per transfer
    options.staging_chunks = 8;           // 4 threads with 2 slots each take chunks in turn
    options.copy_threads = 4;
  }
};

TEST_P(PathTest, ReportsTheForcedMemoryModel) { EXPECT_EQ(paths().memory_model(), GetParam()); }

TEST_P(PathTest, RoundTripIsExactAtChunkBoundaries) {
  // 4096-byte chunks, 8 slots: sizes below, at and past one chunk and past all the slots.
  for (std::size_t count : {1u, 1023u, 1024u, 1025u, 3071u, 3072u, 3073u, 10000u, 262147u}) {
    SCOPED_TRACE(count);
    const auto data = random_raw<float>(count);
    const auto buffer = paths().upload(data);
    EXPECT_TRUE(same_bytes(data, paths().download(buffer)));
  }
}

TEST_P(PathTest, UploadIntoExistingBufferWritesOnlyTheWindow) {
  const auto before = random<std::int32_t>(9000);
  const auto window = random<std::int32_t>(5001);
  auto buffer = paths().upload(before);
  paths().upload(buffer, window, 1999);
  auto expected = before;
  std::memcpy(expected.data() + 1999, window.data(), window.size() * sizeof(std::int32_t));
  EXPECT_TRUE(same_bytes(expected, paths().download(buffer)));
}

TEST_P(PathTest, PartialDownloadReadsTheWindowOnly) {
  const auto data = random<double>(7000);
  const auto buffer = paths().upload(data);
  auto out = clbuf_test::sentinels<double>(3000 + 2);
  paths().download(buffer, out.data() + 1, 3000, 2500);
  EXPECT_TRUE(same_bytes(data.data() + 2500, out.data() + 1, 3000 * sizeof(double)));
  EXPECT_TRUE(clbuf_test::all_sentinel(out.data(), sizeof(double)));
  EXPECT_TRUE(clbuf_test::all_sentinel(out.data() + 3001, sizeof(double)));
}

TEST_P(PathTest, CopyAndCopyBytesMoveTheSameBytes) {
  const auto a = random<std::uint16_t>(20000);
  const auto b = random<std::uint16_t>(20000);
  const auto src = paths().upload(a);
  auto dst = paths().upload(b);
  paths().copy(src, dst);
  EXPECT_TRUE(same_bytes(a, paths().download(dst)));

  auto bytes = paths().upload(b);
  paths().copy_bytes(src, bytes, 10001, 3, 7);
  auto expected = b;
  std::memcpy(reinterpret_cast<char*>(expected.data()) + 7,
              reinterpret_cast<const char*>(a.data()) + 3, 10001);
  EXPECT_TRUE(same_bytes(expected, paths().download(bytes)));
}

TEST_P(PathTest, AsyncTransfersMatchBlockingOnes) {
  const auto data = random<float>(50000);
  auto up = paths().upload_async(data);
  const auto buffer = up.get();
  auto down = paths().download_async(buffer);
  EXPECT_TRUE(same_bytes(data, down.get()));
}

TEST_P(PathTest, AsyncTransfersWithCallerMemory) {
  const auto data = random<std::int32_t>(40000);
  auto up = paths().upload_async(data.data(), data.size());
  const auto src = up.get();
  auto dst = paths().upload(random<std::int32_t>(40000));
  auto copied = paths().copy_bytes_async(src, dst, 80000, 4, 8);
  auto out = clbuf_test::sentinels<std::int32_t>(40000 + 2);
  auto down = paths().download_async(dst, out.data() + 1, 20000, 2);  // ordered after the copy
  down.get();
  copied.wait();
  EXPECT_TRUE(same_bytes(data.data() + 1, out.data() + 1, 20000 * sizeof(std::int32_t)));
  EXPECT_TRUE(clbuf_test::all_sentinel(out.data(), sizeof(std::int32_t)));
  EXPECT_TRUE(clbuf_test::all_sentinel(out.data() + 20001, 20001 * sizeof(std::int32_t)));
  EXPECT_CLBUF_ERROR(paths().copy_bytes_async(src, dst, 8, 159996, 0), CL_INVALID_VALUE,
                     "copy_bytes_async", "160000-byte buffer");
  EXPECT_CLBUF_ERROR(paths().download_async(dst, out.data(), 40001), CL_INVALID_VALUE,
                     "download_async");
}

TEST_P(PathTest, PinnedBuffersRoundTrip) {
  const auto data = random<std::int64_t>(12345);
  auto pinned = paths().allocate_pinned<std::int64_t>(data.size());
  ASSERT_EQ(pinned.size(), data.size());
  std::memcpy(pinned.data(), data.data(), pinned.size_bytes());
  auto buffer = paths().upload(pinned);
  auto out = paths().allocate_pinned<std::int64_t>(data.size());
  paths().download(buffer, out);
  EXPECT_TRUE(same_bytes(data.data(), out.data(), out.size_bytes()));

  const auto more = random<std::int64_t>(12345);
  std::memcpy(pinned.data(), more.data(), pinned.size_bytes());
  paths().upload(buffer, pinned);
  EXPECT_TRUE(same_bytes(more, paths().download(buffer)));
}

// A default PinnedBuffer owns nothing; moves hand the pinned memory over and leave the source
// empty, and a move assignment frees what the target held.
TEST_P(PathTest, PinnedBufferMovesHandTheMemoryOver) {
  const clbuf::PinnedBuffer<std::uint32_t> none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(none.begin(), none.end());
  const auto data = random<std::uint32_t>(3000);
  auto pinned = paths().allocate_pinned<std::uint32_t>(data.size());
  std::memcpy(pinned.data(), data.data(), pinned.size_bytes());
  const std::uint32_t* memory = pinned.data();
  clbuf::PinnedBuffer<std::uint32_t> target = paths().allocate_pinned<std::uint32_t>(5);
  target = std::move(pinned);
  EXPECT_TRUE(pinned.empty());  // moved from: empty, as documented
  EXPECT_EQ(pinned.data(), nullptr);
  const clbuf::PinnedBuffer<std::uint32_t> moved(std::move(target));
  EXPECT_TRUE(target.empty());
  ASSERT_EQ(moved.size(), data.size());
  EXPECT_EQ(moved.data(), memory);
  EXPECT_EQ(static_cast<std::size_t>(moved.end() - moved.begin()), data.size());
  EXPECT_EQ(moved[data.size() - 1], data.back());
  EXPECT_TRUE(same_bytes(data.data(), moved.data(), moved.size_bytes()));
  auto buffer = paths().upload(moved);
  EXPECT_TRUE(same_bytes(data, paths().download(buffer)));
}

TEST_P(PathTest, ReusedPoolMemoryHoldsTheNewData) {
  // The second upload is served by the memory the first one gave back.
  const auto first = random<float>(4096);
  { const auto buffer = paths().upload(first); }
  const auto second = random<float>(4096);
  const auto buffer = paths().upload(second);
  EXPECT_GE(paths().stats().pool.hits, 1u);
  EXPECT_TRUE(same_bytes(second, paths().download(buffer)));
}

TEST_P(PathTest, ReuseWaitsForAnAsyncReadOfTheFreedBuffer) {
  // A buffer dropped while its asynchronous download is queued goes back to the pool; the next
  // upload that gets its memory must not change what the download reads.
  const auto first = random<std::uint8_t>(1 << 16);
  auto buffer = std::make_unique<clbuf::DeviceBuffer<std::uint8_t>>(paths().upload(first));
  auto pending = paths().download_async(*buffer);
  buffer.reset();
  const auto second = random<std::uint8_t>(1 << 16);
  const auto reused = paths().upload(second);
  EXPECT_TRUE(same_bytes(first, pending.get()));
  EXPECT_TRUE(same_bytes(second, paths().download(reused)));
}

CLBUF_INSTANTIATE_MODELS(PathTest);

// The names messages and reports use for the memory models; a value outside the enum (from a
// cast) is "unknown", never a null pointer.
TEST(MemoryModelText, ToStringNamesEveryModel) {
  EXPECT_STREQ(clbuf::to_string(MemoryModel::automatic), "automatic");
  EXPECT_STREQ(clbuf::to_string(MemoryModel::host), "host");
  EXPECT_STREQ(clbuf::to_string(MemoryModel::unified), "unified");
  EXPECT_STREQ(clbuf::to_string(MemoryModel::discrete), "discrete");
  EXPECT_STREQ(clbuf::to_string(static_cast<MemoryModel>(42)), "unknown");
}

// The bounced path (discrete devices): pageable transfers below the staging threshold and up to
// bounce_max_bytes go through one pinned block; past it the driver's path, from the threshold the
// staged pipeline. Sizes at each boundary, at offsets, and more threads than cached blocks.
class BouncePath : public clbuf_test::ModelTest {
 protected:
  static constexpr std::size_t bounce = 64 << 10;
  static constexpr std::size_t threshold = 1 << 20;
  void configure(clbuf::Options& options) override {
    options.staging_threshold_bytes = threshold;
    options.staging_chunk_bytes = 64 << 10;
    options.bounce_max_bytes = bounce;
    options.buffered_upload_max_bytes = 0;  // else uploads up to 64 KiB would be buffered instead
  }
};

TEST_P(BouncePath, ResolvesTheBound) {
  EXPECT_EQ(paths().options().bounce_max_bytes, bounce);
  clbuf::Options automatic;
  automatic.memory = GetParam();
  automatic.staging_threshold_bytes = 12345;
  automatic.bounce_max_bytes = clbuf::Options::automatic;
  clbuf::BufferManager m(std::string(), automatic);
  EXPECT_EQ(m.options().bounce_max_bytes, 12345u) << "automatic: below the staging threshold";
  automatic.staging_threshold_bytes = clbuf::Options::never;
  automatic.bounce_max_bytes = clbuf::Options::automatic;
  clbuf::BufferManager capped(std::string(), automatic);
  EXPECT_EQ(capped.options().bounce_max_bytes, std::size_t{4} << 20) << "automatic: at most 4 MiB";
  clbuf::BufferManager defaults(std::string(), clbuf::Options{});
  EXPECT_EQ(defaults.options().bounce_max_bytes, clbuf::Options{}.staging_threshold_bytes)
      << "the default is automatic: every size below the staging threshold (4 MiB)";
}

// Whole uploads and downloads of `bytes` + 3, then `bytes` into and out of the middle of the
// buffer, exact, the bytes around untouched; `random(n)` makes n random bytes.
template <class Random>
void expect_exact_transfers(clbuf::BufferManager& m, std::initializer_list<std::size_t> sizes,
                            Random random) {
  for (std::size_t bytes : sizes) {
    SCOPED_TRACE(bytes);
    const std::vector<std::uint8_t> data = random(bytes + 3);
    clbuf::DeviceBuffer<std::uint8_t> buffer = m.upload(data);
    EXPECT_TRUE(same_bytes(data, m.download(buffer)));
    // Into and out of the middle of the buffer, the rest untouched.
    const std::vector<std::uint8_t> middle = random(bytes);
    m.upload(buffer, middle, 2);
    std::vector<std::uint8_t> expected = data;
    std::memcpy(expected.data() + 2, middle.data(), bytes);
    std::vector<std::uint8_t> out = clbuf_test::sentinels<std::uint8_t>(bytes + 2);
    m.download(buffer, out.data() + 1, bytes, 1);
    EXPECT_TRUE(same_bytes(expected.data() + 1, out.data() + 1, bytes));
    EXPECT_TRUE(clbuf_test::all_sentinel(out.data(), 1));
    EXPECT_TRUE(clbuf_test::all_sentinel(out.data() + bytes + 1, 1));
  }
}

TEST_P(BouncePath, EveryBoundaryIsExact) {
  expect_exact_transfers(paths(),
                         {std::size_t{1}, std::size_t{4}, bounce - 1, bounce, bounce + 1,
                          threshold - 1, threshold, threshold + 1},
                         [this](std::size_t n) { return random<std::uint8_t>(n); });
}

// One thread per vector of `data`, each uploading its vector into a new buffer and downloading
// it back, into a new vector and into its own, `rounds` times on `m`: every one exact, no error.
void expect_round_trips_on_threads(clbuf::BufferManager& m,
                                   const std::vector<std::vector<std::uint32_t>>& data,
                                   int rounds) {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  for (const std::vector<std::uint32_t>& mine : data) {
    threads.emplace_back([&m, &mine, rounds, &wrong, &errors] {
      try {
        for (int i = 0; i < rounds; ++i) {
          clbuf::DeviceBuffer<std::uint32_t> buffer = m.upload(mine);
          if (m.download(buffer) != mine) ++wrong;
          std::vector<std::uint32_t> out(mine.size());
          m.download(buffer, out.data(), out.size());
          if (out != mine) ++wrong;
        }
      } catch (const clbuf::Error&) {
        ++errors;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

TEST_P(BouncePath, ThreadsBouncingAtOnceStayExact) {
  std::vector<std::vector<std::uint32_t>> data;
  for (std::size_t t = 0; t < 6; ++t) data.push_back(random<std::uint32_t>(1000 + 997 * t));
  expect_round_trips_on_threads(paths(), data, 20);
}

CLBUF_INSTANTIATE_MODELS(BouncePath);

// Staged transfers through 64 KiB chunks in 4 slots (two threads, two slots each): sizes inside
// a chunk, at and around the chunk boundaries, a short last chunk, transfers that go round the
// slots many times, at odd offsets; threads at once.
class WideChunks : public clbuf_test::ModelTest {
 protected:
  static constexpr std::size_t chunk = 64 << 10;
  void configure(clbuf::Options& options) override {
    options.staging_threshold_bytes = 1;  // stage everything the discrete path moves
    options.staging_chunk_bytes = chunk;
    options.staging_chunks = 4;
    options.copy_threads = 4;
  }
};

TEST_P(WideChunks, EveryChunkBoundaryIsExact) {
  const std::size_t c = chunk;
  expect_exact_transfers(
      paths(),
      {std::size_t{1}, std::size_t{5000}, std::size_t{16} << 10, c - 1, c, c + 1,
       c + (std::size_t{40} << 10), 4 * c - 3, 4 * c, 4 * c + 4097, 37 * c + 12345},
      [this](std::size_t n) { return random<std::uint8_t>(n); });
}

TEST_P(WideChunks, ThreadsAtOnceStayExact) {
  std::vector<std::vector<std::uint32_t>> data;
  for (std::size_t t = 0; t < 4; ++t) data.push_back(random<std::uint32_t>(70000 + 9999 * t));
  expect_round_trips_on_threads(paths(), data, 5);
}

CLBUF_INSTANTIATE_MODELS(WideChunks);

// Staged transfers through slots of 100,000 bytes (not a multiple of 4 KiB) on twelve threads:
// sizes inside a slot, at and around whole slots, with fewer chunks than threads, and where an
// upload whose first chunks were cut to 1/T, 2/T, .. of a slot (rounded up to 4 KiB) would end a
// whole slot after them (685,728 + 5 x 100,000: the staggered pipeline measured on the branch
// issue19-stagger-readahead) land exactly; threads at once too.
class StaggeredChunks : public clbuf_test::ModelTest {
 protected:
  static constexpr std::size_t chunk = 100000;
  void configure(clbuf::Options& options) override {
    options.staging_threshold_bytes = 1;
    options.staging_chunk_bytes = chunk;
    options.staging_chunks = 24;
    options.copy_threads = 12;
  }
};

TEST_P(StaggeredChunks, EveryChunkBoundaryIsExact) {
  const std::size_t staggered = 685728;  // twelve staggered first chunks
  expect_exact_transfers(paths(),
                         {std::size_t{1}, std::size_t{4095}, std::size_t{12287}, std::size_t{12288},
                          std::size_t{12289}, chunk - 1, chunk, chunk + 1, 3 * chunk + 5, staggered,
                          11 * chunk + 1, staggered + 5 * chunk - 1, staggered + 5 * chunk,
                          staggered + 5 * chunk + 1, 12 * chunk, 40 * chunk + 777},
                         [this](std::size_t n) { return random<std::uint8_t>(n); });
}

TEST_P(StaggeredChunks, ThreadsAtOnceStayExact) {
  std::vector<std::vector<std::uint32_t>> data;
  for (std::size_t t = 0; t < 3; ++t) data.push_back(random<std::uint32_t>(400000 + 77777 * t));
  expect_round_trips_on_threads(paths(), data, 3);
}

CLBUF_INSTANTIATE_MODELS(StaggeredChunks);

// A bounced read of 2 MiB or more splits its copy out of the pinned block among the copy threads
// in 512 KiB parts: every size around the split and the part boundaries lands exactly, also
// with several threads at once.
class LargeBouncePath : public clbuf_test::ModelTest {
 protected:
  static constexpr std::size_t split = std::size_t{2} << 20;
  static constexpr std::size_t part = std::size_t{512} << 10;
  void configure(clbuf::Options& options) override {
    options.staging_threshold_bytes = std::size_t{4} << 20;
    options.bounce_max_bytes = clbuf::Options::automatic;
    options.copy_threads = 4;
  }
};

TEST_P(LargeBouncePath, EverySplitIsExact) {
  EXPECT_EQ(paths().options().bounce_max_bytes, std::size_t{4} << 20);
  expect_exact_transfers(paths(), {split - 1, split, split + 1, split + part + 4097, 2 * split - 4},
                         [this](std::size_t n) { return random<std::uint8_t>(n); });
}

TEST_P(LargeBouncePath, ThreadsSplittingAtOnceStayExact) {
  std::vector<std::vector<std::uint32_t>> data;
  for (std::size_t t = 0; t < 4; ++t) {
    data.push_back(random<std::uint32_t>(split / 4 + 12345 * t));
  }
  expect_round_trips_on_threads(paths(), data, 3);
}

CLBUF_INSTANTIATE_MODELS(LargeBouncePath);

// ManagerAccess::path, which `clbuf info` shows (python/src/paths.cpp), names the engine's route at
// both sides of every threshold of the default options, for each memory model.
class DefaultPaths : public clbuf_test::ModelTest {};

TEST_P(DefaultPaths, ManagerAccessNamesTheRouteOnBothSidesOfEachThreshold) {
  const clbuf::Options& options = paths().options();
  const std::size_t buffered = options.buffered_upload_max_bytes;
  const std::size_t staging = options.staging_threshold_bytes;
  ASSERT_EQ(buffered, std::size_t{64} << 10);
  ASSERT_EQ(staging, std::size_t{4} << 20);
  ASSERT_EQ(options.bounce_max_bytes, staging);
  const auto path = [this](std::size_t bytes, bool write) {
    return std::string(clbuf::detail::ManagerAccess::path(paths(), bytes, write));
  };
  for (std::size_t bytes :
       {std::size_t{1}, buffered, buffered + 1, staging - 1, staging, std::size_t{1} << 30}) {
    SCOPED_TRACE(bytes);
    switch (GetParam()) {
      case MemoryModel::host:
        EXPECT_EQ(path(bytes, true), "host_copy");
        EXPECT_EQ(path(bytes, false), "host_copy");
        break;
      case MemoryModel::unified:
        EXPECT_EQ(path(bytes, true), "direct");
        EXPECT_EQ(path(bytes, false), "direct");
        break;
      default:
        EXPECT_EQ(path(bytes, true), bytes >= staging   ? "staged"
                                     : bytes > buffered ? "direct"
                                                        : "buffered");
        EXPECT_EQ(path(bytes, false), bytes >= staging ? "staged" : "bounced");
    }
  }
}

CLBUF_INSTANTIATE_MODELS(DefaultPaths);
// Which path each transfer takes (stats().upload.paths, .download.paths, .copy.paths) one byte
// below, at and one byte above every threshold of Options (buffered_upload_max_bytes,
// bounce_max_bytes, staging_threshold_bytes) and the host model's bound on copying at once, on
// each memory model, with the bytes exact on every path. The expected path is the route rule
// (transfer_engine.hpp, docs/design.md "Transfer paths") written out again, so that a rule that
// moves (a threshold off by one byte, a condition dropped) fails here.
class PathBoundaries : public clbuf_test::ModelTest {
 protected:
  static constexpr std::size_t buffered_max = 4 << 10;
  static constexpr std::size_t bounce_max = 16 << 10;
  static constexpr std::size_t threshold = 64 << 10;
  void configure(clbuf::Options& options) override {
    options.buffered_upload_max_bytes = buffered_max;
    options.bounce_max_bytes = bounce_max;
    options.staging_threshold_bytes = threshold;
    options.staging_chunk_bytes = 16 << 10;
  }

  /// Each threshold, one byte below it and one above.
  static std::vector<std::size_t> boundaries() {
    std::vector<std::size_t> sizes;
    for (std::size_t bound : {buffered_max, bounce_max, threshold}) {
      for (std::size_t bytes : {bound - 1, bound, bound + 1}) sizes.push_back(bytes);
    }
    return sizes;
  }

  /// The path of a blocking upload (`to_device`) or download of `bytes` of pageable memory.
  std::string blocking(bool to_device, std::size_t bytes) const {
    if (GetParam() == MemoryModel::host) return "host_copy";
    if (GetParam() == MemoryModel::unified) return "direct";
    if (bytes >= threshold) return "staged";
    if (to_device) return bytes <= buffered_max ? "buffered" : "direct";
    return bytes <= bounce_max ? "bounced" : "direct";
  }

  /// The path of a started transfer of `bytes`: staged on a discrete device from the threshold,
  /// else one command (on the host model too: the host cannot copy before earlier work is done).
  std::string started(std::size_t bytes) const {
    return GetParam() == MemoryModel::discrete && bytes >= threshold ? "staged" : "direct";
  }

  /// The path of the one transfer `run` makes, from `direction` of stats() counted over it alone.
  template <class Run>
  std::string path_of(clbuf::DirectionStats clbuf::TransferStats::*direction, Run run) {
    paths().reset_stats();
    run();
    return clbuf_test::path_taken(paths().stats().*direction);
  }
};

TEST_P(PathBoundaries, BlockingTransfersTakeTheirPathAtEveryThreshold) {
  using clbuf::TransferStats;
  for (std::size_t bytes : boundaries()) {
    SCOPED_TRACE(bytes);
    const auto data = random<std::uint8_t>(bytes);
    clbuf::DeviceBuffer<std::uint8_t> fresh;
    EXPECT_EQ(path_of(&TransferStats::upload, [&] { fresh = paths().upload(data); }),
              blocking(true, bytes))
        << "upload into a new buffer";
    std::vector<std::uint8_t> whole;
    EXPECT_EQ(path_of(&TransferStats::download, [&] { whole = paths().download(fresh); }),
              blocking(false, bytes))
        << "download into a new vector";
    EXPECT_TRUE(same_bytes(data, whole));

    // Into and out of a buffer at byte 1, the bytes around untouched.
    auto around = random<std::uint8_t>(bytes + 2);
    auto buffer = paths().upload(around);
    const auto window = random<std::uint8_t>(bytes);
    EXPECT_EQ(path_of(&TransferStats::upload, [&] { paths().upload(buffer, window, 1); }),
              blocking(true, bytes))
        << "upload at an offset";
    auto out = clbuf_test::sentinels<std::uint8_t>(bytes + 2);
    EXPECT_EQ(path_of(&TransferStats::download,
                      [&] { paths().download(buffer, out.data() + 1, bytes, 1); }),
              blocking(false, bytes))
        << "download at an offset";
    EXPECT_TRUE(same_bytes(window.data(), out.data() + 1, bytes));
    EXPECT_TRUE(clbuf_test::all_sentinel(out.data(), 1));
    EXPECT_TRUE(clbuf_test::all_sentinel(out.data() + bytes + 1, 1));
    std::memcpy(around.data() + 1, window.data(), bytes);
    EXPECT_TRUE(same_bytes(around, paths().download(buffer)));
  }
}

TEST_P(PathBoundaries, StartedTransfersAreStagedFromTheThresholdElseOneCommand) {
  using clbuf::TransferStats;
  for (std::size_t bytes : boundaries()) {
    SCOPED_TRACE(bytes);
    auto around = random<std::uint8_t>(bytes + 2);
    auto buffer = paths().upload(around);
    const auto window = random<std::uint8_t>(bytes);
    EXPECT_EQ(
        path_of(&TransferStats::upload, [&] { paths().upload_async(buffer, window, 1).wait(); }),
        started(bytes));
    auto out = clbuf_test::sentinels<std::uint8_t>(bytes + 2);
    EXPECT_EQ(path_of(&TransferStats::download,
                      [&] { paths().download_async(buffer, out.data() + 1, bytes, 1).wait(); }),
              started(bytes));
    EXPECT_TRUE(same_bytes(window.data(), out.data() + 1, bytes));
    EXPECT_TRUE(clbuf_test::all_sentinel(out.data(), 1));
    EXPECT_TRUE(clbuf_test::all_sentinel(out.data() + bytes + 1, 1));
  }
}

// PinnedBuffers are reached by DMA: never staged, buffered or bounced, whatever their size.
TEST_P(PathBoundaries, PinnedMemoryIsOneCommandAtEveryThreshold) {
  using clbuf::TransferStats;
  const std::string path = GetParam() == MemoryModel::host ? "host_copy" : "direct";
  for (std::size_t bytes : boundaries()) {
    SCOPED_TRACE(bytes);
    auto pinned = paths().allocate_pinned<std::uint8_t>(bytes);
    const auto data = random<std::uint8_t>(bytes);
    std::memcpy(pinned.data(), data.data(), bytes);
    auto buffer = paths().upload(random<std::uint8_t>(bytes + 2));
    EXPECT_EQ(path_of(&TransferStats::upload, [&] { paths().upload(buffer, pinned, 1); }), path);
    auto out = paths().allocate_pinned<std::uint8_t>(bytes);
    EXPECT_EQ(path_of(&TransferStats::download, [&] { paths().download(buffer, out, 1); }), path);
    EXPECT_TRUE(same_bytes(data.data(), out.data(), bytes));
  }
}

// On the host model a started upload into a fresh buffer below the huge-page size is copied at
// once (no command); from that size on, and on the other models, it is a started transfer.
TEST_P(PathBoundaries, StartedUploadsIntoFreshHostBlocksAreCopiedAtOnceBelowTheHugePageSize) {
  const std::size_t huge = clbuf::detail::huge_page_bytes;
  for (std::size_t bytes : {huge - 1, huge, huge + 1}) {
    SCOPED_TRACE(bytes);
    paths().trim_pool();  // a new buffer is then a fresh one
    const auto data = random<std::uint8_t>(bytes);
    clbuf::DeviceBuffer<std::uint8_t> buffer;
    const std::string expected =
        GetParam() == MemoryModel::host ? (bytes < huge ? "host_copy" : "direct") : started(bytes);
    EXPECT_EQ(
        path_of(&clbuf::TransferStats::upload, [&] { buffer = paths().upload_async(data).get(); }),
        expected);
    EXPECT_TRUE(same_bytes(data, paths().download(buffer)));
  }
}

// Copies, fills and rectangles are one command (or a run of them) whatever their size, or one
// host copy between a CPU device's own blocks when blocking.
TEST_P(PathBoundaries, CopiesFillsAndRectsAreCommandsOrHostCopies) {
  using clbuf::TransferStats;
  const std::string blocking_path = GetParam() == MemoryModel::host ? "host_copy" : "direct";
  const std::size_t count = threshold + 1;
  const auto data = random<std::uint8_t>(count);
  const auto src = paths().upload(data);
  auto dst = paths().upload(random<std::uint8_t>(count));
  EXPECT_EQ(path_of(&TransferStats::copy, [&] { paths().copy(src, dst); }), blocking_path);
  EXPECT_EQ(path_of(&TransferStats::copy,
                    [&] { paths().copy_bytes_async(src, dst, count, 0, 0).wait(); }),
            "direct");
  EXPECT_TRUE(same_bytes(data, paths().download(dst)));
  EXPECT_EQ(path_of(&TransferStats::upload, [&] { paths().fill(dst, std::uint8_t{0x3c}); }),
            blocking_path);
  EXPECT_EQ(
      path_of(&TransferStats::upload, [&] { paths().fill_async(dst, std::uint8_t{0x5d}).wait(); }),
      "direct");
  EXPECT_TRUE(same_bytes(std::vector<std::uint8_t>(count, 0x5d), paths().download(dst)));
  clbuf::Region box;
  box.size = {64, 8, 1};
  box.src_extents = {256, 8, 1};
  box.dst_extents = {256, 8, 1};
  const auto host = random<std::uint8_t>(256 * 8);
  EXPECT_EQ(path_of(&TransferStats::upload, [&] { paths().upload_rect(dst, host, box); }),
            "direct");
  std::vector<std::uint8_t> out(256 * 8);
  EXPECT_EQ(path_of(&TransferStats::download, [&] { paths().download_rect(dst, out, box); }),
            "direct");
  EXPECT_EQ(path_of(&TransferStats::copy, [&] { paths().copy_rect(src, dst, box); }), "direct");
}

CLBUF_INSTANTIATE_MODELS(PathBoundaries);

}  // namespace
