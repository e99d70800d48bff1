// SPDX-License-Identifier: MIT
// Concurrency: one manager shared by several threads, a manager per thread, buffers handed
// between threads, and cleanup() while other threads are mid-transfer.
#include <atomic>
#include <chrono>
#include <clbuf/checkpoint.hpp>
#include <clbuf/npy.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "support/device_test.hpp"

namespace {

using clbuf_test::DeviceTest;

constexpr int thread_count = 4;

/// Failures seen on worker threads, reported on the main thread.
class Failures {
 public:
  void add(std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    list_.push_back(std::move(what));
  }
  ::testing::AssertionResult none() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (list_.empty()) return ::testing::AssertionSuccess();
    auto result = ::testing::AssertionFailure() << list_.size() << " failures; first: ";
    return result << list_.front();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> list_;
};

/// One random round trip (fresh upload, upload into, copy, download) of random size; records
/// any difference.
template <class T>
void round_trip(clbuf::BufferManager& manager, std::mt19937& rng, Failures& failures, int thread,
                int iteration) {
  const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 20000)(rng);
  const auto data = clbuf_test::random_bytes<T>(rng, n);
  const auto a = manager.upload(data);
  auto b = manager.allocate<T>(n);
  manager.copy(a, b);
  const auto back = manager.download(b);
  const auto direct = manager.download(a);
  if (!clbuf_test::same_bytes(data, back) || !clbuf_test::same_bytes(data, direct)) {
    failures.add("thread " + std::to_string(thread) + ", iteration " + std::to_string(iteration) +
                 ": " + std::to_string(n) + " elements of " + std::to_string(sizeof(T)) +
                 " bytes differ");
  }
  const auto patch = clbuf_test::random_bytes<T>(rng, n / 2);
  manager.upload(b, patch, n - n / 2);
  auto async = manager.download_async(b);
  const auto later = async.get();
  if (!clbuf_test::same_bytes(patch.data(), later.data() + (n - n / 2), patch.size() * sizeof(T)) ||
      !clbuf_test::same_bytes(data.data(), later.data(), (n - n / 2) * sizeof(T))) {
    failures.add("thread " + std::to_string(thread) + ", iteration " + std::to_string(iteration) +
                 ": windowed upload differs");
  }
}

void mixed_round_trips(clbuf::BufferManager& manager, std::uint32_t seed, Failures& failures,
                       int thread, int iterations) {
  std::mt19937 rng(seed);
  try {
    for (int i = 0; i < iterations; ++i) {
      switch (i % 4) {
        case 0:
          round_trip<float>(manager, rng, failures, thread, i);
          break;
        case 1:
          round_trip<std::int32_t>(manager, rng, failures, thread, i);
          break;
        case 2:
          round_trip<double>(manager, rng, failures, thread, i);
          break;
        default:
          round_trip<std::uint8_t>(manager, rng, failures, thread, i);
          break;
      }
    }
  } catch (const std::exception& error) {
    failures.add("thread " + std::to_string(thread) + " threw: " + error.what());
  }
}

class Threads : public DeviceTest {};

TEST_F(Threads, FourThreadsShareOneManager) {
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back(mixed_round_trips, std::ref(manager()),
                         seed_ + static_cast<std::uint32_t>(t), std::ref(failures), t, 40);
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(failures.none());
}

TEST_F(Threads, AManagerPerThread) {
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&failures, t, seed = seed_] {
      try {
        clbuf::BufferManager own;
        mixed_round_trips(own, seed + static_cast<std::uint32_t>(t), failures, t, 30);
      } catch (const std::exception& error) {
        failures.add("thread " + std::to_string(t) + " threw: " + error.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(failures.none());
}

TEST_F(Threads, ManagersCreatedConcurrently) {
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&failures, t, seed = seed_] {
      std::mt19937 rng(seed + static_cast<std::uint32_t>(t));
      for (int i = 0; i < 10; ++i) {
        try {
          clbuf::BufferManager own;
          const auto data = clbuf_test::random_values<int>(rng, 3);
          if (own.download(own.upload(data)) != data) failures.add("round trip differs");
        } catch (const std::exception& error) {
          failures.add(error.what());
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(failures.none());
}

TEST_F(Threads, BuffersHandedBetweenThreads) {
  // Producers upload; the main thread downloads what each produced.
  const auto inputs = [this] {
    std::vector<std::vector<float>> result;
    for (int t = 0; t < thread_count; ++t) result.push_back(random<float>(pick(1, 50000)));
    return result;
  }();
  std::vector<clbuf::DeviceBuffer<float>> buffers(thread_count);
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([this, &inputs, &buffers, t] {
      const auto index = static_cast<std::size_t>(t);
      buffers[index] = manager().upload(inputs[index]);
    });
  }
  for (auto& thread : threads) thread.join();
  for (std::size_t t = 0; t < buffers.size(); ++t) {
    EXPECT_TRUE(clbuf_test::same_bytes(inputs[t], manager().download(buffers[t]))) << t;
  }
}

TEST_F(Threads, ConcurrentCopiesIntoSeparateBuffers) {
  const auto data = random<std::int64_t>(30000);
  const auto src = manager().upload(data);
  std::vector<clbuf::DeviceBuffer<std::int64_t>> targets;
  for (int t = 0; t < thread_count; ++t)
    targets.push_back(manager().allocate<std::int64_t>(data.size()));
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 20; ++i) {
          manager().copy(src, targets[static_cast<std::size_t>(t)]);
          if (i % 5 == 0) manager().finish();
        }
      } catch (const std::exception& error) {
        failures.add(error.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(failures.none());
  for (const auto& target : targets)
    EXPECT_TRUE(clbuf_test::same_bytes(data, manager().download(target)));
}

// Threads whose asynchronous calls wait for events of their own: the barriers the manager
// keeps for them (KeptEvents) are shared state, kept and released from every thread at once.
// The events complete: PoCL 3.1 itself aborts or hangs when events fail while several threads
// enqueue on one queue (docs/repro/pocl_failed_events.cpp, plain OpenCL), so the failing case
// runs on one thread (async_ops_test) or on a manager per thread (below).
TEST_F(Threads, ConcurrentCallsWaitingForEventsKeepTheirBarriers) {
  std::vector<clbuf::DeviceBuffer<std::uint32_t>> targets;
  for (int t = 0; t < thread_count; ++t) targets.push_back(manager().allocate<std::uint32_t>(4096));
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 20; ++i) {
          cl::UserEvent gate(manager().context());
          auto fill = manager().fill_async(targets[static_cast<std::size_t>(t)],
                                           static_cast<std::uint32_t>(i + 1), {gate});
          gate.setStatus(CL_COMPLETE);
          fill.wait();
        }
      } catch (const std::exception& error) {
        failures.add(error.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(failures.none());
  for (auto& target : targets) {
    EXPECT_EQ(manager().download(target), std::vector<std::uint32_t>(4096, 20U));
  }
}

// A manager per thread (a queue each), half of the events failing: each call ends as its event
// says, and no process aborts.
TEST_F(Threads, EventsThatFailOnAManagerPerThread) {
  if (clbuf_test::thread_sanitizer) {
    GTEST_SKIP() << "PoCL's own lock order when an event fails (clbuf_test::thread_sanitizer)";
  }
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      try {
        clbuf::BufferManager own;
        auto target = own.allocate<std::uint32_t>(4096);
        for (int i = 0; i < 20; ++i) {
          const bool fails = (i + t) % 2 == 1;
          cl::UserEvent gate(own.context());
          auto fill = own.fill_async(target, static_cast<std::uint32_t>(i), {gate});
          gate.setStatus(fails ? -5 : CL_COMPLETE);
          try {
            fill.wait();
            if (fails) failures.add("a fill behind a failed event succeeded");
          } catch (const clbuf::Error& error) {
            if (!fails) failures.add(error.what());
          }
        }
        own.fill(target, 7U);
        if (own.download(target) != std::vector<std::uint32_t>(4096, 7U)) {
          failures.add("the manager did not go on after failed events");
        }
      } catch (const std::exception& error) {
        failures.add(error.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(failures.none());
}

TEST_F(Threads, CleanupWhileOtherThreadsTransfer) {
  // Each call either completes correctly or throws the cleaned-up error; after cleanup()
  // returns, every call throws it. No other outcome, no crash.
  Failures failures;
  std::atomic<bool> cleaned{false};
  std::atomic<int> started{0};
  std::atomic<int> rejected_after_cleanup{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed_ + static_cast<std::uint32_t>(t));
      ++started;
      for (int i = 0; i < 100000; ++i) {
        const bool after = cleaned.load();
        try {
          const auto data = clbuf_test::random_bytes<std::uint32_t>(rng, 257);
          const auto buffer = manager().upload(data);
          const auto back = manager().download(buffer);
          if (after) failures.add("a call succeeded after cleanup() had returned");
          if (!clbuf_test::same_bytes(data, back)) failures.add("round trip differs");
        } catch (const clbuf::Error& error) {
          if (error.code() != CL_SUCCESS ||
              std::string(error.what()).find("cleanup") == std::string::npos) {
            failures.add(std::string("unexpected error: ") + error.what());
          }
          ++rejected_after_cleanup;
          return;
        } catch (const std::exception& error) {
          failures.add(std::string("unexpected exception: ") + error.what());
          return;
        }
      }
      failures.add("thread " + std::to_string(t) + " never saw the cleanup");
    });
  }
  while (started.load() < thread_count) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  manager().cleanup();
  cleaned = true;
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(failures.none());
  EXPECT_EQ(rejected_after_cleanup.load(), thread_count);
}

// cleanup() while other threads move files: .npy loads and saves (typed and by bytes, as the
// Python module calls them) and a Checkpoint's saves and loads. Each call completes or throws the
// cleaned-up error; cleanup() waits for the calls using the manager's engine (no call touches a
// released queue or pinned pool: ASan and TSan watch this one).
/// One round of CleanupWhileFilesAndCheckpointsMove on a manager of `model` (every transfer past
/// 8 KiB staged through 4 KiB pinned chunks: many chunk calls of the engine in flight).
void cleanup_while_files_move(clbuf::MemoryModel model) {
  clbuf::BufferManager manager(std::string(), clbuf_test::fault_options(model));
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("clbuf-thread-files-" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  Failures failures;
  std::atomic<int> started{0};
  std::atomic<int> rejected{0};
  const auto expect_cleaned_up = [&](const clbuf::Error& error) {
    if (error.code() != CL_SUCCESS ||
        std::string(error.what()).find("cleanup") == std::string::npos) {
      failures.add(std::string("unexpected error: ") + error.what());
    }
    ++rejected;
  };
  const std::vector<float> data(300000, 2.5f);  // 1.2 MB: several staging chunks
  std::vector<std::function<void(int)>> work = {
      [&](int i) {
        const std::string path = (folder / ("a" + std::to_string(i % 2) + ".npy")).string();
        auto buffer = manager.upload(data);
        manager.save_npy(path, buffer);
        if (manager.download(manager.load_npy<float>(path)) != data) failures.add("npy");
      },
      [&](int i) {
        const std::string path = (folder / ("b" + std::to_string(i % 2) + ".npy")).string();
        auto bytes = manager.upload(std::vector<std::uint8_t>(400000, 7));
        clbuf::save_npy_bytes(manager, path, bytes, "|u1", {400000});
        clbuf::NpyHeader header;
        auto back = clbuf::load_npy_bytes(manager, path, header);
        if (back.size() != 400000) failures.add("npy bytes");
      },
      [&](int) {
        auto u = manager.upload(data);
        clbuf::Checkpoint checkpoint(manager, (folder / "ckpt").string());
        checkpoint.add("u", u);
        checkpoint.save();
        checkpoint.load();
        if (manager.download(u) != data) failures.add("checkpoint");
      }};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < work.size(); ++t) {
    threads.emplace_back([&, t] {
      ++started;
      for (int i = 0; i < 100000; ++i) {
        try {
          work[t](i);
        } catch (const clbuf::Error& error) {
          expect_cleaned_up(error);
          return;
        } catch (const std::exception& error) {
          failures.add(std::string("unexpected exception: ") + error.what());
          return;
        }
      }
      failures.add("thread " + std::to_string(t) + " never saw the cleanup");
    });
  }
  while (started.load() < static_cast<int>(work.size())) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  manager.cleanup();
  for (auto& thread : threads) thread.join();
  std::filesystem::remove_all(folder);
  EXPECT_TRUE(failures.none()) << clbuf::to_string(model);
  EXPECT_EQ(rejected.load(), static_cast<int>(work.size())) << clbuf::to_string(model);
}

TEST_F(Threads, CleanupWhileFilesAndCheckpointsMove) {
  for (const clbuf::MemoryModel model : {clbuf::MemoryModel::host, clbuf::MemoryModel::discrete}) {
    cleanup_while_files_move(model);
  }
}

TEST_F(Threads, CleanupFromSeveralThreadsAtOnceReleasesOnceAndEveryCallReturns) {
  // Several threads call cleanup() at once while others transfer: every cleanup() returns (none
  // waits forever for another), none throws, and afterwards every call throws the cleaned-up
  // error, cleanup() included never again failing.
  Failures failures;
  std::atomic<bool> go{false};
  std::atomic<int> cleanups_done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed_ + static_cast<std::uint32_t>(t));
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 100000 && cleanups_done.load() < thread_count; ++i) {
        try {
          const auto data = clbuf_test::random_bytes<std::uint32_t>(rng, 64);
          const auto back = manager().download(manager().upload(data));
          if (!clbuf_test::same_bytes(data, back)) failures.add("round trip differs");
        } catch (const clbuf::Error& error) {
          if (error.code() != CL_SUCCESS) failures.add(std::string("unexpected: ") + error.what());
          return;
        }
      }
    });
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      try {
        manager().cleanup();
      } catch (const std::exception& error) {
        failures.add(std::string("cleanup() threw: ") + error.what());
      }
      ++cleanups_done;
    });
  }
  go = true;
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(failures.none());
  EXPECT_EQ(cleanups_done.load(), thread_count);
  EXPECT_THROW((void)manager().allocate<float>(4), clbuf::Error);
  EXPECT_NO_THROW(manager().cleanup());
}

TEST_F(Threads, FirstViewsOfOneBufferFromFourThreadsAtOnce) {
  // The first view of a buffer shares its memory (a Lease made inside the buffer): four threads
  // make the first views of a fresh buffer at once while a fifth downloads it (a const read).
  // Every view sees its bytes, the buffer is unchanged, and the memory goes back to the pool once
  // (the next buffer of that size reuses it, exactly once).
  Failures failures;
  std::mt19937 rng(seed_);
  for (int round = 0; round < 50; ++round) {
    const auto data = clbuf_test::random_bytes<std::uint32_t>(rng, 4096);
    auto root = manager().upload(data);
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < thread_count; ++t) {
      threads.emplace_back([&, t] {
        while (!go.load()) std::this_thread::yield();
        try {
          const std::size_t offset = static_cast<std::size_t>(t) * 1000;
          const auto view = manager().view(root, offset, 1000);
          const auto got = manager().download(view);
          if (!clbuf_test::same_bytes(data.data() + offset, got.data(), 1000 * 4)) {
            failures.add("round " + std::to_string(round) + ", thread " + std::to_string(t) +
                         ": the view's bytes differ");
          }
        } catch (const std::exception& error) {
          failures.add(std::string("threw: ") + error.what());
        }
      });
    }
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      try {
        if (!clbuf_test::same_bytes(data, manager().download(root))) {
          failures.add("round " + std::to_string(round) + ": the buffer's bytes differ");
        }
      } catch (const std::exception& error) {
        failures.add(std::string("threw: ") + error.what());
      }
    });
    go = true;
    for (auto& thread : threads) thread.join();
    ASSERT_TRUE(failures.none());
    const clbuf::PoolStats before = manager().stats().pool;
    root = clbuf::DeviceBuffer<std::uint32_t>();  // the views are gone: the memory goes back
    const clbuf::PoolStats after = manager().stats().pool;
    EXPECT_EQ(after.cached_buffers, before.cached_buffers + 1) << "round " << round;
    const auto again = manager().allocate<std::uint32_t>(4096);
    EXPECT_EQ(manager().stats().pool.hits, after.hits + 1) << "round " << round;
  }
}

}  // namespace
