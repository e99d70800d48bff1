// Shared by the libFuzzer targets: a value source biased towards the edges where size arithmetic
// breaks (0, 1, SIZE_MAX, powers of two, values next to earlier ones), and a failure report.
#ifndef CLBUF_TESTS_FUZZ_SUPPORT_HPP
#define CLBUF_TESTS_FUZZ_SUPPORT_HPP

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace clbuf_fuzz {

using u128 = unsigned __int128;
constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

/// A size_t: raw, or an edge value, or one next to `near`.
inline std::size_t pick(FuzzedDataProvider& data, std::size_t near = 0) {
  switch (data.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return data.ConsumeIntegralInRange<std::size_t>(0, 64);
    case 1:
      return size_max - data.ConsumeIntegralInRange<std::size_t>(0, 64);
    case 2:
      return std::size_t{1} << data.ConsumeIntegralInRange<int>(0, 63);
    case 3:
      return near + data.ConsumeIntegralInRange<std::size_t>(0, 2) - 1;  // near - 1 .. near + 1
    case 4:
      return near - data.ConsumeIntegralInRange<std::size_t>(0, 64);
    default:
      return data.ConsumeIntegral<std::size_t>();
  }
}

[[noreturn]] inline void mismatch(const char* what, unsigned long long a, unsigned long long b,
                                  unsigned long long c) {
  std::fprintf(stderr, "MISMATCH %s (%llu, %llu, %llu)\n", what, a, b, c);
  std::abort();
}

}  // namespace clbuf_fuzz

#endif  // CLBUF_TESTS_FUZZ_SUPPORT_HPP
