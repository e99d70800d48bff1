// SPDX-License-Identifier: MIT
// Rectangular 2D/3D regions: upload_rect, download_rect and copy_rect against a host model on
// every transfer path; bounds checks (overflow-safe) and overlap checks within one buffer, each
// with its code and message and no data changed; the exact overlap test against brute force.
#include <cstdint>
#include <set>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::Extents;
using clbuf::MemoryModel;
using clbuf::Offset;
using clbuf::Region;
using clbuf_test::all_sentinel;
using clbuf_test::code_text;
using clbuf_test::Rgb;
using clbuf_test::same_bytes;
using clbuf_test::sentinels;

std::size_t volume(const Extents& e) { return e.x * e.y * e.z; }

/// The host model: copies the box of `r` from `src` (src_extents) to `dst` (dst_extents).
template <class T>
void model_copy(const std::vector<T>& src, std::vector<T>& dst, const Region& r) {
  for (std::size_t z = 0; z < r.size.z; ++z) {
    for (std::size_t y = 0; y < r.size.y; ++y) {
      for (std::size_t x = 0; x < r.size.x; ++x) {
        const std::size_t s =
            ((r.src_origin.z + z) * r.src_extents.y + r.src_origin.y + y) * r.src_extents.x +
            r.src_origin.x + x;
        const std::size_t d =
            ((r.dst_origin.z + z) * r.dst_extents.y + r.dst_origin.y + y) * r.dst_extents.x +
            r.dst_origin.x + x;
        dst[d] = src[s];
      }
    }
  }
}

class Rect : public clbuf_test::ModelTest {
 protected:
  Extents random_extents(std::size_t max_x, std::size_t max_y, std::size_t max_z) {
    return {pick(1, max_x), pick(1, max_y), pick(1, max_z)};
  }

  /// A random region that fits both arrays.
  Region random_region(const Extents& src, const Extents& dst) {
    Region r;
    r.src_extents = src;
    r.dst_extents = dst;
    r.size = {pick(1, std::min(src.x, dst.x)), pick(1, std::min(src.y, dst.y)),
              pick(1, std::min(src.z, dst.z))};
    r.src_origin = {pick(0, src.x - r.size.x), pick(0, src.y - r.size.y),
                    pick(0, src.z - r.size.z)};
    r.dst_origin = {pick(0, dst.x - r.size.x), pick(0, dst.y - r.size.y),
                    pick(0, dst.z - r.size.z)};
    return r;
  }
};

TEST_P(Rect, Upload2DTileIntoAnImage) {
  // A 3x2 tile of a 5x4 host array, into a 7x6 image at (2, 3); the rest of the image unchanged.
  const std::vector<float> host = random<float>(5 * 4);
  const std::vector<float> image = random<float>(7 * 6);
  clbuf::DeviceBuffer<float> buffer = paths().upload(image);
  Region r;
  r.size = {3, 2};
  r.src_origin = {1, 1};
  r.src_extents = {5, 4};
  r.dst_origin = {2, 3};
  r.dst_extents = {7, 6};
  paths().upload_rect(buffer, host, r);
  std::vector<float> expected = image;
  model_copy(host, expected, r);
  EXPECT_TRUE(same_bytes(expected, paths().download(buffer)));
}

TEST_P(Rect, RandomRoundTripsIn3D) {
  for (int round = 0; round < 25; ++round) {
    const Extents host_extents = random_extents(9, 7, 5);
    const Extents device_extents = random_extents(9, 7, 5);
    const std::vector<Rgb> host = random_raw<Rgb>(volume(host_extents));
    const std::vector<Rgb> device = random_raw<Rgb>(volume(device_extents) + pick(0, 3));
    clbuf::DeviceBuffer<Rgb> buffer = paths().upload(device);

    const Region up = random_region(host_extents, device_extents);
    paths().upload_rect(buffer, host, up);
    std::vector<Rgb> expected = device;
    model_copy(host, expected, up);
    ASSERT_TRUE(same_bytes(expected, paths().download(buffer))) << "upload round " << round;

    const Region down = random_region(device_extents, host_extents);
    std::vector<Rgb> out = sentinels<Rgb>(volume(host_extents));
    std::vector<Rgb> expected_out = out;
    model_copy(expected, expected_out, down);
    paths().download_rect(buffer, out, down);
    ASSERT_TRUE(same_bytes(expected_out, out)) << "download round " << round;
  }
}

TEST_P(Rect, CopyBetweenBuffersAndWithinOne) {
  for (int round = 0; round < 25; ++round) {
    const Extents a_extents = random_extents(8, 6, 4);
    const Extents b_extents = random_extents(8, 6, 4);
    const std::vector<std::uint16_t> a_data = random<std::uint16_t>(volume(a_extents));
    const std::vector<std::uint16_t> b_data = random<std::uint16_t>(volume(b_extents));
    const clbuf::DeviceBuffer<std::uint16_t> a = paths().upload(a_data);
    clbuf::DeviceBuffer<std::uint16_t> b = paths().upload(b_data);
    const Region r = random_region(a_extents, b_extents);
    paths().copy_rect(a, b, r);
    std::vector<std::uint16_t> expected = b_data;
    model_copy(a_data, expected, r);
    ASSERT_TRUE(same_bytes(expected, paths().download(b))) << "round " << round;
    ASSERT_TRUE(same_bytes(a_data, paths().download(a)));
  }
  // Within one buffer: the left and right halves of each row of a 10x4 array never share a byte.
  const std::vector<int> data = random<int>(40);
  clbuf::DeviceBuffer<int> one = paths().upload(data);
  Region halves;
  halves.size = {5, 4};
  halves.src_extents = halves.dst_extents = {10, 4};
  halves.dst_origin = {5, 0};
  paths().copy_rect(one, one, halves);
  std::vector<int> expected = data;
  model_copy(data, expected, halves);
  EXPECT_TRUE(same_bytes(expected, paths().download(one)));
}

TEST_P(Rect, OverlappingRegionsOfOneBufferAreRejected) {
  const std::vector<int> data = random<int>(40);
  clbuf::DeviceBuffer<int> one = paths().upload(data);
  Region r;
  r.size = {5, 4};
  r.src_extents = r.dst_extents = {10, 4};
  r.dst_origin = {4, 0};  // columns 4..8 against 0..4: column 4 shared
  EXPECT_CLBUF_ERROR(paths().copy_rect(one, one, r), CL_MEM_COPY_OVERLAP,
                     "copy_rect: " + code_text(CL_MEM_COPY_OVERLAP),
                     "source region at byte 0 and destination region at byte 16", "share bytes",
                     "row pitches 40 and 40");
  r.size = {5, 2};
  r.dst_origin = {2, 1};  // row 1 shared, columns 2..4
  EXPECT_CLBUF_ERROR(paths().copy_rect(one, one, r), CL_MEM_COPY_OVERLAP, "copy_rect: ");
  // Different extents on the two sides: spans compared, rows 0..1 of a 20-wide view overlap.
  Region wide;
  wide.size = {2, 2};
  wide.src_extents = {10, 4};
  wide.dst_extents = {20, 2};
  wide.dst_origin = {3, 0};
  EXPECT_CLBUF_ERROR(paths().copy_rect(one, one, wide), CL_MEM_COPY_OVERLAP,
                     "copy_rect: ", "row pitches 40 and 80");
  EXPECT_TRUE(same_bytes(data, paths().download(one)));
}

TEST_P(Rect, RegionsOutsideTheirArraysAreRejected) {
  const std::vector<float> data = random<float>(12);
  clbuf::DeviceBuffer<float> buffer = paths().upload(data);
  const std::vector<float> host = random<float>(12);
  std::vector<float> out = sentinels<float>(12);
  Region r;
  r.size = {2, 2};
  r.src_extents = r.dst_extents = {4, 3};
  r.dst_origin = {3, 0};  // x: 3 + 2 > 4
  EXPECT_CLBUF_ERROR(paths().upload_rect(buffer, host, r), CL_INVALID_VALUE,
                     "upload_rect: " + code_text(CL_INVALID_VALUE),
                     "destination: region of 2x2x1 at (3, 0, 0) leaves an array of 4x3x1 elements "
                     "along x");
  r.dst_origin = {0, 2};  // y: 2 + 2 > 3
  EXPECT_CLBUF_ERROR(paths().upload_rect(buffer, host, r), CL_INVALID_VALUE, "along y");
  r.dst_origin = {0, 0, SIZE_MAX};  // z at SIZE_MAX: no wrap-around
  EXPECT_CLBUF_ERROR(paths().upload_rect(buffer, host, r), CL_INVALID_VALUE, "along z");
  r.dst_origin = {};
  r.dst_extents = {4, 4};  // 16 elements in a 12-element buffer
  EXPECT_CLBUF_ERROR(paths().upload_rect(buffer, host, r), CL_INVALID_VALUE,
                     "destination: array of 4x4x1 elements (16) is larger than the 12 elements");
  r.dst_extents = {SIZE_MAX / 2, 4};  // the array's byte size overflows
  r.size = {1, 1};
  EXPECT_CLBUF_ERROR(paths().upload_rect(buffer, host, r), CL_INVALID_VALUE, "overflows size_t");
  r = Region{};
  r.size = {2, 2};
  r.src_extents = {4, 4};  // the host array claims 16 elements, the vector has 12
  r.dst_extents = {4, 3};
  EXPECT_CLBUF_ERROR(paths().upload_rect(buffer, host, r), CL_INVALID_VALUE,
                     "host: array of 4x4x1 elements (16) is larger than the 12 elements");
  EXPECT_CLBUF_ERROR(paths().upload_rect(buffer, static_cast<const float*>(nullptr), 3, r),
                     CL_INVALID_VALUE, "upload_rect: ", "null host pointer with a count of 3");
  r.src_extents = {4, 3};
  r.dst_extents = {4, 4};
  EXPECT_CLBUF_ERROR(paths().download_rect(buffer, out, r), CL_INVALID_VALUE,
                     "download_rect: ", "host: array of 4x4x1");
  clbuf::DeviceBuffer<float> small = paths().upload(random<float>(4));
  EXPECT_CLBUF_ERROR(paths().copy_rect(buffer, small, r), CL_INVALID_VALUE, "copy_rect: ",
                     "destination: array of 4x4x1 elements (16) is larger than the 4");
  EXPECT_TRUE(same_bytes(data, paths().download(buffer)));
  EXPECT_TRUE(all_sentinel(out));
}

TEST_P(Rect, EmptyRegionsDoNothing) {
  const std::vector<int> data = random<int>(6);
  clbuf::DeviceBuffer<int> buffer = paths().upload(data);
  Region r;
  r.size = {0, 3};
  r.src_extents = r.dst_extents = {2, 3};
  paths().upload_rect(buffer, static_cast<const int*>(nullptr), 0,
                      Region{{0, 1, 1}, {}, {0}, {}, {2, 3}});
  paths().copy_rect(buffer, buffer, r);  // nothing moves, so nothing overlaps
  EXPECT_TRUE(same_bytes(data, paths().download(buffer)));
}

CLBUF_INSTANTIATE_MODELS(Rect);

// The exact overlap test of equal pitches against enumerating every byte of both regions.
TEST(RectOverlap, MatchesBruteForce) {
  std::mt19937 rng(clbuf_test::fresh_seed());
  auto pick = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 20000; ++round) {
    const Extents e{pick(1, 6), pick(1, 5), pick(1, 4)};
    const Extents size{pick(1, e.x), pick(1, e.y), pick(1, e.z)};
    const Offset a{pick(0, e.x - size.x), pick(0, e.y - size.y), pick(0, e.z - size.z)};
    const Offset b{pick(0, e.x - size.x), pick(0, e.y - size.y), pick(0, e.z - size.z)};
    const std::size_t base_a = pick(0, 3), base_b = pick(0, 3);  // views at element offsets
    auto cells = [&](const Offset& o, std::size_t base) {
      std::set<std::size_t> s;
      for (std::size_t z = 0; z < size.z; ++z)
        for (std::size_t y = 0; y < size.y; ++y)
          for (std::size_t x = 0; x < size.x; ++x)
            s.insert(base + ((o.z + z) * e.y + o.y + y) * e.x + o.x + x);
      return s;
    };
    const std::set<std::size_t> sa = cells(a, base_a), sb = cells(b, base_b);
    bool brute = false;
    for (std::size_t c : sa) brute = brute || sb.count(c) != 0;
    const std::size_t start_a = base_a + (a.z * e.y + a.y) * e.x + a.x;
    const std::size_t start_b = base_b + (b.z * e.y + b.y) * e.x + b.x;
    ASSERT_EQ(
        clbuf::detail::rect_rows_overlap(start_a, start_b, size.x, size.y, size.z, e.x, e.x * e.y),
        brute)
        << "extents " << e.x << "x" << e.y << "x" << e.z << " size " << size.x << "x" << size.y
        << "x" << size.z << " starts " << start_a << " " << start_b;
  }
}

TEST(RectOverlap, HugeOffsetsDoNotWrap) {
  const std::size_t big = SIZE_MAX - 100;
  EXPECT_FALSE(clbuf::detail::rect_rows_overlap(0, big, 4, 2, 2, 8, 16));
  EXPECT_TRUE(clbuf::detail::rect_rows_overlap(big, big + 3, 4, 1, 1, 8, 16));
}

}  // namespace
