// SPDX-License-Identifier: MIT
// Shared by the fuzz targets: the bytes of one input read as integers (DataProvider), a value
// source biased towards the edges where size arithmetic breaks (0, 1, SIZE_MAX, powers of two,
// values next to earlier ones), and a failure report.
#ifndef CLBUF_TESTS_FUZZ_SUPPORT_HPP
#define CLBUF_TESTS_FUZZ_SUPPORT_HPP

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>

namespace clbuf_fuzz {

__extension__ typedef unsigned __int128 u128;  // __extension__: no -Wpedantic warning
constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

/// Integers read from the end of a fuzz input, as LLVM's FuzzedDataProvider reads them (its
/// ConsumeIntegralInRange): the bytes needed for the range, most significant first, reduced
/// modulo the range; `min` once the input is used up. Our own copy rather than
/// <fuzzer/FuzzedDataProvider.h>, which only clang has, so that gcc builds replay the kept corpus
/// (replay_main.cpp) exactly as the fuzzers read it.
class DataProvider {
 public:
  DataProvider(const std::uint8_t* data, std::size_t size) : data_(data), remaining_(size) {}

  /// An integer in [min, max].
  template <class T>
  T integral_in_range(T min, T max) {
    static_assert(std::is_integral<T>::value && sizeof(T) <= sizeof(std::uint64_t),
                  "integral_in_range needs an integer type of at most 64 bits");
    if (min > max) std::abort();
    const std::uint64_t range = static_cast<std::uint64_t>(max) - static_cast<std::uint64_t>(min);
    std::uint64_t result = 0;
    std::size_t offset = 0;
    while (offset < sizeof(T) * CHAR_BIT && (range >> offset) > 0 && remaining_ != 0) {
      --remaining_;
      result = (result << CHAR_BIT) | data_[remaining_];
      offset += CHAR_BIT;
    }
    if (range != std::numeric_limits<std::uint64_t>::max()) result %= range + 1;
    return static_cast<T>(static_cast<std::uint64_t>(min) + result);
  }

  /// Any value of T.
  template <class T>
  T integral() {
    return integral_in_range(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
  }

 private:
  const std::uint8_t* data_;
  std::size_t remaining_;
};

/// A size_t: raw, or an edge value, or one next to `near`.
inline std::size_t pick(DataProvider& data, std::size_t near = 0) {
  switch (data.integral_in_range<int>(0, 7)) {
    case 0:
      return data.integral_in_range<std::size_t>(0, 64);
    case 1:
      return size_max - data.integral_in_range<std::size_t>(0, 64);
    case 2:
      return std::size_t{1} << data.integral_in_range<int>(0, 63);
    case 3:
      return near + data.integral_in_range<std::size_t>(0, 2) - 1;  // near - 1 .. near + 1
    case 4:
      return near - data.integral_in_range<std::size_t>(0, 64);
    default:
      return data.integral<std::size_t>();
  }
}

[[noreturn]] inline void mismatch(const char* what, unsigned long long a, unsigned long long b,
                                  unsigned long long c) {
  std::fprintf(stderr, "MISMATCH %s (%llu, %llu, %llu)\n", what, a, b, c);
  std::abort();
}

}  // namespace clbuf_fuzz

#endif  // CLBUF_TESTS_FUZZ_SUPPORT_HPP
