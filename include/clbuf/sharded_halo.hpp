// SPDX-License-Identifier: MIT
// clbuf::ShardedHalo<T>: the halo exchange between the shards of a ShardedBuffer made with a
// halo (a field split along its slowest axis into slabs of whole rows or planes, each shard with
// ghost layers). Each shard's ghost elements receive the neighbouring parts' edge elements:
// within one context a device copy (BufferManager::copy_from_async of two views), between
// contexts a read into pinned host memory at start() and a write at finish(), so that the
// kernels queued between start() and finish() on the receiving device run meanwhile; between
// devices whose memory is the host's (the host model: CPU devices) a copy of host memory at
// finish(), as a command would only add its latency.
#ifndef CLBUF_SHARDED_HALO_HPP
#define CLBUF_SHARDED_HALO_HPP

#include <clbuf/device_group.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/sharded_buffer.hpp>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {

/// One copy of a halo exchange: `count` elements from element `from_offset` of shard `from` to
/// element `to_offset` of shard `to` (local offsets, ghost layers included).
struct ShardCopy {
  std::size_t from = 0;         ///< The shard whose own elements are sent.
  std::size_t from_offset = 0;  ///< Their first element in it.
  std::size_t to = 0;           ///< The shard whose ghost elements receive them.
  std::size_t to_offset = 0;    ///< The first ghost element in it.
  std::size_t count = 0;        ///< Elements.
};

/// The halo exchange of ShardedBuffers laid out as one (the same split and halo): after
/// finish(), each shard's ghost elements hold the logical array's elements next to its part
/// (those beyond the array's ends are left as they were). start() queues the copies after the
/// work queued on the devices before it and returns; finish() waits. Kernels that need no ghost
/// element run between them. Reusable: start()/finish() any number of times, on any buffer laid
/// out alike (both fields of a Jacobi ping-pong). Not for several threads at once.
template <class T>
class ShardedHalo {
 public:
  /// The plan for buffers of `group` laid out as `layout`.
  /// @throws Error CL_INVALID_VALUE for a buffer of another group or one without a halo.
  ShardedHalo(DeviceGroup& group, const ShardedBuffer<T>& layout) : group_(group) {
    const char* op = "ShardedHalo";
    group.check_member(op, layout);
    if (layout.ghost() == 0) {
      detail::fail(op, CL_INVALID_VALUE, "the ShardedBuffer has no ghost layer (made with halo 0)");
    }
    for (std::size_t i = 0; i < layout.shards(); ++i) {
      counts_.push_back(layout.count(i));
      devices_.push_back(layout.device(i));
    }
    ghost_ = layout.ghost();
    plan(layout);
    for (const ShardCopy& copy : copies_) {
      const bool host = manager_of(copy.from).memory_model() == MemoryModel::host &&
                        manager_of(copy.to).memory_model() == MemoryModel::host;
      const bool shared = group.shares_context(devices_[copy.from], devices_[copy.to]);
      modes_.push_back(host ? Mode::host_copy : shared ? Mode::device_copy : Mode::pinned);
      pinned_.push_back(modes_.back() == Mode::pinned
                            ? manager_of(copy.to).template allocate_pinned<T>(copy.count)
                            : PinnedBuffer<T>());
    }
  }

  ShardedHalo(const ShardedHalo&) = delete;
  ShardedHalo& operator=(const ShardedHalo&) = delete;
  /// Waits for an exchange still under way (errors ignored).
  ~ShardedHalo() { futures_.clear(); }

  /// The copies each exchange makes.
  const std::vector<ShardCopy>& copies() const noexcept { return copies_; }

  /// Starts the exchange of `field`, which must stay alive until finish() has returned.
  /// @throws Error CL_INVALID_VALUE for a buffer of another group or laid out otherwise;
  ///         CL_INVALID_OPERATION while an exchange is under way; as the managers' calls (then
  ///         nothing is left under way).
  void start(ShardedBuffer<T>& field) {
    const char* op = "ShardedHalo::start";
    check(op, field);
    if (field_ != nullptr) detail::fail(op, CL_INVALID_OPERATION, "an exchange is under way");
    try {
      for (std::size_t k = 0; k < copies_.size(); ++k) begin(k, field);
    } catch (...) {
      futures_.clear();  // each waits
      throw;
    }
    field_ = &field;
  }

  /// Ends the exchange started last: once each read between contexts has landed in its pinned
  /// chunk, the chunk is written into the receiving shard; then every copy is waited for.
  /// Nothing to do when none is under way.
  /// @throws Error as the first copy that failed, once all have ended.
  void finish() {
    if (field_ == nullptr) return;
    ShardedBuffer<T>& field = *field_;
    field_ = nullptr;
    std::vector<Future<void>> started = std::move(futures_);
    futures_.clear();
    std::exception_ptr first;
    for (std::size_t k = 0; k < started.size(); ++k) {
      try {
        started[k].wait();
        const ShardCopy& copy = copies_[k];
        if (modes_[k] == Mode::host_copy) copy_now(copy, field);
        if (modes_[k] != Mode::pinned) continue;  // done
        started[k] = manager_of(copy.to).upload_async(field.shard(copy.to), pinned_[k].data(),
                                                      copy.count, copy.to_offset);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    for (Future<void>& written : started) {
      try {
        written.wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  /// start(), then finish().
  void exchange(ShardedBuffer<T>& field) {
    start(field);
    finish();
  }

 private:
  /// The copies that fill each shard's ghost elements below and above its part.
  void plan(const ShardedBuffer<T>& layout) {
    for (std::size_t to = 0; to < layout.shards(); ++to) {
      const std::size_t first = layout.offset(to);
      const std::size_t last = first + layout.count(to);
      const std::size_t low = first >= ghost_ ? first - ghost_ : 0;
      const std::size_t high = std::min(last + ghost_, layout.size());
      add_copies(layout, to, low, first);  // the ghost layer below
      add_copies(layout, to, last, high);  // and above
    }
  }

  /// The copies of the array's elements [begin, end) from the shards that own them into shard
  /// `to`'s ghost elements.
  void add_copies(const ShardedBuffer<T>& layout, std::size_t to, std::size_t begin,
                  std::size_t end) {
    for (std::size_t from = 0; from < layout.shards() && begin < end; ++from) {
      const std::size_t own_first = layout.offset(from);
      const std::size_t own_last = own_first + layout.count(from);
      const std::size_t a = std::max(begin, own_first);
      const std::size_t b = std::min(end, own_last);
      if (from == to || a >= b) continue;
      // Element x of the array is element x + ghost - offset of a shard (its part and ghosts).
      copies_.push_back(
          {from, ghost_ + (a - own_first), to, a + ghost_ - layout.offset(to), b - a});
    }
  }

  /// Starts copy k: a device copy, or a read into its pinned chunk (a host copy waits for
  /// finish(): an empty Future).
  void begin(std::size_t k, ShardedBuffer<T>& field) {
    const ShardCopy& copy = copies_[k];
    BufferManager& from = manager_of(copy.from);
    BufferManager& to = manager_of(copy.to);
    if (modes_[k] == Mode::host_copy) {
      futures_.emplace_back();
    } else if (modes_[k] == Mode::device_copy) {
      DeviceBuffer<T> src = from.view(field.shard(copy.from), copy.from_offset, copy.count);
      DeviceBuffer<T> dst = to.view(field.shard(copy.to), copy.to_offset, copy.count);
      futures_.push_back(to.copy_from_async(from, src, dst));
    } else {
      futures_.push_back(from.download_async(field.shard(copy.from), pinned_[k].data(), copy.count,
                                             copy.from_offset));
    }
  }

  /// Copy `copy` now (blocking): between host-model devices a copy of host memory, which a
  /// command would only slow down.
  void copy_now(const ShardCopy& copy, ShardedBuffer<T>& field) {
    BufferManager& from = manager_of(copy.from);
    BufferManager& to = manager_of(copy.to);
    DeviceBuffer<T> src = from.view(field.shard(copy.from), copy.from_offset, copy.count);
    DeviceBuffer<T> dst = to.view(field.shard(copy.to), copy.to_offset, copy.count);
    to.copy_from(from, src, dst);
  }

  void check(const char* operation, const ShardedBuffer<T>& field) const {
    group_.check_member(operation, field);
    bool alike = field.ghost() == ghost_ && field.shards() == counts_.size();
    for (std::size_t i = 0; alike && i < counts_.size(); ++i) {
      alike = field.count(i) == counts_[i] && field.device(i) == devices_[i];
    }
    if (!alike) {
      detail::fail(operation, CL_INVALID_VALUE,
                   "the ShardedBuffer is laid out otherwise than the plan's (split or halo)");
    }
  }

  /// The manager of shard `shard`'s device.
  BufferManager& manager_of(std::size_t shard) const { return group_.manager(devices_[shard]); }

  DeviceGroup& group_;
  std::vector<std::size_t> counts_;
  std::vector<std::size_t> devices_;  // each shard's device
  std::size_t ghost_ = 0;
  /// How a copy moves: between host-model devices at finish(), host memory to host memory;
  /// within a context a device copy from start(); else a read into a pinned chunk at start()
  /// and a write at finish().
  enum class Mode { host_copy, device_copy, pinned };

  std::vector<ShardCopy> copies_;
  std::vector<Mode> modes_;
  std::vector<PinnedBuffer<T>> pinned_;  // per copy: its host chunk (empty: a device copy)
  std::vector<Future<void>> futures_;
  ShardedBuffer<T>* field_ = nullptr;  // under way
};

}  // namespace clbuf

#endif  // CLBUF_SHARDED_HALO_HPP
