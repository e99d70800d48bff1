// SPDX-License-Identifier: MIT
// How a stream of tiles (clbuf/tile_stream.hpp) cuts an array: TileOptions (what the caller may
// set), TilePlan (what a stream of given elements would do) and plan_tiles(), pure arithmetic
// on the device's facts, so BufferManager::memory_report() can say it with no stream made.
#ifndef CLBUF_TILE_PLAN_HPP
#define CLBUF_TILE_PLAN_HPP

#include <clbuf/device_info.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace clbuf {

/// How stream_tiles() cuts an array into tiles; every field 0 means "clbuf chooses".
struct TileOptions {
  /// Elements per tile (the last tile may hold fewer); 0: the most that fit the budget with
  /// `in_flight` tiles in flight, at most 32 MiB of the larger element type a buffer and at most
  /// an `in_flight`-th of the array (rounded up), so a small array still overlaps.
  std::size_t tile_elements = 0;
  /// Tiles in flight at once (each with its own device buffers and pinned chunk), 1 to 64; 0: 3,
  /// or 2 (1) when the budget holds fewer tiles of 1 MiB.
  std::size_t in_flight = 0;
  /// Most bytes of device memory the stream's buffers take (in_flight x a tile's input and
  /// output buffers; one buffer a tile in place); 0: a quarter of the device's memory.
  std::size_t memory_budget_bytes = 0;
};

/// What a stream of a given array does: computed by plan_tiles() before any OpenCL call.
struct TilePlan {
  std::size_t tile_elements = 0;  ///< elements per tile (the last may hold fewer)
  std::size_t in_flight = 0;      ///< tiles in flight at once: the device buffers in use
  std::size_t tiles = 0;          ///< tiles of the array (0 for an empty array)
  std::size_t device_bytes = 0;   ///< device memory the stream's buffers take
  std::size_t budget_bytes = 0;   ///< the budget it kept within
};

/// How much fits: the device's memory, what this manager holds of it and of pinned host
/// memory now, and the tiles a stream would choose (BufferManager::memory_report()).
struct MemoryReport {
  std::uint64_t device_memory_bytes = 0;  ///< CL_DEVICE_GLOBAL_MEM_SIZE
  std::uint64_t max_alloc_bytes = 0;      ///< CL_DEVICE_MAX_MEM_ALLOC_SIZE: one buffer's most
  std::size_t buffers = 0;                ///< the manager's buffers in use (PoolStats::in_use_*)
  std::size_t buffers_bytes = 0;          ///< their capacity
  std::size_t pool_cached_bytes = 0;      ///< freed buffers the pool keeps for reuse
  std::size_t pinned_bytes = 0;           ///< clbuf's pinned host memory held (leased + cached)
  std::size_t pinned_budget_bytes = 0;    ///< Options::pinned_budget_bytes, resolved
  /// The plan of a stream of elements of the asked size, in and out, over an array larger than
  /// any tile (`tiles` is 0: it depends on the array).
  TilePlan stream;
};

namespace detail {

/// An automatic tile's largest buffer: large enough for the bus's full speed, small enough that
/// three tiles' pinned chunks fit the pinned pool's default share for copies (128 MiB).
constexpr std::size_t tile_cap_bytes = std::size_t{32} << 20;
/// An automatic stream keeps tiles of at least this many bytes in flight (fewer tiles if need be).
constexpr std::size_t tile_floor_bytes = std::size_t{1} << 20;
constexpr std::size_t tile_most_in_flight = 64;

/// The stream's device bytes for `tile` elements (no overflow: callers keep tile within bounds).
inline std::size_t tile_device_bytes(std::size_t tile, std::size_t in_flight,
                                     std::size_t element_bytes) noexcept {
  return tile * element_bytes * in_flight;
}

/// The tiles in flight: the caller's, else 3 (fewer when the budget holds fewer 1 MiB tiles).
inline std::size_t tiles_in_flight(const char* operation, const TileOptions& options,
                                   std::size_t budget) {
  if (options.in_flight > tile_most_in_flight) {
    fail(operation, CL_INVALID_VALUE,
         "TileOptions::in_flight " + std::to_string(options.in_flight) + " is above " +
             std::to_string(tile_most_in_flight));
  }
  if (options.in_flight != 0) return options.in_flight;
  std::size_t in_flight = 3;
  while (in_flight > 1 && budget / in_flight < tile_floor_bytes) --in_flight;
  return in_flight;
}

/// The elements of an automatic tile: the budget's share, capped (tile_cap_bytes, the device's
/// max allocation, an in_flight-th of the array), at least 1.
inline std::size_t automatic_tile(std::size_t count, std::size_t in_flight, std::size_t budget,
                                  std::size_t element_bytes, std::size_t largest,
                                  std::uint64_t max_alloc) {
  std::size_t tile = budget / in_flight / element_bytes;
  tile = std::min(tile, tile_cap_bytes / largest);
  if (max_alloc != 0) tile = std::min<std::uint64_t>(tile, max_alloc / largest);
  tile = std::min(tile, count / in_flight + (count % in_flight != 0 ? 1 : 0));
  return std::max<std::size_t>(tile, 1);
}

/// The plan of a stream over `count` elements of `in_bytes` in and `out_bytes` out (0 in place)
/// on `device`. @throws Error CL_INVALID_VALUE for a budget that holds no tile or a tile over the
/// budget, CL_INVALID_BUFFER_SIZE for a tile over the device's max allocation.
inline TilePlan plan_tiles(const char* operation, const DeviceInfo& device, std::size_t count,
                           std::size_t in_bytes, std::size_t out_bytes,
                           const TileOptions& options) {
  if (in_bytes == 0) fail(operation, CL_INVALID_VALUE, "an element of 0 bytes");
  const std::size_t element = in_bytes + out_bytes;
  const std::size_t largest = std::max(in_bytes, out_bytes);
  TilePlan plan;
  plan.budget_bytes = options.memory_budget_bytes != 0
                          ? options.memory_budget_bytes
                          : static_cast<std::size_t>(device.global_mem_bytes / 4);
  plan.in_flight = tiles_in_flight(operation, options, plan.budget_bytes);
  if (plan.budget_bytes / plan.in_flight < element) {
    fail(operation, CL_INVALID_VALUE,
         "TileOptions::memory_budget_bytes " + std::to_string(plan.budget_bytes) +
             " holds no tile: " + std::to_string(plan.in_flight) + " tiles in flight of " +
             std::to_string(element) + " bytes an element need " +
             std::to_string(plan.in_flight * element));
  }
  plan.tile_elements = options.tile_elements != 0
                           ? options.tile_elements
                           : automatic_tile(count, plan.in_flight, plan.budget_bytes, element,
                                            largest, device.max_alloc_bytes);
  if (plan.tile_elements > plan.budget_bytes / plan.in_flight / element) {
    fail(operation, CL_INVALID_VALUE,
         "TileOptions::tile_elements " + std::to_string(plan.tile_elements) + " x " +
             std::to_string(plan.in_flight) + " tiles in flight x " + std::to_string(element) +
             " bytes an element exceed memory_budget_bytes " + std::to_string(plan.budget_bytes));
  }
  if (device.max_alloc_bytes != 0 && plan.tile_elements > device.max_alloc_bytes / largest) {
    fail_too_large(operation, plan.tile_elements * largest, device.max_alloc_bytes);
  }
  plan.tiles = count / plan.tile_elements + (count % plan.tile_elements != 0 ? 1 : 0);
  plan.in_flight = std::max<std::size_t>(1, std::min(plan.in_flight, plan.tiles));
  plan.device_bytes =
      plan.tiles == 0 ? 0 : tile_device_bytes(plan.tile_elements, plan.in_flight, element);
  return plan;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_TILE_PLAN_HPP
