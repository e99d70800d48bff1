// SPDX-License-Identifier: MIT
// Transfers: the seed's two test cases, round trips of every element type at boundary sizes,
// uploads into existing buffers and partial downloads at offsets, device-to-device copies, zero-
// sized work, and random operations checked against a host model. Every comparison is byte-exact.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "support/device_test.hpp"
#include "support/random_workload.hpp"

namespace {

using clbuf_test::all_sentinel;
using clbuf_test::DeviceTest;
using clbuf_test::Rgb;
using clbuf_test::same_bytes;
using clbuf_test::Sample;
using clbuf_test::sentinels;

// ---------------------------------------------------------------------------------------------
// The seed's test cases (seeds/000_*.txt, "Test Cases").

class Seed : public DeviceTest {};

// "Upload a numpy array of 1000 random float32 values to device, download it back, and verify
// the values match exactly"
TEST_F(Seed, UploadA1000RandomFloat32ArrayDownloadItBackAndVerifyTheValuesMatchExactly) {
  const std::vector<float> data = random<float>(1000);
  const clbuf::DeviceBuffer<float> buffer = manager().upload(data);
  const std::vector<float> back = manager().download(buffer);
  static_assert(std::is_same<decltype(manager().download(buffer)), std::vector<float>>::value,
                "download keeps the element type");
  ASSERT_EQ(back.size(), 1000u);
  EXPECT_TRUE(same_bytes(data, back));
  for (std::size_t i = 0; i < data.size(); ++i) {
    ASSERT_EQ(back[i], data[i]) << "at " << i;  // finite values compare equal too
  }
}

// "Upload two numpy arrays to device, copy the first buffer's data to the second buffer on
// device, download both, and verify they contain identical data"
TEST_F(Seed, UploadTwoArraysCopyTheFirstBufferToTheSecondOnDeviceDownloadBothAndVerifyIdentical) {
  const std::vector<float> first = random<float>(1000);
  const std::vector<float> second = random<float>(1000);
  ASSERT_FALSE(same_bytes(first, second)) << "the two arrays must start different";
  const clbuf::DeviceBuffer<float> a = manager().upload(first);
  clbuf::DeviceBuffer<float> b = manager().upload(second);
  manager().copy(a, b);
  const std::vector<float> first_back = manager().download(a);
  const std::vector<float> second_back = manager().download(b);
  EXPECT_TRUE(same_bytes(first_back, second_back));
  EXPECT_TRUE(same_bytes(first, first_back)) << "the source is unchanged";
  EXPECT_TRUE(same_bytes(first, second_back));
}

// ---------------------------------------------------------------------------------------------
// Round trips of every element type at the sizes where chunking, alignment and page logic
// could go wrong.

template <class T>
class RoundTrip : public DeviceTest {
 protected:
  /// Random bit patterns: for floating point that includes NaNs with payloads and -0.0.
  std::vector<T> data(std::size_t count) { return random_raw<T>(count); }

  static std::vector<std::size_t> sizes() {
    std::vector<std::size_t> result;
    for (std::size_t n = 1; n <= 17; ++n) result.push_back(n);
    for (std::size_t n :
         {std::size_t{1000}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097}}) {
      result.push_back(n);
    }
    const std::size_t mib = (std::size_t{1} << 20) / sizeof(T);
    for (std::size_t n : {mib - 1, mib, mib + 1}) result.push_back(n);
    return result;
  }
};

using ElementTypes = ::testing::Types<std::int8_t, std::uint8_t, std::int16_t, std::int32_t,
                                      std::uint32_t, std::int64_t, float, double, Sample, Rgb>;

/// Readable names for the typed tests (RoundTrip/float rather than RoundTrip/6).
class ElementTypeNames {
 public:
  template <class T>
  static std::string GetName(int) {  // NOLINT(readability-identifier-naming): GoogleTest's name
    if (std::is_same<T, std::int8_t>::value) return "int8";
    if (std::is_same<T, std::uint8_t>::value) return "uint8";
    if (std::is_same<T, std::int16_t>::value) return "int16";
    if (std::is_same<T, std::int32_t>::value) return "int32";
    if (std::is_same<T, std::uint32_t>::value) return "uint32";
    if (std::is_same<T, std::int64_t>::value) return "int64";
    if (std::is_same<T, float>::value) return "float";
    if (std::is_same<T, double>::value) return "double";
    if (std::is_same<T, Sample>::value) return "Sample";
    return "Rgb";
  }
};
TYPED_TEST_SUITE(RoundTrip, ElementTypes, ElementTypeNames);

TYPED_TEST(RoundTrip, FreshUploadAndDownloadAreExactAtBoundarySizes) {
  for (std::size_t n : TestFixture::sizes()) {
    const auto host = this->data(n);
    const auto buffer = this->manager().upload(host);
    ASSERT_EQ(buffer.size(), n);
    const std::vector<TypeParam> back = this->manager().download(buffer);
    ASSERT_TRUE(same_bytes(host, back)) << n << " elements";
  }
}

TYPED_TEST(RoundTrip, PointerUploadIntoAllocatedAndPointerDownloadAreExact) {
  for (std::size_t n : TestFixture::sizes()) {
    const auto host = this->data(n);
    auto buffer = this->manager().template allocate<TypeParam>(n);
    this->manager().upload(buffer, host.data(), n);
    // One sentinel element after the window shows that no more than n elements are written.
    auto out = sentinels<TypeParam>(n + 1);
    this->manager().download(buffer, out.data(), n);
    ASSERT_TRUE(same_bytes(host.data(), out.data(), n * sizeof(TypeParam))) << n << " elements";
    ASSERT_TRUE(all_sentinel(&out[n], sizeof(TypeParam))) << n << " elements";
  }
}

TYPED_TEST(RoundTrip, UploadFromPointerIsExact) {
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{4097}}) {
    const auto host = this->data(n);
    const auto buffer = this->manager().upload(host.data(), n);
    ASSERT_EQ(buffer.size(), n);
    ASSERT_EQ(buffer.shape(), std::vector<std::size_t>{n});
    ASSERT_TRUE(same_bytes(host, this->manager().download(buffer))) << n << " elements";
  }
}

TYPED_TEST(RoundTrip, WindowsAtOffsetsAreExact) {
  const std::size_t n = 1031;
  auto host = this->data(n);
  auto buffer = this->manager().upload(host);
  const std::vector<std::array<std::size_t, 2>> windows = {{0, 1},     {0, n},   {1, n - 1},
                                                           {n - 1, 1}, {517, 3}, {100, 900}};
  for (const auto& window : windows) {
    const std::size_t offset = window[0];
    const std::size_t count = window[1];
    const auto patch = this->data(count);
    this->manager().upload(buffer, patch.data(), count, offset);
    std::memcpy(static_cast<void*>(&host[offset]), patch.data(), count * sizeof(TypeParam));
    auto out = sentinels<TypeParam>(count + 2);
    this->manager().download(buffer, &out[1], count, offset);
    ASSERT_TRUE(same_bytes(patch.data(), &out[1], count * sizeof(TypeParam)))
        << "window at " << offset << " of " << count;
    ASSERT_TRUE(all_sentinel(&out[0], sizeof(TypeParam)));
    ASSERT_TRUE(all_sentinel(&out[count + 1], sizeof(TypeParam)));
    ASSERT_TRUE(same_bytes(host, this->manager().download(buffer)));
  }
}

TYPED_TEST(RoundTrip, CopyIsExact) {
  for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{4096}}) {
    const auto host = this->data(n);
    const auto src = this->manager().upload(host);
    auto dst = this->manager().upload(this->data(n));
    this->manager().copy(src, dst);
    ASSERT_TRUE(same_bytes(host, this->manager().download(dst))) << n << " elements";
    ASSERT_TRUE(same_bytes(host, this->manager().download(src))) << n << " elements";
  }
}

// ---------------------------------------------------------------------------------------------

class Transfer : public DeviceTest {};

TEST_F(Transfer, DownloadKeepsElementTypeAndCount) {
  const auto data = random<std::int16_t>(123);
  const auto buffer = manager().upload(data);
  const auto back = manager().download(buffer);
  static_assert(std::is_same<std::decay_t<decltype(back)>, std::vector<std::int16_t>>::value,
                "download returns the uploaded element type");
  EXPECT_EQ(back.size(), 123u);
  EXPECT_TRUE(same_bytes(data, back));
}

TEST_F(Transfer, SeedDataTypesRoundTripAsValues) {
  // int32, float32, float64, drawn as values (the seed's dtypes), not bit patterns.
  const auto ints = random<std::int32_t>(1000);
  const auto floats = random<float>(1000);
  const auto doubles = random<double>(1000);
  EXPECT_TRUE(same_bytes(ints, manager().download(manager().upload(ints))));
  EXPECT_TRUE(same_bytes(floats, manager().download(manager().upload(floats))));
  EXPECT_TRUE(same_bytes(doubles, manager().download(manager().upload(doubles))));
}

TEST_F(Transfer, SpecialFloatingPointValuesAreBitExact) {
  std::vector<float> floats = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::signaling_NaN()};
  const std::uint32_t payload_nan = 0x7fa5a5a5u;  // a signalling NaN with a payload
  const std::uint32_t negative_nan = 0xffc00001u;
  floats.resize(floats.size() + 2);
  std::memcpy(&floats[floats.size() - 2], &payload_nan, 4);
  std::memcpy(&floats[floats.size() - 1], &negative_nan, 4);
  EXPECT_TRUE(same_bytes(floats, manager().download(manager().upload(floats))));

  std::vector<double> doubles = {-0.0, std::numeric_limits<double>::denorm_min(),
                                 std::numeric_limits<double>::quiet_NaN(),
                                 -std::numeric_limits<double>::infinity()};
  const std::uint64_t payload = 0x7ff0000000000001ull;
  doubles.resize(doubles.size() + 1);
  std::memcpy(&doubles.back(), &payload, 8);
  auto buffer = manager().allocate<double>(doubles.size());
  manager().upload(buffer, doubles);
  EXPECT_TRUE(same_bytes(doubles, manager().download(buffer)));
}

TEST_F(Transfer, UploadWithShapeRoundTrips) {
  const auto data = random<float>(2 * 3 * 5);
  const auto buffer = manager().upload(data, {2, 3, 5});
  EXPECT_EQ(buffer.shape(), (std::vector<std::size_t>{2, 3, 5}));
  EXPECT_TRUE(same_bytes(data, manager().download(buffer)));
  const auto column = manager().upload(data, {30, 1});
  EXPECT_EQ(column.shape(), (std::vector<std::size_t>{30, 1}));
  EXPECT_TRUE(same_bytes(data, manager().download(column)));
}

TEST_F(Transfer, UploadIntoExistingBufferAtOffsetChangesOnlyThatWindow) {
  auto original = random<std::int32_t>(100);
  auto buffer = manager().upload(original);
  const auto patch = random<std::int32_t>(30);
  manager().upload(buffer, patch, 50);
  std::copy(patch.begin(), patch.end(), original.begin() + 50);
  EXPECT_TRUE(same_bytes(original, manager().download(buffer)));
  EXPECT_EQ(buffer.size(), 100u) << "an upload into a buffer never resizes it";
}

TEST_F(Transfer, UploadIntoExistingBufferFillingItExactly) {
  auto buffer = manager().allocate<double>(64);
  const auto whole = random<double>(64);
  manager().upload(buffer, whole);
  EXPECT_TRUE(same_bytes(whole, manager().download(buffer)));
  const auto tail = random<double>(4);
  manager().upload(buffer, tail.data(), tail.size(), 60);  // ends exactly at the end
  auto expected = whole;
  std::copy(tail.begin(), tail.end(), expected.begin() + 60);
  EXPECT_TRUE(same_bytes(expected, manager().download(buffer)));
}

TEST_F(Transfer, UploadIntoExistingKeepsTheShape) {
  auto buffer = manager().upload(random<float>(12), {3, 4});
  manager().upload(buffer, random<float>(12));
  EXPECT_EQ(buffer.shape(), (std::vector<std::size_t>{3, 4}));
}

TEST_F(Transfer, PartialDownloadWithOffsetReadsOnlyThatWindow) {
  const auto data = random<std::uint16_t>(500);
  const auto buffer = manager().upload(data);
  auto out = sentinels<std::uint16_t>(42);
  manager().download(buffer, &out[1], 40, 123);
  EXPECT_TRUE(same_bytes(&data[123], &out[1], 40 * sizeof(std::uint16_t)));
  EXPECT_TRUE(all_sentinel(&out[0], sizeof(std::uint16_t)));
  EXPECT_TRUE(all_sentinel(&out[41], sizeof(std::uint16_t)));
}

TEST_F(Transfer, PartialDownloadOfTheLastElement) {
  const auto data = random<double>(33);
  const auto buffer = manager().upload(data);
  double last = 0.0;
  manager().download(buffer, &last, 1, 32);
  EXPECT_TRUE(same_bytes(&data[32], &last, sizeof(double)));
}

TEST_F(Transfer, PartialDownloadDefaultOffsetIsZero) {
  const auto data = random<std::int8_t>(99);
  const auto buffer = manager().upload(data);
  std::vector<std::int8_t> out(10);
  manager().download(buffer, out.data(), out.size());
  EXPECT_TRUE(same_bytes(data.data(), out.data(), 10));
}

TEST_F(Transfer, CopyBytesWithOffsets) {
  const auto src_data = random<float>(100);
  auto dst_data = random<float>(100);
  const auto src = manager().upload(src_data);
  auto dst = manager().upload(dst_data);
  manager().copy_bytes(src, dst, 40 * sizeof(float), 10 * sizeof(float), 50 * sizeof(float));
  std::copy(src_data.begin() + 10, src_data.begin() + 50, dst_data.begin() + 50);
  EXPECT_TRUE(same_bytes(dst_data, manager().download(dst)));
  EXPECT_TRUE(same_bytes(src_data, manager().download(src)));
}

TEST_F(Transfer, CopyBytesDefaultOffsetsAreZero) {
  const auto src_data = random<std::uint32_t>(20);
  auto dst_data = random<std::uint32_t>(30);
  const auto src = manager().upload(src_data);
  auto dst = manager().upload(dst_data);
  manager().copy_bytes(src, dst, src.size_bytes());
  std::copy(src_data.begin(), src_data.end(), dst_data.begin());
  EXPECT_TRUE(same_bytes(dst_data, manager().download(dst)));
}

TEST_F(Transfer, CopyBytesBetweenElementTypesAtOddByteOffsets) {
  const auto src_data = random<float>(64);
  auto dst_data = random<std::uint8_t>(301);
  const auto src = manager().upload(src_data);
  auto dst = manager().upload(dst_data);
  manager().copy_bytes(src, dst, 101, 6, 3);
  std::memcpy(&dst_data[3], reinterpret_cast<const unsigned char*>(src_data.data()) + 6, 101);
  EXPECT_TRUE(same_bytes(dst_data, manager().download(dst)));
}

TEST_F(Transfer, CopyBytesWithinOneBufferWhenRangesDoNotOverlap) {
  auto data = random<std::uint8_t>(64);
  auto buffer = manager().upload(data);
  // Adjacent ranges: dst == src + n is no overlap.
  manager().copy_bytes(buffer, buffer, 16, 8, 24);
  std::memmove(&data[24], &data[8], 16);
  EXPECT_TRUE(same_bytes(data, manager().download(buffer)));
  // And backwards: dst + n == src.
  manager().copy_bytes(buffer, buffer, 16, 40, 24);
  std::memmove(&data[24], &data[40], 16);
  EXPECT_TRUE(same_bytes(data, manager().download(buffer)));
  // Far apart, whole halves.
  manager().copy_bytes(buffer, buffer, 32, 0, 32);
  std::memmove(&data[32], &data[0], 32);
  EXPECT_TRUE(same_bytes(data, manager().download(buffer)));
}

TEST_F(Transfer, CopyOfLargeBufferIsExact) {
  const auto data = random_raw<std::uint64_t>((std::size_t{3} << 20) / 8 + 5);  // ~3 MiB
  const auto src = manager().upload(data);
  auto dst = manager().allocate<std::uint64_t>(data.size());
  manager().copy(src, dst);
  EXPECT_TRUE(same_bytes(data, manager().download(dst)));
}

TEST_F(Transfer, LargeRoundTripsAroundStagingSizesAreExact) {
  // Around 4 MiB and past several 8 MiB chunks: where a discrete device's pinned staging starts
  // and where its pipeline wraps (defaults; the same bytes must come back on every path).
  for (std::size_t bytes : {(std::size_t{4} << 20) - 4, std::size_t{4} << 20,
                            (std::size_t{4} << 20) + 4, (std::size_t{17} << 20) + 4}) {
    const auto data = random_raw<float>(bytes / sizeof(float));
    auto buffer = manager().upload(data);
    ASSERT_TRUE(same_bytes(data, manager().download(buffer))) << bytes << " bytes";
    const auto again = random_raw<float>(data.size());
    manager().upload(buffer, again);
    std::vector<float> out(again.size());
    manager().download(buffer, out.data(), out.size());
    ASSERT_TRUE(same_bytes(again, out)) << bytes << " bytes, into existing";
  }
}

TEST_F(Transfer, UploadFromMisalignedHostPointers) {
  const auto bytes = random<std::uint8_t>(4096 + 8);
  for (std::size_t shift = 1; shift < 8; ++shift) {
    for (std::size_t n : {std::size_t{7}, std::size_t{4095}, std::size_t{4096}}) {
      const auto buffer = manager().upload(bytes.data() + shift, n);
      std::vector<std::uint8_t> out(n + 8);
      manager().download(buffer, out.data() + (8 - shift), n);
      ASSERT_TRUE(same_bytes(bytes.data() + shift, out.data() + (8 - shift), n))
          << "shift " << shift << ", " << n << " bytes";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Zero-sized work is valid and does nothing.

TEST_F(Transfer, EmptyVectorUploadsAndDownloadsAsEmpty) {
  const auto buffer = manager().upload(std::vector<double>{});
  EXPECT_TRUE(buffer.valid());
  EXPECT_TRUE(buffer.empty());
  EXPECT_TRUE(manager().download(buffer).empty());
}

TEST_F(Transfer, AllocateZeroDownloadsAsEmpty) {
  const auto buffer = manager().allocate<Sample>(0);
  EXPECT_TRUE(buffer.valid());
  EXPECT_TRUE(manager().download(buffer).empty());
}

TEST_F(Transfer, NullPointerWithZeroCountIsEmptyWork) {
  const float* nothing = nullptr;
  const auto buffer = manager().upload(nothing, 0);
  EXPECT_TRUE(buffer.valid());
  EXPECT_TRUE(buffer.empty());
  auto target = manager().upload(random<float>(4));
  manager().upload(target, nothing, 0);
  float* nowhere = nullptr;
  manager().download(target, nowhere, 0);
  manager().download(buffer, nowhere, 0);
}

TEST_F(Transfer, ZeroCountAtTheEndChangesNothing) {
  const auto data = random<std::int32_t>(10);
  auto buffer = manager().upload(data);
  const std::vector<std::int32_t> none;
  manager().upload(buffer, none, 10);  // offset == size, count 0
  auto out = sentinels<std::int32_t>(1);
  manager().download(buffer, out.data(), 0, 10);
  EXPECT_TRUE(all_sentinel(out));
  EXPECT_TRUE(same_bytes(data, manager().download(buffer)));
}

TEST_F(Transfer, EmptyShapedUpload) {
  const auto buffer = manager().upload(std::vector<float>{}, {0, 3});
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.shape(), (std::vector<std::size_t>{0, 3}));
  EXPECT_TRUE(manager().download(buffer).empty());
}

TEST_F(Transfer, CopyOfEmptyBuffersDoesNothing) {
  const auto a = manager().allocate<int>(0);
  auto b = manager().upload(std::vector<int>{});
  manager().copy(a, b);
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(b.valid());
  manager().copy_bytes(a, b, 0);
}

TEST_F(Transfer, CopyBytesOfZeroBytesDoesNothing) {
  const auto src_data = random<std::uint8_t>(32);
  const auto dst_data = random<std::uint8_t>(32);
  const auto src = manager().upload(src_data);
  auto dst = manager().upload(dst_data);
  manager().copy_bytes(src, dst, 0);
  manager().copy_bytes(src, dst, 0, 32, 32);  // at the very ends
  manager().copy_bytes(src, dst, 0, 5, 17);
  auto& same = dst;
  manager().copy_bytes(same, dst, 0, 4, 4);  // one buffer, empty ranges: no overlap
  EXPECT_TRUE(same_bytes(dst_data, manager().download(dst)));
  EXPECT_TRUE(same_bytes(src_data, manager().download(src)));
}

TEST_F(Transfer, FinishWithNothingQueuedReturns) {
  manager().finish();
  manager().finish();
}

// ---------------------------------------------------------------------------------------------
// Stress against a host model.

// The random workloads of tests/support/random_workload.hpp, shared with the stress suite (which
// runs them on every MemoryModel with larger buffers), here on the default manager.
TEST_F(Transfer, RandomWindowsMatchAHostShadow) {
  clbuf_test::RandomWindows workload;
  workload.elements = 4099;
  workload.iterations = 1000;
  EXPECT_TRUE(workload.run(manager(), seed_));
}

TEST_F(Transfer, RandomOperationsOnEightBuffersMatchAModel) {
  clbuf_test::RandomOperations workload;
  workload.buffers = 8;
  workload.operations = 500;
  workload.max_bytes = 3000;
  EXPECT_TRUE(workload.run(manager(), seed_));
}

TEST_F(Transfer, TwentyThousandTinyBuffers) {
  std::vector<std::int32_t> values = random<std::int32_t>(20000);
  std::vector<clbuf::DeviceBuffer<std::int32_t>> buffers;
  buffers.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    buffers.push_back(manager().upload(&values[i], 1));
  for (std::size_t i = 0; i < values.size(); i += 97) {
    std::int32_t out = 0;
    manager().download(buffers[i], &out, 1);
    ASSERT_EQ(out, values[i]) << "buffer " << i;
  }
  std::int32_t last = 0;
  manager().download(buffers.back(), &last, 1);
  EXPECT_EQ(last, values.back());
}

}  // namespace
