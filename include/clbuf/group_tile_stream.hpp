// SPDX-License-Identifier: MIT
// clbuf::stream_tiles over a DeviceGroup: the tiles of one host array dealt to the group's
// devices, each device streaming its tiles through its own manager (its own queues, device
// buffers and pinned chunks: clbuf/tile_stream.hpp's TileLane), all at once, driven by the
// calling thread alone (docs/design.md "Arrays larger than the device: tiles streamed through
// it"). The deal (detail/tile_deal.hpp) gives tile k to one device, in proportion to the
// weights; the run (TileRun) starts the tiles in order and finishes them in order, so outputs
// reach the caller's array in tile order whichever device ran them: an error at tile k leaves
// every earlier tile written and no byte of a later one, as on one device.
#ifndef CLBUF_GROUP_TILE_STREAM_HPP
#define CLBUF_GROUP_TILE_STREAM_HPP

#include <clbuf/detail/host_memory.hpp>
#include <clbuf/detail/tile_deal.hpp>
#include <clbuf/device_group.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/sharded_buffer.hpp>
#include <clbuf/tile_plan.hpp>
#include <clbuf/tile_stream.hpp>

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace clbuf {

/// The options of a stream over a DeviceGroup: a one-device stream's (per device: the plan's
/// in_flight and memory_budget_bytes hold on each device) and how the tiles are shared.
struct GroupTileOptions : TileStreamOptions {
  GroupTileOptions() = default;
  /// A one-device stream's options, the tiles shared evenly.
  GroupTileOptions(const TileStreamOptions& stream)  // NOLINT(google-explicit-constructor)
      : TileStreamOptions(stream) {}
  /// A plan's options, the tiles shared evenly.
  GroupTileOptions(const TileOptions& plan) {  // NOLINT(google-explicit-constructor)
    static_cast<TileOptions&>(*this) = plan;
  }

  /// One per device (finite, >= 0, not all 0), as Partition::weighted's: device d takes about
  /// weights[d] / sum(weights) of the tiles, dealt in turn through the array; a weight of 0
  /// takes none. Empty (the default): every device the same share, round robin.
  std::vector<double> weights;
};

namespace detail {

/// Places a device holds in the deal's table: the shares' resolution (1 / (64 x devices)).
constexpr std::size_t tile_deal_places = 64;

/// The deal of `weights` (empty: even) over `devices` devices.
/// @throws Error CL_INVALID_VALUE as Partition::weighted's split (a weight count other than
///         `devices`, a negative or non-finite weight, all weights 0).
inline TileDeal group_tile_deal(const char* operation, const std::vector<double>& weights,
                                std::size_t devices) {
  const Partition partition = weights.empty() ? Partition::even() : Partition::weighted(weights);
  return TileDeal(partition.split(operation, tile_deal_places * devices, devices));
}

/// The plan of a group's stream: each device taking tiles plans for its even share of the
/// array (plan_tiles(), which checks the options against that device); the tile is the least
/// of their tiles and in_flight the least of their tiles in flight, so every device keeps
/// within its own budget and max allocation; in_flight then at most the tiles a device takes.
/// device_bytes and budget_bytes are a device's.
inline TilePlan plan_group_tiles(const char* operation, const DeviceGroup& group,
                                 const TileDeal& deal, std::size_t count, std::size_t in_bytes,
                                 std::size_t out_bytes, const TileOptions& options) {
  std::vector<std::size_t> takers;
  for (std::size_t d = 0; d < group.size(); ++d) {
    if (deal.tiles_of(d, tile_deal_places * group.size()) != 0) takers.push_back(d);
  }
  const std::size_t share = count / takers.size() + (count % takers.size() != 0 ? 1 : 0);
  TilePlan plan;
  std::size_t in_flight = 0;
  for (std::size_t d : takers) {
    const TilePlan own =
        plan_tiles(operation, group.manager(d).device(), share, in_bytes, out_bytes, options);
    const std::size_t own_in_flight = tiles_in_flight(operation, options, own.budget_bytes);
    const bool first = d == takers.front();
    plan.tile_elements =
        first ? own.tile_elements : std::min(plan.tile_elements, own.tile_elements);
    plan.budget_bytes = first ? own.budget_bytes : std::min(plan.budget_bytes, own.budget_bytes);
    in_flight = first ? own_in_flight : std::min(in_flight, own_in_flight);
  }
  plan.tiles = count / plan.tile_elements + (count % plan.tile_elements != 0 ? 1 : 0);
  std::size_t most = 0;
  for (std::size_t d : takers) most = std::max(most, deal.tiles_of(d, plan.tiles));
  plan.in_flight = std::max<std::size_t>(1, std::min(in_flight, most));
  plan.device_bytes =
      plan.tiles == 0 ? 0
                      : tile_device_bytes(plan.tile_elements, plan.in_flight, in_bytes + out_bytes);
  return plan;
}

}  // namespace detail

/// Runs `fn` over `count` elements of `in`, writing `count` elements of `out`, as
/// stream_tiles(manager, ...) does, with the tiles dealt to the group's devices
/// (GroupTileOptions::weights; even by default) and every device streaming its tiles at once
/// through its own manager, up to plan.in_flight tiles in flight on each. The function is
/// called on the calling thread, tiles in order; Tile::device and Tile::manager say where the
/// tile is (its buffers and queue are of that manager's context: use a kernel of it). Outputs
/// are copied into `out` in tile order only, whichever device finishes first; the host waits
/// only when a device reuses a tile's buffers (for the tiles up to that one).
/// Returns when every tile's output is in `out` (or the stream was cancelled); the report's
/// device_tiles counts each device's tiles.
/// @throws Error as stream_tiles(manager, ...), each device's plan checked against its own
///         device, and CL_INVALID_VALUE for weights Partition::weighted refuses; a failure at
///         tile k names "tile k of n", its elements and "on device d": tiles 0 to k-1 are
///         written to `out` and nothing of a later tile is, whichever device ran it.
template <class T, class U, class Fn>
TileReport stream_tiles(DeviceGroup& group, const T* in, U* out, std::size_t count, Fn&& fn,
                        const GroupTileOptions& options = GroupTileOptions()) {
  const char* op = "stream_tiles";
  return detail::guard_host_memory(op, [&] {
    detail::check_tile_arrays(in, out, count);
    const bool in_place =
        static_cast<const void*>(in) == static_cast<const void*>(out) && std::is_same<T, U>::value;
    detail::TileDeal deal = detail::group_tile_deal(op, options.weights, group.size());
    const TilePlan plan = detail::plan_group_tiles(op, group, deal, count, sizeof(T),
                                                   in_place ? 0 : sizeof(U), options);
    std::vector<BufferManager*> managers;
    for (std::size_t d = 0; d < group.size(); ++d) managers.push_back(&group.manager(d));
    detail::TileRun<T, U> run(managers, in, out, count, plan, std::move(deal), options.cancel,
                              true);
    return run.run(fn);
  });
}

/// As stream_tiles(group, data, data, count, fn, options): in place, one device buffer a tile.
template <class T, class Fn>
TileReport stream_tiles(DeviceGroup& group, T* data, std::size_t count, Fn&& fn,
                        const GroupTileOptions& options = GroupTileOptions()) {
  return stream_tiles(group, static_cast<const T*>(data), data, count, std::forward<Fn>(fn),
                      options);
}

/// The plan stream_tiles(group, ...) would follow for `count` elements of T in and U out
/// (`in_place`: one array of T); in_flight, device_bytes and budget_bytes are per device. No
/// OpenCL call. @throws Error as stream_tiles(group, ...) for options out of range.
template <class T, class U = T>
TilePlan plan_tiles(const DeviceGroup& group, std::size_t count,
                    const GroupTileOptions& options = GroupTileOptions(), bool in_place = false) {
  const char* op = "plan_tiles";
  const detail::TileDeal deal = detail::group_tile_deal(op, options.weights, group.size());
  return detail::plan_group_tiles(op, group, deal, count, sizeof(T), in_place ? 0 : sizeof(U),
                                  options);
}

}  // namespace clbuf

#endif  // CLBUF_GROUP_TILE_STREAM_HPP
