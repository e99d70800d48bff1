// SPDX-License-Identifier: MIT
// Stress (RELIABILITY.md group E) on every MemoryModel, so the fast paths (host blocks, staging,
// the pool) meet the same random workloads as the default path: random windows against a host
// shadow with sentinels, random operations over eight buffers against a model, sizes around every
// boundary from misaligned host pointers, 20,000 tiny buffers, 200 managers, and an allocation of
// exactly the device's max allocation (POCL_MEMORY_LIMIT=1 keeps it at 256 MiB).
#include <cstdint>
#include <string>
#include <vector>

#include "support/device_test.hpp"
#include "support/random_workload.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_test::all_sentinel;
using clbuf_test::same_bytes;
using clbuf_test::sentinels;

/// A manager per MemoryModel; the discrete one stages anything from 8 KiB in 4 KiB chunks.
class Stress : public clbuf_test::ModelTest {
 protected:
  void configure(clbuf::Options& options) override {
    options.staging_threshold_bytes = 8192;
    options.staging_chunk_bytes = 4096;
  }
  clbuf::BufferManager& m() { return paths(); }
};

// The random workloads of tests/support/random_workload.hpp, shared with the transfer suite.
TEST_P(Stress, ThousandRandomWindowsMatchAHostShadowWithSentinels) {
  clbuf_test::RandomWindows workload;
  workload.elements = 20011;  // 80 KB: windows both below and above the staging threshold
  workload.iterations = 1000;
  workload.check_every = 100;
  EXPECT_TRUE(workload.run(m(), seed_));
}

TEST_P(Stress, FiveHundredRandomOperationsOnEightBuffersMatchAModel) {
  clbuf_test::RandomOperations workload;
  workload.buffers = 8;
  workload.operations = 500;
  workload.max_bytes = 20000;  // staged (from 8 KiB) and not
  EXPECT_TRUE(workload.run(m(), seed_));
}

TEST_P(Stress, BoundarySizesFromMisalignedPointersRoundTrip) {
  std::vector<std::size_t> sizes;
  for (std::size_t n = 1; n <= 17; ++n) sizes.push_back(n);
  const std::size_t mib = std::size_t{1} << 20;
  for (std::size_t n :
       std::vector<std::size_t>{4095, 4096, 4097, 8191, 8192, 8193, 12289, mib - 1, mib, mib + 1}) {
    sizes.push_back(n);
  }
  for (std::size_t bytes : sizes) {
    for (std::size_t shift : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
      // Bytes at an odd address, with sentinels on both sides of the download window.
      std::vector<std::uint8_t> source = random<std::uint8_t>(bytes + shift);
      const std::uint8_t* from = source.data() + shift;
      auto buffer = m().upload(from, bytes);
      std::vector<std::uint8_t> back = sentinels<std::uint8_t>(bytes + shift + 1);
      m().download(buffer, back.data() + shift, bytes);
      ASSERT_TRUE(same_bytes(from, back.data() + shift, bytes)) << bytes << " bytes +" << shift;
      ASSERT_TRUE(all_sentinel(back.data(), shift));
      ASSERT_TRUE(all_sentinel(back.data() + shift + bytes, 1)) << bytes << " bytes +" << shift;
      auto again = m().allocate<std::uint8_t>(bytes);
      m().upload(again, from, bytes);
      m().copy(again, buffer);
      ASSERT_TRUE(same_bytes(from, m().download(buffer).data(), bytes)) << bytes;
    }
  }
}

TEST_P(Stress, TwentyThousandTinyBuffers) {
  const auto values = random<std::int32_t>(20000);
  std::vector<clbuf::DeviceBuffer<std::int32_t>> buffers;
  buffers.reserve(values.size());
  for (const std::int32_t& value : values) buffers.push_back(m().upload(&value, 1));
  for (std::size_t i = 0; i < values.size(); i += 7) {
    std::int32_t out = 0;
    m().download(buffers[i], &out, 1);
    ASSERT_EQ(out, values[i]) << "buffer " << i;
  }
  buffers.clear();  // all back to the pool (or freed past its limit)
  EXPECT_LE(m().stats().pool.cached_bytes, m().stats().pool.limit_bytes);
}

TEST_P(Stress, TwoHundredManagersComeAndGo) {
  clbuf::Options options = m().options();
  for (int i = 0; i < 200; ++i) {
    clbuf::BufferManager local("", options);
    const auto data = random<std::int32_t>(pick(1, 4000));
    auto buffer = local.upload(data);
    if (i % 2 == 0) {
      ASSERT_TRUE(same_bytes(data, local.download(buffer))) << "manager " << i;
    } else {
      auto future = local.download_async(buffer);  // destroyed with the transfer pending
    }
  }
}

CLBUF_INSTANTIATE_MODELS(Stress);

class MaxAlloc : public clbuf_test::DeviceTest {};

// Registered with POCL_MEMORY_LIMIT=1, which keeps PoCL's max allocation at 256 MiB.
TEST_F(MaxAlloc, ExactlyMaxAllocIsAllocatedWrittenAtBothEndsAndOneMoreByteIsNot) {
  const std::uint64_t max_alloc = manager().device().max_alloc_bytes;
  if (max_alloc > (std::uint64_t{1} << 30)) {
    GTEST_SKIP() << "max allocation " << max_alloc << " bytes: run with POCL_MEMORY_LIMIT=1";
  }
  const auto bytes = static_cast<std::size_t>(max_alloc);
  auto buffer = manager().allocate<std::uint8_t>(bytes);
  ASSERT_EQ(buffer.size(), bytes);
  const auto head = random<std::uint8_t>(4096);
  const auto tail = random<std::uint8_t>(4096);
  manager().upload(buffer, head, 0);
  manager().upload(buffer, tail, bytes - tail.size());
  auto out = sentinels<std::uint8_t>(4097);
  manager().download(buffer, out.data(), 4096, bytes - 4096);
  EXPECT_TRUE(same_bytes(tail.data(), out.data(), 4096));
  EXPECT_TRUE(all_sentinel(&out[4096], 1));
  manager().download(buffer, out.data(), 4096, 0);
  EXPECT_TRUE(same_bytes(head.data(), out.data(), 4096));
  EXPECT_CLBUF_ERROR(manager().allocate<std::uint8_t>(bytes + 1), CL_INVALID_BUFFER_SIZE,
                     "allocate: ", std::to_string(bytes + 1), std::to_string(max_alloc));
  EXPECT_CLBUF_ERROR(manager().allocate<std::uint32_t>(bytes / 4 + 1), CL_INVALID_BUFFER_SIZE,
                     "allocate: ");
}

}  // namespace
