// SPDX-License-Identifier: MIT
// Bad input: every rule of DESIGN.md and the API brief, each checked for its clbuf::Error code,
// its message, and for leaving every byte of device and host memory as it was.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::all_sentinel;
using clbuf_test::code_text;
using clbuf_test::DeviceTest;
using clbuf_test::same_bytes;
using clbuf_test::sentinels;

constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

class BadInput : public DeviceTest {
 protected:
  /// An adopted manager on a context of its own (same device): its buffers belong to another
  /// OpenCL context than manager()'s, for certain.
  std::unique_ptr<clbuf::BufferManager> other_context_manager() {
    const cl::Device device = cl_device();
    cl_int err = CL_SUCCESS;
    cl::Context context(device, nullptr, nullptr, nullptr, &err);
    EXPECT_EQ(err, CL_SUCCESS);
    cl::CommandQueue queue(context, device, 0, &err);
    EXPECT_EQ(err, CL_SUCCESS);
    auto other = std::make_unique<clbuf::BufferManager>(context, queue);
    EXPECT_NE(other->context()(), manager().context()());
    return other;
  }

  /// Checks that `buffer` still holds `expected`.
  template <class T>
  void expect_unchanged(const clbuf::DeviceBuffer<T>& buffer, const std::vector<T>& expected) {
    EXPECT_TRUE(same_bytes(expected, manager().download(buffer))) << "device data changed";
  }
};

// ---------------------------------------------------------------------------------------------
// Downloads past the end.

TEST_F(BadInput, DownloadLongerThanTheBufferThrowsAndWritesNothing) {
  const auto data = random<float>(256);
  const auto buffer = manager().upload(data);
  auto out = sentinels<float>(1024);
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), out.size()), CL_INVALID_VALUE,
                     "download: ", code_text(CL_INVALID_VALUE), "4096", "1024");
  EXPECT_TRUE(all_sentinel(out));
  expect_unchanged(buffer, data);
}

TEST_F(BadInput, DownloadOneElementAtTheEndThrows) {
  const auto data = random<std::int32_t>(100);
  const auto buffer = manager().upload(data);
  auto out = sentinels<std::int32_t>(4);
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 1, 100), CL_INVALID_VALUE,
                     "download: ", code_text(CL_INVALID_VALUE), "400");
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 2, 99), CL_INVALID_VALUE, "download: ");
  EXPECT_TRUE(all_sentinel(out));
  // The last element itself is in range.
  manager().download(buffer, out.data(), 1, 99);
  EXPECT_EQ(out[0], data[99]);
}

TEST_F(BadInput, DownloadOffsetPastTheEndThrows) {
  const auto buffer = manager().upload(random<std::int32_t>(100));
  auto out = sentinels<std::int32_t>(4);
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 1, 101), CL_INVALID_VALUE,
                     "download: ");
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 0, 101), CL_INVALID_VALUE,
                     "download: ");
  EXPECT_TRUE(all_sentinel(out));
}

TEST_F(BadInput, DownloadAtHugeOffsetsDoesNotWrap) {
  const auto data = random<std::uint8_t>(64);
  const auto buffer = manager().upload(data);
  auto out = sentinels<std::uint8_t>(16);
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 1, size_max), CL_INVALID_VALUE,
                     "download: ");
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 16, size_max - 8), CL_INVALID_VALUE,
                     "download: ");
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), size_max, 1), CL_INVALID_VALUE,
                     "download: ");
  EXPECT_TRUE(all_sentinel(out));
  expect_unchanged(buffer, data);
}

TEST_F(BadInput, DownloadWhoseByteCountOverflowsThrows) {
  const auto buffer = manager().upload(random<double>(8));
  auto out = sentinels<double>(8);
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), size_max / sizeof(double) + 1),
                     CL_INVALID_VALUE, "download: ");
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 1, size_max / sizeof(double) + 1),
                     CL_INVALID_VALUE, "download: ");
  EXPECT_TRUE(all_sentinel(out));
}

// ---------------------------------------------------------------------------------------------
// Uploads into an existing buffer past its end.

TEST_F(BadInput, UploadIntoBufferPastItsEndThrowsAndWritesNothing) {
  const auto data = random<std::int32_t>(100);
  auto buffer = manager().upload(data);
  const auto patch = random<std::int32_t>(30);
  EXPECT_CLBUF_ERROR(manager().upload(buffer, patch, 80), CL_INVALID_VALUE,
                     "upload: ", code_text(CL_INVALID_VALUE), "120", "320", "400");
  EXPECT_CLBUF_ERROR(manager().upload(buffer, patch.data(), 1, 100), CL_INVALID_VALUE, "upload: ");
  EXPECT_CLBUF_ERROR(manager().upload(buffer, patch.data(), 0, 101), CL_INVALID_VALUE, "upload: ");
  expect_unchanged(buffer, data);
}

TEST_F(BadInput, UploadOfMoreThanTheBufferHoldsThrows) {
  const auto data = random<float>(10);
  auto buffer = manager().upload(data);
  EXPECT_CLBUF_ERROR(manager().upload(buffer, random<float>(11)), CL_INVALID_VALUE,
                     "upload: ", "44", "40");
  expect_unchanged(buffer, data);
}

TEST_F(BadInput, UploadIntoBufferAtHugeOffsetsDoesNotWrap) {
  const auto data = random<std::uint8_t>(64);
  auto buffer = manager().upload(data);
  const auto patch = random<std::uint8_t>(16);
  EXPECT_CLBUF_ERROR(manager().upload(buffer, patch.data(), 1, size_max), CL_INVALID_VALUE,
                     "upload: ");
  EXPECT_CLBUF_ERROR(manager().upload(buffer, patch.data(), 16, size_max - 8), CL_INVALID_VALUE,
                     "upload: ");
  // A count far beyond the host array: the check must come before any read of it.
  EXPECT_CLBUF_ERROR(manager().upload(buffer, patch.data(), size_max, 0), CL_INVALID_VALUE,
                     "upload: ");
  expect_unchanged(buffer, data);
}

TEST_F(BadInput, UploadIntoBufferWhoseByteCountOverflowsThrows) {
  const auto data = random<std::uint64_t>(4);
  auto buffer = manager().upload(data);
  const auto patch = random<std::uint64_t>(4);
  EXPECT_CLBUF_ERROR(manager().upload(buffer, patch.data(), size_max / 8 + 1), CL_INVALID_VALUE,
                     "upload: ");
  EXPECT_CLBUF_ERROR(manager().upload(buffer, patch.data(), 1, size_max / 8 + 1), CL_INVALID_VALUE,
                     "upload: ");
  expect_unchanged(buffer, data);
}

// ---------------------------------------------------------------------------------------------
// Sizes: count * sizeof(T) overflowing size_t, or beyond the device's max allocation.

TEST_F(BadInput, AllocateWhoseByteCountOverflowsIsInvalidValue) {
  EXPECT_CLBUF_ERROR(manager().allocate<std::uint64_t>(size_max / 8 + 1), CL_INVALID_VALUE,
                     "allocate: ", code_text(CL_INVALID_VALUE));
  EXPECT_CLBUF_ERROR(manager().allocate<std::uint64_t>(size_max), CL_INVALID_VALUE, "allocate: ");
  EXPECT_CLBUF_ERROR(manager().allocate<clbuf_test::Sample>(size_max / 2), CL_INVALID_VALUE,
                     "allocate: ");
}

TEST_F(BadInput, AllocateOneElementOverMaxAllocIsInvalidBufferSize) {
  const std::uint64_t max_alloc = manager().device().max_alloc_bytes;
  ASSERT_GT(max_alloc, 0u);
  const auto floats = static_cast<std::size_t>(max_alloc / sizeof(float) + 1);
  EXPECT_CLBUF_ERROR(manager().allocate<float>(floats), CL_INVALID_BUFFER_SIZE,
                     "allocate: ", code_text(CL_INVALID_BUFFER_SIZE),
                     std::to_string(floats * sizeof(float)), std::to_string(max_alloc));
  const auto bytes = static_cast<std::size_t>(max_alloc + 1);
  EXPECT_CLBUF_ERROR(manager().allocate<std::uint8_t>(bytes), CL_INVALID_BUFFER_SIZE,
                     "allocate: ", std::to_string(bytes), std::to_string(max_alloc));
  // Not an overflow of size_t, only far beyond the device.
  EXPECT_CLBUF_ERROR(manager().allocate<std::uint8_t>(size_max), CL_INVALID_BUFFER_SIZE,
                     "allocate: ");
}

TEST_F(BadInput, AllocationOfExactlyMaxAllocIsAllowed) {
  // The limit itself is allowed: only what exceeds it is rejected. (Drivers allocate lazily, so
  // only the pages touched below are ever backed.)
  const std::uint64_t max_alloc = manager().device().max_alloc_bytes;
  ASSERT_LE(max_alloc, std::uint64_t{size_max});
  const auto bytes = static_cast<std::size_t>(max_alloc);
  auto buffer = manager().allocate<std::uint8_t>(bytes);
  EXPECT_EQ(buffer.size(), bytes);
  const auto tail = random<std::uint8_t>(16);
  manager().upload(buffer, tail, bytes - tail.size());
  auto out = sentinels<std::uint8_t>(17);
  manager().download(buffer, out.data(), 16, bytes - 16);
  EXPECT_TRUE(same_bytes(tail.data(), out.data(), 16));
  EXPECT_TRUE(all_sentinel(&out[16], 1));
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 17, bytes - 16), CL_INVALID_VALUE,
                     "download: ", std::to_string(bytes));
}

TEST_F(BadInput, UploadOverMaxAllocIsInvalidBufferSizeAndReadsNoHostMemory) {
  const std::uint64_t max_alloc = manager().device().max_alloc_bytes;
  const auto count = static_cast<std::size_t>(max_alloc / sizeof(float) + 1);
  const auto small = random<float>(4);  // far smaller than count: must not be read
  EXPECT_CLBUF_ERROR(manager().upload(small.data(), count), CL_INVALID_BUFFER_SIZE,
                     "upload: ", code_text(CL_INVALID_BUFFER_SIZE), std::to_string(max_alloc));
}

TEST_F(BadInput, UploadWhoseByteCountOverflowsIsInvalidValue) {
  const auto small = random<float>(4);
  EXPECT_CLBUF_ERROR(manager().upload(small.data(), size_max / sizeof(float) + 1), CL_INVALID_VALUE,
                     "upload: ", code_text(CL_INVALID_VALUE));
  EXPECT_CLBUF_ERROR(manager().upload(small.data(), size_max), CL_INVALID_VALUE, "upload: ");
}

// ---------------------------------------------------------------------------------------------
// Shapes.

TEST_F(BadInput, ShapeWhoseProductDiffersFromTheCountThrows) {
  const auto data = random<int>(5);
  EXPECT_CLBUF_ERROR(manager().upload(data, {2, 3}), CL_INVALID_VALUE,
                     "upload: ", code_text(CL_INVALID_VALUE), "2, 3", "6", "5");
  EXPECT_CLBUF_ERROR(manager().upload(data, {4}), CL_INVALID_VALUE, "upload: ", "4", "5");
  EXPECT_CLBUF_ERROR(manager().upload(data, {5, 0}), CL_INVALID_VALUE, "upload: ");
  EXPECT_CLBUF_ERROR(manager().upload(std::vector<int>{}, {1}), CL_INVALID_VALUE, "upload: ");
}

TEST_F(BadInput, ShapeWhoseProductOverflowsThrows) {
  const auto data = random<int>(2);
  EXPECT_CLBUF_ERROR(manager().upload(data, {size_max, 2}), CL_INVALID_VALUE, "upload: ");
  // Products that wrap around to exactly the count, 0 or 2, must still be rejected.
  const std::size_t half = size_max / 2 + 1;  // half * 2 wraps to 0
  EXPECT_CLBUF_ERROR(manager().upload(std::vector<int>{}, {half, 2}), CL_INVALID_VALUE, "upload: ");
  EXPECT_CLBUF_ERROR(manager().upload(data, {half, 2, 1, 3, 5}), CL_INVALID_VALUE, "upload: ");
  const std::size_t root = std::size_t{1} << (sizeof(std::size_t) * 4);  // root * root wraps
  EXPECT_CLBUF_ERROR(manager().upload(std::vector<int>{}, {root, root}), CL_INVALID_VALUE,
                     "upload: ");
  EXPECT_CLBUF_ERROR(manager().upload(data, {half + 1, 2}), CL_INVALID_VALUE, "upload: ");
}

// ---------------------------------------------------------------------------------------------
// copy: sizes must match; one buffer with itself overlaps.

TEST_F(BadInput, CopyOfDifferentSizesThrowsAndChangesNothing) {
  const auto small_data = random<double>(10);
  const auto large_data = random<double>(12);
  auto small = manager().upload(small_data);
  auto large = manager().upload(large_data);
  EXPECT_CLBUF_ERROR(manager().copy(small, large), CL_INVALID_VALUE,
                     "copy: ", code_text(CL_INVALID_VALUE), "10", "12");
  EXPECT_CLBUF_ERROR(manager().copy(large, small), CL_INVALID_VALUE, "copy: ", "12", "10");
  expect_unchanged(small, small_data);
  expect_unchanged(large, large_data);
}

TEST_F(BadInput, CopyOfABufferOntoItselfIsOverlap) {
  const auto data = random<float>(32);
  auto buffer = manager().upload(data);
  EXPECT_CLBUF_ERROR(manager().copy(buffer, buffer), CL_MEM_COPY_OVERLAP,
                     "copy: ", code_text(CL_MEM_COPY_OVERLAP));
  expect_unchanged(buffer, data);
}

// ---------------------------------------------------------------------------------------------
// copy_bytes: ranges past either end, and overlap within one buffer.

TEST_F(BadInput, CopyBytesPastTheSourceEndThrowsAndChangesNothing) {
  const auto src_data = random<std::uint8_t>(64);
  const auto dst_data = random<std::uint8_t>(128);
  const auto src = manager().upload(src_data);
  auto dst = manager().upload(dst_data);
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 65), CL_INVALID_VALUE,
                     "copy_bytes: ", code_text(CL_INVALID_VALUE), "65", "64");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 16, 49), CL_INVALID_VALUE, "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 1, 64), CL_INVALID_VALUE, "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 0, 65), CL_INVALID_VALUE, "copy_bytes: ");
  expect_unchanged(src, src_data);
  expect_unchanged(dst, dst_data);
}

TEST_F(BadInput, CopyBytesPastTheDestinationEndThrowsAndChangesNothing) {
  const auto src_data = random<std::uint8_t>(128);
  const auto dst_data = random<std::uint8_t>(64);
  const auto src = manager().upload(src_data);
  auto dst = manager().upload(dst_data);
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 65), CL_INVALID_VALUE, "copy_bytes: ", "65",
                     "64");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 16, 0, 49), CL_INVALID_VALUE, "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 1, 0, 64), CL_INVALID_VALUE, "copy_bytes: ");
  expect_unchanged(src, src_data);
  expect_unchanged(dst, dst_data);
}

TEST_F(BadInput, CopyBytesAtHugeOffsetsDoesNotWrap) {
  const auto src_data = random<std::uint32_t>(16);
  const auto dst_data = random<std::uint32_t>(16);
  const auto src = manager().upload(src_data);
  auto dst = manager().upload(dst_data);
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 4, size_max), CL_INVALID_VALUE, "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 4, 0, size_max), CL_INVALID_VALUE,
                     "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, 8, size_max - 3), CL_INVALID_VALUE,
                     "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, size_max), CL_INVALID_VALUE, "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(src, dst, size_max, 1, 1), CL_INVALID_VALUE,
                     "copy_bytes: ");
  expect_unchanged(src, src_data);
  expect_unchanged(dst, dst_data);
}

TEST_F(BadInput, CopyBytesOverlapEdges) {
  const auto data = random<std::uint8_t>(64);
  auto buffer = manager().upload(data);
  // dst == src + n - 1: the last source byte is the first destination byte.
  EXPECT_CLBUF_ERROR(manager().copy_bytes(buffer, buffer, 16, 8, 23), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: ", code_text(CL_MEM_COPY_OVERLAP), "8", "24", "23", "39");
  // dst == src - n + 1, the mirror image.
  EXPECT_CLBUF_ERROR(manager().copy_bytes(buffer, buffer, 16, 23, 8), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: ");
  // Identical ranges, and one byte.
  EXPECT_CLBUF_ERROR(manager().copy_bytes(buffer, buffer, 16, 8, 8), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(buffer, buffer, 1, 63, 63), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(buffer, buffer, 64), CL_MEM_COPY_OVERLAP, "copy_bytes: ");
  expect_unchanged(buffer, data);

  // dst == src + n and dst == src - n touch without overlapping: both are allowed.
  auto expected = data;
  manager().copy_bytes(buffer, buffer, 16, 8, 24);
  std::memmove(&expected[24], &expected[8], 16);
  manager().copy_bytes(buffer, buffer, 16, 40, 24);
  std::memmove(&expected[24], &expected[40], 16);
  expect_unchanged(buffer, expected);
}

TEST_F(BadInput, RangeCheckComesBeforeOverlapCheck) {
  const auto data = random<std::uint8_t>(32);
  auto buffer = manager().upload(data);
  // Both overlapping and past the end: a range error, either way nothing changes.
  try {
    manager().copy_bytes(buffer, buffer, 32, 4, 8);
    ADD_FAILURE() << "did not throw";
  } catch (const clbuf::Error& error) {
    EXPECT_TRUE(error.code() == CL_INVALID_VALUE || error.code() == CL_MEM_COPY_OVERLAP)
        << error.what();
  }
  expect_unchanged(buffer, data);
}

// ---------------------------------------------------------------------------------------------
// Buffers of another OpenCL context.

TEST_F(BadInput, BufferOfAnotherContextIsRejectedByEveryOperation) {
  auto other = other_context_manager();
  const auto foreign_data = random<float>(16);
  auto foreign = other->upload(foreign_data);
  const auto own_data = random<float>(16);
  auto own = manager().upload(own_data);
  auto out = sentinels<float>(16);

  EXPECT_CLBUF_ERROR(manager().download(foreign), CL_INVALID_CONTEXT,
                     "download: ", code_text(CL_INVALID_CONTEXT));
  EXPECT_CLBUF_ERROR(manager().download(foreign, out.data(), 16), CL_INVALID_CONTEXT, "download: ");
  EXPECT_CLBUF_ERROR(manager().download_async(foreign), CL_INVALID_CONTEXT, "download_async: ");
  EXPECT_CLBUF_ERROR(manager().upload(foreign, own_data), CL_INVALID_CONTEXT, "upload: ");
  EXPECT_CLBUF_ERROR(manager().copy(foreign, own), CL_INVALID_CONTEXT, "copy: ");
  EXPECT_CLBUF_ERROR(manager().copy(own, foreign), CL_INVALID_CONTEXT, "copy: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(foreign, own, 4), CL_INVALID_CONTEXT, "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(own, foreign, 4), CL_INVALID_CONTEXT, "copy_bytes: ");

  EXPECT_TRUE(all_sentinel(out));
  expect_unchanged(own, own_data);
  EXPECT_TRUE(same_bytes(foreign_data, other->download(foreign)));
}

TEST_F(BadInput, BufferOfAnotherDefaultManagerIsRejected) {
  clbuf::BufferManager second;
  if (second.context()() == manager().context()()) {
    GTEST_SKIP() << "the two managers share one context";
  }
  const auto data = random<std::int16_t>(40);
  auto theirs = second.upload(data);
  auto mine = manager().upload(random<std::int16_t>(40));
  const auto mine_before = manager().download(mine);
  EXPECT_CLBUF_ERROR(manager().download(theirs), CL_INVALID_CONTEXT, "download: ");
  EXPECT_CLBUF_ERROR(manager().copy(theirs, mine), CL_INVALID_CONTEXT, "copy: ");
  EXPECT_CLBUF_ERROR(second.copy(theirs, mine), CL_INVALID_CONTEXT, "copy: ");
  expect_unchanged(mine, mine_before);
  EXPECT_TRUE(same_bytes(data, second.download(theirs)));
}

// ---------------------------------------------------------------------------------------------
// Moved-from and default-constructed buffers.

TEST_F(BadInput, MovedFromBufferIsRejectedByEveryOperation) {
  const auto data = random<std::int32_t>(8);
  auto source = manager().upload(data);
  auto kept = std::move(source);
  const auto& moved = source;  // NOLINT(bugprone-use-after-move): the point of this test
  auto out = sentinels<std::int32_t>(8);
  auto own_data = random<std::int32_t>(8);
  auto own = manager().upload(own_data);

  EXPECT_CLBUF_ERROR(manager().download(moved), CL_INVALID_MEM_OBJECT,
                     "download: ", code_text(CL_INVALID_MEM_OBJECT));
  EXPECT_CLBUF_ERROR(manager().download(moved, out.data(), 0), CL_INVALID_MEM_OBJECT, "download: ");
  EXPECT_CLBUF_ERROR(manager().download_async(moved), CL_INVALID_MEM_OBJECT, "download_async: ");
  EXPECT_CLBUF_ERROR(manager().upload(source, own_data.data(), 0), CL_INVALID_MEM_OBJECT,
                     "upload: ");
  EXPECT_CLBUF_ERROR(manager().upload(source, own_data), CL_INVALID_MEM_OBJECT, "upload: ");
  EXPECT_CLBUF_ERROR(manager().copy(moved, own), CL_INVALID_MEM_OBJECT, "copy: ");
  EXPECT_CLBUF_ERROR(manager().copy(own, source), CL_INVALID_MEM_OBJECT, "copy: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(moved, own, 0), CL_INVALID_MEM_OBJECT, "copy_bytes: ");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(own, source, 0), CL_INVALID_MEM_OBJECT, "copy_bytes: ");

  EXPECT_TRUE(all_sentinel(out));
  expect_unchanged(own, own_data);
  expect_unchanged(kept, data);
}

TEST_F(BadInput, DefaultConstructedBufferIsRejected) {
  clbuf::DeviceBuffer<double> none;
  auto own = manager().upload(random<double>(3));
  EXPECT_CLBUF_ERROR(manager().download(none), CL_INVALID_MEM_OBJECT, "download: ");
  EXPECT_CLBUF_ERROR(manager().copy(none, none), CL_INVALID_MEM_OBJECT, "copy: ");
  EXPECT_CLBUF_ERROR(manager().copy(own, none), CL_INVALID_MEM_OBJECT, "copy: ");
  EXPECT_CLBUF_ERROR(manager().upload(none, std::vector<double>{}), CL_INVALID_MEM_OBJECT,
                     "upload: ");
}

// ---------------------------------------------------------------------------------------------
// Null host pointers with a non-zero count.

TEST_F(BadInput, NullHostPointerWithACountThrows) {
  const float* no_data = nullptr;
  float* no_out = nullptr;
  EXPECT_CLBUF_ERROR(manager().upload(no_data, 5), CL_INVALID_VALUE,
                     "upload: ", code_text(CL_INVALID_VALUE));
  const auto data = random<float>(8);
  auto buffer = manager().upload(data);
  EXPECT_CLBUF_ERROR(manager().upload(buffer, no_data, 5), CL_INVALID_VALUE, "upload: ");
  EXPECT_CLBUF_ERROR(manager().download(buffer, no_out, 5), CL_INVALID_VALUE, "download: ");
  EXPECT_CLBUF_ERROR(manager().download(buffer, no_out, 1, 7), CL_INVALID_VALUE, "download: ");
  expect_unchanged(buffer, data);
}

// ---------------------------------------------------------------------------------------------
// A cleaned-up manager.

TEST_F(BadInput, EveryOperationAfterCleanupThrowsSuccessCodeNamingCleanup) {
  const auto data = random<std::uint16_t>(32);
  auto a = manager().upload(data);
  auto b = manager().upload(random<std::uint16_t>(32));
  std::vector<std::uint16_t> out(32);
  manager().cleanup();

  EXPECT_CLBUF_ERROR(manager().context(), CL_SUCCESS, "cleanup");
  EXPECT_CLBUF_ERROR(manager().queue(), CL_SUCCESS, "cleanup");
  EXPECT_CLBUF_ERROR(manager().allocate<float>(4), CL_SUCCESS, "allocate", "cleanup");
  EXPECT_CLBUF_ERROR(manager().allocate<float>(0), CL_SUCCESS, "allocate", "cleanup");
  EXPECT_CLBUF_ERROR(manager().upload(data.data(), data.size()), CL_SUCCESS, "upload", "cleanup");
  EXPECT_CLBUF_ERROR(manager().upload(data), CL_SUCCESS, "upload", "cleanup");
  EXPECT_CLBUF_ERROR(manager().upload(data, {4, 8}), CL_SUCCESS, "upload", "cleanup");
  EXPECT_CLBUF_ERROR(manager().upload(a, data), CL_SUCCESS, "upload", "cleanup");
  EXPECT_CLBUF_ERROR(manager().upload(a, data.data(), 4, 2), CL_SUCCESS, "upload", "cleanup");
  EXPECT_CLBUF_ERROR(manager().upload_async(data), CL_SUCCESS, "upload_async", "cleanup");
  EXPECT_CLBUF_ERROR(manager().download(a), CL_SUCCESS, "download", "cleanup");
  EXPECT_CLBUF_ERROR(manager().download(a, out.data(), out.size()), CL_SUCCESS, "download",
                     "cleanup");
  EXPECT_CLBUF_ERROR(manager().download_async(a), CL_SUCCESS, "download_async", "cleanup");
  EXPECT_CLBUF_ERROR(manager().copy(a, b), CL_SUCCESS, "copy", "cleanup");
  EXPECT_CLBUF_ERROR(manager().copy_bytes(a, b, 8, 2, 4), CL_SUCCESS, "copy_bytes", "cleanup");
  EXPECT_CLBUF_ERROR(manager().finish(), CL_SUCCESS, "finish", "cleanup");
  EXPECT_TRUE(a.valid());
  EXPECT_FALSE(manager().device().name.empty()) << "device() still answers";
}

TEST_F(BadInput, CleanupIsIdempotent) {
  auto buffer = manager().upload(random<float>(10));
  manager().cleanup();
  manager().cleanup();
  manager().cleanup();
  EXPECT_CLBUF_ERROR(manager().download(buffer), CL_SUCCESS, "cleanup");
  manager_.reset();  // the destructor's own cleanup() after three
}

TEST_F(BadInput, CleanupWaitsForPendingWork) {
  auto buffer = manager().upload(random<std::uint8_t>(1 << 16));
  auto future = manager().download_async(buffer);
  manager().cleanup();
  EXPECT_TRUE(future.ready()) << "cleanup() finishes the queue first";
  EXPECT_EQ(future.get().size(), std::size_t{1} << 16);
}

// ---------------------------------------------------------------------------------------------

TEST_F(BadInput, ManagerStaysUsableAfterRejectedCalls) {
  const auto data = random<float>(64);
  auto buffer = manager().upload(data);
  auto out = sentinels<float>(65);
  EXPECT_CLBUF_ERROR(manager().download(buffer, out.data(), 65), CL_INVALID_VALUE, "download: ");
  EXPECT_CLBUF_ERROR(manager().copy(buffer, buffer), CL_MEM_COPY_OVERLAP, "copy: ");
  EXPECT_CLBUF_ERROR(manager().allocate<float>(size_max), CL_INVALID_VALUE, "allocate: ");
  manager().download(buffer, out.data(), 64);
  EXPECT_TRUE(same_bytes(data.data(), out.data(), 64 * sizeof(float)));
  EXPECT_TRUE(all_sentinel(&out[64], sizeof(float)));
  const auto more = random<float>(64);
  EXPECT_TRUE(same_bytes(more, manager().download(manager().upload(more))));
}

}  // namespace

namespace {

// Options that would make clbuf allocate more pinned memory than any host has (or a block the
// device cannot make) are refused at construction, naming the option and its value, instead of
// allocating until the host runs out at the first staged transfer, or failing every download.
TEST(BadOptions, PinnedMemoryOutOfRangeIsRefusedAtConstruction) {
  const clbuf::DeviceInfo device = clbuf::BufferManager().device();
  const auto refused = [&](clbuf::Options options, const std::string& fragment) {
    options.memory = clbuf::MemoryModel::discrete;
    EXPECT_CLBUF_ERROR(clbuf::BufferManager("", options), CL_INVALID_VALUE,
                       "BufferManager: " + code_text(CL_INVALID_VALUE), fragment);
  };
  clbuf::Options options;
  options.staging_chunks = std::size_t{1} << 40;
  refused(options, "Options::staging_chunks of 1099511627776 is out of range: at most 4096");
  options.staging_chunks = SIZE_MAX;
  refused(options, "Options::staging_chunks of " + std::to_string(SIZE_MAX));
  options = clbuf::Options();
  options.staging_chunk_bytes = static_cast<std::size_t>(device.max_alloc_bytes) + 1;
  refused(options, "Options::staging_chunk_bytes of " + std::to_string(device.max_alloc_bytes + 1));
  options = clbuf::Options();
  options.bounce_max_bytes = SIZE_MAX - 1;
  refused(options, "Options::bounce_max_bytes of " + std::to_string(SIZE_MAX - 1));
  // At the bounds: accepted, and transfers work (bounce blocks never beyond the threshold).
  options = clbuf::Options();
  options.memory = clbuf::MemoryModel::discrete;
  options.staging_chunks = 4096;
  options.staging_chunk_bytes = 4096;
  options.bounce_max_bytes = static_cast<std::size_t>(device.max_alloc_bytes);
  options.staging_threshold_bytes = std::size_t{1} << 20;
  clbuf::BufferManager manager("", options);
  const std::vector<int> data(1000, 7);
  EXPECT_EQ(manager.download(manager.upload(data)), data);
}

}  // namespace
