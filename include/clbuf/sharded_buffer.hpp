// SPDX-License-Identifier: MIT
// clbuf::Partition (how a logical array is split over a DeviceGroup's devices) and
// clbuf::ShardedBuffer<T> (the array as one DeviceBuffer per device, optionally with ghost
// layers around each part for halo exchanges). The moves are DeviceGroup's (device_group.hpp).
#ifndef CLBUF_SHARDED_BUFFER_HPP
#define CLBUF_SHARDED_BUFFER_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/apportion.hpp>
#include <clbuf/detail/checks.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {

/// How a DeviceGroup splits `count` elements over its devices: evenly (the default) or in
/// proportion to `weights` (one per device, finite, >= 0, not all 0), in whole `unit`s of
/// elements (a row or a plane of a field; `count` must be a multiple of it). Split parts are
/// consecutive: device 0 holds the first part.
class Partition {
 public:
  /// An even split in units of one element.
  Partition() = default;

  /// An even split in whole `unit`s: each device gets units / devices, the first
  /// units % devices one more.
  static Partition even(std::size_t unit = 1) {
    Partition partition;
    partition.unit_ = unit;
    return partition;
  }

  /// A split in proportion to `weights` (one per device), in whole `unit`s: device i gets its
  /// exact share units * w_i / sum(w) rounded down, and the units that leaves (fewer than the
  /// devices) go one each to the largest exact remainders, the lower device first on a tie.
  /// Exact for every finite weight and every count: the parts sum to the count, a weight of 0
  /// gets 0 elements, equal weights get parts at most one unit apart, and a larger weight
  /// never gets fewer elements.
  static Partition weighted(std::vector<double> weights, std::size_t unit = 1) {
    Partition partition;
    partition.weights_ = std::move(weights);
    partition.unit_ = unit;
    partition.by_weight_ = true;
    return partition;
  }

  /// A copy of this partition whose shards hold at most `bytes` bytes each, ghost elements
  /// included: a device whose part is larger holds it as several shards (pieces), consecutive
  /// and in order, as evenly as whole units allow. 0 (the default), and anything above a
  /// device's CL_DEVICE_MAX_MEM_ALLOC_SIZE, mean that max allocation: a part larger than one
  /// allocation is held in pieces even without a cap.
  Partition max_shard_bytes(std::size_t bytes) const {
    Partition capped = *this;
    capped.max_shard_bytes_ = bytes;
    return capped;
  }
  /// The cap on a shard's bytes (0: the device's max allocation).
  std::size_t max_shard_bytes() const noexcept { return max_shard_bytes_; }

  /// Where the shards of an array go: shard k holds counts[k] elements of the array on device
  /// devices[k]; the shards are consecutive in the array and in device order.
  struct Placement {
    std::vector<std::size_t> devices;  ///< devices[k]: the device (group index) of shard k
    std::vector<std::size_t> counts;   ///< counts[k]: the array's elements shard k holds
  };

  /// The shards of `count` elements of `element_bytes` bytes, each with `ghost` ghost elements
  /// before and after, over devices whose max allocations are `max_alloc` (one per device):
  /// each device's part (split()) in the fewest shards of at most max_shard_bytes() bytes (at
  /// most its max allocation), at least one a device. @throws Error as split();
  /// CL_INVALID_BUFFER_SIZE when a shard of one unit and its ghost elements exceeds the cap.
  Placement place(const char* operation, std::size_t count, std::size_t element_bytes,
                  std::size_t ghost, const std::vector<std::uint64_t>& max_alloc) const {
    const std::vector<std::size_t> parts = split(operation, count, max_alloc.size());
    Placement placement;
    for (std::size_t d = 0; d < parts.size(); ++d) {
      const std::size_t units = parts[d] / unit_;
      const std::size_t most = units_per_shard(operation, element_bytes, ghost, max_alloc[d]);
      const std::size_t pieces = std::max<std::size_t>(1, units / most + (units % most != 0));
      for (std::size_t k = 0; k < pieces; ++k) {
        placement.devices.push_back(d);
        placement.counts.push_back((units / pieces + (k < units % pieces ? 1 : 0)) * unit_);
      }
    }
    return placement;
  }

  /// The weights (empty for an even split).
  const std::vector<double>& weights() const noexcept { return weights_; }
  /// Elements per indivisible unit.
  std::size_t unit() const noexcept { return unit_; }

  /// The element counts of `count` elements over `devices` devices.
  /// @throws Error CL_INVALID_VALUE for a unit of 0, a count that is not a multiple of it, a
  ///         weight count other than `devices` (an empty list included), a negative or
  ///         non-finite weight, all weights 0.
  std::vector<std::size_t> split(const char* operation, std::size_t count,
                                 std::size_t devices) const {
    check(operation, count, devices);
    const std::size_t units = count / unit_;
    std::vector<std::size_t> parts =
        by_weight_ ? detail::apportion(units, weights_) : split_even(units, devices);
    for (std::size_t& part : parts) part *= unit_;
    return parts;
  }

 private:
  void check(const char* operation, std::size_t count, std::size_t devices) const {
    if (unit_ == 0 || count % unit_ != 0) {
      detail::fail(operation, CL_INVALID_VALUE,
                   "a partition in units of " + std::to_string(unit_) + " elements cannot split " +
                       std::to_string(count) + " elements");
    }
    if (!by_weight_) return;
    if (weights_.size() != devices) {
      detail::fail(
          operation, CL_INVALID_VALUE,
          std::to_string(weights_.size()) + " weights for " + std::to_string(devices) + " devices");
    }
    for (std::size_t i = 0; i < weights_.size(); ++i) {
      if (!std::isfinite(weights_[i]) || weights_[i] < 0) {
        char value[32];
        std::snprintf(value, sizeof value, "%.17g", weights_[i]);
        detail::fail(
            operation, CL_INVALID_VALUE,
            "weight " + std::to_string(i) + " is " + value + " (weights must be finite and >= 0)");
      }
    }
    if (std::none_of(weights_.begin(), weights_.end(), [](double w) { return w > 0; })) {
      detail::fail(operation, CL_INVALID_VALUE, "every weight is 0");
    }
  }

  /// The most units a shard of a device of max allocation `max_alloc` may hold under the cap.
  std::size_t units_per_shard(const char* operation, std::size_t element_bytes, std::size_t ghost,
                              std::uint64_t max_alloc) const {
    std::uint64_t cap = max_alloc != 0 ? max_alloc : ~std::uint64_t{0};
    if (max_shard_bytes_ != 0) cap = std::min<std::uint64_t>(cap, max_shard_bytes_);
    const std::uint64_t elements = cap / element_bytes;
    const std::uint64_t ghosts = std::uint64_t{2} * ghost;
    if (elements <= ghosts || (elements - ghosts) / unit_ == 0) {
      detail::fail(operation, CL_INVALID_BUFFER_SIZE,
                   "a shard of at most " + std::to_string(cap) + " bytes (max_shard_bytes " +
                       std::to_string(max_shard_bytes_) + ", the device's max allocation " +
                       std::to_string(max_alloc) + ") holds no unit of " + std::to_string(unit_) +
                       " elements of " + std::to_string(element_bytes) + " bytes beside " +
                       std::to_string(ghosts) + " ghost elements");
    }
    const std::uint64_t units = (elements - ghosts) / unit_;
    return units > SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(units);
  }

  static std::vector<std::size_t> split_even(std::size_t units, std::size_t devices) {
    std::vector<std::size_t> parts(devices, devices == 0 ? 0 : units / devices);
    for (std::size_t i = 0; i < devices && i < units % devices; ++i) ++parts[i];
    return parts;
  }

  std::vector<double> weights_;
  std::size_t unit_ = 1;
  std::size_t max_shard_bytes_ = 0;  // 0: the device's max allocation
  bool by_weight_ = false;
};

class DeviceGroup;

/// A logical array of size() elements of T split over the devices of one DeviceGroup: shard(i)
/// is a DeviceBuffer of device(i) (for the application's kernels on manager(device(i))'s queue;
/// one shard a device unless a part exceeds Partition::max_shard_bytes()), holding the
/// elements [offset(i), offset(i) + count(i)) at element ghost() of it, with ghost() elements of
/// ghost layer before and after (0 unless made with a halo: then they hold the neighbouring
/// parts' edge elements after a ShardedHalo exchange). Move-only; made by DeviceGroup::scatter()
/// or allocate(); moved by the group's calls.
template <class T>
class ShardedBuffer {
 public:
  /// Holds nothing: valid() is false.
  ShardedBuffer() = default;
  ShardedBuffer(const ShardedBuffer&) = delete;
  ShardedBuffer& operator=(const ShardedBuffer&) = delete;
  /// Takes over `other`'s shards; `other` becomes invalid.
  ShardedBuffer(ShardedBuffer&& other) noexcept { take(other); }
  /// Releases this buffer's shards, then takes over `other`'s; `other` becomes invalid.
  ShardedBuffer& operator=(ShardedBuffer&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }

  /// Elements of the logical array.
  std::size_t size() const noexcept { return size_; }
  /// size() * sizeof(T).
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// True when the array has no element.
  bool empty() const noexcept { return size_ == 0; }
  /// False when default-constructed or moved from.
  bool valid() const noexcept { return group_ != 0; }
  /// How many shards: one a device, more on a device whose part exceeds the partition's
  /// max_shard_bytes() (or the device's max allocation).
  std::size_t shards() const noexcept { return shards_.size(); }
  /// The group's device that holds shard i (manager(device(i)) moves it; shards of one device
  /// are consecutive). @throws Error CL_INVALID_VALUE for i >= shards().
  std::size_t device(std::size_t i) const { return devices_[checked(i)]; }
  /// Ghost elements before and after each part in its shard (halo * partition unit).
  std::size_t ghost() const noexcept { return ghost_; }
  /// The partition it was split by.
  const Partition& partition() const noexcept { return partition_; }

  /// Shard i's buffer, on device(i): count(i) + 2 ghost() elements (empty when count(i) is 0
  /// and there is no ghost layer). @throws Error CL_INVALID_VALUE for i >= shards().
  DeviceBuffer<T>& shard(std::size_t i) { return shards_[checked(i)]; }
  /// Shard i's buffer. @throws Error CL_INVALID_VALUE for i >= shards().
  const DeviceBuffer<T>& shard(std::size_t i) const { return shards_[checked(i)]; }
  /// The first element of the logical array that shard i holds.
  /// @throws Error CL_INVALID_VALUE for i >= shards().
  std::size_t offset(std::size_t i) const { return offsets_[checked(i)]; }
  /// How many elements of the logical array shard i holds.
  /// @throws Error CL_INVALID_VALUE for i >= shards().
  std::size_t count(std::size_t i) const { return counts_[checked(i)]; }

 private:
  friend class DeviceGroup;

  ShardedBuffer(std::uint64_t group, std::vector<DeviceBuffer<T>> shards,
                Partition::Placement placement, std::size_t ghost, Partition partition)
      : group_(group),
        shards_(std::move(shards)),
        devices_(std::move(placement.devices)),
        counts_(std::move(placement.counts)),
        ghost_(ghost),
        partition_(std::move(partition)) {
    for (std::size_t count : counts_) {
      offsets_.push_back(size_);
      size_ += count;
    }
  }

  void take(ShardedBuffer& other) noexcept {
    group_ = std::exchange(other.group_, 0);
    shards_ = std::move(other.shards_);
    devices_ = std::move(other.devices_);
    counts_ = std::move(other.counts_);
    offsets_ = std::move(other.offsets_);
    size_ = std::exchange(other.size_, 0);
    ghost_ = std::exchange(other.ghost_, 0);
    partition_ = std::move(other.partition_);
    other.shards_.clear();
    other.devices_.clear();
    other.counts_.clear();
    other.offsets_.clear();
  }

  std::size_t checked(std::size_t i) const {
    if (i >= shards_.size()) {
      detail::fail("ShardedBuffer::shard", CL_INVALID_VALUE,
                   "shard " + std::to_string(i) + " of " + std::to_string(shards_.size()));
    }
    return i;
  }

  std::uint64_t group_ = 0;  // the DeviceGroup's id (0: none)
  std::vector<DeviceBuffer<T>> shards_;
  std::vector<std::size_t> devices_;  // shard i is on the group's device devices_[i]
  std::vector<std::size_t> counts_;
  std::vector<std::size_t> offsets_;
  std::size_t size_ = 0;
  std::size_t ghost_ = 0;
  Partition partition_;
};

}  // namespace clbuf

#endif  // CLBUF_SHARDED_BUFFER_HPP
