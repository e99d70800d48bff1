// SPDX-License-Identifier: MIT
// fill(): a whole buffer and an element range with one value, on every transfer path, for
// element sizes that clEnqueueFillBuffer takes (powers of two up to 128 bytes) and those it does
// not (3, 24 and 256 bytes: the fallback); bad input leaves every byte as it was.
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_test::all_sentinel;
using clbuf_test::Rgb;
using clbuf_test::same_bytes;
using clbuf_test::Sample;
using clbuf_test::sentinels;

class Fill : public clbuf_test::ModelTest {
 protected:
  /// Fills [offset, offset + count) of a buffer of `size` random elements with a random value and
  /// checks every element: the range holds the value, the rest its old bytes.
  template <class T>
  void check_range_fill(std::size_t size, std::size_t offset, std::size_t count) {
    const std::vector<T> data = random_raw<T>(size);
    const T value = random_raw<T>(1)[0];
    clbuf::DeviceBuffer<T> buffer = paths().upload(data);
    paths().fill(buffer, value, count, offset);
    std::vector<T> expected = data;
    for (std::size_t i = offset; i < offset + count; ++i) expected[i] = value;
    EXPECT_TRUE(same_bytes(expected, paths().download(buffer)))
        << "sizeof " << sizeof(T) << ", size " << size << ", range [" << offset << ", "
        << offset + count << ")";
  }
};

struct Big {
  std::uint8_t bytes[256];
};
struct Pow128 {
  std::uint64_t words[16];
};

TEST_P(Fill, WholeBufferOfFloats) {
  clbuf::DeviceBuffer<float> buffer = paths().upload(random<float>(10000));
  paths().fill(buffer, 3.25f);
  const std::vector<float> back = paths().download(buffer);
  ASSERT_EQ(back.size(), 10000u);
  for (float x : back) ASSERT_EQ(x, 3.25f);
}

TEST_P(Fill, RangesOfEveryPatternSize) {
  for (std::size_t size : {1u, 2u, 17u, 1000u, 4097u}) {
    const std::size_t offset = pick(0, size - 1);
    const std::size_t count = pick(0, size - offset);
    check_range_fill<std::uint8_t>(size, offset, count);
    check_range_fill<std::uint16_t>(size, offset, count);
    check_range_fill<double>(size, offset, count);
    check_range_fill<Pow128>(size, offset, count);  // 128 bytes: the largest fill pattern
    check_range_fill<Rgb>(size, offset, count);     // 3 bytes: the fallback
    check_range_fill<Sample>(size, offset, count);  // 24 bytes: the fallback
    check_range_fill<Big>(size, offset, count);     // 256 bytes: the fallback
  }
}

TEST_P(Fill, LargeFallbackFillDoublesOnTheDevice) {
  check_range_fill<Rgb>(1000003, 5, 1000003 - 11);  // past the 64 KiB head: several doublings
}

TEST_P(Fill, WholeAndEmptyEdges) {
  check_range_fill<std::int32_t>(64, 0, 64);
  check_range_fill<std::int32_t>(64, 63, 1);
  check_range_fill<std::int32_t>(64, 64, 0);
  clbuf::DeviceBuffer<int> empty = paths().allocate<int>(0);
  paths().fill(empty, 5);  // zero-sized work: nothing to do
  EXPECT_TRUE(paths().download(empty).empty());
}

TEST_P(Fill, RangePastTheEndIsRejectedAndChangesNothing) {
  const std::vector<std::uint32_t> data = random<std::uint32_t>(100);
  clbuf::DeviceBuffer<std::uint32_t> buffer = paths().upload(data);
  EXPECT_CLBUF_ERROR(paths().fill(buffer, 1u, 11, 90), CL_INVALID_VALUE,
                     "fill: " + clbuf_test::code_text(CL_INVALID_VALUE),
                     "write of 44 bytes at offset 360 past the end of a 400-byte buffer");
  EXPECT_CLBUF_ERROR(paths().fill(buffer, 1u, 1, SIZE_MAX), CL_INVALID_VALUE,
                     "fill: ", "past the end of a 400-byte buffer");
  EXPECT_CLBUF_ERROR(paths().fill(buffer, 1u, SIZE_MAX, 1), CL_INVALID_VALUE, "fill: ", "write of",
                     "past the end");
  EXPECT_TRUE(same_bytes(data, paths().download(buffer)));
}

TEST_P(Fill, MovedFromAndForeignBuffersAreRejected) {
  clbuf::DeviceBuffer<int> buffer = paths().upload(random<int>(8));
  clbuf::DeviceBuffer<int> moved = std::move(buffer);
  EXPECT_CLBUF_ERROR(paths().fill(buffer, 1), CL_INVALID_MEM_OBJECT, "fill: ",  // NOLINT
                     "holds no device memory");
  clbuf::BufferManager other;
  const std::vector<int> data = random<int>(8);
  clbuf::DeviceBuffer<int> foreign = other.upload(data);
  EXPECT_CLBUF_ERROR(paths().fill(foreign, 1), CL_INVALID_CONTEXT,
                     "fill: ", "another OpenCL context");
  EXPECT_TRUE(same_bytes(data, other.download(foreign)));
}

TEST_P(Fill, AfterCleanupThrows) {
  clbuf::DeviceBuffer<int> buffer = paths().allocate<int>(4);
  paths().cleanup();
  EXPECT_CLBUF_ERROR(paths().fill(buffer, 1), CL_SUCCESS, "fill: ", "cleanup()");
}

CLBUF_INSTANTIATE_MODELS(Fill);

// A value of another type than the buffer's elements (fill(ints, 1.7) would store 1) does not
// compile, in each form of fill and fill_async and with the element type named: whether a call
// compiles, asked of the compiler.
template <class Buffer, class Value, class = void>
struct CanFill : std::false_type {};
template <class Buffer, class Value>
struct CanFill<Buffer, Value,
               std::void_t<decltype(std::declval<clbuf::BufferManager&>().fill(
                   std::declval<Buffer&>(), std::declval<const Value&>()))>> : std::true_type {};
template <class Buffer, class Value, class = void>
struct CanFillRange : std::false_type {};
template <class Buffer, class Value>
struct CanFillRange<
    Buffer, Value,
    std::void_t<decltype(std::declval<clbuf::BufferManager&>().fill(
        std::declval<Buffer&>(), std::declval<const Value&>(), std::size_t{1}, std::size_t{0}))>>
    : std::true_type {};
template <class Buffer, class Value, class = void>
struct CanFillAsync : std::false_type {};
template <class Buffer, class Value>
struct CanFillAsync<Buffer, Value,
                    std::void_t<decltype(std::declval<clbuf::BufferManager&>().fill_async(
                        std::declval<Buffer&>(), std::declval<const Value&>()))>> : std::true_type {
};
template <class Buffer, class Value, class = void>
struct CanFillAsyncRange : std::false_type {};
template <class Buffer, class Value>
struct CanFillAsyncRange<Buffer, Value,
                         std::void_t<decltype(std::declval<clbuf::BufferManager&>().fill_async(
                             std::declval<Buffer&>(), std::declval<const Value&>(), std::size_t{1},
                             std::size_t{0}, std::vector<cl::Event>{}))>> : std::true_type {};
template <class Element, class Buffer, class Value, class = void>
struct CanFillNamingTheElement : std::false_type {};
template <class Element, class Buffer, class Value>
struct CanFillNamingTheElement<
    Element, Buffer, Value,
    std::void_t<decltype(std::declval<clbuf::BufferManager&>().template fill<Element>(
        std::declval<Buffer&>(), std::declval<const Value&>()))>> : std::true_type {};

template <class Element, class Value>
constexpr bool compiles() {
  using Buffer = clbuf::DeviceBuffer<Element>;
  constexpr bool all = CanFill<Buffer, Value>::value && CanFillRange<Buffer, Value>::value &&
                       CanFillAsync<Buffer, Value>::value &&
                       CanFillAsyncRange<Buffer, Value>::value &&
                       CanFillNamingTheElement<Element, Buffer, Value>::value;
  constexpr bool any = CanFill<Buffer, Value>::value || CanFillRange<Buffer, Value>::value ||
                       CanFillAsync<Buffer, Value>::value ||
                       CanFillAsyncRange<Buffer, Value>::value ||
                       CanFillNamingTheElement<Element, Buffer, Value>::value;
  static_assert(all == any, "the forms of fill disagree");
  return all;
}

TEST(FillValueType, AValueOfAnotherTypeThanTheElementsDoesNotCompile) {
  static_assert(compiles<int, int>());
  static_assert(compiles<float, float>());
  static_assert(compiles<Rgb, Rgb>());
  static_assert(!compiles<int, double>());           // fill(ints, 1.7): 1
  static_assert(!compiles<std::int8_t, int>());      // fill(int8s, 300): 44
  static_assert(!compiles<std::uint8_t, double>());  // fill(uint8s, -1.0)
  static_assert(!compiles<float, double>());
  static_assert(!compiles<float, int>());
  static_assert(!compiles<std::int64_t, std::uint64_t>());
  static_assert(!compiles<double, long double>());
  SUCCEED();
}

}  // namespace
