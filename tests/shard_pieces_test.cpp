// SPDX-License-Identifier: MIT
// Issue 43: pieces on one device. Partition::max_shard_bytes caps a shard's bytes, so a
// DeviceGroup places as many shards on a device as its part needs, in order; a group of one
// device holds an array of any size that fits its memory. Every move (scatter, gather, upload,
// download, copy, fill, their async forms) and ShardedHalo between shards of one device and
// across devices, each against the host's array. Run on 2 PoCL devices and again on 1.
#include <gtest/gtest.h>

#include <clbuf/clbuf.hpp>

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::DeviceGroup;
using clbuf::Partition;
using clbuf::ShardedBuffer;
using clbuf_test::expect_error;

// The split by weights (Partition::weights; detail::apportion), exact in integers: a fraction's
// share of a count above 2^32 / its top bits (the product's carry runs past its limbs), and
// weights 600 binary orders apart, each part its exact share rounded down or up.
TEST(Apportion, WeightsOfAnySizeSplitACountExactly) {
  using clbuf::detail::apportion;
  EXPECT_EQ(apportion(1000000, {0.3, 0.7}), (std::vector<std::size_t>{300000, 700000}));
  EXPECT_EQ(apportion(std::size_t{1} << 62, {0.25, 0.75}),
            (std::vector<std::size_t>{std::size_t{1} << 60, std::size_t{3} << 60}));
  EXPECT_EQ(apportion(10, {1e300, 1e-300}), (std::vector<std::size_t>{10, 0}));
  EXPECT_EQ(apportion(7, {1e-300, 0.0, 1e-300}), (std::vector<std::size_t>{4, 0, 3}));
}

class Pieces : public clbuf_test::DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    clbuf::Options options;
    options.memory = clbuf::MemoryModel::discrete;  // commands, not host copies, between shards
    options.staging_threshold_bytes = 8192;
    options.staging_chunk_bytes = 4096;
    all_ = std::make_unique<DeviceGroup>("all", options);
    one_ = std::make_unique<DeviceGroup>("0:0", options);
  }

  /// Shards in order: consecutive parts, devices non-decreasing, every device holding one at
  /// least, no shard over `cap` bytes with its ghost elements.
  template <class T>
  void expect_placed(const DeviceGroup& group, const ShardedBuffer<T>& buffer, std::size_t cap) {
    std::size_t next = 0, device = 0;
    std::vector<bool> seen(group.size(), false);
    for (std::size_t i = 0; i < buffer.shards(); ++i) {
      EXPECT_EQ(buffer.offset(i), next) << "shard " << i;
      next += buffer.count(i);
      EXPECT_GE(buffer.device(i), device) << "shard " << i;
      device = buffer.device(i);
      seen[device] = true;
      EXPECT_LE(buffer.shard(i).size_bytes(), cap) << "shard " << i;
      EXPECT_EQ(buffer.shard(i).size(), buffer.count(i) + 2 * buffer.ghost()) << "shard " << i;
    }
    EXPECT_EQ(next, buffer.size());
    for (std::size_t d = 0; d < group.size(); ++d) EXPECT_TRUE(seen[d]) << "device " << d;
  }

  /// Every move of `group` over `count` floats split by `partition` against the host's array.
  void every_move(DeviceGroup& group, std::size_t count, const Partition& partition) {
    const std::vector<float> data = random<float>(count);
    ShardedBuffer<float> x = group.scatter(data, partition);
    expect_placed(group, x, partition.max_shard_bytes());
    EXPECT_EQ(group.gather(x), data);
    const std::vector<float> other = random<float>(count);
    group.upload(x, other);
    std::vector<float> back(count);
    group.download(x, back.data(), count);
    EXPECT_EQ(back, other);
    ShardedBuffer<float> y = group.allocate<float>(count, partition);
    group.copy(x, y);
    EXPECT_EQ(group.gather(y), other);
    group.fill(y, 2.5f);
    EXPECT_EQ(group.gather(y), std::vector<float>(count, 2.5f));
    ShardedBuffer<float> z = group.scatter_async(data.data(), count, partition).get();
    EXPECT_EQ(group.gather_async(z).get(), data);
    group.upload_async(z, other.data(), count).get();
    group.copy_async(z, y).get();
    group.download_async(y, back.data(), count).get();
    EXPECT_EQ(back, other);
    group.fill_async(z, -1.0f).get();
    EXPECT_EQ(group.gather(z), std::vector<float>(count, -1.0f));
  }

  std::unique_ptr<DeviceGroup> all_, one_;
};

TEST_F(Pieces, OneDeviceHoldsAnArrayInPiecesAndEveryMoveWorks) {
  // 1001 floats in shards of at most 1000 bytes: 5 pieces of 201, 200, 200, 200, 200 floats.
  const Partition capped = Partition::even().max_shard_bytes(1000);
  ShardedBuffer<float> x = one_->allocate<float>(1001, capped);
  ASSERT_EQ(x.shards(), 5u);
  EXPECT_EQ(x.count(0), 201u);
  for (std::size_t i = 1; i < 5; ++i) EXPECT_EQ(x.count(i), 200u) << i;
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{250},
                                  std::size_t{251}, std::size_t{1001}, std::size_t{4097}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    every_move(*one_, count, capped);
  }
}

TEST_F(Pieces, EveryDeviceHoldsItsPartInPiecesInOrder) {
  for (const std::size_t cap : {std::size_t{64}, std::size_t{400}, std::size_t{1} << 20}) {
    SCOPED_TRACE("cap " + std::to_string(cap));
    every_move(*all_, 3001, Partition::even().max_shard_bytes(cap));
    std::vector<double> weights(all_->size(), 1.0);
    weights[0] = 3.0;
    every_move(*all_, 2999, Partition::weighted(weights).max_shard_bytes(cap));
  }
}

TEST_F(Pieces, UnitsAreNeverCutAndACapBelowAUnitIsRefused) {
  const Partition rows = Partition::even(10).max_shard_bytes(10 * 4 * 3);  // 3 rows a shard
  ShardedBuffer<float> x = one_->allocate<float>(10 * 7, rows);
  ASSERT_EQ(x.shards(), 3u);
  for (std::size_t i = 0; i < x.shards(); ++i) EXPECT_EQ(x.count(i) % 10, 0u);
  expect_error([&] { one_->allocate<float>(100, Partition::even(10).max_shard_bytes(39)); },
               CL_INVALID_BUFFER_SIZE, {"DeviceGroup::allocate", "holds no unit of 10"});
  // Two ghost rows beside one row need 3 rows of room.
  expect_error([&] { one_->allocate<float>(100, Partition::even(10).max_shard_bytes(80), 1); },
               CL_INVALID_BUFFER_SIZE, {"holds no unit", "20 ghost elements"});
}

TEST_F(Pieces, TheDefaultCapAndTheUpperBoundAreTheMaxAllocation) {
  // Partition::place alone: max allocations of 1000 and 400 bytes, floats.
  const std::vector<std::uint64_t> max_alloc = {1000, 400};
  const Partition::Placement even = Partition::even().place("t", 1000, 4, 0, max_alloc);
  // 500 floats each: 2 pieces of 250 on device 0, 5 of 100 on device 1.
  EXPECT_EQ(even.devices, (std::vector<std::size_t>{0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(even.counts, (std::vector<std::size_t>{250, 250, 100, 100, 100, 100, 100}));
  const Partition::Placement above =
      Partition::even().max_shard_bytes(1 << 20).place("t", 1000, 4, 0, max_alloc);
  EXPECT_EQ(above.devices, even.devices);
  const Partition::Placement capped =
      Partition::even().max_shard_bytes(800).place("t", 1000, 4, 0, max_alloc);
  EXPECT_EQ(capped.counts, (std::vector<std::size_t>{167, 167, 166, 100, 100, 100, 100, 100}));
  const Partition::Placement empty = Partition::even().place("t", 0, 4, 0, max_alloc);
  EXPECT_EQ(empty.counts, (std::vector<std::size_t>{0, 0}));
}

/// After scatter with a halo, new parts (ghosts untouched), then a halo exchange: each shard's
/// ghost elements hold the array's neighbours of its part (beyond the ends: T(), as scattered).
void expect_halo_matches_host(clbuf_test::DeviceTest& test, DeviceGroup& group,
                              const Partition& partition, std::size_t count, std::size_t halo,
                              std::mt19937& rng) {
  const std::vector<std::int32_t> first = clbuf_test::random_values<std::int32_t>(rng, count);
  const std::vector<std::int32_t> next = clbuf_test::random_values<std::int32_t>(rng, count);
  ShardedBuffer<std::int32_t> field = group.scatter(first, partition, halo);
  group.upload(field, next);
  clbuf::ShardedHalo<std::int32_t> exchange(group, field);
  exchange.exchange(field);
  const std::size_t g = field.ghost();
  for (std::size_t i = 0; i < field.shards(); ++i) {
    const std::vector<std::int32_t> shard = group.manager(field.device(i)).download(field.shard(i));
    for (std::size_t e = 0; e < shard.size(); ++e) {
      // Element e of the shard is element offset - g + e of the array.
      const long long at = static_cast<long long>(field.offset(i) + e) - static_cast<long long>(g);
      const bool inside = at >= 0 && at < static_cast<long long>(count);
      const std::int32_t expected = inside ? next[static_cast<std::size_t>(at)] : 0;
      ASSERT_EQ(shard[e], expected)
          << "shard " << i << " (device " << field.device(i) << ") element " << e;
    }
  }
  static_cast<void>(test);
}

TEST_F(Pieces, HalosBetweenShardsOfOneDeviceMatchTheHost) {
  // Rows of 17, 40 rows, a ghost row each side; at most 6 rows a shard with its ghosts.
  const std::size_t row = 17;
  for (std::size_t halo : {std::size_t{1}, std::size_t{2}}) {
    SCOPED_TRACE("halo " + std::to_string(halo));
    const Partition rows = Partition::even(row).max_shard_bytes(row * 4 * (4 + 2 * halo));
    expect_halo_matches_host(*this, *one_, rows, row * 40, halo, rng_);
    expect_halo_matches_host(*this, *all_, rows, row * 40, halo, rng_);
  }
  // Thin pieces: one row each, a halo of 2 reaches two shards away.
  expect_halo_matches_host(*this, *one_, Partition::even(row).max_shard_bytes(row * 4 * 5), row * 9,
                           2, rng_);
}

TEST_F(Pieces, AShardsDeviceAndManagerAreKnown) {
  ShardedBuffer<float> x = all_->allocate<float>(4000, Partition::even().max_shard_bytes(1024));
  for (std::size_t i = 0; i < x.shards(); ++i) {
    EXPECT_EQ(x.shard(i).context(), all_->manager(x.device(i)).context()()) << i;
  }
  expect_error([&] { static_cast<void>(x.device(x.shards())); }, CL_INVALID_VALUE,
               {"shard " + std::to_string(x.shards())});
}

}  // namespace
