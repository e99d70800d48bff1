// SPDX-License-Identifier: MIT
// clbuf's one pool of pinned host memory (detail/pinned_pool.hpp): every pinned block clbuf uses
// for itself (staging slots, the buffered uploads' ring, bounced downloads, copy_from's chunks
// between contexts) leases from it, blocks are reused at their size class, cached blocks are
// trimmed for another size, and Options::pinned_budget_bytes holds under load from several
// threads and two managers, with every byte still exact where the budget holds nothing at all.
// (clbuf::mpi's chunks on several Communicators: tests/mpi/mpi_test.cpp.)
#include <gtest/gtest.h>
#include <clbuf/clbuf.hpp>

#include "support/device_test.hpp"

// The heap is watched (heap_hook.hpp) except under TSan, whose runtime defines operator new and
// delete itself.
#if !CLBUF_TEST_TSAN
#include "support/heap_hook.hpp"
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

/// The largest C++ heap allocation made while `heap_watch` is set (heap_hook.hpp).
std::atomic<bool> heap_watch{false};
std::atomic<std::size_t> heap_largest{0};

#if !CLBUF_TEST_TSAN
void* clbuf_test_heap_new(std::size_t size) noexcept {
  if (heap_watch.load(std::memory_order_relaxed)) {
    std::size_t seen = heap_largest.load();
    while (size > seen && !heap_largest.compare_exchange_weak(seen, size)) {
    }
  }
  return std::malloc(size == 0 ? 1 : size);
}
#endif

namespace {

using clbuf::MemoryModel;
using Pool = clbuf::detail::PinnedPool;

constexpr std::size_t kib = 1024;

/// A discrete manager (forced on PoCL) whose every path needs pinned memory at small sizes:
/// staged from 256 KiB in 64 KiB chunks (8 a lane), bounced up to 32 KiB, buffered up to 4 KiB
/// (a ring of 16 x 4 KiB = 64 KiB), within `budget`.
clbuf::Options small_paths(std::size_t budget) {
  clbuf::Options options;
  options.memory = MemoryModel::discrete;
  options.staging_threshold_bytes = 256 * kib;
  options.staging_chunk_bytes = 64 * kib;
  options.staging_chunks = 8;
  options.bounce_max_bytes = 32 * kib;
  options.buffered_upload_max_bytes = 4 * kib;
  options.copy_threads = 2;
  options.pinned_budget_bytes = budget;
  return options;
}

class PinnedPool : public clbuf_test::DeviceTest {
 protected:
  std::unique_ptr<clbuf::BufferManager> make(std::size_t budget) {
    return std::make_unique<clbuf::BufferManager>(std::string(), small_paths(budget));
  }

  /// Uploads `bytes` of random data to `m` and downloads it back (into caller memory and into a
  /// new vector), exact.
  void round_trip(clbuf::BufferManager& m, std::size_t bytes) {
    SCOPED_TRACE(bytes);
    const std::vector<std::uint8_t> data = random<std::uint8_t>(bytes);
    clbuf::DeviceBuffer<std::uint8_t> buffer = m.allocate<std::uint8_t>(bytes);
    m.upload(buffer, data);
    EXPECT_EQ(m.download(buffer), data);
    std::vector<std::uint8_t> out(bytes);
    m.download(buffer, out.data(), bytes);
    EXPECT_EQ(out, data);
  }
};

TEST(PinnedPoolClasses, ArePowersOfTwoFrom4KiBThenWholeMiB) {
  const std::size_t mib = std::size_t{1} << 20;
  EXPECT_EQ(Pool::size_class(1), 4096u);
  EXPECT_EQ(Pool::size_class(4096), 4096u);
  EXPECT_EQ(Pool::size_class(4097), 8192u);
  EXPECT_EQ(Pool::size_class(mib), mib);
  EXPECT_EQ(Pool::size_class(mib + 1), 2 * mib);
  EXPECT_EQ(Pool::size_class(64 * mib), 64 * mib);
  EXPECT_EQ(Pool::size_class(64 * mib + 1), 65 * mib);
}

TEST_F(PinnedPool, AutomaticBudgetHoldsBothLanesTheRingFourBounceBlocksAnd128MiB) {
  clbuf::Options options;
  options.memory = MemoryModel::discrete;
  clbuf::BufferManager m(std::string(), options);
  const clbuf::Options& r = m.options();
  EXPECT_EQ(r.pinned_budget_bytes, 2 * r.staging_chunk_bytes * r.staging_chunks +
                                       16 * r.buffered_upload_max_bytes + 4 * r.bounce_max_bytes +
                                       (std::size_t{128} << 20));
  EXPECT_EQ(m.stats().pinned.budget_bytes, r.pinned_budget_bytes);
  EXPECT_EQ(m.stats().pinned.allocated_bytes, 0u) << "nothing is made before it is needed";
}

TEST_F(PinnedPool, BouncedDownloadsReuseOneBlock) {
  auto m = make(std::size_t{16} << 20);
  clbuf::DeviceBuffer<std::uint8_t> buffer = m->upload(random<std::uint8_t>(20 * kib));
  for (int i = 0; i < 10; ++i) static_cast<void>(m->download(buffer));
  const clbuf::PinnedStats pinned = m->stats().pinned;
  EXPECT_EQ(pinned.leases, 10u);
  EXPECT_EQ(pinned.allocations, 1u) << "made once";
  EXPECT_EQ(pinned.reuses, 9u);
  EXPECT_EQ(pinned.in_use_bytes, 0u);
  EXPECT_EQ(pinned.cached_bytes, 32 * kib) << "the bounce block's size class, kept";
  EXPECT_EQ(pinned.allocated_bytes, pinned.cached_bytes);
}

TEST_F(PinnedPool, EveryPathLeasesFromItAndCleanupFreesAll) {
  auto m = make(std::size_t{16} << 20);
  auto other = make(std::size_t{16} << 20);  // another context: copy_from relays through chunks
  round_trip(*m, 100);                       // buffered upload, bounced download
  round_trip(*m, 300 * kib);                 // staged both ways
  clbuf::DeviceBuffer<std::uint8_t> src = other->upload(random<std::uint8_t>(200 * kib));
  clbuf::DeviceBuffer<std::uint8_t> dst = m->allocate<std::uint8_t>(200 * kib);
  m->copy_from(*other, src, dst);
  EXPECT_EQ(m->download(dst), other->download(src));
  const clbuf::TransferStats stats = m->stats();
  EXPECT_EQ(stats.upload.paths.buffered, 1u);
  EXPECT_EQ(stats.download.paths.bounced, 2u);
  EXPECT_EQ(stats.upload.paths.staged, 1u);
  EXPECT_EQ(stats.copy.paths.relayed, 1u);
  // The staging lanes (8 x 64 KiB each) and the ring (64 KiB) stay leased; the bounce block and
  // copy_from's two chunks came back.
  EXPECT_EQ(stats.pinned.in_use_bytes, 2 * 8 * 64 * kib + 64 * kib);
  EXPECT_GE(stats.pinned.cached_bytes, 32 * kib + 2 * 64 * kib);
  EXPECT_EQ(stats.pinned.refusals, 0u);
  m->cleanup();
  EXPECT_EQ(m->stats().pinned.allocated_bytes, 0u) << "cleanup() frees every block";
  EXPECT_EQ(m->stats().pinned.in_use_bytes, 0u);
}

TEST_F(PinnedPool, ACachedBlockIsTrimmedForAnotherSizeAndAFullBudgetRefuses) {
  // 64 KiB: the ring (64 KiB) fits only once the cached bounce block (32 KiB) is freed; then a
  // bounced download finds no room and reads without pinned memory, exact all the same.
  auto m = make(64 * kib);
  clbuf::DeviceBuffer<std::uint8_t> buffer = m->upload(random<std::uint8_t>(20 * kib));
  const std::vector<std::uint8_t> first = m->download(buffer);  // bounce block made, then cached
  EXPECT_EQ(m->stats().pinned.cached_bytes, 32 * kib);
  const std::vector<std::uint8_t> small = random<std::uint8_t>(100);
  m->upload(buffer, small);  // the ring: the cached block is trimmed to make room
  clbuf::PinnedStats pinned = m->stats().pinned;
  EXPECT_EQ(pinned.trims, 1u);
  EXPECT_EQ(pinned.in_use_bytes, 64 * kib);
  EXPECT_EQ(pinned.cached_bytes, 0u);
  std::vector<std::uint8_t> expected = first;
  std::copy(small.begin(), small.end(), expected.begin());
  EXPECT_EQ(m->download(buffer), expected) << "a bounced download without a block";
  pinned = m->stats().pinned;
  EXPECT_EQ(pinned.refusals, 1u);
  EXPECT_LE(pinned.peak_bytes, 64 * kib);
}

TEST_F(PinnedPool, ABudgetOfNothingStillMovesEveryByteExactly) {
  auto m = make(0);
  auto other = make(0);
  for (std::size_t bytes : {std::size_t{1}, std::size_t{100}, 20 * kib, 300 * kib + 7}) {
    round_trip(*m, bytes);
    const std::vector<std::uint8_t> data = random<std::uint8_t>(bytes);
    clbuf::DeviceBuffer<std::uint8_t> buffer = m->allocate<std::uint8_t>(bytes);
    m->upload_async(buffer, data).wait();
    EXPECT_EQ(m->download_async(buffer).get(), data);
    clbuf::DeviceBuffer<std::uint8_t> copy = other->allocate<std::uint8_t>(bytes);
    other->copy_from(*m, buffer, copy);
    EXPECT_EQ(other->download(copy), data);
  }
  for (clbuf::BufferManager* manager : {m.get(), other.get()}) {
    const clbuf::PinnedStats pinned = manager->stats().pinned;
    EXPECT_EQ(pinned.allocations, 0u);
    EXPECT_EQ(pinned.peak_bytes, 0u);
    EXPECT_GT(pinned.refusals, 0u);
  }
}

// A download that would bounce, with no pinned block to bounce through, reads straight into the
// caller's memory: no host buffer of its size in between (before: a vector, then a copy).
TEST_F(PinnedPool, ARefusedBounceReadsStraightIntoTheCallersMemory) {
  if (clbuf_test::thread_sanitizer) GTEST_SKIP() << "the heap is not watched under TSan";
  auto m = make(0);
  const std::size_t bytes = 24 * kib;  // bounced (up to 32 KiB), not buffered, not staged
  const std::vector<std::uint8_t> data = random<std::uint8_t>(bytes);
  clbuf::DeviceBuffer<std::uint8_t> buffer = m->upload(data);
  std::vector<std::uint8_t> out(bytes);
  m->finish();
  heap_largest = 0;
  heap_watch = true;
  m->download(buffer, out.data(), bytes);
  heap_watch = false;
  EXPECT_EQ(out, data);
  EXPECT_LT(heap_largest.load(), bytes) << "a host buffer of the download's size in between";
  EXPECT_EQ(m->stats().download.paths.bounced, 1u);
  EXPECT_GT(m->stats().pinned.refusals, 0u);
}

// A chunk left to something outside clbuf that may still write it (clbuf::mpi: the request of a
// failed transfer) is never freed, and no longer counted against the budget: stats say so.
TEST_F(PinnedPool, ALeakedChunkLeavesTheBudgetAndIsCounted) {
  if (clbuf_test::address_sanitizer)
    GTEST_SKIP() << "leaks a pinned block on purpose (LSan would report it)";
  auto m = make(64 * kib);
  clbuf::detail::ChunkIo io = clbuf::detail::ManagerAccess::engine(*m).chunk_io();
  clbuf::detail::HostChunk chunk = io.chunk("chunk", 32 * kib);
  ASSERT_TRUE(chunk.pinned());
  EXPECT_EQ(m->stats().pinned.in_use_bytes, 32 * kib);
  chunk.leak();
  EXPECT_FALSE(chunk);
  const clbuf::PinnedStats pinned = m->stats().pinned;
  EXPECT_EQ(pinned.leaked, 1u);
  EXPECT_EQ(pinned.in_use_bytes, 0u);
  EXPECT_EQ(pinned.allocated_bytes, 0u);
  clbuf::detail::HostChunk two = io.chunk("chunk", 64 * kib);  // the whole budget again
  EXPECT_TRUE(two.pinned());
}

// The engine's chunk calls (detail/chunk_io.hpp), as clbuf::mpi uses them: a chunk of the pool
// (of plain host memory when the budget holds none), bytes written out of it and read back into
// it, a range mapped and unmapped without waiting, a started command waited for quietly.
TEST_F(PinnedPool, ChunkCallsMoveBytesThroughPooledAndPlainChunks) {
  for (std::size_t budget : {std::size_t{1} << 20, std::size_t{0}}) {
    SCOPED_TRACE(budget);
    auto m = make(budget);
    clbuf::detail::ChunkIo io = clbuf::detail::ManagerAccess::engine(*m).chunk_io();
    clbuf::detail::HostChunk chunk = io.chunk("chunk", 8 * kib);
    ASSERT_TRUE(chunk);
    EXPECT_EQ(chunk.pinned(), budget != 0);
    const std::vector<std::uint8_t> data = random<std::uint8_t>(8 * kib);
    std::copy(data.begin(), data.end(), static_cast<std::uint8_t*>(chunk.data()));
    clbuf::DeviceBuffer<std::uint8_t> buffer = m->allocate<std::uint8_t>(8 * kib);
    const cl::Event written = io.write("chunk", buffer.native()(), 0, 8 * kib, chunk.data(), false);
    clbuf::detail::ChunkIo::wait_quietly(written);
    EXPECT_EQ(m->download(buffer), data);
    std::fill_n(static_cast<std::uint8_t*>(chunk.data()), 8 * kib, std::uint8_t{0});
    io.read("chunk", buffer.native()(), 0, 8 * kib, chunk.data(), true);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), static_cast<std::uint8_t*>(chunk.data())));
    void* mapped = io.map("chunk", buffer.native()(), CL_MAP_READ, 0, 8 * kib);
    EXPECT_EQ(std::memcmp(mapped, data.data(), 8 * kib), 0);
    io.unmap_quietly(buffer.native()(), mapped);
    io.finish("chunk");
    chunk.reset();
    EXPECT_FALSE(chunk);
    EXPECT_EQ(m->stats().pinned.in_use_bytes, 0u);
  }
}

// Bounced downloads from four threads at once on one manager take and give back blocks through
// the pool's lock-free hot slot and its locked lists at once (issue 47): every byte arrives, and
// once they are done every lease was counted, nothing is in use and every block is cached.
TEST_F(PinnedPool, BouncedDownloadsFromSeveralThreadsCountEveryLeaseAndKeepEveryBlock) {
  auto m = make(std::size_t{1} << 20);
  const std::size_t bytes = 8 * kib;  // bounced (up to 32 KiB), not buffered, not staged
  const std::vector<std::uint8_t> data = random<std::uint8_t>(bytes);
  const clbuf::DeviceBuffer<std::uint8_t> buffer = m->upload(data);
  const clbuf::PinnedStats before = m->stats().pinned;
  constexpr int threads = 4;
  constexpr int reads = 50;
  std::atomic<int> wrong{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      std::vector<std::uint8_t> out(bytes);
      for (int i = 0; i < reads; ++i) {
        std::fill(out.begin(), out.end(), std::uint8_t{0});
        m->download(buffer, out.data(), bytes);
        if (out != data) ++wrong;
        if (m->download(buffer) != data) ++wrong;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(wrong.load(), 0);
  const clbuf::PinnedStats after = m->stats().pinned;
  EXPECT_EQ(after.leases - before.leases, std::uint64_t{2 * threads * reads});
  EXPECT_EQ(after.leases, after.reuses + after.allocations + after.refusals);
  EXPECT_EQ(after.in_use_bytes, 0u);
  EXPECT_EQ(after.allocated_bytes, after.cached_bytes);
  EXPECT_LE(after.allocations - before.allocations, std::uint64_t{threads})
      << "at most one block per thread reading at once";
  m->cleanup();
  EXPECT_EQ(m->stats().pinned.allocated_bytes, 0u) << "cleanup() frees the hot block too";
}

// Four threads on two managers (two contexts), each moving bytes by every path at once, with a
// budget smaller than one staging lane: a thread samples both pools' bytes all along, and none
// ever holds more than its budget; every byte arrives exactly.
TEST_F(PinnedPool, TheBudgetHoldsUnderLoadFromSeveralThreadsAndManagers) {
  const std::size_t budget = 6 * 64 * kib;
  auto a = make(budget);
  auto b = make(budget);
  std::atomic<bool> done{false};
  std::atomic<std::size_t> most{0};
  std::thread sampler([&] {
    while (!done.load()) {
      for (clbuf::BufferManager* m : {a.get(), b.get()}) {
        const std::size_t now = m->stats().pinned.allocated_bytes;
        std::size_t seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
      }
      std::this_thread::yield();
    }
  });
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      clbuf::BufferManager& mine = t % 2 == 0 ? *a : *b;
      clbuf::BufferManager& theirs = t % 2 == 0 ? *b : *a;
      try {
        for (std::size_t round = 0; round < 4; ++round) {
          for (std::size_t bytes : {std::size_t{100} + t, 20 * kib + t, 300 * kib + t}) {
            std::vector<std::uint8_t> data(bytes);
            for (std::size_t i = 0; i < bytes; ++i) {
              data[i] = static_cast<std::uint8_t>(i * 7 + t + round);
            }
            clbuf::DeviceBuffer<std::uint8_t> buffer = mine.upload(data);
            if (mine.download(buffer) != data) ++wrong;
            if (mine.download_async(buffer).get() != data) ++wrong;
            clbuf::DeviceBuffer<std::uint8_t> there = theirs.allocate<std::uint8_t>(bytes);
            theirs.copy_from(mine, buffer, there);
            if (theirs.download(there) != data) ++wrong;
          }
        }
      } catch (const clbuf::Error&) {
        ++errors;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done = true;
  sampler.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(most.load(), budget) << "sampled";
  for (clbuf::BufferManager* m : {a.get(), b.get()}) {
    const clbuf::PinnedStats pinned = m->stats().pinned;
    EXPECT_LE(pinned.peak_bytes, budget);
    EXPECT_GT(pinned.allocations, 0u);
    EXPECT_GT(pinned.refusals, 0u) << "the budget was tight enough to refuse";
  }
}

}  // namespace
