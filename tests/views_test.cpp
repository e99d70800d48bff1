// SPDX-License-Identifier: MIT
// view(): views at any element offset, usable everywhere a buffer is, on every transfer path;
// no OpenCL sub-buffer behind clbuf's own commands (the overlapping-views layout that crashes
// NVIDIA's driver, in variants); native() of a view; overlap checks by root buffer and absolute
// offset; and the parent's memory kept out of the pool while any view of it is alive.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_test::code_text;
using clbuf_test::same_bytes;

class Views : public clbuf_test::ModelTest {
 protected:
  void SetUp() override {
    clbuf_test::ModelTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    align_ = cl_device().getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() / 8;
  }
  /// Staged transfers from 64 KiB on the discrete path, in 16 KiB chunks: views of a few
  /// hundred KiB take the pipeline there.
  void configure(clbuf::Options& options) override {
    options.staging_threshold_bytes = 64 << 10;
    options.staging_chunk_bytes = 16 << 10;
  }
  /// Elements of T per alignment step.
  template <class T>
  std::size_t step() const {
    return align_ / sizeof(T);
  }

  /// A view of `count` elements at element `offset` of a root of offset + count + 7 elements,
  /// and the host's copy of the root (`shadow`), which every step below changes as it changes
  /// the view. After each step the whole root must equal the shadow: the view's bytes are right
  /// and no byte outside it was touched.
  template <class T>
  void every_operation(std::size_t offset, std::size_t count) {
    SCOPED_TRACE("view of " + std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
                 " bytes at element " + std::to_string(offset));
    clbuf::BufferManager& m = paths();
    std::vector<T> shadow = random<T>(offset + count + 7);
    clbuf::DeviceBuffer<T> root = m.upload(shadow);
    clbuf::DeviceBuffer<T> v = m.view(root, offset, count);
    ASSERT_EQ(v.root_offset_bytes(), offset * sizeof(T));
    ASSERT_EQ(v.native_offset_bytes(), offset * sizeof(T));
    ASSERT_EQ(v.native_root()(), root.native()()) << "a view is its root plus an offset";
    T* const mine = shadow.data() + offset;
    const auto slice = [&](std::size_t first, std::size_t n) {
      return std::vector<T>(mine + first, mine + first + n);
    };
    const auto root_is_shadow = [&](const char* step) {
      ASSERT_TRUE(same_bytes(shadow, m.download(root))) << "after " << step;
    };

    // Reads.
    ASSERT_TRUE(same_bytes(slice(0, count), m.download(v)));
    std::vector<T> part(count - 2);
    m.download(v, part.data(), count - 2, 1);
    ASSERT_TRUE(same_bytes(slice(1, count - 2), part));
    clbuf::PinnedBuffer<T> pinned = m.allocate_pinned<T>(count - 1);
    m.download(v, pinned, 1);
    ASSERT_TRUE(same_bytes(mine + 1, pinned.data(), (count - 1) * sizeof(T)));

    // Writes.
    std::vector<T> fresh = random<T>(count);
    m.upload(v, fresh);
    std::copy(fresh.begin(), fresh.end(), mine);
    root_is_shadow("upload");
    fresh = random<T>(count - 3);
    m.upload(v, fresh.data(), fresh.size(), 2);
    std::copy(fresh.begin(), fresh.end(), mine + 2);
    root_is_shadow("upload at an offset");
    std::memcpy(static_cast<void*>(pinned.data()), random<T>(count - 1).data(),
                (count - 1) * sizeof(T));
    m.upload(v, pinned, 1);
    std::copy(pinned.begin(), pinned.end(), mine + 1);
    root_is_shadow("upload from pinned memory");
    const T value = random<T>(1)[0];
    m.fill(v, value);
    std::fill(mine, mine + count, value);
    root_is_shadow("fill");
    const T other_value = random<T>(1)[0];
    m.fill(v, other_value, count / 2, 1);
    std::fill(mine + 1, mine + 1 + count / 2, other_value);
    root_is_shadow("fill of a range");

    // Device copies: out of the view, into it, and within it.
    clbuf::DeviceBuffer<T> elsewhere = m.allocate<T>(count);
    m.copy(v, elsewhere);
    ASSERT_TRUE(same_bytes(slice(0, count), m.download(elsewhere)));
    fresh = random<T>(count);
    m.upload(elsewhere, fresh);
    m.copy(elsewhere, v);
    std::copy(fresh.begin(), fresh.end(), mine);
    root_is_shadow("copy into the view");
    const std::size_t half = count / 2;
    m.copy_bytes(v, v, half * sizeof(T), 0, (count - half) * sizeof(T));
    std::memmove(static_cast<void*>(mine + count - half), mine, half * sizeof(T));
    root_is_shadow("copy_bytes within the view");

    // Rectangles: the view as rows of `width` elements.
    const std::size_t width = 5;
    const std::size_t rows = count / width;
    clbuf::Region box;
    box.size = {3, rows - 1};
    box.src_extents = {4, rows};
    box.src_origin = {1, 1};
    box.dst_extents = {width, rows};
    box.dst_origin = {2, 0};
    const std::vector<T> host_box = random<T>(4 * rows);
    m.upload_rect(v, host_box, box);
    for (std::size_t y = 0; y < box.size.y; ++y) {
      for (std::size_t x = 0; x < box.size.x; ++x) {
        mine[y * width + 2 + x] = host_box[(1 + y) * 4 + 1 + x];
      }
    }
    root_is_shadow("upload_rect");
    std::vector<T> got = clbuf_test::sentinels<T>(4 * rows);
    std::vector<T> want = got;
    clbuf::Region back{box.size, box.dst_origin, box.dst_extents, box.src_origin, box.src_extents};
    m.download_rect(v, got, back);
    for (std::size_t y = 0; y < box.size.y; ++y) {
      for (std::size_t x = 0; x < box.size.x; ++x) {
        want[(1 + y) * 4 + 1 + x] = mine[y * width + 2 + x];
      }
    }
    ASSERT_TRUE(same_bytes(want, got)) << "download_rect";
    clbuf::Region within;  // columns 0-1 of the first rows to columns 3-4 of the last rows
    within.size = {2, rows / 2};
    within.src_extents = within.dst_extents = {width, rows};
    within.dst_origin = {3, rows - rows / 2};
    m.copy_rect(v, v, within);
    for (std::size_t y = 0; y < within.size.y; ++y) {
      for (std::size_t x = 0; x < 2; ++x) {
        mine[(within.dst_origin.y + y) * width + 3 + x] = mine[y * width + x];
      }
    }
    root_is_shadow("copy_rect within the view");

    // Mapping, in every mode.
    {
      clbuf::MappedView<T> mapped = m.map(v, clbuf::MapMode::read);
      ASSERT_TRUE(same_bytes(mine, mapped.data(), count * sizeof(T))) << "map(read)";
    }
    {
      fresh = random<T>(count - 4);
      clbuf::MappedView<T> mapped = m.map(v, clbuf::MapMode::write, 4, count - 4);
      std::copy(fresh.begin(), fresh.end(), mapped.begin());
      std::copy(fresh.begin(), fresh.end(), mine + 4);
    }
    root_is_shadow("map(write)");
    {
      clbuf::MappedView<T> mapped = m.map(v, clbuf::MapMode::read_write);
      std::reverse(mapped.begin(), mapped.end());
      std::reverse(mine, mine + count);
    }
    root_is_shadow("map(read_write)");

    // Asynchronous forms.
    fresh = random<T>(count);
    m.upload_async(v, fresh).wait();
    std::copy(fresh.begin(), fresh.end(), mine);
    root_is_shadow("upload_async");
    ASSERT_TRUE(same_bytes(slice(0, count), m.download_async(v).get())) << "download_async";
    std::vector<T> tail(count - 5);
    m.download_async(v, tail.data(), tail.size(), 5).wait();
    ASSERT_TRUE(same_bytes(slice(5, count - 5), tail)) << "download_async of a range";
    m.fill_async(v, value, count - 1, 1).wait();
    std::fill(mine + 1, mine + count, value);
    root_is_shadow("fill_async");
    m.copy_bytes_async(v, v, half * sizeof(T), (count - half) * sizeof(T), 0).wait();
    std::memmove(static_cast<void*>(mine), mine + count - half, half * sizeof(T));
    root_is_shadow("copy_bytes_async");
    m.upload_rect_async(v, host_box, box).wait();
    for (std::size_t y = 0; y < box.size.y; ++y) {
      for (std::size_t x = 0; x < box.size.x; ++x) {
        mine[y * width + 2 + x] = host_box[(1 + y) * 4 + 1 + x];
      }
    }
    root_is_shadow("upload_rect_async");
    std::vector<T> got_async = clbuf_test::sentinels<T>(4 * rows);
    m.download_rect_async(v, got_async, back).wait();
    ASSERT_TRUE(same_bytes(want, got_async)) << "download_rect_async";

    // Between managers of two contexts, both ways, blocking and started.
    clbuf::Options options = paths().options();
    clbuf::BufferManager other(std::string(), options);
    fresh = random<T>(count);
    clbuf::DeviceBuffer<T> theirs = other.upload(fresh);
    m.copy_from(other, theirs, v);
    std::copy(fresh.begin(), fresh.end(), mine);
    root_is_shadow("copy_from into the view");
    clbuf::DeviceBuffer<T> back_there = other.allocate<T>(count);
    other.copy_from(m, v, back_there);
    ASSERT_TRUE(same_bytes(slice(0, count), other.download(back_there))) << "copy_from the view";
    fresh = random<T>(count);
    other.upload(theirs, fresh);
    m.copy_from_async(other, theirs, v).wait();
    std::copy(fresh.begin(), fresh.end(), mine);
    root_is_shadow("copy_from_async into the view");
    other.copy_from_async(m, v, back_there).wait();
    ASSERT_TRUE(same_bytes(slice(0, count), other.download(back_there)))
        << "copy_from_async of the view";
  }

  std::size_t align_ = 1;
};

// Views at offsets no sub-buffer could have (1, 3 elements), at 32 elements (128 bytes of float:
// a sub-buffer on PoCL, CL_MISALIGNED_SUB_BUFFER_OFFSET on NVIDIA) and at 1000, of float, double
// and char; small ones take the queue path, large ones the staged pipeline on the discrete path.
TEST_P(Views, ViewsAtAnyElementOffsetTakeEveryOperation) {
  for (std::size_t offset : {std::size_t{1}, std::size_t{3}, std::size_t{32}, std::size_t{1000}}) {
    for (std::size_t count : {std::size_t{47}, std::size_t{40000}}) {
      every_operation<float>(offset, count);
      if (HasFatalFailure()) return;
      every_operation<double>(offset, count);
      if (HasFatalFailure()) return;
      every_operation<char>(offset, count);
      if (HasFatalFailure()) return;
    }
  }
}

// The layout that crashed NVIDIA's driver (580, H200) in clReleaseMemObject while views were
// sub-buffers: five views of one 32 MiB buffer overlap each other (large ones staged), each is
// read and written while all are alive, then they are destroyed. `order` says when the parent
// goes: 0 after the views, 1 before them, 2 with them (one vector, parent in the middle).
class OverlappingViews : public Views {
 protected:
  static constexpr std::size_t mib = std::size_t{1} << 20;
  static constexpr std::size_t offsets[5] = {0, 4096, 12288, 27 * mib, 28672};
  static constexpr std::size_t sizes[5] = {8 * mib, 8 * mib, 16 * mib + 4096, 5 * mib, mib};

  void configure(clbuf::Options&) override {}  // the default staging threshold, as users run

  /// Reads view `i` against the shadow, then writes it with fresh bytes.
  void read_and_write(clbuf::DeviceBuffer<std::uint8_t>& view, std::size_t i,
                      std::vector<std::uint8_t>& shadow) {
    const std::vector<std::uint8_t> read = paths().download(view);
    ASSERT_TRUE(same_bytes(shadow.data() + offsets[i], read.data(), sizes[i])) << "view " << i;
    const std::vector<std::uint8_t> fresh = random<std::uint8_t>(sizes[i]);
    paths().upload(view, fresh);
    std::copy(fresh.begin(), fresh.end(), shadow.begin() + static_cast<std::ptrdiff_t>(offsets[i]));
  }
};
constexpr std::size_t OverlappingViews::offsets[5];
constexpr std::size_t OverlappingViews::sizes[5];

TEST_P(OverlappingViews, UsedTogetherThenDestroyedAfterBeforeOrWithTheirParent) {
  for (int order = 0; order < 3; ++order) {
    SCOPED_TRACE("order " + std::to_string(order));
    std::vector<std::uint8_t> shadow = random<std::uint8_t>(32 * mib);
    std::vector<clbuf::DeviceBuffer<std::uint8_t>> all;
    all.push_back(paths().upload(shadow));
    for (std::size_t i = 0; i < 5; ++i) all.push_back(paths().view(all[0], offsets[i], sizes[i]));
    for (std::size_t i = 0; i < 5; ++i) {
      read_and_write(all[i + 1], i, shadow);
      if (HasFatalFailure()) return;
    }
    // Every view sees what the others wrote.
    for (std::size_t i = 0; i < 5; ++i) {
      ASSERT_TRUE(
          same_bytes(shadow.data() + offsets[i], paths().download(all[i + 1]).data(), sizes[i]))
          << "view " << i << " after all writes";
    }
    clbuf::DeviceBuffer<std::uint8_t> parent = std::move(all[0]);
    if (order == 1) parent = clbuf::DeviceBuffer<std::uint8_t>();
    if (order == 2) std::swap(all[0], parent);
    std::vector<std::uint8_t> survivor;
    if (order == 1) survivor = paths().download(all[3]);
    all.clear();
    paths().finish();
    if (order == 0) {
      EXPECT_TRUE(same_bytes(shadow, paths().download(parent)));
    }
    if (order == 1) {
      EXPECT_TRUE(same_bytes(shadow.data() + offsets[2], survivor.data(), sizes[2]));
    }
  }
}

// Views of views and of the views' parents, every operation that reaches the device (fill, copy,
// map, rect) on the overlapping ones, then all destroyed in a scrambled order.
TEST_P(OverlappingViews, ViewsOfViewsUsedByEveryOperationThenDestroyedInAnyOrder) {
  std::vector<std::uint8_t> shadow = random<std::uint8_t>(32 * mib);
  auto parent = std::make_unique<clbuf::DeviceBuffer<std::uint8_t>>(paths().upload(shadow));
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> views;
  for (std::size_t i = 0; i < 5; ++i) views.push_back(paths().view(*parent, offsets[i], sizes[i]));
  // A view of view 2 that overlaps views 0, 1 and 2, and one of view 3 at an odd offset.
  views.push_back(paths().view(views[2], 3, 2 * mib));
  views.push_back(paths().view(views[3], 1001, mib + 3));
  const std::size_t at[7] = {offsets[0], offsets[1],     offsets[2],       offsets[3],
                             offsets[4], offsets[2] + 3, offsets[3] + 1001};
  const std::size_t n[7] = {sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], 2 * mib, mib + 3};
  for (std::size_t i = 0; i < 7; ++i) {
    const std::uint8_t value = static_cast<std::uint8_t>(i * 37 + 11);
    paths().fill(views[i], value, n[i] / 3, n[i] / 5);
    std::fill_n(shadow.begin() + static_cast<std::ptrdiff_t>(at[i] + n[i] / 5), n[i] / 3, value);
    {
      clbuf::MappedView<std::uint8_t> mapped =
          paths().map(views[i], clbuf::MapMode::read_write, 100, 1000);
      ASSERT_TRUE(same_bytes(shadow.data() + at[i] + 100, mapped.data(), 1000)) << "view " << i;
      for (std::uint8_t& b : mapped) b = static_cast<std::uint8_t>(b ^ 0x5a);
    }
    for (std::size_t k = 0; k < 1000; ++k) shadow[at[i] + 100 + k] ^= 0x5a;
    clbuf::Region r;
    r.size = {64, 3};
    r.src_extents = r.dst_extents = {256, 8};
    r.dst_origin = {128, 4};
    paths().copy_rect(views[i], views[i], r);
    for (std::size_t y = 0; y < 3; ++y) {
      std::memmove(shadow.data() + at[i] + (4 + y) * 256 + 128, shadow.data() + at[i] + y * 256,
                   64);
    }
    ASSERT_TRUE(same_bytes(shadow, paths().download(*parent))) << "after view " << i;
  }
  // Destroy: view 3, the parent, views 5 and 0, then the rest in reverse.
  views[3] = clbuf::DeviceBuffer<std::uint8_t>();
  parent.reset();
  views[5] = clbuf::DeviceBuffer<std::uint8_t>();
  views[0] = clbuf::DeviceBuffer<std::uint8_t>();
  ASSERT_TRUE(same_bytes(shadow.data() + at[6], paths().download(views[6]).data(), n[6]));
  while (!views.empty()) views.pop_back();
  paths().finish();
}

// Overlapping views read from several threads at once, then each thread writes through a view of
// its view and destroys both while the others still work, the parent dropped midway; a witness
// view of the whole root checks every byte at the end.
TEST_P(OverlappingViews, ThreadsUseAndDestroyOverlappingViews) {
  std::vector<std::uint8_t> shadow = random<std::uint8_t>(32 * mib);
  auto parent = std::make_unique<clbuf::DeviceBuffer<std::uint8_t>>(paths().upload(shadow));
  clbuf::DeviceBuffer<std::uint8_t> witness = paths().view(*parent, 0, 32 * mib);
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> views;
  for (std::size_t i = 0; i < 5; ++i) views.push_back(paths().view(*parent, offsets[i], sizes[i]));
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  const auto in_threads = [&](auto&& work) {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < 5; ++i) {
      threads.emplace_back([&, i] {
        try {
          work(i);
        } catch (const clbuf::Error&) {
          ++errors;
        }
      });
    }
    for (std::thread& t : threads) t.join();
  };
  in_threads([&](std::size_t i) {
    const std::vector<std::uint8_t> read = paths().download(views[i]);
    if (std::memcmp(read.data(), shadow.data() + offsets[i], sizes[i]) != 0) ++wrong;
  });
  in_threads([&](std::size_t i) {  // [offset + 7, offset + 4100): disjoint between threads
    clbuf::DeviceBuffer<std::uint8_t> own = paths().view(views[i], 7, 4093);
    paths().fill(own, static_cast<std::uint8_t>(i + 1));
    own = clbuf::DeviceBuffer<std::uint8_t>();
    views[i] = clbuf::DeviceBuffer<std::uint8_t>();
    if (i == 2) parent.reset();  // parent is only touched by thread 2 in this phase
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  for (std::size_t i = 0; i < 5; ++i) {
    std::fill_n(shadow.begin() + static_cast<std::ptrdiff_t>(offsets[i] + 7), 4093,
                static_cast<std::uint8_t>(i + 1));
  }
  EXPECT_TRUE(same_bytes(shadow, paths().download(witness)));
}

CLBUF_INSTANTIATE_MODELS(OverlappingViews);

TEST_P(Views, AViewOfAViewIsAViewOfTheRoot) {
  const std::vector<std::uint32_t> data = random<std::uint32_t>(600);
  clbuf::DeviceBuffer<std::uint32_t> parent = paths().upload(data);
  clbuf::DeviceBuffer<std::uint32_t> outer = paths().view(parent, 101, 400);
  clbuf::DeviceBuffer<std::uint32_t> inner = paths().view(outer, 3, 200);
  EXPECT_TRUE(inner.is_view());
  EXPECT_EQ(inner.root_offset_bytes(), 104 * sizeof(std::uint32_t));
  EXPECT_EQ(inner.native_root()(), parent.native()());
  EXPECT_TRUE(same_bytes(std::vector<std::uint32_t>(data.data() + 104, data.data() + 304),
                         paths().download(inner)));
}

// native() of a view is a sub-buffer of exactly its bytes, made once, where the device allows
// one; elsewhere a clear error that names the alignment and what to use instead.
TEST_P(Views, NativeOfAnAlignedViewIsASubBufferOfItsBytes) {
  const std::size_t s = step<float>();
  const std::vector<float> data = random<float>(4 * s);
  clbuf::DeviceBuffer<float> parent = paths().upload(data);
  clbuf::DeviceBuffer<float> part = paths().view(parent, s, 2 * s);
  const cl::Buffer& handle = part.native();
  ASSERT_NE(handle(), nullptr);
  EXPECT_EQ(handle.getInfo<CL_MEM_SIZE>(), 2 * s * sizeof(float));
  EXPECT_EQ(handle.getInfo<CL_MEM_OFFSET>(), s * sizeof(float));
  EXPECT_EQ(handle.getInfo<CL_MEM_ASSOCIATED_MEMOBJECT>()(), parent.native()());
  EXPECT_EQ(part.native()(), handle()) << "made once";
  std::vector<float> back(2 * s);
  ASSERT_EQ(
      paths().queue().enqueueReadBuffer(handle, CL_TRUE, 0, 2 * s * sizeof(float), back.data()),
      CL_SUCCESS);
  EXPECT_TRUE(same_bytes(data.data() + s, back.data(), 2 * s * sizeof(float)));
}

// A view of an adopted sub-buffer: OpenCL has no sub-buffer of a sub-buffer, so native() is a
// sub-buffer of the parent at the view's place in it, with the adopted sub-buffer's flags;
// release() hands it over.
TEST_P(Views, NativeOfAViewOfAnAdoptedSubBufferIsASubBufferOfTheParent) {
  const std::size_t s = step<float>();
  const std::vector<float> data = random<float>(4 * s);
  cl::Buffer parent(paths().context(), CL_MEM_READ_WRITE, 5 * s * sizeof(float));
  const cl_buffer_region region{s * sizeof(float), 4 * s * sizeof(float)};
  cl::Buffer sub = parent.createSubBuffer(CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region);
  clbuf::DeviceBuffer<float> adopted = paths().adopt<float>(sub, 4 * s);
  paths().upload(adopted, data);
  for (const std::size_t at : {std::size_t{0}, s}) {
    clbuf::DeviceBuffer<float> part = paths().view(adopted, at, 2 * s);
    const cl::Buffer& handle = part.native();
    ASSERT_NE(handle(), nullptr);
    EXPECT_EQ(handle.getInfo<CL_MEM_ASSOCIATED_MEMOBJECT>()(), parent());
    EXPECT_EQ(handle.getInfo<CL_MEM_OFFSET>(), (s + at) * sizeof(float));
    EXPECT_EQ(handle.getInfo<CL_MEM_SIZE>(), 2 * s * sizeof(float));
    std::vector<float> back(2 * s);
    ASSERT_EQ(
        paths().queue().enqueueReadBuffer(handle, CL_TRUE, 0, 2 * s * sizeof(float), back.data()),
        CL_SUCCESS);
    EXPECT_TRUE(same_bytes(data.data() + at, back.data(), 2 * s * sizeof(float))) << at;
    const cl::Buffer released = part.release();
    EXPECT_EQ(released.getInfo<CL_MEM_ASSOCIATED_MEMOBJECT>()(), parent());
    EXPECT_FALSE(part.valid());
  }
  EXPECT_TRUE(same_bytes(data, paths().download(adopted)));
}

TEST_P(Views, NativeOfAMisalignedViewIsAClearErrorAndChangesNothing) {
  if (align_ <= sizeof(float)) GTEST_SKIP() << "every float offset is aligned on this device";
  const std::vector<float> data = random<float>(4 * step<float>());
  clbuf::DeviceBuffer<float> parent = paths().upload(data);
  clbuf::DeviceBuffer<float> part = paths().view(parent, 1, 10);
  const std::string align = std::to_string(align_);
  EXPECT_CLBUF_ERROR(part.native(), CL_MISALIGNED_SUB_BUFFER_OFFSET,
                     "native: " + code_text(CL_MISALIGNED_SUB_BUFFER_OFFSET),
                     "the view starts 4 bytes into its buffer",
                     "CL_DEVICE_MEM_BASE_ADDR_ALIGN of " + align + " bytes",
                     "native_root() and native_offset_bytes()");
  EXPECT_CLBUF_ERROR(static_cast<void>(part.release()), CL_MISALIGNED_SUB_BUFFER_OFFSET,
                     "native: ");
  ASSERT_TRUE(part.valid()) << "a failed release() changes nothing";
  EXPECT_TRUE(
      same_bytes(std::vector<float>(data.data() + 1, data.data() + 11), paths().download(part)));
  // What the message suggests: the root and the offset reach the same bytes.
  std::vector<float> back(10);
  ASSERT_EQ(
      paths().queue().enqueueReadBuffer(part.native_root(), CL_TRUE, part.native_offset_bytes(),
                                        10 * sizeof(float), back.data()),
      CL_SUCCESS);
  EXPECT_TRUE(same_bytes(data.data() + 1, back.data(), 10 * sizeof(float)));
}

TEST_P(Views, RangesOutsideTheParentAreRejected) {
  const std::size_t s = step<int>();
  clbuf::DeviceBuffer<int> parent = paths().upload(random<int>(2 * s));
  EXPECT_CLBUF_ERROR(paths().view(parent, s, s + 1), CL_INVALID_VALUE,
                     "view: " + code_text(CL_INVALID_VALUE), "view of ",
                     "past the end of a " + std::to_string(2 * s * sizeof(int)) + "-byte buffer");
  EXPECT_CLBUF_ERROR(paths().view(parent, SIZE_MAX, 1), CL_INVALID_VALUE, "view: ", "past the end");
  clbuf::DeviceBuffer<int> empty = paths().view(parent, 2 * s, 0);
  EXPECT_TRUE(empty.empty());
  clbuf::DeviceBuffer<int> gone = std::move(parent);
  EXPECT_CLBUF_ERROR(paths().view(parent, 0, 1), CL_INVALID_MEM_OBJECT, "view: ");  // NOLINT
}

TEST_P(Views, OverlapIsCheckedAgainstTheRoot) {
  const std::size_t s = step<std::uint8_t>();
  const std::vector<std::uint8_t> data = random<std::uint8_t>(4 * s);
  clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(data);
  clbuf::DeviceBuffer<std::uint8_t> a = paths().view(parent, 0, 2 * s);
  clbuf::DeviceBuffer<std::uint8_t> b = paths().view(parent, s, 2 * s);
  // a's [s, 2s) is b's [0, s): the same bytes of the root.
  EXPECT_CLBUF_ERROR(paths().copy_bytes(a, b, s, s, 0), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: " + code_text(CL_MEM_COPY_OVERLAP),
                     "ranges [" + std::to_string(s) + ", " + std::to_string(2 * s) + ") and [" +
                         std::to_string(s) + ", " + std::to_string(2 * s) + ")");
  EXPECT_CLBUF_ERROR(paths().copy_bytes(parent, b, 1, 2 * s - 1, s - 1), CL_MEM_COPY_OVERLAP,
                     "copy_bytes: ");  // last byte of one range is the first of the other
  clbuf::DeviceBuffer<std::uint8_t> c = paths().view(parent, 2 * s, 2 * s);
  EXPECT_CLBUF_ERROR(paths().copy(a, b), CL_MEM_COPY_OVERLAP, "copy: ");
  clbuf::Region r;
  r.size = {s, 1};
  r.src_extents = r.dst_extents = {2 * s, 1};
  r.src_origin = {s / 2};  // the parent's [s/2, 3s/2) against b's [s, 2s) of the root
  EXPECT_CLBUF_ERROR(paths().copy_rect(parent, b, r), CL_MEM_COPY_OVERLAP, "copy_rect: ");
  EXPECT_TRUE(same_bytes(data, paths().download(parent)));
  // Adjacent views do not overlap: a = [0, 2s), c = [2s, 4s).
  paths().copy_bytes(a, c, 2 * s);
  std::vector<std::uint8_t> expected = data;
  std::memcpy(expected.data() + 2 * s, data.data(), 2 * s);
  EXPECT_TRUE(same_bytes(expected, paths().download(parent)));
}

// Rectangular copies between a view and its root buffer: addressed by absolute offsets, also when
// a view's offset is not a whole number of rows of the region's array.
TEST_P(Views, RectCopiesBetweenAViewAndItsRoot) {
  const std::size_t s = step<std::uint8_t>();
  const std::vector<std::uint8_t> data = random<std::uint8_t>(8 * s);
  clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(data);
  clbuf::DeviceBuffer<std::uint8_t> part = paths().view(parent, s, 4 * s);
  const std::size_t pitch = 3 * s / 4;  // rows that do not line up with the view's offset
  clbuf::Region r;
  r.size = {s / 3, 3};
  r.src_origin = {pitch - s / 3};  // the last columns of each row
  r.src_extents = {pitch, 4};
  r.dst_origin = {0, 6};
  r.dst_extents = {pitch, 10};
  ASSERT_LE(10 * pitch, 8 * s);
  paths().copy_rect(part, parent, r);
  std::vector<std::uint8_t> expected = data;
  for (std::size_t y = 0; y < r.size.y; ++y) {
    for (std::size_t x = 0; x < r.size.x; ++x) {
      expected[(6 + y) * pitch + x] = data[s + y * pitch + r.src_origin.x + x];
    }
  }
  EXPECT_TRUE(same_bytes(expected, paths().download(parent)));
  paths().copy_rect(parent, part,
                    clbuf::Region{{s / 3, 2}, {0, 6}, {pitch, 10}, {1, 2}, {pitch, 4}});
  for (std::size_t y = 0; y < 2; ++y) {
    for (std::size_t x = 0; x < s / 3; ++x) {
      expected[s + (2 + y) * pitch + 1 + x] = expected[(6 + y) * pitch + x];
    }
  }
  EXPECT_TRUE(same_bytes(expected, paths().download(parent)));
}

// The DANGER case: the parent is destroyed while a view is alive. Its memory must not go back to
// the pool, or the next allocation of that size would share bytes with the view.
TEST_P(Views, ParentMemoryIsNotReusedWhileAViewIsAlive) {
  const std::size_t s = step<std::uint8_t>();
  const std::vector<std::uint8_t> data = random<std::uint8_t>(4 * s);
  clbuf::DeviceBuffer<std::uint8_t> part;
  cl_mem parent_handle = nullptr;
  {
    clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(data);
    parent_handle = parent.native()();
    part = paths().view(parent, s, s);
  }
  const clbuf::PoolStats before = paths().stats().pool;
  std::vector<clbuf::DeviceBuffer<std::uint8_t>> later;
  for (int i = 0; i < 4; ++i) {
    later.push_back(paths().upload(random<std::uint8_t>(4 * s)));
    EXPECT_NE(later.back().native()(), parent_handle);
  }
  EXPECT_EQ(paths().stats().pool.hits, before.hits) << "the parent's memory was reused";
  EXPECT_TRUE(same_bytes(std::vector<std::uint8_t>(data.data() + s, data.data() + 2 * s),
                         paths().download(part)));
  later.clear();
  part = clbuf::DeviceBuffer<std::uint8_t>();  // the last user: now the memory is pooled
  EXPECT_GT(paths().stats().pool.cached_buffers, before.cached_buffers);
}

TEST_P(Views, ReleasingAViewKeepsTheRootOutOfThePoolForever) {
  const std::size_t s = step<std::uint8_t>();
  std::vector<std::uint8_t> data = random<std::uint8_t>(2 * s);
  cl::Buffer mine;
  {
    clbuf::DeviceBuffer<std::uint8_t> parent = paths().upload(data);
    clbuf::DeviceBuffer<std::uint8_t> part = paths().view(parent, s, s);
    mine = part.release();
  }
  const std::size_t cached = paths().stats().pool.cached_buffers;
  clbuf::DeviceBuffer<std::uint8_t> next = paths().upload(random<std::uint8_t>(2 * s));
  EXPECT_EQ(paths().stats().pool.cached_buffers, cached);
  std::vector<std::uint8_t> back(s);
  paths().queue().enqueueReadBuffer(mine, CL_TRUE, 0, s, back.data());
  EXPECT_TRUE(same_bytes(data.data() + s, back.data(), s));
}

CLBUF_INSTANTIATE_MODELS(Views);

// copy_from between managers of two memory models (two contexts), every pair, from a view at an
// odd byte offset of one root into a view at another odd offset of another root, blocking and
// started, at sizes inside one pinned chunk and across several: the bytes exact, every byte
// around both views unchanged, and the path the copy took counted (a memcpy between two host
// blocks, one command where one side is a host block, else relayed through pinned chunks).
using ModelPair = std::pair<MemoryModel, MemoryModel>;

class ViewsAcrossModels : public clbuf_test::DeviceTest,
                          public ::testing::WithParamInterface<ModelPair> {
 protected:
  static constexpr std::size_t chunk = 4096;  // the relayed copy's pinned chunks

  void SetUp() override {
    clbuf_test::DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const bool host =
        GetParam().first == MemoryModel::host || GetParam().second == MemoryModel::host;
    if (host && manager().device().type != clbuf::DeviceType::cpu) {
      GTEST_SKIP() << "the host path needs a CPU device";
    }
    from_ = make(GetParam().first);
    to_ = make(GetParam().second);
  }

  static std::unique_ptr<clbuf::BufferManager> make(MemoryModel model) {
    clbuf::Options options;
    options.memory = model;
    options.staging_chunk_bytes = chunk;
    return std::make_unique<clbuf::BufferManager>(std::string(), options);
  }

  /// The path of PathStats a copy between the two models takes.
  std::string copy_path() const {
    const int host_sides = (GetParam().first == MemoryModel::host ? 1 : 0) +
                           (GetParam().second == MemoryModel::host ? 1 : 0);
    return host_sides == 2 ? "host_copy" : host_sides == 1 ? "direct" : "relayed";
  }

  std::unique_ptr<clbuf::BufferManager> from_;
  std::unique_ptr<clbuf::BufferManager> to_;
};

TEST_P(ViewsAcrossModels, CopyFromAViewAtAnOffsetIntoAViewAtAnOffsetIsExact) {
  clbuf::BufferManager& a = *from_;
  clbuf::BufferManager& b = *to_;
  ASSERT_NE(a.context()(), b.context()());
  constexpr std::size_t src_at = 13;  // no alignment at all
  constexpr std::size_t dst_at = 7;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{1000}, chunk, 6 * chunk + 5}) {
    for (bool started : {false, true}) {
      SCOPED_TRACE(std::to_string(bytes) + (started ? " bytes, copy_from_async" : " bytes"));
      const std::vector<std::uint8_t> src_shadow = random<std::uint8_t>(src_at + bytes + 8);
      auto src_root = a.upload(src_shadow);
      const auto src = a.view(src_root, src_at, bytes);
      std::vector<std::uint8_t> dst_shadow = random<std::uint8_t>(dst_at + bytes + 5);
      auto dst_root = b.upload(dst_shadow);
      auto dst = b.view(dst_root, dst_at, bytes);
      b.reset_stats();
      if (started) {
        b.copy_from_async(a, src, dst).wait();
      } else {
        b.copy_from(a, src, dst);
      }
      EXPECT_EQ(clbuf_test::path_taken(b.stats().copy), copy_path());
      std::memcpy(dst_shadow.data() + dst_at, src_shadow.data() + src_at, bytes);
      EXPECT_TRUE(same_bytes(dst_shadow, b.download(dst_root))) << "the view and around it";
      EXPECT_TRUE(same_bytes(src_shadow, a.download(src_root))) << "the source is unchanged";
    }
  }
}

std::string pair_name(const ::testing::TestParamInfo<ModelPair>& info) {
  const auto name = [](MemoryModel model) {
    return model == MemoryModel::host      ? "Host"
           : model == MemoryModel::unified ? "Unified"
                                           : "Discrete";
  };
  return std::string(name(info.param.first)) + "To" + name(info.param.second);
}

INSTANTIATE_TEST_SUITE_P(Pairs, ViewsAcrossModels,
                         ::testing::Values(ModelPair{MemoryModel::discrete, MemoryModel::host},
                                           ModelPair{MemoryModel::host, MemoryModel::discrete},
                                           ModelPair{MemoryModel::discrete, MemoryModel::discrete},
                                           ModelPair{MemoryModel::discrete, MemoryModel::unified},
                                           ModelPair{MemoryModel::unified, MemoryModel::discrete},
                                           ModelPair{MemoryModel::unified, MemoryModel::host},
                                           ModelPair{MemoryModel::host, MemoryModel::unified},
                                           ModelPair{MemoryModel::unified, MemoryModel::unified},
                                           ModelPair{MemoryModel::host, MemoryModel::host}),
                         pair_name);

}  // namespace
