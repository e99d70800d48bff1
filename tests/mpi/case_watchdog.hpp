// SPDX-License-Identifier: MIT
// A per-case watchdog for the MPI tests (issue 45): a hang names itself instead of running into
// CTest's time-out unnamed. Each rank arms it at the start of every test case; a case that runs
// past the limit prints the case, the rank and how long it ran, and aborts the rank (mpiexec then
// ends the others). The limit is generous (a case takes up to about 50 s on a 2-core machine at
// load 13, docs/testing.md "The MPI tests' time"), so it trips on a hang, not on a busy machine;
// CTest's TIMEOUT stays behind it as the last resort.
#ifndef CLBUF_TESTS_MPI_CASE_WATCHDOG_HPP
#define CLBUF_TESTS_MPI_CASE_WATCHDOG_HPP

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

namespace case_watchdog {

/// The longest a test case may run before it counts as hung.
constexpr std::chrono::seconds kCaseLimit{300};

/// Aborts the process when one test case runs longer than `limit`, naming it and the rank.
class CaseWatchdog : public ::testing::EmptyTestEventListener {
 public:
  CaseWatchdog(int rank, std::chrono::seconds limit)
      : rank_(rank), limit_(limit), thread_([this] { watch(); }) {}
  CaseWatchdog(const CaseWatchdog&) = delete;
  CaseWatchdog& operator=(const CaseWatchdog&) = delete;
  ~CaseWatchdog() override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  void OnTestStart(const ::testing::TestInfo& info) override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ++started_;
      name_ = std::string(info.test_suite_name()) + "." + info.name();
      armed_ = true;
    }
    wake_.notify_one();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      armed_ = false;
    }
    wake_.notify_one();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (!armed_) {
        wake_.wait(lock, [this] { return stop_ || armed_; });
        continue;
      }
      const long seen = started_;
      const auto start = std::chrono::steady_clock::now();
      if (!wake_.wait_for(lock, limit_, [&] { return stop_ || !armed_ || started_ != seen; })) {
        const auto ran = std::chrono::duration_cast<std::chrono::seconds>(
            std::chrono::steady_clock::now() - start);
        std::cerr << "[ watchdog ] rank " << rank_ << ": " << name_ << " has run for "
                  << ran.count() << " s (limit " << limit_.count()
                  << " s): it hangs; aborting this rank" << std::endl;
        std::abort();
      }
    }
  }

  int rank_;
  std::chrono::seconds limit_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool armed_ = false;
  long started_ = 0;
  std::string name_;
  std::thread thread_;  // last: starts once the members it reads are made
};

/// Adds a CaseWatchdog for `rank` to GoogleTest's listeners (which own it): kCaseLimit, or
/// CLBUF_TEST_CASE_LIMIT seconds where that is a positive number (the test that proves the
/// watchdog names a hang sets 2).
inline void install(int rank) {
  std::chrono::seconds limit = kCaseLimit;
  if (const char* text = std::getenv("CLBUF_TEST_CASE_LIMIT")) {
    const long seconds = std::strtol(text, nullptr, 10);
    if (seconds > 0) limit = std::chrono::seconds(seconds);
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(new CaseWatchdog(rank, limit));
}

}  // namespace case_watchdog

#endif  // CLBUF_TESTS_MPI_CASE_WATCHDOG_HPP
