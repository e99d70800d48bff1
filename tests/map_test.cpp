// SPDX-License-Identifier: MIT
// map(): RAII mapped views for read, write or both, on every transfer path; writes reach the
// device at unmap; a view is empty after unmap or a move; the memory stays out of the pool while
// a view of it is alive; bad input is rejected with nothing mapped or changed.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::MapMode;
using clbuf::MemoryModel;
using clbuf_test::code_text;
using clbuf_test::same_bytes;

class Map : public clbuf_test::ModelTest {
 protected:
};

TEST_P(Map, ReadSeesTheUploadedData) {
  const std::vector<float> data = random<float>(1000);
  clbuf::DeviceBuffer<float> buffer = paths().upload(data);
  const clbuf::MappedView<float> view = paths().map(buffer, MapMode::read);
  ASSERT_EQ(view.size(), 1000u);
  EXPECT_EQ(view.mode(), MapMode::read);
  EXPECT_TRUE(same_bytes(data.data(), view.data(), 1000 * sizeof(float)));
  EXPECT_TRUE(std::equal(view.begin(), view.end(), data.begin()));
  EXPECT_EQ(view[999], data[999]);
}

TEST_P(Map, WritesReachTheDeviceAtUnmap) {
  const std::vector<std::int32_t> data = random<std::int32_t>(500);
  const std::vector<std::int32_t> fresh = random<std::int32_t>(100);
  clbuf::DeviceBuffer<std::int32_t> buffer = paths().upload(data);
  {
    clbuf::MappedView<std::int32_t> view = paths().map(buffer, MapMode::write, 200, 100);
    ASSERT_EQ(view.size(), 100u);
    std::copy(fresh.begin(), fresh.end(), view.begin());
  }  // unmapped here
  std::vector<std::int32_t> expected = data;
  std::copy(fresh.begin(), fresh.end(), expected.begin() + 200);
  EXPECT_TRUE(same_bytes(expected, paths().download(buffer)));

  clbuf::MappedView<std::int32_t> both = paths().map(buffer);  // read_write by default
  for (std::int32_t& x : both)
    x = static_cast<std::int32_t>(static_cast<std::uint32_t>(x) ^ 0x5a5a5a5au);
  both.unmap();
  for (std::int32_t& x : expected)
    x = static_cast<std::int32_t>(static_cast<std::uint32_t>(x) ^ 0x5a5a5a5au);
  EXPECT_TRUE(same_bytes(expected, paths().download(buffer)));
}

TEST_P(Map, EmptyAfterUnmapAndAfterMove) {
  clbuf::DeviceBuffer<int> buffer = paths().upload(random<int>(16));
  clbuf::MappedView<int> view = paths().map(buffer, MapMode::read_write);
  clbuf::MappedView<int> moved = std::move(view);
  EXPECT_EQ(view.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(view.size(), 0u);
  EXPECT_EQ(view.begin(), view.end());
  EXPECT_EQ(moved.size(), 16u);
  moved.unmap();
  EXPECT_EQ(moved.data(), nullptr);
  EXPECT_TRUE(moved.empty());
  moved.unmap();  // idempotent
  static_assert(!std::is_copy_constructible<clbuf::MappedView<int>>::value, "move-only");
  static_assert(std::is_nothrow_destructible<clbuf::MappedView<int>>::value, "noexcept");
}

TEST_P(Map, MemoryStaysOutOfThePoolWhileMapped) {
  const std::vector<std::uint8_t> data = random<std::uint8_t>(4096);
  clbuf::MappedView<std::uint8_t> view;
  cl_mem handle = nullptr;
  {
    clbuf::DeviceBuffer<std::uint8_t> buffer = paths().upload(data);
    handle = buffer.native()();
    view = paths().map(buffer, MapMode::read_write);
  }  // the buffer is gone, the view is not
  // Allocations of the same size must not get the mapped memory.
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> others;
  for (int i = 0; i < 4; ++i) {
    others.push_back(paths().upload(random<std::uint8_t>(4096)));
    EXPECT_NE(others.back().native()(), handle);
  }
  EXPECT_TRUE(same_bytes(data.data(), view.data(), data.size()));
  others.clear();
  view.unmap();
  // Now the memory may go back to the pool: the next allocation of that size reuses some buffer.
  const std::uint64_t hits = paths().stats().pool.hits;
  clbuf::DeviceBuffer<std::uint8_t> again = paths().allocate<std::uint8_t>(4096);
  EXPECT_EQ(paths().stats().pool.hits, hits + 1);
}

TEST_P(Map, BadInputIsRejected) {
  const std::vector<int> data = random<int>(10);
  clbuf::DeviceBuffer<int> buffer = paths().upload(data);
  EXPECT_CLBUF_ERROR(paths().map(buffer, MapMode::read, 5, 6), CL_INVALID_VALUE,
                     "map: " + code_text(CL_INVALID_VALUE),
                     "read of 24 bytes at offset 20 past the end of a 40-byte buffer");
  EXPECT_CLBUF_ERROR(paths().map(buffer, MapMode::write, SIZE_MAX, 1), CL_INVALID_VALUE,
                     "map: ", "write of 4 bytes", "past the end of a 40-byte buffer");
  clbuf::DeviceBuffer<int> moved = std::move(buffer);
  EXPECT_CLBUF_ERROR(paths().map(buffer), CL_INVALID_MEM_OBJECT, "map: ");  // NOLINT
  clbuf::MappedView<int> none = paths().map(moved, MapMode::read, 10, 0);
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(same_bytes(data, paths().download(moved)));
}

CLBUF_INSTANTIATE_MODELS(Map);

}  // namespace
