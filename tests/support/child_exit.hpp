// SPDX-License-Identifier: MIT
// The end of a forked child process that a test runs without exec: its line counts written
// first in a coverage build (CLBUF_COVERAGE=ON defines CLBUF_TEST_COVERAGE: gcc's __gcov_dump;
// the counters are otherwise written by exit(), which _exit() skips, and a forked child starts
// with its counters zeroed, so what a child ran would go uncounted), then _exit(status). The
// file-size limit a child may have set is lifted first: the counters' files outgrow it.
#ifndef CLBUF_TESTS_CHILD_EXIT_HPP
#define CLBUF_TESTS_CHILD_EXIT_HPP

#include <sys/resource.h>
#include <unistd.h>

#if defined(CLBUF_TEST_COVERAGE)
extern "C" void __gcov_dump(void);  // libgcov's, linked by --coverage
#endif

namespace clbuf_test {

/// Ends a forked child with `status`, its line counts written (see above).
[[noreturn]] inline void exit_child(int status) {
#if defined(CLBUF_TEST_COVERAGE)
  struct rlimit unlimited {};
  unlimited.rlim_cur = unlimited.rlim_max = RLIM_INFINITY;
  ::setrlimit(RLIMIT_FSIZE, &unlimited);  // up to the hard limit, which the tests leave alone
  __gcov_dump();
#endif
  ::_exit(status);
}

}  // namespace clbuf_test

#endif  // CLBUF_TESTS_CHILD_EXIT_HPP
