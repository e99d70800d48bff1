// SPDX-License-Identifier: MIT
// The DeviceGroup calls a binding (the Python module) builds on instead of deciding for itself
// (issue 48): scatter_into() and scatter_into_async() of an existing ShardedBuffer,
// check_alike() counting in elements of a run-time size, and each_shard() / each_shard_async()
// for per-device work with errors naming the device. CTest runs it on 2 PoCL devices.
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
using clbuf_test::same_bytes;

class GroupCalls : public clbuf_test::DeviceTest {
 protected:
  void SetUp() override {
    clbuf_test::DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    group_ = std::make_unique<DeviceGroup>("all");
  }

  /// Shard i of `buffer` as the device holds it: ghost elements, part, ghost elements.
  template <class T>
  std::vector<T> whole_shard(const ShardedBuffer<T>& buffer, std::size_t i) {
    std::vector<T> out(buffer.shard(i).size());
    group_->manager(i).download(buffer.shard(i), out.data(), out.size());
    return out;
  }

  std::unique_ptr<DeviceGroup> group_;
};

TEST_F(GroupCalls, ScatterIntoWritesEveryShardAsScatterWritesANewOne) {
  const std::size_t count = 6 * group_->size() + 3;
  const std::vector<std::int32_t> data = random_raw<std::int32_t>(count);
  const Partition rows = Partition::even(1);
  const ShardedBuffer<std::int32_t> made = group_->scatter(data, rows, 2);

  ShardedBuffer<std::int32_t> into = group_->allocate<std::int32_t>(count, rows, 2);
  for (std::size_t i = 0; i < group_->size(); ++i) {
    group_->manager(i).fill(into.shard(i), std::int32_t{-7});  // ghosts too: overwritten
  }
  group_->scatter_into(into, data.data(), data.size());
  for (std::size_t i = 0; i < group_->size(); ++i) {
    SCOPED_TRACE("shard " + std::to_string(i));
    EXPECT_TRUE(same_bytes(whole_shard(made, i), whole_shard(into, i)));
  }

  ShardedBuffer<std::int32_t> started = group_->allocate<std::int32_t>(count, rows, 2);
  for (std::size_t i = 0; i < group_->size(); ++i) {
    group_->manager(i).fill(started.shard(i), std::int32_t{-7});
  }
  group_->scatter_into_async(started, data.data(), data.size()).wait();
  for (std::size_t i = 0; i < group_->size(); ++i) {
    SCOPED_TRACE("async shard " + std::to_string(i));
    EXPECT_TRUE(same_bytes(whole_shard(made, i), whole_shard(started, i)));
  }
}

TEST_F(GroupCalls, ScatterIntoRefusesAnotherCountANullPointerAndAnotherGroupsBuffer) {
  ShardedBuffer<float> into = group_->allocate<float>(8);
  const std::vector<float> seven(7, 1.0F);
  EXPECT_CLBUF_ERROR(group_->scatter_into(into, seven.data(), seven.size()), CL_INVALID_VALUE,
                     "DeviceGroup::scatter_into", "7", "8");
  EXPECT_CLBUF_ERROR(group_->scatter_into_async(into, static_cast<const float*>(nullptr), 8),
                     CL_INVALID_VALUE, "DeviceGroup::scatter_into");
  DeviceGroup other("all");
  ShardedBuffer<float> theirs = other.allocate<float>(8);
  const std::vector<float> eight(8, 2.0F);
  EXPECT_CLBUF_ERROR(group_->scatter_into(theirs, eight.data(), eight.size()), CL_INVALID_VALUE,
                     "another DeviceGroup");
}

TEST_F(GroupCalls, CheckAlikeCountsInElementsOfTheSizeGiven) {
  if (group_->size() < 2) GTEST_SKIP() << "a split that differs needs two devices";
  std::vector<double> weights(group_->size(), 1.0);
  weights.back() = 3.0;
  // 8-byte elements held as bytes, split in units of one element (8 bytes).
  const std::size_t elements = 4 * (group_->size() + 2);
  const ShardedBuffer<std::uint8_t> even =
      group_->allocate<std::uint8_t>(8 * elements, Partition::even(8));
  const ShardedBuffer<std::uint8_t> skewed =
      group_->allocate<std::uint8_t>(8 * elements, Partition::weighted(weights, 8));
  const std::size_t a = even.count(0) / 8;
  const std::size_t b = skewed.count(0) / 8;
  ASSERT_NE(a, b);
  EXPECT_CLBUF_ERROR(
      group_->check_alike("copy", even, skewed, 8), CL_INVALID_VALUE, "copy: CL_INVALID_VALUE",
      "split differently",
      "device 0 holds " + std::to_string(a) + " and " + std::to_string(b) + " elements");
  EXPECT_CLBUF_ERROR(
      group_->check_alike("copy", even, skewed), CL_INVALID_VALUE,
      "device 0 holds " + std::to_string(8 * a) + " and " + std::to_string(8 * b) + " elements");
  group_->check_alike("copy", even, even, 8);  // alike: nothing thrown
}

TEST_F(GroupCalls, EachShardRunsOnEveryDeviceWithAPartAndItsErrorsNameTheDevice) {
  const std::size_t count = 5 * group_->size();
  ShardedBuffer<std::uint16_t> buffer = group_->allocate<std::uint16_t>(count, Partition(), 1);
  group_
      ->each_shard_async("mark", buffer,
                         [&](std::size_t i) {
                           return group_->manager(i).fill_async(buffer.shard(i),
                                                                static_cast<std::uint16_t>(i + 1),
                                                                buffer.count(i), buffer.ghost());
                         })
      .wait();
  std::vector<std::uint16_t> expected(count);
  for (std::size_t i = 0; i < group_->size(); ++i) {
    for (std::size_t k = 0; k < buffer.count(i); ++k) {
      expected[buffer.offset(i) + k] = static_cast<std::uint16_t>(i + 1);
    }
  }
  EXPECT_TRUE(same_bytes(expected, group_->gather(buffer)));

  std::vector<int> ran(group_->size(), 0);
  group_->each_shard("count", buffer, [&](std::size_t i) { ++ran[i]; });
  EXPECT_EQ(ran, std::vector<int>(group_->size(), 1));

  const std::size_t last = group_->size() - 1;
  const std::string name = group_->manager(last).device().name;
  EXPECT_CLBUF_ERROR(
      group_->each_shard("mark", buffer,
                         [&](std::size_t i) {
                           if (i == last) clbuf::detail::fail("fill", -30, "x");
                         }),
      CL_INVALID_VALUE,
      "mark: CL_INVALID_VALUE (-30): device " + std::to_string(last) + " (" + name + "): fill");
  EXPECT_CLBUF_ERROR(group_->each_shard_async("mark", buffer,
                                              [&](std::size_t i) {
                                                if (i == last)
                                                  clbuf::detail::fail("fill", -30, "x");
                                                return clbuf::Future<void>();
                                              }),
                     CL_INVALID_VALUE, "device " + std::to_string(last) + " (" + name + ")");
}

}  // namespace
