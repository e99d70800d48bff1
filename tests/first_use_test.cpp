// SPDX-License-Identifier: MIT
// Several threads construct the process's first BufferManager at once, as its first OpenCL use.
// PoCL 3.1 initialises itself lazily and not thread-safely: without clbuf serialising discovery
// this crashed 7 times in 10 and gave a false CL_DEVICE_NOT_FOUND the other 3. Each trial runs
// in a child forked before any OpenCL call (forking after OpenCL has started hangs the child).
#include <clbuf/clbuf.hpp>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/device_test.hpp"

namespace {

constexpr int no_device_exit = 3;

/// In the child: `threads` threads wait at a gate, then all construct a manager at once and
/// upload and download a little. Exit 0 when every thread succeeded.
[[noreturn]] void child(unsigned threads) {
  std::mutex mutex;
  std::condition_variable gate;
  bool open = false;
  std::atomic<int> failures{0};
  std::atomic<int> no_device{0};
  std::vector<std::thread> workers;
  for (unsigned i = 0; i < threads; ++i) {
    workers.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mutex);
        gate.wait(lock, [&] { return open; });
      }
      try {
        clbuf::BufferManager manager;
        const std::vector<int> data{static_cast<int>(i), 1, 2, 3};
        if (manager.download(manager.upload(data)) != data) ++failures;
      } catch (const clbuf::Error& error) {
        if (error.code() == -1001) {
          ++no_device;
        } else {
          std::fprintf(stderr, "thread %u: %s\n", i, error.what());
          ++failures;
        }
      }
    });
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
  }
  gate.notify_all();
  for (std::thread& worker : workers) worker.join();
  std::fflush(stderr);
  _exit(failures != 0 ? 1 : no_device != 0 ? no_device_exit : 0);
}

TEST(FirstUse, ConcurrentFirstManagersAllSucceed) {
  constexpr int trials = 10;
  int crashed = 0, failed = 0, passed = 0, skipped = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) child(8);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) {
      ++crashed;
    } else if (WEXITSTATUS(status) == no_device_exit) {
      ++skipped;
    } else if (WEXITSTATUS(status) != 0) {
      ++failed;
    } else {
      ++passed;
    }
  }
  if (skipped == trials && !clbuf_test::device_required()) GTEST_SKIP() << "no OpenCL platform";
  EXPECT_EQ(crashed, 0) << "trials whose child died of a signal";
  EXPECT_EQ(failed, 0) << "trials where a thread's manager threw or lost data (see stderr)";
  EXPECT_EQ(passed, trials);
}

}  // namespace
