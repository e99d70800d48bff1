// SPDX-License-Identifier: MIT
// BufferManager(cl::Context, cl::CommandQueue): adopting an application's own context and
// in-order queue, sharing (not copying) them, and rejecting queues clbuf cannot order by.
#include <cstdint>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::DeviceTest;
using clbuf_test::same_bytes;

class Adopt : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    device_ = cl_device();
    cl_int err = CL_SUCCESS;
    context_ = cl::Context(device_, nullptr, nullptr, nullptr, &err);
    ASSERT_EQ(err, CL_SUCCESS);
    queue_ = cl::CommandQueue(context_, device_, 0, &err);
    ASSERT_EQ(err, CL_SUCCESS);
  }

  cl::Device device_;
  cl::Context context_;
  cl::CommandQueue queue_;
};

TEST_F(Adopt, UsesTheGivenContextAndQueue) {
  clbuf::BufferManager adopted(context_, queue_);
  EXPECT_EQ(adopted.context()(), context_());
  EXPECT_EQ(adopted.queue()(), queue_());
  EXPECT_EQ(adopted.device().name, manager().device().name);
  EXPECT_EQ(adopted.device().max_alloc_bytes, device_.getInfo<CL_DEVICE_MAX_MEM_ALLOC_SIZE>());
}

TEST_F(Adopt, RoundTripsThroughTheAdoptedQueue) {
  clbuf::BufferManager adopted(context_, queue_);
  const auto data = random<double>(4321);
  const auto buffer = adopted.upload(data);
  EXPECT_EQ(buffer.context(), context_());
  EXPECT_TRUE(same_bytes(data, adopted.download(buffer)));
  auto copy = adopted.allocate<double>(data.size());
  adopted.copy(buffer, copy);
  EXPECT_TRUE(same_bytes(data, adopted.download_async(copy).get()));
}

TEST_F(Adopt, BuffersInterOperateWithTheApplicationsQueue) {
  clbuf::BufferManager adopted(context_, queue_);
  const auto data = random<std::uint32_t>(1000);
  const auto buffer = adopted.upload(data);
  std::vector<std::uint32_t> out(data.size());
  ASSERT_EQ(queue_.enqueueReadBuffer(buffer.native(), CL_TRUE, 0, buffer.size_bytes(), out.data()),
            CL_SUCCESS);
  EXPECT_TRUE(same_bytes(data, out));

  const auto written = random<std::uint32_t>(1000);
  ASSERT_EQ(
      queue_.enqueueWriteBuffer(buffer.native(), CL_TRUE, 0, buffer.size_bytes(), written.data()),
      CL_SUCCESS);
  EXPECT_TRUE(same_bytes(written, adopted.download(buffer)));
}

TEST_F(Adopt, ApplicationObjectsOutliveTheManager) {
  {
    clbuf::BufferManager adopted(context_, queue_);
    const auto data = random<float>(10);
    EXPECT_TRUE(same_bytes(data, adopted.download(adopted.upload(data))));
    adopted.cleanup();
  }
  // The application's context and queue are still its own and still work.
  const auto data = random<float>(256);
  cl_int err = CL_SUCCESS;
  cl::Buffer raw(context_, CL_MEM_READ_WRITE, data.size() * sizeof(float), nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  ASSERT_EQ(queue_.enqueueWriteBuffer(raw, CL_TRUE, 0, data.size() * sizeof(float), data.data()),
            CL_SUCCESS);
  std::vector<float> out(data.size());
  ASSERT_EQ(queue_.enqueueReadBuffer(raw, CL_TRUE, 0, out.size() * sizeof(float), out.data()),
            CL_SUCCESS);
  EXPECT_TRUE(same_bytes(data, out));
  EXPECT_EQ(queue_.finish(), CL_SUCCESS);
}

TEST_F(Adopt, TwoManagersMayShareOneContextAndQueue) {
  clbuf::BufferManager first(context_, queue_);
  clbuf::BufferManager second(context_, queue_);
  const auto data = random<std::int8_t>(99);
  const auto buffer = first.upload(data);
  EXPECT_TRUE(same_bytes(data, second.download(buffer))) << "same context: buffers are shared";
  first.cleanup();
  EXPECT_TRUE(same_bytes(data, second.download(buffer))) << "cleanup of one leaves the other";
}

TEST_F(Adopt, BufferOfTheFixtureManagerIsAnotherContext) {
  clbuf::BufferManager adopted(context_, queue_);
  const auto buffer = manager().upload(random<float>(8));
  EXPECT_CLBUF_ERROR(adopted.download(buffer), CL_INVALID_CONTEXT,
                     "download: ", clbuf_test::code_text(CL_INVALID_CONTEXT));
}

TEST_F(Adopt, OutOfOrderQueueIsRejected) {
  const auto supported = device_.getInfo<CL_DEVICE_QUEUE_PROPERTIES>();
  if ((supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) == 0) {
    GTEST_SKIP() << "the device has no out-of-order queues";
  }
  cl_int err = CL_SUCCESS;
  cl::CommandQueue out_of_order(context_, device_, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(context_, out_of_order), CL_INVALID_COMMAND_QUEUE,
                     "BufferManager: ", clbuf_test::code_text(CL_INVALID_COMMAND_QUEUE));
}

TEST_F(Adopt, InOrderQueueWithProfilingIsAccepted) {
  cl_int err = CL_SUCCESS;
  cl::CommandQueue profiling(context_, device_, CL_QUEUE_PROFILING_ENABLE, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  clbuf::BufferManager adopted(context_, profiling);
  const auto data = random<std::uint16_t>(77);
  EXPECT_TRUE(same_bytes(data, adopted.download(adopted.upload(data))));
}

TEST_F(Adopt, NullContextOrQueueIsAnError) {
  EXPECT_THROW(static_cast<void>(clbuf::BufferManager(cl::Context(), cl::CommandQueue())),
               clbuf::Error);
  EXPECT_THROW(static_cast<void>(clbuf::BufferManager(context_, cl::CommandQueue())), clbuf::Error);
  EXPECT_THROW(static_cast<void>(clbuf::BufferManager(cl::Context(), queue_)), clbuf::Error);
}

TEST_F(Adopt, QueueOfAnotherContextIsAnError) {
  EXPECT_THROW(static_cast<void>(clbuf::BufferManager(context_, manager().queue())), clbuf::Error);
}

TEST_F(Adopt, AdoptedManagerAfterCleanupBehavesLikeAnyOther) {
  clbuf::BufferManager adopted(context_, queue_);
  adopted.cleanup();
  adopted.cleanup();
  EXPECT_CLBUF_ERROR(adopted.upload(random<int>(3)), CL_SUCCESS, "upload", "cleanup");
  EXPECT_CLBUF_ERROR(adopted.queue(), CL_SUCCESS, "cleanup");
  EXPECT_FALSE(adopted.device().name.empty());
}

}  // namespace
