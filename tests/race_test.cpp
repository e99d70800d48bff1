// SPDX-License-Identifier: MIT
// Concurrency gaps of RELIABILITY.md group C, for TSan: a buffer destroyed by one thread while
// another thread's transfer of it is in flight; managers destroyed with work pending; concurrent
// const reads (downloads of one buffer from several threads); cleanup() racing transfers on the
// staged path.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::DeviceTest;
using clbuf_test::same_bytes;

class Race : public DeviceTest {};

TEST_F(Race, BufferDestroyedWhileAnotherThreadsDownloadIsInFlight) {
  for (int round = 0; round < 20; ++round) {
    const auto data = random<std::uint32_t>(pick(1, 300000));
    auto buffer = std::make_unique<clbuf::DeviceBuffer<std::uint32_t>>(manager().upload(data));
    auto future = manager().download_async(*buffer);
    std::thread destroyer([&] { buffer.reset(); });  // the OpenCL buffer outlives the command
    destroyer.join();
    std::thread waiter([&] { EXPECT_TRUE(same_bytes(data, future.get())) << "round " << round; });
    waiter.join();
  }
}

TEST_F(Race, ConcurrentDownloadsOfOneBuffer) {
  const auto data = random<std::uint32_t>(100000);
  const auto buffer = manager().upload(data);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        if (manager().download(buffer) != data) ++mismatches;
        auto future = manager().download_async(buffer);
        if (future.get() != data) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(Race, ManagersDestroyedWithWorkPendingOnOtherThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, seed = seed_ + static_cast<std::uint32_t>(t)] {
      std::mt19937 rng(seed);
      for (int i = 0; i < 10; ++i) {
        auto local = std::make_unique<clbuf::BufferManager>();
        const auto data = clbuf_test::random_bytes<std::uint32_t>(rng, 50000);
        auto upload = local->upload_async(std::vector<std::uint32_t>(data));
        auto buffer = upload.get();
        auto pending = local->download_async(buffer);
        local.reset();  // the manager goes first; the buffer and the future stay valid
        if (pending.get() != data) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(Race, CleanupWhileOtherThreadsUseTheStagedPath) {
  clbuf::Options options;
  options.memory = clbuf::MemoryModel::discrete;
  options.staging_threshold_bytes = 8192;
  options.staging_chunk_bytes = 4096;
  clbuf::BufferManager staged("", options);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, seed = seed_ + static_cast<std::uint32_t>(t)] {
      std::mt19937 rng(seed);
      while (!stop) {
        try {
          const auto data = clbuf_test::random_bytes<std::uint32_t>(rng, 20000);
          auto buffer = staged.upload(data);
          if (staged.download(buffer) != data) ++wrong;
        } catch (const clbuf::Error& error) {
          if (error.code() != CL_SUCCESS) ++wrong;  // only "cleaned up" may stop a thread
          return;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  staged.cleanup();
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
