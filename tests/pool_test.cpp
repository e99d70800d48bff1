// SPDX-License-Identifier: MIT
// The device-memory pool: reuse, bins and block sizes on every memory model, the limit, trimming,
// and its end with the manager.
#include <cstddef>
#include <cstdint>
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
