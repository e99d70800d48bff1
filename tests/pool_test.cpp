// SPDX-License-Identifier: MIT
// The device-memory pool: reuse, bins and block sizes on every memory model, the limit, trimming,
// and its end with the manager.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::detail::MemoryPool;

class PoolTest : public clbuf_test::DeviceTest {};

TEST(PoolBins, BinsAreNeverSmallerAndWasteAtMostAnEighthAboveFourKiB) {
  const std::uint64_t no_max = ~std::uint64_t{0};
  EXPECT_EQ(MemoryPool::bin_size(1, no_max), 64u);
  EXPECT_EQ(MemoryPool::bin_size(65, no_max), 128u);
  EXPECT_EQ(MemoryPool::bin_size(4096, no_max), 4096u);
  EXPECT_EQ(MemoryPool::bin_size(std::size_t{64} << 20, no_max), std::size_t{64} << 20);
  for (std::size_t bytes = 4097; bytes < (std::size_t{1} << 30); bytes = bytes * 3 / 2 + 7) {
    const std::size_t bin = MemoryPool::bin_size(bytes, no_max);
    EXPECT_GE(bin, bytes);
    EXPECT_LE(bin - bytes, bytes / 8 + 1) << bytes;
  }
}

TEST(PoolBins, ABinPastTheMaxAllocationFallsBackToTheExactSize) {
  EXPECT_EQ(MemoryPool::bin_size(1000000, 1000001), 1000000u);
  const std::size_t huge = ~std::size_t{0} - 5;
  EXPECT_EQ(MemoryPool::bin_size(huge, ~std::uint64_t{0}), huge);
}

TEST_F(PoolTest, RepeatedUploadsOfOneSizeReuseMemory) {
  const auto before = manager().stats().pool;
  for (int i = 0; i < 10; ++i) {
    const auto data = random<float>(100000);
    const auto buffer = manager().upload(data);
    EXPECT_TRUE(clbuf_test::same_bytes(data, manager().download(buffer)));
  }
  const auto after = manager().stats().pool;
  EXPECT_EQ(after.misses - before.misses, 1u);
  EXPECT_EQ(after.hits - before.hits, 9u);
  EXPECT_EQ(after.cached_buffers, 1u);
}

TEST_F(PoolTest, CachedBytesStayWithinTheLimit) {
  clbuf::Options options;
  options.pool_limit_bytes = 1 << 20;
  clbuf::BufferManager small(std::string(), options);
  {
    std::vector<clbuf::DeviceBuffer<char>> buffers;
    for (int i = 0; i < 8; ++i) buffers.push_back(small.allocate<char>(300000));
  }
  const auto stats = small.stats().pool;
  EXPECT_LE(stats.cached_bytes, std::size_t{1} << 20);
  EXPECT_EQ(stats.limit_bytes, std::size_t{1} << 20);
  EXPECT_GE(stats.released, 5u);
}

TEST_F(PoolTest, ZeroLimitTurnsThePoolOff) {
  clbuf::Options options;
  options.pool_limit_bytes = 0;
  clbuf::BufferManager uncached(std::string(), options);
  { const auto buffer = uncached.allocate<int>(1000); }
  { const auto buffer = uncached.allocate<int>(1000); }
  const auto stats = uncached.stats().pool;
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.cached_bytes, 0u);
}

TEST_F(PoolTest, TrimFreesEveryCachedBuffer) {
  { const auto buffer = manager().allocate<double>(5000); }
  EXPECT_GT(manager().stats().pool.cached_bytes, 0u);
  manager().trim_pool();
  const auto stats = manager().stats().pool;
  EXPECT_EQ(stats.cached_bytes, 0u);
  EXPECT_EQ(stats.cached_buffers, 0u);
  EXPECT_GE(stats.trims, 1u);
}

TEST_F(PoolTest, BuffersReturnedAfterCleanupAreFreedNotCached) {
  auto buffer = manager().allocate<int>(4096);
  manager().cleanup();
  EXPECT_EQ(manager().stats().pool.cached_bytes, 0u);
  { auto gone = std::move(buffer); }
  EXPECT_EQ(manager().stats().pool.cached_bytes, 0u);
  EXPECT_GE(manager().stats().pool.released, 1u);
}

TEST_F(PoolTest, PooledBufferMayBeLargerButSizeIsExact) {
  const auto data = random<std::uint8_t>(5000);
  const auto buffer = manager().upload(data);
  EXPECT_EQ(buffer.size(), 5000u);
  EXPECT_EQ(buffer.size_bytes(), 5000u);
  EXPECT_GE(buffer.native().getInfo<CL_MEM_SIZE>(), 5000u);
  EXPECT_CLBUF_ERROR(manager().download(buffer, std::vector<std::uint8_t>(5001).data(), 5001),
                     CL_INVALID_VALUE, "5001 bytes", "5000-byte buffer");
}

// The hot slot (the one cached buffer taken and given back without the lock, issue 47) keeps the
// pool's promises: its buffer counts as cached and its reuses as hits, a buffer of another size
// stays cached (trim() frees it), the limit holds, another queue's command on it holds it back,
// and once the pool is closed nothing is cached. On the pool itself, so that each step is seen.
class HotSlot : public clbuf_test::DeviceTest {};

TEST_F(HotSlot, ItsBufferCountsAsCachedAndItsReusesAsHits) {
  MemoryPool p(manager().context(), false, 1 << 20, manager().device().max_alloc_bytes);
  clbuf::detail::Allocation a = p.acquire(100, "test");
  const cl_mem first = a.buffer();
  EXPECT_EQ(p.stats().misses, 1u);
  EXPECT_EQ(p.stats().in_use_buffers, 1u);
  p.give_back(std::move(a));
  clbuf::PoolStats s = p.stats();
  EXPECT_EQ(s.cached_buffers, 1u);
  EXPECT_EQ(s.cached_bytes, 128u);
  EXPECT_EQ(s.in_use_buffers, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  clbuf::detail::Allocation b = p.acquire(120, "test");
  EXPECT_EQ(b.buffer(), first);
  EXPECT_FALSE(b.fresh);
  s = p.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.cached_buffers, 0u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.in_use_buffers, 1u);
  EXPECT_EQ(s.in_use_bytes, 128u);
  p.give_back(std::move(b));
}

TEST_F(HotSlot, ABufferOfAnotherSizeStaysCachedUntilTrimmed) {
  MemoryPool p(manager().context(), false, 1 << 20, manager().device().max_alloc_bytes);
  p.give_back(p.acquire(64, "test"));                       // into the slot
  clbuf::detail::Allocation big = p.acquire(4096, "test");  // another bin: a new buffer
  EXPECT_EQ(p.stats().misses, 2u);
  EXPECT_EQ(p.stats().cached_bytes, 64u);
  p.give_back(std::move(big));  // the slot is full: into the lists
  clbuf::PoolStats s = p.stats();
  EXPECT_EQ(s.cached_buffers, 2u);
  EXPECT_EQ(s.cached_bytes, 64u + 4096u);
  EXPECT_EQ(s.in_use_buffers, 0u);
  clbuf::detail::Allocation again = p.acquire(4000, "test");  // from the lists
  EXPECT_EQ(p.stats().hits, 1u);
  p.give_back(std::move(again));
  p.trim();
  s = p.stats();
  EXPECT_EQ(s.cached_buffers, 0u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.in_use_buffers, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(p.acquire(64, "test").capacity, 64u);
  EXPECT_EQ(p.stats().misses, 3u) << "trim() freed the slot's buffer";
}

TEST_F(HotSlot, TheLimitHoldsWithTheSlot) {
  for (const std::size_t limit : {std::size_t{0}, std::size_t{63}, std::size_t{100}}) {
    SCOPED_TRACE(limit);
    MemoryPool p(manager().context(), false, limit, manager().device().max_alloc_bytes);
    clbuf::detail::Allocation a = p.acquire(64, "test");
    clbuf::detail::Allocation b = p.acquire(64, "test");
    p.give_back(std::move(a));
    p.give_back(std::move(b));
    const clbuf::PoolStats s = p.stats();
    EXPECT_LE(s.cached_bytes, limit);
    EXPECT_EQ(s.cached_buffers, limit >= 64 ? 1u : 0u);
    EXPECT_EQ(s.released, limit >= 64 ? 1u : 2u);
    EXPECT_EQ(s.in_use_buffers, 0u);
  }
  MemoryPool p(manager().context(), false, 1 << 20, manager().device().max_alloc_bytes);
  p.give_back(p.acquire(4096, "test"));
  p.set_limit(1000);  // below the slot's buffer: trimmed
  EXPECT_EQ(p.stats().cached_bytes, 0u);
  EXPECT_EQ(p.stats().trims, 1u);
}

TEST_F(HotSlot, AnotherQueuesCommandHoldsItsBufferBack) {
  MemoryPool p(manager().context(), false, 1 << 20, manager().device().max_alloc_bytes);
  clbuf::detail::Allocation a = p.acquire(64, "test");
  const cl_mem first = a.buffer();
  cl::UserEvent running(manager().context());
  a.fences->add(running);
  p.give_back(std::move(a));  // into the slot, still in use by that command
  clbuf::detail::Allocation b = p.acquire(64, "test");
  EXPECT_NE(b.buffer(), first);
  EXPECT_EQ(p.stats().misses, 2u);
  p.give_back(std::move(b));  // the slot is full: into the list
  running.setStatus(CL_COMPLETE);
  clbuf::detail::Allocation c = p.acquire(64, "test");
  EXPECT_EQ(c.buffer(), first) << "the slot's buffer, its command ended";
  EXPECT_EQ(p.stats().hits, 1u);
  p.give_back(std::move(c));
}

TEST_F(HotSlot, NothingIsCachedOnceClosed) {
  MemoryPool p(manager().context(), false, 1 << 20, manager().device().max_alloc_bytes);
  clbuf::detail::Allocation a = p.acquire(64, "test");
  p.give_back(p.acquire(64, "test"));
  p.close();
  EXPECT_EQ(p.stats().cached_buffers, 0u);
  p.give_back(std::move(a));
  const clbuf::PoolStats s = p.stats();
  EXPECT_EQ(s.cached_buffers, 0u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.in_use_buffers, 0u);
  EXPECT_EQ(s.released, 1u);
}

// Threads taking and giving back buffers of two bins at once, the limit room for three of the
// smaller: the counts add up exactly at the end and the cached bytes never passed the limit
// (TSan: the slot's state orders its buffer's hand-over).
TEST_F(HotSlot, ThreadsAtOnceKeepTheCountsAndTheLimit) {
  const std::size_t limit = 3 * 64;
  MemoryPool p(manager().context(), false, limit, manager().device().max_alloc_bytes);
  constexpr int threads = 4, rounds = 400;
  std::atomic<int> wrong{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&p, &wrong, t] {
      std::mt19937 rng(static_cast<std::uint32_t>(t));
      for (int i = 0; i < rounds; ++i) {
        const std::size_t bytes = rng() % 2 == 0 ? 64 : 128;
        try {
          clbuf::detail::Allocation a = p.acquire(bytes, "test");
          if (a.capacity != bytes || a.buffer() == nullptr) ++wrong;
          p.give_back(std::move(a));
        } catch (...) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(wrong.load(), 0);
  const clbuf::PoolStats s = p.stats();
  EXPECT_EQ(s.hits + s.misses, std::uint64_t{threads} * rounds);
  EXPECT_EQ(s.in_use_buffers, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_LE(s.cached_bytes, limit);
  EXPECT_EQ(s.misses, s.released + s.cached_buffers) << "every buffer made is cached or freed";
}

// The pool's blocks on every memory model (on the host model they are host memory clbuf
// allocates itself, which no driver bounds-checks): a buffer's block (the CL_MEM_SIZE of its
// OpenCL buffer, and what cached_bytes counts once it is back) is its size's bin, never less than
// the size; the smallest and the largest request of that bin both reuse it whole, and a request of
// the next bin never gets it: a new, larger block.
class PoolBlocks : public clbuf_test::ModelTest {
 protected:
  /// Uploads `bytes` random bytes, checks the block and the bytes, and frees it (back to the pool).
  void round_trip(std::size_t bytes, std::size_t block) {
    const auto data = random<std::uint8_t>(bytes);
    const auto buffer = paths().upload(data);
    EXPECT_EQ(buffer.native().getInfo<CL_MEM_SIZE>(), block) << "the block of " << bytes;
    EXPECT_TRUE(clbuf_test::same_bytes(data, paths().download(buffer)));
  }
};

TEST_P(PoolBlocks, EveryBlockIsItsBinAndReuseStaysInTheBin) {
  // The bins, written out: 64 B, powers of two to 4 KiB, then eighths of the power of two below.
  struct Bin {
    std::size_t bytes;     // a request
    std::size_t bin;       // its block
    std::size_t smallest;  // the smallest request of that bin
    std::size_t next;      // the block of one byte more than the bin
  };
  const Bin bins[] = {{1, 64, 1, 128},
                      {64, 64, 1, 128},
                      {65, 128, 65, 256},
                      {4095, 4096, 2049, 4608},
                      {4096, 4096, 2049, 4608},
                      {4097, 4608, 4097, 5120},
                      {4608, 4608, 4097, 5120},
                      {4609, 5120, 4609, 5632},
                      {65537, 73728, 65537, 81920},
                      {(1 << 20) + 3, 1179648, (1 << 20) + 1, 1310720}};
  const std::uint64_t max = paths().device().max_alloc_bytes;
  for (const Bin& b : bins) {
    SCOPED_TRACE(b.bytes);
    ASSERT_GE(max, b.next);
    EXPECT_EQ(MemoryPool::bin_size(b.bytes, max), b.bin);
    paths().trim_pool();
    const auto before = paths().stats().pool;
    round_trip(b.bytes, b.bin);
    EXPECT_EQ(paths().stats().pool.cached_bytes, b.bin) << "the block came back whole";
    round_trip(b.smallest, b.bin);
    round_trip(b.bin, b.bin);
    const auto reused = paths().stats().pool;
    EXPECT_EQ(reused.misses - before.misses, 1u) << "one block for the whole bin";
    EXPECT_EQ(reused.hits - before.hits, 2u);
    round_trip(b.bin + 1, b.next);
    const auto after = paths().stats().pool;
    EXPECT_EQ(after.misses - reused.misses, 1u)
        << "a request of the next bin reused a smaller block";
    EXPECT_EQ(after.hits, reused.hits);
    EXPECT_EQ(after.cached_bytes, b.bin + b.next);
  }
}

CLBUF_INSTANTIATE_MODELS(PoolBlocks);

}  // namespace
