// SPDX-License-Identifier: MIT
// The heap sweeps' shared parts (tests/fault/heap_fault_test.cpp, tests/mpi/mpi_heap_test.cpp):
// a C++ heap (tests/support/heap_hook.hpp) that, while armed, counts clbuf's allocations and
// fails the one numbered fail_at; CLBUF_CL, which marks every OpenCL call clbuf makes as the
// driver's, so that the driver's own allocations (PoCL's, made holding its locks) are neither
// counted nor failed; and the verdict on one armed run. Include it in one translation unit of a
// test binary, after <CL/opencl.hpp> and before any other clbuf header (it defines CLBUF_CL); a
// test may specialise heap_fault::Driver for a call it wants to watch, before that include.
#ifndef CLBUF_TESTS_FAILING_HEAP_HPP
#define CLBUF_TESTS_FAILING_HEAP_HPP

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "heap_hook.hpp"

namespace heap_fault {

/// Inside an OpenCL call on this thread (its allocations are the driver's).
inline thread_local int in_driver = 0;

/// An OpenCL call F, made with in_driver set.
template <auto F>
struct Driver;
template <class R, class... A, R (*F)(A...)>
struct Driver<F> {
  static R call(A... args) {
    ++in_driver;
    const R result = F(args...);
    --in_driver;
    return result;
  }
};

}  // namespace heap_fault

#define CLBUF_CL(fn) ::heap_fault::Driver<&::fn>::call
#include <clbuf/error.hpp>  // uses no OpenCL call: a test's Driver specialisations may follow

namespace heap_fault {

inline std::atomic<bool> armed{false};
inline std::atomic<long> count{0};    // allocations counted while armed
inline std::atomic<long> fail_at{0};  // the one that fails (0: none)
inline std::atomic<long> fired{0};    // allocations failed

/// A new trial: nothing counted yet, allocation `n` to fail (0: none). Leaves the heap disarmed.
inline void reset(long n) {
  armed = false;
  count = 0;
  fired = 0;
  fail_at = n;
}

/// A sweep's workload as named steps, and how far a trial got through them.
struct Steps {
  std::vector<const char*> names;
  std::size_t done = 0;  // steps completed

  const char* step_name() const { return done < names.size() ? names[done] : "(completed)"; }
  std::size_t step(const char* name) const {
    return static_cast<std::size_t>(
        std::find_if(names.begin(), names.end(),
                     [&](const char* n) { return std::strcmp(n, name) == 0; }) -
        names.begin());
  }
  bool completed(const char* name) const { return done > step(name); }
};

/// Runs `workload` (which arms the heap, or runs armed) and disarms the heap. Returns "" when it
/// completed, or when it threw a clbuf::Error with CL_OUT_OF_HOST_MEMORY after an allocation
/// failed (counted in `errors`); else what went wrong.
template <class F>
std::string outcome_of(F&& workload, long& errors) {
  std::string outcome;
  try {
    workload();
  } catch (const clbuf::Error& error) {
    armed = false;
    ++errors;
    if (error.code() != CL_OUT_OF_HOST_MEMORY || fired.load() == 0) {
      outcome = "clbuf::Error with code " + std::to_string(error.code()) + " after " +
                std::to_string(fired.load()) +
                " failed allocations (expected CL_OUT_OF_HOST_MEMORY after one): " + error.what();
    }
  } catch (const std::bad_alloc&) {
    armed = false;
    outcome = "std::bad_alloc escaped";
  } catch (const std::exception& error) {
    armed = false;
    outcome = std::string("a non-clbuf exception escaped: ") + error.what();
  }
  armed = false;
  return outcome;
}

}  // namespace heap_fault

void* clbuf_test_heap_new(std::size_t size) noexcept {
  if (heap_fault::armed.load(std::memory_order_relaxed) && heap_fault::in_driver == 0) {
    const long n = heap_fault::count.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n == heap_fault::fail_at.load(std::memory_order_relaxed)) {
      heap_fault::fired.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
  }
  return std::malloc(size == 0 ? 1 : size);
}

#endif  // CLBUF_TESTS_FAILING_HEAP_HPP
