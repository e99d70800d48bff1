// SPDX-License-Identifier: MIT
// Issue 43: stream_tiles() over a DeviceGroup, the tiles dealt to its devices. CTest runs this
// binary on 2 PoCL devices and again on 1, 3 and 4 (tests/CMakeLists.txt). Every size around a
// tile's edge, several element types, 1 to 3 tiles in flight a device, in place and out of
// place, on the host and discrete paths, against a host reference; the deal (even: round robin;
// weighted; a weight of 0); a function that throws, or an event that fails (at once, or later
// while other devices' later tiles have finished), at tile k on device d: the error names tile
// k and its device, tiles before k are in the output and no byte of a later one, whichever
// device ran it; a cancelled stream; the plan; bad weights.
#include <clbuf/clbuf.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/device_test.hpp"

namespace {

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

/// Values small enough that no type overflows when the index is added.
template <class T>
std::vector<T> small_values(std::mt19937& rng, std::size_t count) {
  std::uniform_int_distribution<int> dist(0, 100);
  std::vector<T> values(count);
  for (T& v : values) v = static_cast<T>(dist(rng));
  return values;
}

/// The kernels of the test's group by types and name (each test's TearDown empties it).
std::map<std::string, std::vector<cl::Kernel>>& kernel_cache() {
  static std::map<std::string, std::vector<cl::Kernel>> cache;
  return cache;
}

/// A function for stream_tiles over a group: the `shift` kernel (or shift_in_place) of the
/// tile's device's context; records which device each tile ran on, and its kernel's event.
template <class T, class U>
struct Shift {
  Shift(clbuf::DeviceGroup& devices, bool place)
      : kernels(built(devices, place)), in_place(place) {}

  /// The kernel for each device: a program a context (devices sharing one share it), built
  /// once per test (kernel_cache()) and types.
  static std::vector<cl::Kernel> built(clbuf::DeviceGroup& devices, bool in_place) {
    const std::string defines = std::string("-DIN=") + cl_name<T>() + " -DOUT=" + cl_name<U>();
    const std::string name = in_place ? "shift_in_place" : "shift";
    std::vector<cl::Kernel>& kernels = kernel_cache()[defines + name];
    if (!kernels.empty()) return kernels;
    std::map<cl_context, cl::Program> programs;
    for (std::size_t d = 0; d < devices.size(); ++d) {
      clbuf::BufferManager& bm = devices.manager(d);
      auto found = programs.find(bm.context()());
      if (found == programs.end()) {
        cl::Program program(bm.context(), kSource);
        try {
          program.build(defines.c_str());
        } catch (...) {
          ADD_FAILURE() << "build failed: "
                        << program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(
                               bm.context().getInfo<CL_CONTEXT_DEVICES>().at(0));
          throw;
        }
        found = programs.emplace(bm.context()(), program).first;
      }
      kernels.emplace_back(found->second, name.c_str());
    }
    return kernels;
  }

  std::vector<cl::Kernel> kernels;  // one a device: its context's
  bool in_place = false;
  std::vector<std::size_t> device_of;  // device_of[k]: where tile k ran
  std::vector<cl::Event> done;         // done[k]: tile k's kernel
  const clbuf::DeviceGroup* group = nullptr;
  bool managers_match = true;

  cl::Event operator()(const clbuf::Tile<T, U>& tile) {
    EXPECT_EQ(tile.index, device_of.size()) << "tiles out of order";
    device_of.push_back(tile.device);
    if (group != nullptr)
      managers_match = managers_match && &tile.manager == &group->manager(tile.device);
    cl::Kernel& kernel = kernels.at(tile.device);
    cl_uint arg = 0;
    kernel.setArg(arg++, tile.in.native());
    if (!in_place) kernel.setArg(arg++, tile.out.native());
    kernel.setArg(arg++, static_cast<cl_ulong>(tile.first));
    kernel.setArg(arg++, static_cast<cl_ulong>(tile.count));
    cl::Event event;
    EXPECT_EQ(tile.queue.enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(tile.count),
                                              cl::NullRange, &tile.after, &event),
              CL_SUCCESS);
    done.push_back(event);
    return event;
  }
};

class GroupTileStream : public ::testing::TestWithParam<clbuf::MemoryModel> {
 protected:
  void SetUp() override {
    clbuf::Options options;
    options.memory = GetParam();
    try {
      group_ = std::make_unique<clbuf::DeviceGroup>("all", options);
    } catch (const clbuf::Error& error) {
      if (clbuf_test::device_required()) FAIL() << error.what();
      GTEST_SKIP() << error.what();
    }
    if (GetParam() == clbuf::MemoryModel::host &&
        group_->manager(0).device().type != clbuf::DeviceType::cpu) {
      GTEST_SKIP() << "the host path needs a CPU device";
    }
  }

  void TearDown() override { kernel_cache().clear(); }

  clbuf::DeviceGroup& group() { return *group_; }
  std::size_t devices() const { return group_->size(); }

  /// Tiles each device takes when `tiles` are dealt round robin.
  std::vector<std::size_t> round_robin(std::size_t tiles) const {
    std::vector<std::size_t> counts(devices(), tiles / devices());
    for (std::size_t d = 0; d < tiles % devices(); ++d) ++counts[d];
    return counts;
  }

  /// Streams `count` random elements of T through `shift` out of place (U) over the group and
  /// checks every element against the host reference, and the even deal (round robin).
  template <class T, class U>
  void out_of_place(std::size_t count, std::size_t tile, std::size_t in_flight) {
    SCOPED_TRACE("count " + std::to_string(count) + ", tile " + std::to_string(tile) +
                 ", in flight " + std::to_string(in_flight));
    const std::vector<T> in = small_values<T>(rng_, count);
    std::vector<U> out(count, static_cast<U>(77));
    Shift<T, U> fn(group(), false);
    fn.group = &group();
    clbuf::GroupTileOptions options;
    options.tile_elements = tile;
    options.in_flight = in_flight;
    const clbuf::TileReport report =
        clbuf::stream_tiles(group(), in.data(), out.data(), count, fn, options);
    const std::size_t tiles = (count + tile - 1) / tile;
    EXPECT_EQ(report.plan.tiles, tiles);
    EXPECT_EQ(report.tiles_done, tiles);
    EXPECT_FALSE(report.cancelled);
    const std::size_t most = round_robin(tiles).front();
    EXPECT_EQ(report.plan.in_flight, std::max<std::size_t>(1, std::min(in_flight, most)));
    EXPECT_EQ(report.device_tiles, round_robin(tiles));
    ASSERT_EQ(fn.device_of.size(), tiles);
    for (std::size_t k = 0; k < tiles; ++k) EXPECT_EQ(fn.device_of[k], k % devices()) << k;
    EXPECT_TRUE(fn.managers_match) << "Tile::manager is not group.manager(Tile::device)";
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[i], (reference_of<T, U>(in[i], i))) << "element " << i;
    }
  }

  template <class T>
  void in_place(std::size_t count, std::size_t tile, std::size_t in_flight) {
    SCOPED_TRACE("in place: count " + std::to_string(count) + ", tile " + std::to_string(tile));
    std::vector<T> data = small_values<T>(rng_, count);
    const std::vector<T> before = data;
    Shift<T, T> fn(group(), true);
    clbuf::GroupTileOptions options;
    options.tile_elements = tile;
    options.in_flight = in_flight;
    const clbuf::TileReport report = clbuf::stream_tiles(group(), data.data(), count, fn, options);
    EXPECT_EQ(report.tiles_done, (count + tile - 1) / tile);
    EXPECT_EQ(report.device_tiles, round_robin(report.tiles_done));
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(data[i], (reference_of<T, T>(before[i], i))) << "element " << i;
    }
  }

  std::unique_ptr<clbuf::DeviceGroup> group_;
  std::mt19937 rng_{clbuf_test::fresh_seed()};
};

TEST_P(GroupTileStream, EverySizeAroundATileMatchesTheHostReference) {
  const std::size_t tile = 64;
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, tile - 1, tile, tile + 1, std::size_t{1001}}) {
    for (std::size_t in_flight : kInFlight) out_of_place<float, float>(count, tile, in_flight);
  }
}

TEST_P(GroupTileStream, InPlaceMatchesTheHostReference) {
  const std::size_t tile = 50;
  for (std::size_t count : {std::size_t{1}, tile - 1, tile + 1, std::size_t{777}}) {
    for (std::size_t in_flight : kInFlight) in_place<std::int32_t>(count, tile, in_flight);
  }
}

TEST_P(GroupTileStream, SeveralElementTypesInAndOut) {
  out_of_place<std::uint8_t, std::uint8_t>(1003, 100, 2);
  out_of_place<std::uint16_t, float>(999, 128, 3);
  out_of_place<std::int32_t, std::int64_t>(1001, 64, 3);
  out_of_place<float, double>(513, 32, 2);
  in_place<double>(301, 32, 3);
  in_place<std::uint8_t>(257, 16, 2);
}

TEST_P(GroupTileStream, DevicesOfContextsOfTheirOwnEachGetTheirOwnBuffersAndQueue) {
  clbuf::Options options;
  options.memory = GetParam();
  kernel_cache().clear();
  group_ = std::make_unique<clbuf::DeviceGroup>("all", options, clbuf::ContextSharing::per_device);
  out_of_place<float, float>(1001, 64, 2);
  in_place<std::int32_t>(333, 50, 3);
}

TEST_P(GroupTileStream, AutomaticPlanKeepsEachDeviceWithinItsBudget) {
  const std::size_t count = 100000;
  const std::vector<float> in = small_values<float>(rng_, count);
  std::vector<float> out(count);
  Shift<float, float> fn(group(), false);
  clbuf::GroupTileOptions options;
  options.memory_budget_bytes = 3 * 65536;
  options.in_flight = 3;
  const clbuf::TilePlan planned = clbuf::plan_tiles<float>(group(), count, options);
  const clbuf::TileReport report =
      clbuf::stream_tiles(group(), in.data(), out.data(), count, fn, options);
  EXPECT_EQ(report.plan.tile_elements, planned.tile_elements);
  EXPECT_EQ(report.plan.tiles, planned.tiles);
  EXPECT_EQ(report.plan.in_flight, 3u);
  EXPECT_LE(report.plan.tile_elements, 65536u / 8u);
  EXPECT_LE(report.plan.device_bytes, options.memory_budget_bytes);
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], in[i] + static_cast<float>(i)) << i;
}

TEST_P(GroupTileStream, WeightsShareTheTilesAndAWeightOfZeroTakesNone) {
  // One period of the deal (64 places a device): exactly each device's share of the weights.
  const std::size_t tile = 8, tiles = 64 * devices(), count = tile * tiles;
  const std::vector<float> in = small_values<float>(rng_, count);
  std::vector<double> weights(devices());
  for (std::size_t d = 0; d < devices(); ++d) weights[d] = static_cast<double>(d + 1);
  if (devices() > 1) weights[0] = 0.0;
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<float> out(count, -1.0f);
  Shift<float, float> fn(group(), false);
  clbuf::GroupTileOptions options;
  options.tile_elements = tile;
  options.in_flight = 2;
  options.weights = weights;
  const clbuf::TileReport report =
      clbuf::stream_tiles(group(), in.data(), out.data(), count, fn, options);
  EXPECT_EQ(report.tiles_done, tiles);
  std::vector<std::size_t> seen(devices(), 0);
  for (std::size_t d : fn.device_of) ++seen.at(d);
  EXPECT_EQ(seen, report.device_tiles);
  for (std::size_t d = 0; d < devices(); ++d) {
    // apportion(): 64 x devices places in proportion to the weights, here exact or one apart
    const double share = static_cast<double>(tiles) * weights[d] / sum;
    EXPECT_LE(std::abs(static_cast<double>(report.device_tiles[d]) - share), 1.0) << d;
  }
  if (devices() > 1) {
    EXPECT_EQ(report.device_tiles[0], 0u);
  }
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], in[i] + static_cast<float>(i)) << i;
}

/// Runs a stream of `tiles` tiles of 10 floats over the group whose function fails at tile k
/// by `fail`, and checks the error and the output: tiles before k are written, every later
/// element is the sentinel, whichever device ran it.
template <class Fail>
void expect_stops_at(clbuf::DeviceGroup& group, std::size_t k, std::size_t in_flight, Fail fail,
                     const std::string& fragment) {
  const std::size_t tile = 10, tiles = 13, count = tile * tiles - 3;
  std::vector<float> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 13);
  std::vector<float> out(count, -1.0f);
  Shift<float, float> shift(group, false);
  auto fn = [&](const clbuf::Tile<float, float>& t) -> cl::Event {
    if (t.index == k) return fail(t, shift);
    return shift(t);
  };
  clbuf::GroupTileOptions options;
  options.tile_elements = tile;
  options.in_flight = in_flight;
  const std::string message = clbuf_test::error_message(
      [&] { clbuf::stream_tiles(group, in.data(), out.data(), count, fn, options); });
  const std::string where =
      "tile " + std::to_string(k) + " of " + std::to_string(tiles) + " (elements " +
      std::to_string(k * tile) + " to " + std::to_string(std::min(count, (k + 1) * tile)) + " of " +
      std::to_string(count) + ") on device " + std::to_string(k % group.size());
  EXPECT_TRUE(clbuf_test::has_fragments(message, {"stream_tiles", where, fragment}));
  for (std::size_t i = 0; i < count; ++i) {
    if (i < k * tile) {
      ASSERT_EQ(out[i], in[i] + static_cast<float>(i)) << "element " << i << " of an earlier tile";
    } else {
      ASSERT_EQ(out[i], -1.0f) << "element " << i << " of tile " << i / tile << " was written";
    }
  }
}

TEST_P(GroupTileStream, AFunctionThatThrowsAtTileKOnDeviceDStopsTheStreamThere) {
  for (std::size_t in_flight : kInFlight) {
    for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{12}}) {
      SCOPED_TRACE("tile " + std::to_string(k) + ", in flight " + std::to_string(in_flight));
      expect_stops_at(
          group(), k, in_flight,
          [](const clbuf::Tile<float, float>&, Shift<float, float>&) -> cl::Event {
            throw std::runtime_error("no kernel for this tile");
          },
          "the function threw: no kernel for this tile");
    }
  }
}

TEST_P(GroupTileStream, AFailedEventAtTileKOnDeviceDStopsTheStreamThere) {
  if (clbuf_test::thread_sanitizer) GTEST_SKIP() << "PoCL's lock order on failed events";
  for (std::size_t in_flight : kInFlight) {
    for (std::size_t k : {std::size_t{0}, std::size_t{3}, std::size_t{12}}) {
      SCOPED_TRACE("tile " + std::to_string(k) + ", in flight " + std::to_string(in_flight));
      expect_stops_at(
          group(), k, in_flight,
          [&](const clbuf::Tile<float, float>& t, Shift<float, float>& shift) -> cl::Event {
            shift(t);  // the kernel runs; its tile must not reach the output all the same
            cl::UserEvent failed(t.manager.context());
            failed.setStatus(CL_OUT_OF_RESOURCES);
            return failed;
          },
          "the event the function returned failed with CL_OUT_OF_RESOURCES");
    }
  }
}

TEST_P(GroupTileStream, LaterTilesFinishedOnOtherDevicesAreNotWrittenWhenAnEarlierOneFails) {
  if (clbuf_test::thread_sanitizer) GTEST_SKIP() << "PoCL's lock order on failed events";
  // Tile 2's event fails only when tile s = 3 x devices + 1 is started (the last tile whose
  // slot is not tile 2's or a later one's, 3 in flight a device), after the kernels of tiles 3
  // to s-1 (on the other devices, and on tile 2's own) have run: their outputs must stay out.
  const std::size_t tile = 10, count = 155, late = 3 * devices() + 1;
  std::vector<float> in(count, 1.0f), out(count, -1.0f);
  Shift<float, float> shift(group(), false);
  std::unique_ptr<cl::UserEvent> pending;
  auto fn = [&](const clbuf::Tile<float, float>& t) -> cl::Event {
    cl::Event done = shift(t);
    if (t.index == 2) {
      pending = std::make_unique<cl::UserEvent>(t.manager.context());
      return *pending;
    }
    if (t.index == late) {
      for (std::size_t j = 3; j < late; ++j) EXPECT_EQ(shift.done[j].wait(), CL_SUCCESS);
      pending->setStatus(CL_OUT_OF_RESOURCES);
    }
    return done;
  };
  clbuf::GroupTileOptions options;
  options.tile_elements = tile;
  options.in_flight = 3;
  const std::string message = clbuf_test::error_message(
      [&] { clbuf::stream_tiles(group(), in.data(), out.data(), count, fn, options); });
  EXPECT_TRUE(clbuf_test::has_fragments(
      message,
      {"tile 2 of 16 (elements 20 to 30 of 155) on device " + std::to_string(2 % devices()),
       "CL_OUT_OF_RESOURCES"}));
  EXPECT_GT(shift.device_of.size(), late) << "the stream stopped before the event failed";
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(out[i], i < 20 ? 1.0f + static_cast<float>(i) : -1.0f) << i;
  }
}

TEST_P(GroupTileStream, ACancelledStreamWritesTheTilesItStarted) {
  const std::size_t count = 1000, tile = 50;
  const std::vector<float> in = small_values<float>(rng_, count);
  std::vector<float> out(count, -1.0f);
  std::atomic<bool> cancel{false};
  Shift<float, float> shift(group(), false);
  auto fn = [&](const clbuf::Tile<float, float>& t) {
    if (t.index == 6) cancel = true;
    return shift(t);
  };
  clbuf::TileStreamOptions options;  // a one-device stream's options: the group form takes them
  options.tile_elements = tile;
  options.in_flight = 2;
  options.cancel = &cancel;
  const clbuf::TileReport report =
      clbuf::stream_tiles(group(), in.data(), out.data(), count, fn, options);
  EXPECT_TRUE(report.cancelled);
  EXPECT_EQ(report.tiles_done, 7u);
  EXPECT_EQ(report.device_tiles, round_robin(7));
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(out[i], i < 350 ? in[i] + static_cast<float>(i) : -1.0f) << i;
  }
}

TEST_P(GroupTileStream, BadWeightsAreRefusedBeforeAnyWork) {
  std::vector<float> a(100), b(100);
  const auto fn = [](const clbuf::Tile<float, float>&) { return cl::Event(); };
  clbuf::GroupTileOptions options;
  options.weights.assign(devices() + 1, 1.0);
  clbuf_test::expect_error(
      [&] { clbuf::stream_tiles(group(), a.data(), b.data(), 100, fn, options); }, CL_INVALID_VALUE,
      {"stream_tiles",
       std::to_string(devices() + 1) + " weights for " + std::to_string(devices()) + " devices"});
  options.weights.assign(devices(), 1.0);
  options.weights.back() = -1.0;
  clbuf_test::expect_error(
      [&] { clbuf::stream_tiles(group(), a.data(), b.data(), 100, fn, options); }, CL_INVALID_VALUE,
      {"stream_tiles", "is -1", "finite and >= 0"});
  options.weights.assign(devices(), 0.0);
  clbuf_test::expect_error(
      [&] { clbuf::stream_tiles(group(), a.data(), b.data(), 100, fn, options); }, CL_INVALID_VALUE,
      {"every weight is 0"});
  clbuf_test::expect_error([&] { clbuf::stream_tiles(group(), a.data(), a.data() + 1, 50, fn); },
                           CL_MEM_COPY_OVERLAP, {"stream_tiles", "share bytes"});
  for (std::size_t d = 0; d < devices(); ++d) {
    EXPECT_EQ(group().manager(d).stats().upload.operations, 0u) << d;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GroupTileStream,
                         ::testing::Values(clbuf::MemoryModel::host, clbuf::MemoryModel::discrete),
                         clbuf_test::model_name);

TEST(TileDeal, EqualPartsDealRoundRobin) {
  const clbuf::detail::TileDeal deal({64, 64, 64});
  for (std::size_t k = 0; k < 500; ++k) EXPECT_EQ(deal.owner(k), k % 3) << k;
  EXPECT_EQ(deal.tiles_of(0, 7), 3u);
  EXPECT_EQ(deal.tiles_of(1, 7), 2u);
  EXPECT_EQ(deal.tiles_of(2, 7), 2u);
}

TEST(TileDeal, EveryPrefixAgreesWithOwnerAndPartsAreSpreadThroughThePeriod) {
  const clbuf::detail::TileDeal deal({96, 0, 32, 64});
  std::vector<std::size_t> counted(4, 0);
  for (std::size_t tiles = 0; tiles < 600; ++tiles) {
    for (std::size_t d = 0; d < 4; ++d) ASSERT_EQ(deal.tiles_of(d, tiles), counted[d]) << tiles;
    ++counted[deal.owner(tiles)];
  }
  EXPECT_EQ(deal.tiles_of(1, 600), 0u);
  // Spread: in any 24 consecutive tiles (an eighth of the period) each device holds its share,
  // within 2.
  for (std::size_t start = 0; start < 192; ++start) {
    std::vector<std::size_t> window(4, 0);
    for (std::size_t k = start; k < start + 24; ++k) ++window[deal.owner(k)];
    EXPECT_NEAR(static_cast<double>(window[0]), 12.0, 2.0) << start;
    EXPECT_NEAR(static_cast<double>(window[2]), 4.0, 2.0) << start;
    EXPECT_NEAR(static_cast<double>(window[3]), 8.0, 2.0) << start;
  }
}

}  // namespace
