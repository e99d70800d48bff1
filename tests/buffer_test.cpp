// SPDX-License-Identifier: MIT
// clbuf::DeviceBuffer<T>: a move-only owner of device memory; its size, shape and native handle;
// and its life after the manager that made it is cleaned up or destroyed.
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::DeviceTest;
using clbuf_test::same_bytes;

static_assert(!std::is_copy_constructible<clbuf::DeviceBuffer<float>>::value,
              "DeviceBuffer must not be copyable");
static_assert(!std::is_copy_assignable<clbuf::DeviceBuffer<float>>::value,
              "DeviceBuffer must not be copy-assignable");
static_assert(std::is_nothrow_move_constructible<clbuf::DeviceBuffer<float>>::value,
              "DeviceBuffer must be nothrow move-constructible");
static_assert(std::is_nothrow_move_assignable<clbuf::DeviceBuffer<float>>::value,
              "DeviceBuffer must be nothrow move-assignable");
static_assert(std::is_nothrow_destructible<clbuf::DeviceBuffer<float>>::value,
              "DeviceBuffer's destructor must not throw");
static_assert(std::is_default_constructible<clbuf::DeviceBuffer<float>>::value,
              "DeviceBuffer is default-constructible (an invalid buffer)");
static_assert(!std::is_copy_constructible<clbuf::DeviceBuffer<clbuf_test::Sample>>::value,
              "DeviceBuffer of a struct must not be copyable");
static_assert(!std::is_copy_constructible<clbuf::Future<std::vector<int>>>::value,
              "Future must not be copyable");
static_assert(!std::is_copy_assignable<clbuf::Future<std::vector<int>>>::value,
              "Future must not be copy-assignable");
static_assert(std::is_move_constructible<clbuf::Future<std::vector<int>>>::value,
              "Future must be movable");
static_assert(std::is_move_constructible<clbuf::Future<clbuf::DeviceBuffer<int>>>::value,
              "Future of a buffer must be movable");
static_assert(!std::is_copy_constructible<clbuf::BufferManager>::value,
              "BufferManager must not be copyable");
static_assert(std::is_nothrow_destructible<clbuf::BufferManager>::value,
              "BufferManager's destructor must not throw");
static_assert(std::is_same<decltype(std::declval<const clbuf::DeviceBuffer<double>&>().native()),
                           const cl::Buffer&>::value,
              "native() gives the cl::Buffer");

class Buffer : public DeviceTest {
 protected:
  /// Reads `buffer` through OpenCL directly, bypassing clbuf, on `queue`.
  template <class T>
  std::vector<T> raw_read(const cl::CommandQueue& queue, const clbuf::DeviceBuffer<T>& buffer) {
    std::vector<T> out(buffer.size());
    const cl_int err =
        queue.enqueueReadBuffer(buffer.native(), CL_TRUE, 0, buffer.size_bytes(), out.data());
    EXPECT_EQ(err, CL_SUCCESS);
    return out;
  }
};

TEST_F(Buffer, DefaultConstructedIsInvalidAndEmpty) {
  const clbuf::DeviceBuffer<int> buffer;
  EXPECT_FALSE(buffer.valid());
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_EQ(buffer.size_bytes(), 0u);
  EXPECT_TRUE(buffer.empty());
}

TEST_F(Buffer, UploadGivesSizeBytesAndFlatShape) {
  const auto data = random<double>(37);
  const auto buffer = manager().upload(data);
  EXPECT_TRUE(buffer.valid());
  EXPECT_FALSE(buffer.empty());
  EXPECT_EQ(buffer.size(), 37u);
  EXPECT_EQ(buffer.size_bytes(), 37u * sizeof(double));
  EXPECT_EQ(buffer.shape(), std::vector<std::size_t>{37});
}

TEST_F(Buffer, UploadWithShapeKeepsTheShape) {
  const auto data = random<float>(24);
  const auto buffer = manager().upload(data, {2, 3, 4});
  EXPECT_EQ(buffer.size(), 24u);
  EXPECT_EQ(buffer.shape(), (std::vector<std::size_t>{2, 3, 4}));
  EXPECT_TRUE(same_bytes(data, manager().download(buffer)));
}

TEST_F(Buffer, AllocateGivesSizeAndFlatShape) {
  const auto buffer = manager().allocate<std::int16_t>(1000);
  EXPECT_TRUE(buffer.valid());
  EXPECT_EQ(buffer.size(), 1000u);
  EXPECT_EQ(buffer.size_bytes(), 2000u);
  EXPECT_EQ(buffer.shape(), std::vector<std::size_t>{1000});
}

TEST_F(Buffer, StructElementSizeInBytes) {
  const auto data = random_raw<clbuf_test::Rgb>(11);
  const auto buffer = manager().upload(data);
  EXPECT_EQ(buffer.size(), 11u);
  EXPECT_EQ(buffer.size_bytes(), 33u);
}

TEST_F(Buffer, MoveConstructionTransfersAndLeavesSourceInvalid) {
  const auto data = random<std::int32_t>(100);
  auto source = manager().upload(data, {10, 10});
  const cl_mem handle = source.native()();
  clbuf::DeviceBuffer<std::int32_t> target(std::move(source));
  EXPECT_FALSE(source.valid());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(source.size(), 0u);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(source.empty());   // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(target.valid());
  EXPECT_EQ(target.size(), 100u);
  EXPECT_EQ(target.shape(), (std::vector<std::size_t>{10, 10}));
  EXPECT_EQ(target.native()(), handle);
  EXPECT_TRUE(same_bytes(data, manager().download(target)));
}

TEST_F(Buffer, MoveAssignmentTransfersAndLeavesSourceInvalid) {
  const auto first = random<float>(50);
  const auto second = random<float>(70);
  auto a = manager().upload(first);
  auto b = manager().upload(second);
  b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.size(), 50u);
  EXPECT_TRUE(same_bytes(first, manager().download(b)));
}

TEST_F(Buffer, MovedFromBufferCanBeAssignedAgain) {
  auto a = manager().upload(random<std::uint8_t>(9));
  auto b = std::move(a);
  const auto data = random<std::uint8_t>(13);
  a = manager().upload(data);
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(a.size(), 13u);
  EXPECT_TRUE(same_bytes(data, manager().download(a)));
  EXPECT_TRUE(b.valid());
}

TEST_F(Buffer, SelfMoveAssignmentKeepsTheBuffer) {
  const auto data = random<std::uint64_t>(20);
  auto a = manager().upload(data);
  auto& alias = a;
  a = std::move(alias);
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(a.size(), 20u);
  EXPECT_TRUE(same_bytes(data, manager().download(a)));
}

TEST_F(Buffer, NativeIsTheOpenClBufferOfTheManagersContext) {
  const auto data = random<float>(300);
  const auto buffer = manager().upload(data);
  ASSERT_NE(buffer.native()(), nullptr);
  EXPECT_GE(buffer.native().getInfo<CL_MEM_SIZE>(), buffer.size_bytes());
  EXPECT_EQ(buffer.native().getInfo<CL_MEM_CONTEXT>()(), manager().context()());
  EXPECT_EQ(buffer.context(), manager().context()());
  EXPECT_TRUE(same_bytes(data, raw_read(manager().queue(), buffer)));
}

TEST_F(Buffer, RawWritesToNativeAreSeenByDownload) {
  auto buffer = manager().allocate<std::int64_t>(64);
  const auto data = random<std::int64_t>(64);
  ASSERT_EQ(manager().queue().enqueueWriteBuffer(buffer.native(), CL_TRUE, 0, buffer.size_bytes(),
                                                 data.data()),
            CL_SUCCESS);
  EXPECT_TRUE(same_bytes(data, manager().download(buffer)));
}

// A new queue on the first device of the context `handle` (retained here); a null queue when it
// cannot be made.
cl::CommandQueue queue_on(cl_context handle) {
  const cl::Context context(handle, true);
  cl_int err = CL_SUCCESS;
  cl::CommandQueue queue(context, context.getInfo<CL_CONTEXT_DEVICES>().at(0), 0, &err);
  return err == CL_SUCCESS ? queue : cl::CommandQueue();
}

TEST_F(Buffer, BufferOutlivesItsDestroyedManager) {
  const auto data = random<double>(500);
  clbuf::DeviceBuffer<double> buffer;
  {
    clbuf::BufferManager local;
    buffer = local.upload(data);
  }  // the manager is gone; the buffer retains its context
  ASSERT_TRUE(buffer.valid());
  ASSERT_NE(buffer.context(), nullptr);
  const cl::CommandQueue queue = queue_on(buffer.context());
  ASSERT_NE(queue(), nullptr);
  EXPECT_TRUE(same_bytes(data, raw_read(queue, buffer)));
}  // the buffer is released after its manager: must not crash

// A buffer holds its context through its OpenCL buffer; an empty one (no OpenCL buffer) and a
// view (its root's buffer) must keep the context alive too once the manager is gone.
TEST_F(Buffer, EmptyBufferAndViewKeepTheirContextAfterTheManager) {
  const auto data = random<std::uint16_t>(300);
  clbuf::DeviceBuffer<std::uint16_t> empty;
  clbuf::DeviceBuffer<std::uint16_t> view;
  {
    clbuf::BufferManager local;
    empty = local.allocate<std::uint16_t>(0);
    auto parent = local.upload(data);
    view = local.view(parent, 7, 100);
  }  // the manager and the view's parent are gone
  for (const cl_context handle : {empty.context(), view.context()}) {
    ASSERT_NE(handle, nullptr);
    const cl::Context context(handle, true);  // a live context: its devices can be asked
    EXPECT_EQ(context.getInfo<CL_CONTEXT_DEVICES>().size(), 1u);
  }
  EXPECT_TRUE(empty.valid());
  EXPECT_TRUE(empty.empty());
  const cl::CommandQueue queue = queue_on(view.context());
  ASSERT_NE(queue(), nullptr);
  clbuf::BufferManager adopter(cl::Context(view.context(), true), queue);
  EXPECT_TRUE(same_bytes(std::vector<std::uint16_t>(data.begin() + 7, data.begin() + 107),
                         adopter.download(view)));
}

TEST_F(Buffer, BufferOutlivesCleanupAndMovesToANewManager) {
  const auto data = random<std::uint32_t>(777);
  auto buffer = manager().upload(data);
  manager().cleanup();
  ASSERT_TRUE(buffer.valid());
  const cl::CommandQueue queue = queue_on(buffer.context());
  ASSERT_NE(queue(), nullptr);
  clbuf::BufferManager adopter(cl::Context(buffer.context(), true), queue);
  EXPECT_TRUE(same_bytes(data, adopter.download(buffer)));
}

TEST_F(Buffer, BuffersDestroyedAfterManagerInAnyOrder) {
  std::vector<clbuf::DeviceBuffer<float>> buffers;
  {
    clbuf::BufferManager local;
    for (std::size_t i = 1; i <= 16; ++i) buffers.push_back(local.upload(random<float>(i * 100)));
    buffers.push_back(local.allocate<float>(0));
  }
  // Destroy from the middle outwards.
  while (!buffers.empty())
    buffers.erase(buffers.begin() + static_cast<std::ptrdiff_t>(buffers.size() / 2));
  SUCCEED();
}

TEST_F(Buffer, EmptyUploadIsValidAndEmpty) {
  const auto buffer = manager().upload(std::vector<float>{});
  EXPECT_TRUE(buffer.valid());
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_EQ(buffer.size_bytes(), 0u);
  EXPECT_EQ(buffer.shape(), std::vector<std::size_t>{0});
}

TEST_F(Buffer, AllocateZeroIsValidAndEmpty) {
  const auto buffer = manager().allocate<double>(0);
  EXPECT_TRUE(buffer.valid());
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.size_bytes(), 0u);
}

TEST_F(Buffer, ManyManagersComeAndGo) {
  for (int i = 0; i < 100; ++i) {
    clbuf::BufferManager local;
    const auto data = random<std::int32_t>(16);
    auto buffer = local.upload(data);
    ASSERT_TRUE(same_bytes(data, local.download(buffer))) << "manager " << i;
  }
}

}  // namespace
