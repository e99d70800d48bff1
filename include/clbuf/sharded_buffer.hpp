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

  static std::vector<std::size_t> split_even(std::size_t units, std::size_t devices) {
    std::vector<std::size_t> parts(devices, devices == 0 ? 0 : units / devices);
    for (std::size_t i = 0; i < devices && i < units % devices; ++i) ++parts[i];
    return parts;
  }

  std::vector<double> weights_;
  std::size_t unit_ = 1;
  bool by_weight_ = false;
};

class DeviceGroup;

/// A logical array of size() elements of T split over the devices of one DeviceGroup: shard(i)
/// is device i's DeviceBuffer (for the application's kernels on manager(i)'s queue), holding the
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
  /// How many shards (the group's device count).
  std::size_t shards() const noexcept { return shards_.size(); }
  /// Ghost elements before and after each part in its shard (halo * partition unit).
  std::size_t ghost() const noexcept { return ghost_; }
  /// The partition it was split by.
  const Partition& partition() const noexcept { return partition_; }

  /// Device i's buffer: count(i) + 2 ghost() elements (empty when count(i) is 0 and there is
  /// no ghost layer). @throws Error CL_INVALID_VALUE for i >= shards().
  DeviceBuffer<T>& shard(std::size_t i) { return shards_[checked(i)]; }
  /// Device i's buffer. @throws Error CL_INVALID_VALUE for i >= shards().
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
                std::vector<std::size_t> counts, std::size_t ghost, Partition partition)
      : group_(group),
        shards_(std::move(shards)),
        counts_(std::move(counts)),
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
    counts_ = std::move(other.counts_);
    offsets_ = std::move(other.offsets_);
    size_ = std::exchange(other.size_, 0);
    ghost_ = std::exchange(other.ghost_, 0);
    partition_ = std::move(other.partition_);
    other.shards_.clear();
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
  std::vector<std::size_t> counts_;
  std::vector<std::size_t> offsets_;
  std::size_t size_ = 0;
  std::size_t ghost_ = 0;
  Partition partition_;
};

}  // namespace clbuf

#endif  // CLBUF_SHARDED_BUFFER_HPP
