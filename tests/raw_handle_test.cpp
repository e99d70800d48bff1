// SPDX-License-Identifier: MIT
// adopt() and release(): an application's cl::Buffer wrapped as a DeviceBuffer<T> (context, size
// and overflow checked), and a DeviceBuffer's buffer handed to the application, never to be
// reused by clbuf's pool.
#include <cstdint>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::code_text;
using clbuf_test::DeviceTest;
using clbuf_test::same_bytes;

class RawHandle : public DeviceTest {
 protected:
  cl::Buffer raw(std::size_t bytes) {
    return cl::Buffer(manager().context(), CL_MEM_READ_WRITE, bytes);
  }
};

TEST_F(RawHandle, AdoptedBufferWorksEverywhere) {
  cl::Buffer mine = raw(1000 * sizeof(float));
  clbuf::DeviceBuffer<float> adopted = manager().adopt<float>(mine, 1000);
  EXPECT_EQ(adopted.size(), 1000u);
  EXPECT_EQ(adopted.native()(), mine());
  const std::vector<float> data = random<float>(1000);
  manager().upload(adopted, data);
  EXPECT_TRUE(same_bytes(data, manager().download(adopted)));
  // The application's own handle sees the same bytes.
  std::vector<float> direct(1000);
  manager().queue().enqueueReadBuffer(mine, CL_TRUE, 0, 1000 * sizeof(float), direct.data());
  EXPECT_TRUE(same_bytes(data, direct));
  clbuf::DeviceBuffer<float> copy = manager().allocate<float>(1000);
  manager().copy(adopted, copy);
  EXPECT_TRUE(same_bytes(data, manager().download(copy)));
}

TEST_F(RawHandle, AdoptingFewerElementsThanTheBufferHoldsIsFine) {
  clbuf::DeviceBuffer<std::uint8_t> adopted = manager().adopt<std::uint8_t>(raw(100), 7);
  EXPECT_EQ(adopted.size(), 7u);
  clbuf::DeviceBuffer<std::uint8_t> none = manager().adopt<std::uint8_t>(raw(100), 0);
  EXPECT_TRUE(none.valid());
  EXPECT_TRUE(manager().download(none).empty());
}

TEST_F(RawHandle, BadAdoptionsAreRejected) {
  EXPECT_CLBUF_ERROR(manager().adopt<int>(cl::Buffer(), 1), CL_INVALID_MEM_OBJECT,
                     "adopt: " + code_text(CL_INVALID_MEM_OBJECT),
                     "the cl::Buffer to adopt is null");
  EXPECT_CLBUF_ERROR(manager().adopt<int>(raw(40), 11), CL_INVALID_VALUE,
                     "adopt: " + code_text(CL_INVALID_VALUE),
                     "11 elements of 4 bytes need 44 bytes but the buffer has 40 (CL_MEM_SIZE)");
  EXPECT_CLBUF_ERROR(manager().adopt<int>(raw(40), SIZE_MAX / 2), CL_INVALID_VALUE,
                     "adopt: ", "elements of 4 bytes overflow size_t");
  clbuf::BufferManager other;
  cl::Buffer foreign(other.context(), CL_MEM_READ_WRITE, 64);
  EXPECT_CLBUF_ERROR(manager().adopt<int>(foreign, 4), CL_INVALID_CONTEXT,
                     "adopt: " + code_text(CL_INVALID_CONTEXT), "another OpenCL context");
}

TEST_F(RawHandle, AdoptedSubBufferOverlapsItsParent) {
  cl::Buffer parent = raw(4096);
  const cl_buffer_region area = {1024, 1024};
  cl_int err = CL_SUCCESS;
  cl::Buffer sub =
      parent.createSubBuffer(CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &area, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  clbuf::DeviceBuffer<std::uint8_t> whole = manager().adopt<std::uint8_t>(parent, 4096);
  clbuf::DeviceBuffer<std::uint8_t> part = manager().adopt<std::uint8_t>(sub, 1024);
  EXPECT_EQ(part.root_offset_bytes(), 1024u);
  const std::vector<std::uint8_t> data = random<std::uint8_t>(4096);
  manager().upload(whole, data);
  // Bytes [1024, 1100) of the parent are bytes [0, 76) of the sub-buffer: a copy between them
  // overlaps.
  EXPECT_CLBUF_ERROR(manager().copy_bytes(whole, part, 100, 1000, 0), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: " + code_text(CL_MEM_COPY_OVERLAP),
                     "ranges [1000, 1100) and [1024, 1124) of one buffer overlap");
  manager().copy_bytes(whole, part, 24, 1000, 0);  // [1000, 1024) and [1024, 1048): apart
  std::vector<std::uint8_t> expected = data;
  std::memcpy(expected.data() + 1024, data.data() + 1000, 24);
  EXPECT_TRUE(same_bytes(expected, manager().download(whole)));
}

TEST_F(RawHandle, ReleaseHandsTheBufferOverAndIsNeverReused) {
  const std::vector<int> data = random<int>(256);
  clbuf::DeviceBuffer<int> buffer = manager().upload(data);
  const cl_mem handle = buffer.native()();
  const std::size_t cached = manager().stats().pool.cached_buffers;
  cl::Buffer mine = buffer.release();
  EXPECT_EQ(manager().stats().pool.cached_buffers, cached) << "released memory went to the pool";
  EXPECT_EQ(mine(), handle);
  EXPECT_FALSE(buffer.valid());
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.native()(), nullptr);
  EXPECT_CLBUF_ERROR(manager().download(buffer), CL_INVALID_MEM_OBJECT, "download: ");
  EXPECT_GE(mine.getInfo<CL_MEM_SIZE>(), 256 * sizeof(int));
  // The pool never hands the released memory out again: new buffers of that size get others,
  // and writing them leaves the released bytes alone.
  std::vector<clbuf::DeviceBuffer<int>> later;
  for (int i = 0; i < 8; ++i) {
    later.push_back(manager().upload(random<int>(256)));
    EXPECT_NE(later.back().native()(), handle);
  }
  std::vector<int> back(256);
  manager().queue().enqueueReadBuffer(mine, CL_TRUE, 0, 256 * sizeof(int), back.data());
  EXPECT_TRUE(same_bytes(data, back));
  EXPECT_EQ(clbuf::DeviceBuffer<int>().release()(), nullptr);
}

TEST_F(RawHandle, ReleaseThenAdoptRoundTrips) {
  const std::vector<double> data = random<double>(99);
  clbuf::DeviceBuffer<double> buffer = manager().upload(data);
  clbuf::DeviceBuffer<double> again = manager().adopt<double>(buffer.release(), 99);
  EXPECT_TRUE(same_bytes(data, manager().download(again)));
}

}  // namespace
