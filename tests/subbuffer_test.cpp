// SPDX-License-Identifier: MIT
// view(): sub-buffer views usable everywhere a buffer is, on every transfer path; alignment to
// CL_DEVICE_MEM_BASE_ADDR_ALIGN; overlap checks by root buffer and absolute offset; and the
// parent's memory kept out of the pool while any view of it is alive.
#include <cstdint>
#include <cstring>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_test::code_text;
using clbuf_test::same_bytes;

class SubBuffer : public clbuf_test::ModelTest {
 protected:
  void SetUp() override {
    clbuf_test::ModelTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    align_ = cl_device().getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() / 8;
  }
  /// Elements of T per alignment step.
  template <class T>
  std::size_t step() const {
    return align_ / sizeof(T);
  }
  std::size_t align_ = 1;
};

// Issue 9, finding 14: on the H200 this layout once crashed in the driver's clReleaseMemObject
// of a view. Five views of one 32 MiB buffer overlap each other (large ones staged), each is
// downloaded and uploaded once with exact data, then destroyed while the parent lives.
TEST_P(SubBuffer, OverlappingViewsRoundTripAndDieBeforeTheirParent) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  const std::size_t offsets[] = {0, 4096, 12288, 27 * mib, 28672};
  const std::size_t sizes[] = {8 * mib, 8 * mib, 16 * mib + 4096, 5 * mib, mib};
  for (std::size_t offset : offsets) {
    if (offset % align_ != 0) GTEST_SKIP() << "offsets not aligned to " << align_ << " bytes";
  }
  std::vector<std::uint8_t> shadow = random<std::uint8_t>(32 * mib);
  clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(shadow);
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> views;
  for (int i = 0; i < 5; ++i) views.push_back(paths().view(parent, offsets[i], sizes[i]));
  for (int i = 0; i < 5; ++i) {
    const std::vector<std::uint8_t> read = paths().download(views[static_cast<std::size_t>(i)]);
    ASSERT_TRUE(same_bytes(shadow.data() + offsets[i], read.data(), sizes[i])) << "view " << i;
    const std::vector<std::uint8_t> fresh = random<std::uint8_t>(sizes[i]);
    paths().upload(views[static_cast<std::size_t>(i)], fresh);
    std::copy(fresh.begin(), fresh.end(), shadow.begin() + static_cast<std::ptrdiff_t>(offsets[i]));
  }
  for (auto& view : views) view = clbuf::DeviceBuffer<std::uint8_t>();
  paths().finish();
  EXPECT_TRUE(same_bytes(shadow, paths().download(parent)));
}

TEST_P(SubBuffer, ViewReadsAndWritesItsPartOfTheParent) {
  const std::size_t s = step<float>();
  const std::vector<float> data = random<float>(8 * s);
  clbuf::DeviceBuffer<float> parent = paths().upload(data);
  clbuf::DeviceBuffer<float> part = paths().view(parent, 2 * s, 3 * s);
  EXPECT_TRUE(part.is_view());
  EXPECT_EQ(part.size(), 3 * s);
  EXPECT_EQ(part.root_offset_bytes(), 2 * s * sizeof(float));
  EXPECT_TRUE(same_bytes(std::vector<float>(data.data() + 2 * s, data.data() + 5 * s),
                         paths().download(part)));
  // Writes through the view land in the parent, and nowhere else.
  const std::vector<float> fresh = random<float>(3 * s);
  paths().upload(part, fresh);
  std::vector<float> expected = data;
  std::copy(fresh.begin(), fresh.end(), expected.data() + 2 * s);
  EXPECT_TRUE(same_bytes(expected, paths().download(parent)));
  // Fill, map, rect and copy work on it too.
  paths().fill(part, 1.5f, s, s);
  std::fill(expected.data() + 3 * s, expected.data() + 4 * s, 1.5f);
  EXPECT_TRUE(same_bytes(expected, paths().download(parent)));
  {
    clbuf::MappedView<float> mapped = paths().map(part, clbuf::MapMode::read);
    EXPECT_TRUE(same_bytes(expected.data() + 2 * s, mapped.data(), 3 * s * sizeof(float)));
  }
  clbuf::DeviceBuffer<float> other = paths().allocate<float>(3 * s);
  paths().copy(part, other);
  EXPECT_TRUE(same_bytes(std::vector<float>(expected.data() + 2 * s, expected.data() + 5 * s),
                         paths().download(other)));
}

TEST_P(SubBuffer, ViewOfAViewIsAViewOfTheRoot) {
  const std::size_t s = step<std::uint32_t>();
  const std::vector<std::uint32_t> data = random<std::uint32_t>(6 * s);
  clbuf::DeviceBuffer<std::uint32_t> parent = paths().upload(data);
  clbuf::DeviceBuffer<std::uint32_t> outer = paths().view(parent, s, 4 * s);
  clbuf::DeviceBuffer<std::uint32_t> inner = paths().view(outer, s, 2 * s);
  EXPECT_EQ(inner.root_offset_bytes(), 2 * s * sizeof(std::uint32_t));
  EXPECT_TRUE(same_bytes(std::vector<std::uint32_t>(data.data() + 2 * s, data.data() + 4 * s),
                         paths().download(inner)));
}

TEST_P(SubBuffer, MisalignedOffsetIsRejected) {
  if (align_ <= 1) GTEST_SKIP() << "the device has no alignment requirement";
  clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(random<std::uint8_t>(4 * align_));
  EXPECT_CLBUF_ERROR(paths().view(parent, 1, 8), CL_MISALIGNED_SUB_BUFFER_OFFSET,
                     "view: " + code_text(CL_MISALIGNED_SUB_BUFFER_OFFSET),
                     "offset of 1 bytes from the start of the root buffer is not a multiple of "
                     "the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN of " +
                         std::to_string(align_) + " bytes");
  clbuf::DeviceBuffer<std::uint8_t> aligned = paths().view(parent, align_, align_);
  // Aligned within its parent but not from the root: the absolute offset counts.
  EXPECT_CLBUF_ERROR(paths().view(aligned, align_ / 2, 1), CL_MISALIGNED_SUB_BUFFER_OFFSET,
                     "offset of " + std::to_string(align_ + align_ / 2) + " bytes");
}

TEST_P(SubBuffer, RangesOutsideTheParentAreRejected) {
  const std::size_t s = step<int>();
  clbuf::DeviceBuffer<int> parent = paths().upload(random<int>(2 * s));
  EXPECT_CLBUF_ERROR(paths().view(parent, s, s + 1), CL_INVALID_VALUE,
                     "view: " + code_text(CL_INVALID_VALUE), "view of ",
                     "past the end of a " + std::to_string(2 * s * sizeof(int)) + "-byte buffer");
  EXPECT_CLBUF_ERROR(paths().view(parent, SIZE_MAX, 1), CL_INVALID_VALUE, "view: ", "past the end");
  clbuf::DeviceBuffer<int> empty = paths().view(parent, 2 * s, 0);
  EXPECT_TRUE(empty.empty());
  clbuf::DeviceBuffer<int> gone = std::move(parent);
  EXPECT_CLBUF_ERROR(paths().view(parent, 0, 1), CL_INVALID_MEM_OBJECT, "view: ");  // NOLINT
}

TEST_P(SubBuffer, OverlapIsCheckedAgainstTheRoot) {
  const std::size_t s = step<std::uint8_t>();
  const std::vector<std::uint8_t> data = random<std::uint8_t>(4 * s);
  clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(data);
  clbuf::DeviceBuffer<std::uint8_t> a = paths().view(parent, 0, 2 * s);
  clbuf::DeviceBuffer<std::uint8_t> b = paths().view(parent, s, 2 * s);
  // a's [s, 2s) is b's [0, s): the same bytes of the root.
  EXPECT_CLBUF_ERROR(paths().copy_bytes(a, b, s, s, 0), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: " + code_text(CL_MEM_COPY_OVERLAP),
                     "ranges [" + std::to_string(s) + ", " + std::to_string(2 * s) + ") and [" +
                         std::to_string(s) + ", " + std::to_string(2 * s) + ")");
  EXPECT_CLBUF_ERROR(paths().copy_bytes(parent, b, 1, 2 * s - 1, s - 1), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: ");  // last byte of one range is the first of the other
  clbuf::DeviceBuffer<std::uint8_t> c = paths().view(parent, 2 * s, 2 * s);
  EXPECT_CLBUF_ERROR(paths().copy(a, b), CL_MEM_COPY_OVERLAP, "copy: ");
  clbuf::Region r;
  r.size = {s, 1};
  r.src_extents = r.dst_extents = {2 * s, 1};
  r.src_origin = {s / 2};  // the parent's [s/2, 3s/2) against b's [s, 2s) of the root
  EXPECT_CLBUF_ERROR(paths().copy_rect(parent, b, r), CL_MEM_COPY_OVERLAP, "copy_rect: ");
  EXPECT_TRUE(same_bytes(data, paths().download(parent)));
  // Adjacent views do not overlap: a = [0, 2s), c = [2s, 4s).
  paths().copy_bytes(a, c, 2 * s);
  std::vector<std::uint8_t> expected = data;
  std::memcpy(expected.data() + 2 * s, data.data(), 2 * s);
  EXPECT_TRUE(same_bytes(expected, paths().download(parent)));
}

// Rectangular copies between a view and its root buffer: addressed by absolute offsets, also when
// a view's offset is not a whole number of rows of the region's array.
TEST_P(SubBuffer, RectCopiesBetweenAViewAndItsRoot) {
  const std::size_t s = step<std::uint8_t>();
  const std::vector<std::uint8_t> data = random<std::uint8_t>(8 * s);
  clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(data);
  clbuf::DeviceBuffer<std::uint8_t> part = paths().view(parent, s, 4 * s);
  const std::size_t pitch = 3 * s / 4;  // rows that do not line up with the view's offset
  clbuf::Region r;
  r.size = {s / 3, 3};
  r.src_origin = {pitch - s / 3};  // the last columns of each row
  r.src_extents = {pitch, 4};
  r.dst_origin = {0, 6};
  r.dst_extents = {pitch, 10};
  ASSERT_LE(10 * pitch, 8 * s);
  paths().copy_rect(part, parent, r);
  std::vector<std::uint8_t> expected = data;
  for (std::size_t y = 0; y < r.size.y; ++y) {
    for (std::size_t x = 0; x < r.size.x; ++x) {
      expected[(6 + y) * pitch + x] = data[s + y * pitch + r.src_origin.x + x];
    }
  }
  EXPECT_TRUE(same_bytes(expected, paths().download(parent)));
  paths().copy_rect(parent, part,
                    clbuf::Region{{s / 3, 2}, {0, 6}, {pitch, 10}, {1, 2}, {pitch, 4}});
  for (std::size_t y = 0; y < 2; ++y) {
    for (std::size_t x = 0; x < s / 3; ++x) {
      expected[s + (2 + y) * pitch + 1 + x] = expected[(6 + y) * pitch + x];
    }
  }
  EXPECT_TRUE(same_bytes(expected, paths().download(parent)));
}

// The DANGER case: the parent is destroyed while a view is alive. Its memory must not go back to
// the pool, or the next allocation of that size would share bytes with the view.
TEST_P(SubBuffer, ParentMemoryIsNotReusedWhileAViewIsAlive) {
  const std::size_t s = step<std::uint8_t>();
  const std::vector<std::uint8_t> data = random<std::uint8_t>(4 * s);
  clbuf::DeviceBuffer<std::uint8_t> part;
  cl_mem parent_handle = nullptr;
  {
    clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(data);
    parent_handle = parent.native()();
    part = paths().view(parent, s, s);
  }
  const clbuf::PoolStats before = paths().stats().pool;
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> later;
  for (int i = 0; i < 4; ++i) {
    later.push_back(paths().upload(random<std::uint8_t>(4 * s)));
    EXPECT_NE(later.back().native()(), parent_handle);
  }
  EXPECT_EQ(paths().stats().pool.hits, before.hits) << "the parent's memory was reused";
  EXPECT_TRUE(same_bytes(std::vector<std::uint8_t>(data.data() + s, data.data() + 2 * s),
                         paths().download(part)));
  later.clear();
  part = clbuf::DeviceBuffer<std::uint8_t>();  // the last user: now the memory is pooled
  EXPECT_GT(paths().stats().pool.cached_buffers, before.cached_buffers);
}

TEST_P(SubBuffer, ReleasingAViewKeepsTheRootOutOfThePoolForever) {
  const std::size_t s = step<std::uint8_t>();
  std::vector<std::uint8_t> data = random<std::uint8_t>(2 * s);
  cl::Buffer mine;
  {
    clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(data);
    clbuf::DeviceBuffer<std::uint8_t> part = paths().view(parent, s, s);
    mine = part.release();
  }
  const std::size_t cached = paths().stats().pool.cached_buffers;
  clbuf::DeviceBuffer<std::uint8_t> next = paths().upload(random<std::uint8_t>(2 * s));
  EXPECT_EQ(paths().stats().pool.cached_buffers, cached);
  std::vector<std::uint8_t> back(s);
  paths().queue().enqueueReadBuffer(mine, CL_TRUE, 0, s, back.data());
  EXPECT_TRUE(same_bytes(data.data() + s, back.data(), s));
}

CLBUF_INSTANTIATE_MODELS(SubBuffer);

}  // namespace
