// SPDX-License-Identifier: MIT
// Issue 43: stream_tiles() runs an application's kernels over a host array tile by tile. Every
// size around a tile's edge, several element types, 1 to 3 tiles in flight, in place and out of
// place, on the host and the discrete paths, each against a host reference; a function that
// throws or returns a failed event at tile k (the error names tile k; tiles before k are in the
// output, no byte of a later one), a cancelled stream, the plan's choices and bounds, the trace's
// spans and memory_report().
#include <clbuf/clbuf.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/device_test.hpp"
#include "support/json.hpp"

namespace {

using clbuf_test::DeviceTest;

constexpr std::size_t kInFlight[] = {1, 2, 3};

// out[i] = (U)in[i] + (U)(first + i): every element depends on its place in the whole array.
const char* const kSource = R"CLC(
__kernel void shift(__global const IN* in, __global OUT* out, ulong first, ulong count) {
  size_t i = get_global_id(0);
  if (i < count) out[i] = (OUT)in[i] + (OUT)(first + i);
}
__kernel void shift_in_place(__global IN* data, ulong first, ulong count) {
  size_t i = get_global_id(0);
  if (i < count) data[i] = (IN)(data[i] + (IN)(first + i));
}
)CLC";

template <class T>
const char* cl_name();
template <>
const char* cl_name<float>() {
  return "float";
}
template <>
const char* cl_name<double>() {
  return "double";
}
template <>
const char* cl_name<std::int32_t>() {
  return "int";
}
template <>
const char* cl_name<std::uint8_t>() {
  return "uchar";
}
template <>
const char* cl_name<std::uint16_t>() {
  return "ushort";
}
template <>
const char* cl_name<std::int64_t>() {
  return "long";
}

template <class T, class U>
U reference_of(T in, std::size_t at) {
  return static_cast<U>(static_cast<U>(in) + static_cast<U>(at));
}

/// The kernels for IN = T, OUT = U, built once per test.
template <class T, class U>
cl::Program build(clbuf::BufferManager& manager) {
  cl::Program program(manager.context(), kSource);
  const std::string defines = std::string("-DIN=") + cl_name<T>() + " -DOUT=" + cl_name<U>();
  try {
    program.build(defines.c_str());
  } catch (...) {
    ADD_FAILURE() << "build failed: "
                  << program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(
                         manager.context().getInfo<CL_CONTEXT_DEVICES>().at(0));
    throw;
  }
  return program;
}

/// Values small enough that no type overflows when the index is added.
template <class T>
std::vector<T> small_values(std::mt19937& rng, std::size_t count) {
  std::uniform_int_distribution<int> dist(0, 100);
  std::vector<T> values(count);
  for (T& v : values) v = static_cast<T>(dist(rng));
  return values;
}

/// A function for stream_tiles: the `shift` kernel over the tile (or shift_in_place).
template <class T, class U>
struct Shift {
  explicit Shift(cl::Kernel k, bool place = false) : kernel(std::move(k)), in_place(place) {}

  cl::Kernel kernel;
  bool in_place = false;
  std::vector<std::size_t> seen;  // tiles the function was called for, in order

  cl::Event operator()(const clbuf::Tile<T, U>& tile) {
    seen.push_back(tile.index);
    EXPECT_EQ(tile.device, 0u);  // one manager: device 0, that manager's context
    EXPECT_EQ(tile.manager.context()(), kernel.getInfo<CL_KERNEL_CONTEXT>()());
    cl_uint arg = 0;
    kernel.setArg(arg++, tile.in.native());
    if (!in_place) kernel.setArg(arg++, tile.out.native());
    kernel.setArg(arg++, static_cast<cl_ulong>(tile.first));
    kernel.setArg(arg++, static_cast<cl_ulong>(tile.count));
    cl::Event done;
    EXPECT_EQ(tile.queue.enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(tile.count),
                                              cl::NullRange, &tile.after, &done),
              CL_SUCCESS);
    return done;
  }
};

class TileStream : public DeviceTest, public ::testing::WithParamInterface<clbuf::MemoryModel> {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    clbuf::Options options;
    options.memory = GetParam();
    if (GetParam() == clbuf::MemoryModel::host &&
        manager().device().type != clbuf::DeviceType::cpu) {
      GTEST_SKIP() << "the host path needs a CPU device";
    }
    stream_manager_ = std::make_unique<clbuf::BufferManager>(std::string(), options);
  }

  clbuf::BufferManager& bm() { return *stream_manager_; }

  /// Streams `count` random elements of T through `shift` out of place (U) and checks every
  /// element against the host reference.
  template <class T, class U>
  void out_of_place(std::size_t count, std::size_t tile, std::size_t in_flight) {
    SCOPED_TRACE("count " + std::to_string(count) + ", tile " + std::to_string(tile) +
                 ", in flight " + std::to_string(in_flight));
    const std::vector<T> in = small_values<T>(rng_, count);
    std::vector<U> out(count, static_cast<U>(77));
    Shift<T, U> fn{cl::Kernel(build<T, U>(bm()), "shift")};
    clbuf::TileStreamOptions options;
    options.tile_elements = tile;
    options.in_flight = in_flight;
    const clbuf::TileReport report =
        clbuf::stream_tiles(bm(), in.data(), out.data(), count, fn, options);
    const std::size_t tiles = (count + tile - 1) / tile;
    EXPECT_EQ(report.plan.tiles, tiles);
    EXPECT_EQ(report.tiles_done, tiles);
    EXPECT_FALSE(report.cancelled);
    EXPECT_EQ(report.plan.in_flight, std::max<std::size_t>(1, std::min(in_flight, tiles)));
    EXPECT_EQ(fn.seen.size(), tiles);
    EXPECT_EQ(report.device_tiles, std::vector<std::size_t>{tiles});
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[i], (reference_of<T, U>(in[i], i))) << "element " << i;
    }
  }

  template <class T>
  void in_place(std::size_t count, std::size_t tile, std::size_t in_flight) {
    SCOPED_TRACE("in place: count " + std::to_string(count) + ", tile " + std::to_string(tile));
    std::vector<T> data = small_values<T>(rng_, count);
    const std::vector<T> before = data;
    Shift<T, T> fn{cl::Kernel(build<T, T>(bm()), "shift_in_place"), true};
    clbuf::TileStreamOptions options;
    options.tile_elements = tile;
    options.in_flight = in_flight;
    const clbuf::TileReport report = clbuf::stream_tiles(bm(), data.data(), count, fn, options);
    EXPECT_EQ(report.tiles_done, (count + tile - 1) / tile);
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(data[i], (reference_of<T, T>(before[i], i))) << "element " << i;
    }
  }

  std::unique_ptr<clbuf::BufferManager> stream_manager_;
};

TEST_P(TileStream, EverySizeAroundATileMatchesTheHostReference) {
  const std::size_t tile = 64;
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, tile - 1, tile, tile + 1, std::size_t{1001}}) {
    for (std::size_t in_flight : kInFlight) out_of_place<float, float>(count, tile, in_flight);
  }
}

TEST_P(TileStream, InPlaceMatchesTheHostReference) {
  const std::size_t tile = 50;
  for (std::size_t count : {std::size_t{1}, tile - 1, tile + 1, std::size_t{777}}) {
    for (std::size_t in_flight : kInFlight) in_place<std::int32_t>(count, tile, in_flight);
  }
}

TEST_P(TileStream, SeveralElementTypesInAndOut) {
  out_of_place<std::uint8_t, std::uint8_t>(1003, 100, 2);
  out_of_place<std::uint16_t, float>(999, 128, 3);
  out_of_place<std::int32_t, std::int64_t>(1001, 64, 3);
  out_of_place<float, double>(513, 256, 2);
  in_place<double>(301, 32, 3);
  in_place<std::uint8_t>(257, 16, 2);
}

TEST_P(TileStream, AutomaticPlanStreamsAnArrayOfManyTiles) {
  // A budget of 3 x 64 KiB: tiles of 8 Ki floats in and out (4 KiB a side x 2 sides... the
  // plan's arithmetic: 65536 / 8 bytes an element), 3 in flight over 100 000 elements.
  const std::size_t count = 100000;
  const std::vector<float> in = small_values<float>(rng_, count);
  std::vector<float> out(count);
  Shift<float, float> fn{cl::Kernel(build<float, float>(bm()), "shift")};
  clbuf::TileStreamOptions options;
  options.memory_budget_bytes = 3 * 65536;
  options.in_flight = 3;
  const clbuf::TileReport report =
      clbuf::stream_tiles(bm(), in.data(), out.data(), count, fn, options);
  EXPECT_EQ(report.plan.in_flight, 3u);
  EXPECT_EQ(report.plan.tile_elements, 65536u / 8u);
  EXPECT_EQ(report.plan.tiles, (count + 8191) / 8192);
  EXPECT_LE(report.plan.device_bytes, options.memory_budget_bytes);
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], in[i] + static_cast<float>(i)) << i;
}

/// Runs a stream of `tiles` tiles of 10 floats whose function fails at tile `k` by `fail`, and
/// checks the error and the output: tiles before k are written, every later element is the
/// sentinel.
template <class Fail>
void expect_stops_at(clbuf::BufferManager& bm, std::size_t k, std::size_t in_flight, Fail fail,
                     const std::string& fragment) {
  const std::size_t tile = 10, tiles = 9, count = tile * tiles - 3;
  std::vector<float> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 13);
  std::vector<float> out(count, -1.0f);
  Shift<float, float> shift{cl::Kernel(build<float, float>(bm), "shift")};
  auto fn = [&](const clbuf::Tile<float, float>& t) -> cl::Event {
    if (t.index == k) return fail(t, shift);
    return shift(t);
  };
  clbuf::TileStreamOptions options;
  options.tile_elements = tile;
  options.in_flight = in_flight;
  const std::string message = clbuf_test::error_message(
      [&] { clbuf::stream_tiles(bm, in.data(), out.data(), count, fn, options); });
  const std::string where = "tile " + std::to_string(k) + " of " + std::to_string(tiles) +
                            " (elements " + std::to_string(k * tile) + " to " +
                            std::to_string(std::min(count, (k + 1) * tile));
  EXPECT_TRUE(clbuf_test::has_fragments(message, {"stream_tiles", where, fragment}));
  for (std::size_t i = 0; i < count; ++i) {
    if (i < k * tile) {
      ASSERT_EQ(out[i], in[i] + static_cast<float>(i)) << "element " << i << " of an earlier tile";
    } else {
      ASSERT_EQ(out[i], -1.0f) << "element " << i << " of tile " << i / tile << " was written";
    }
  }
}

TEST_P(TileStream, AFunctionThatThrowsAtTileKStopsTheStreamThere) {
  for (std::size_t in_flight : kInFlight) {
    for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{8}}) {
      expect_stops_at(
          bm(), k, in_flight,
          [](const clbuf::Tile<float, float>&, Shift<float, float>&) -> cl::Event {
            throw std::runtime_error("no kernel for this tile");
          },
          "the function threw: no kernel for this tile");
    }
  }
}

TEST_P(TileStream, TheFunctionsOwnExceptionIsNestedInTheError) {
  std::vector<int> data(100, 1);
  clbuf::TileStreamOptions options;
  options.tile_elements = 10;
  try {
    clbuf::stream_tiles(
        bm(), data.data(), data.size(),
        [](const clbuf::Tile<int, int>& t) -> cl::Event {
          if (t.index == 2) throw std::out_of_range("mine");
          return cl::Event();
        },
        options);
    FAIL() << "no error";
  } catch (const clbuf::Error& error) {
    EXPECT_EQ(error.code(), CL_SUCCESS);
    EXPECT_THROW(std::rethrow_if_nested(error), std::out_of_range);
  }
}

TEST_P(TileStream, AFailedEventAtTileKStopsTheStreamThere) {
  if (clbuf_test::thread_sanitizer) GTEST_SKIP() << "PoCL's lock order on failed events";
  for (std::size_t in_flight : kInFlight) {
    for (std::size_t k : {std::size_t{0}, std::size_t{3}, std::size_t{8}}) {
      expect_stops_at(
          bm(), k, in_flight,
          [&](const clbuf::Tile<float, float>& t, Shift<float, float>& shift) -> cl::Event {
            shift(t);  // the kernel runs; its tile must not reach the output all the same
            cl::UserEvent failed(bm().context());
            failed.setStatus(CL_OUT_OF_RESOURCES);
            return failed;
          },
          "the event the function returned failed with CL_OUT_OF_RESOURCES");
    }
  }
}

TEST_P(TileStream, AnEventThatFailsLaterStopsTheStreamAtItsTile) {
  if (clbuf_test::thread_sanitizer) GTEST_SKIP() << "PoCL's lock order on failed events";
  // Tile 2's event fails only when tile 4 is started: its download was enqueued long before,
  // and tiles 3 and 4 have run (their downloads landed in the pinned chunks, not the output).
  const std::size_t tile = 10, count = 95;
  std::vector<float> in(count, 1.0f), out(count, -1.0f);
  Shift<float, float> shift{cl::Kernel(build<float, float>(bm()), "shift")};
  cl::UserEvent pending(bm().context());
  auto fn = [&](const clbuf::Tile<float, float>& t) -> cl::Event {
    cl::Event done = shift(t);
    if (t.index == 4) pending.setStatus(CL_OUT_OF_RESOURCES);
    return t.index == 2 ? cl::Event(pending) : done;
  };
  clbuf::TileStreamOptions options;
  options.tile_elements = tile;
  options.in_flight = 3;
  const std::string message = clbuf_test::error_message(
      [&] { clbuf::stream_tiles(bm(), in.data(), out.data(), count, fn, options); });
  EXPECT_TRUE(clbuf_test::has_fragments(
      message, {"tile 2 of 10 (elements 20 to 30 of 95)", "CL_OUT_OF_RESOURCES"}));
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(out[i], i < 20 ? 1.0f + static_cast<float>(i) : -1.0f) << i;
  }
}

TEST_P(TileStream, ACancelledStreamWritesTheTilesItStarted) {
  const std::size_t count = 1000, tile = 100;
  const std::vector<float> in = small_values<float>(rng_, count);
  std::vector<float> out(count, -1.0f);
  std::atomic<bool> cancel{false};
  Shift<float, float> shift{cl::Kernel(build<float, float>(bm()), "shift")};
  auto fn = [&](const clbuf::Tile<float, float>& t) {
    if (t.index == 4) cancel = true;
    return shift(t);
  };
  clbuf::TileStreamOptions options;
  options.tile_elements = tile;
  options.in_flight = 3;
  options.cancel = &cancel;
  const clbuf::TileReport report =
      clbuf::stream_tiles(bm(), in.data(), out.data(), count, fn, options);
  EXPECT_TRUE(report.cancelled);
  EXPECT_EQ(report.tiles_done, 5u);
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(out[i], i < 500 ? in[i] + static_cast<float>(i) : -1.0f) << i;
  }
}

TEST_P(TileStream, TheStreamsBuffersGoBackToThePool) {
  std::vector<float> data(1000, 1.0f);
  clbuf::TileStreamOptions options;
  options.tile_elements = 100;
  options.in_flight = 2;
  const auto nothing = [](const clbuf::Tile<float, float>&) { return cl::Event(); };
  clbuf::stream_tiles(bm(), data.data(), data.data(), data.size(), nothing, options);
  const clbuf::PoolStats after_first = bm().stats().pool;
  clbuf::stream_tiles(bm(), data.data(), data.data(), data.size(), nothing, options);
  const clbuf::PoolStats after_second = bm().stats().pool;
  EXPECT_EQ(after_second.misses, after_first.misses) << "the second stream allocated again";
  EXPECT_EQ(after_second.hits, after_first.hits + 2);
  EXPECT_EQ(data[0], 1.0f);  // a function that enqueues nothing: the tile comes back as it went
}

TEST_P(TileStream, BadInputIsRefusedBeforeAnyWork) {
  std::vector<float> a(100), b(100);
  const auto fn = [](const clbuf::Tile<float, float>&) { return cl::Event(); };
  clbuf::TileStreamOptions options;
  clbuf_test::expect_error([&] { clbuf::stream_tiles(bm(), a.data(), a.data() + 1, 50, fn); },
                           CL_MEM_COPY_OVERLAP, {"stream_tiles", "share bytes"});
  clbuf_test::expect_error(
      [&] { clbuf::stream_tiles(bm(), static_cast<const float*>(nullptr), b.data(), 5, fn); },
      CL_INVALID_VALUE, {"stream_tiles", "null host pointer"});
  options.in_flight = 65;
  clbuf_test::expect_error([&] { clbuf::stream_tiles(bm(), a.data(), b.data(), 100, fn, options); },
                           CL_INVALID_VALUE, {"in_flight 65", "above 64"});
  options.in_flight = 3;
  options.memory_budget_bytes = 20;
  clbuf_test::expect_error([&] { clbuf::stream_tiles(bm(), a.data(), b.data(), 100, fn, options); },
                           CL_INVALID_VALUE, {"memory_budget_bytes 20", "holds no tile", "24"});
  options.memory_budget_bytes = 3 * 8 * 10;
  options.tile_elements = 11;
  clbuf_test::expect_error([&] { clbuf::stream_tiles(bm(), a.data(), b.data(), 100, fn, options); },
                           CL_INVALID_VALUE,
                           {"tile_elements 11", "exceed memory_budget_bytes 240"});
  options = clbuf::TileStreamOptions();
  options.tile_elements = static_cast<std::size_t>(bm().device().max_alloc_bytes / 4 + 1);
  options.memory_budget_bytes = std::numeric_limits<std::size_t>::max();
  clbuf_test::expect_error([&] { clbuf::stream_tiles(bm(), a.data(), b.data(), 100, fn, options); },
                           CL_INVALID_BUFFER_SIZE, {"max allocation"});
  EXPECT_EQ(bm().stats().upload.operations, 0u);
}

INSTANTIATE_TEST_SUITE_P(Models, TileStream,
                         ::testing::Values(clbuf::MemoryModel::host, clbuf::MemoryModel::discrete),
                         clbuf_test::model_name);

class TilePlanTest : public DeviceTest {};

TEST_F(TilePlanTest, InFlightFollowsTheBudget) {
  clbuf::TileOptions options;
  options.memory_budget_bytes = std::size_t{3} << 20;  // three 1 MiB tiles
  EXPECT_EQ(clbuf::plan_tiles<float>(manager(), 1u << 24, options).in_flight, 3u);
  options.memory_budget_bytes = (std::size_t{3} << 20) - 1;
  EXPECT_EQ(clbuf::plan_tiles<float>(manager(), 1u << 24, options).in_flight, 2u);
  options.memory_budget_bytes = std::size_t{1} << 20;
  EXPECT_EQ(clbuf::plan_tiles<float>(manager(), 1u << 24, options).in_flight, 1u);
  // A small array is cut into in_flight tiles, so it overlaps too; an empty one into none.
  options = clbuf::TileOptions();
  const clbuf::TilePlan small = clbuf::plan_tiles<float>(manager(), 1000, options);
  EXPECT_EQ(small.tiles, 3u);
  EXPECT_EQ(small.tile_elements, 334u);
  EXPECT_EQ(clbuf::plan_tiles<float>(manager(), 0, options).tiles, 0u);
  // In place needs one buffer a tile: twice the elements of the same budget.
  options.memory_budget_bytes = std::size_t{3} << 20;
  EXPECT_EQ(clbuf::plan_tiles<float>(manager(), 1u << 24, options, true).tile_elements,
            2 * clbuf::plan_tiles<float>(manager(), 1u << 24, options).tile_elements);
  // An automatic tile holds at most 32 MiB of the larger type.
  options.memory_budget_bytes = std::size_t{1} << 40;
  const clbuf::TilePlan wide =
      clbuf::plan_tiles<float, double>(manager(), std::size_t{1} << 32, options);
  EXPECT_EQ(wide.tile_elements, (std::size_t{32} << 20) / 8);
}

TEST_F(TilePlanTest, MemoryReportSaysWhatFits) {
  const clbuf::MemoryReport before = manager().memory_report();
  EXPECT_EQ(before.device_memory_bytes, manager().device().global_mem_bytes);
  EXPECT_EQ(before.max_alloc_bytes, manager().device().max_alloc_bytes);
  EXPECT_EQ(before.stream.tile_elements,
            clbuf::plan_tiles<float>(manager(), std::size_t{1} << 40).tile_elements);
  {
    clbuf::DeviceBuffer<char> held = manager().allocate<char>(1 << 20);
    const clbuf::MemoryReport during = manager().memory_report();
    EXPECT_EQ(during.buffers_bytes, before.buffers_bytes + (1u << 20));
  }
  const clbuf::MemoryReport after = manager().memory_report();
  EXPECT_EQ(after.buffers_bytes, before.buffers_bytes);
  EXPECT_GE(after.pool_cached_bytes, before.pool_cached_bytes + (1u << 20));
}

TEST(TileStreamTrace, TheTraceHoldsEachTilesUploadKernelsAndDownload) {
  const std::string path = ::testing::TempDir() + "tile_stream_trace.json";
  std::remove(path.c_str());
  {
    clbuf::Options options;
    options.trace_path = path;
    options.memory = clbuf::MemoryModel::discrete;
    std::unique_ptr<clbuf::BufferManager> bm;
    try {
      bm = std::make_unique<clbuf::BufferManager>(std::string(), options);
    } catch (const clbuf::Error& error) {
      if (clbuf_test::device_required()) FAIL() << error.what();
      GTEST_SKIP() << error.what();
    }
    std::vector<float> in(6000, 2.0f), out(6000);
    Shift<float, float> fn{cl::Kernel(build<float, float>(*bm), "shift")};
    clbuf::TileStreamOptions stream;
    stream.tile_elements = 1000;
    stream.in_flight = 3;
    clbuf::stream_tiles(*bm, in.data(), out.data(), in.size(), fn, stream);
    bm->cleanup();
  }
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::map<std::string, int> begins;
  for (const char* name : {"tile upload", "tile kernels", "tile download"}) {
    const std::string needle = std::string("\"name\":\"") + name + "\"";
    for (std::size_t at = text.find(needle); at != std::string::npos;
         at = text.find(needle, at + 1)) {
      ++begins[name];
    }
  }
  // Each span is a pair of events ("b" and "e"): 6 tiles, 12 events a track.
  EXPECT_EQ(begins["tile upload"], 12) << text.substr(0, 2000);
  EXPECT_EQ(begins["tile kernels"], 12);
  EXPECT_EQ(begins["tile download"], 12);
  for (const char* track :
       {"tile stream: uploads", "tile stream: kernels", "tile stream: downloads"}) {
    EXPECT_NE(text.find(track), std::string::npos) << track;
  }
}

}  // namespace
