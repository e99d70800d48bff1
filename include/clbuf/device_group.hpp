// SPDX-License-Identifier: MIT
// clbuf::DeviceGroup: one BufferManager per device of a selection, and the moves of a
// ShardedBuffer (scatter, gather, upload, download, copy, fill) over all of them at once: each
// shard moves through its own manager (its own staging lane and background thread), so the host
// copies of one shard never wait for another's DMA. The blocking forms run each device's
// blocking call, on a thread a device when the move is large; the _async forms join the shards'
// Futures into one (detail/joined_future.hpp).
#ifndef CLBUF_DEVICE_GROUP_HPP
#define CLBUF_DEVICE_GROUP_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/group.hpp>
#include <clbuf/detail/joined_future.hpp>
#include <clbuf/detail/shard_moves.hpp>
#include <clbuf/detail/worker_pool.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/options.hpp>
#include <clbuf/sharded_buffer.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {

template <class T>
class ShardedHalo;

/// Which devices of a DeviceGroup share an OpenCL context.
enum class ContextSharing {
  per_platform,  ///< the group's devices of one platform share one context (default): copies
                 ///< between them are device copies (clEnqueueCopyBuffer)
  per_device,    ///< a context per device: copies between them go through pinned host chunks
};

/// Several devices in one process: one BufferManager per device (manager(i)), and the moves of
/// a ShardedBuffer over all of them. Not copyable, not movable (ShardedHalo and the managers'
/// users refer to it). Every call may be made from several threads at once, as a manager's.
class DeviceGroup {
 public:
  /// The devices `selector` names, in list_devices() order (a list: in its order); the grammar
  /// ("", "all", a type, "P:D", a list "s1, s2", part of a name) is docs/design.md's "Which
  /// devices".
  /// @throws Error CL_DEVICE_NOT_FOUND when nothing matches (naming every device);
  ///         CL_INVALID_VALUE for a list that names a device twice; as BufferManager's
  ///         constructor.
  explicit DeviceGroup(const std::string& selector = std::string(),
                       const Options& options = Options(),
                       ContextSharing sharing = ContextSharing::per_platform)
      : sharing_(sharing) {
    detail::guard_host_memory("DeviceGroup", [&] {
      open(detail::select_group("DeviceGroup", selector, report_), options);
    });
  }

  /// The listed devices (as list_devices() gives them), in this order.
  /// @throws Error CL_DEVICE_NOT_FOUND for a device no platform has; CL_INVALID_VALUE for an
  ///         empty list or a device listed twice.
  explicit DeviceGroup(const std::vector<DeviceInfo>& devices, const Options& options = Options(),
                       ContextSharing sharing = ContextSharing::per_platform)
      : sharing_(sharing) {
    detail::guard_host_memory("DeviceGroup", [&] {
      open(detail::select_group_devices("DeviceGroup", devices, report_), options);
    });
  }

  /// Adopts the application's managers (shared with it), in this order.
  /// @throws Error CL_INVALID_VALUE for an empty list, a null manager or one listed twice.
  explicit DeviceGroup(std::vector<std::shared_ptr<BufferManager>> managers)
      : sharing_(ContextSharing::per_device), managers_(std::move(managers)) {
    detail::guard_host_memory(
        "DeviceGroup", [&] { report_ = detail::adopted_group_report("DeviceGroup", managers_); });
  }

  DeviceGroup(const DeviceGroup&) = delete;
  DeviceGroup& operator=(const DeviceGroup&) = delete;

  /// How many devices.
  std::size_t size() const noexcept { return managers_.size(); }
  /// Device i's manager. @throws Error CL_INVALID_VALUE for i >= size().
  BufferManager& manager(std::size_t i) const { return *managers_[checked(i)]; }
  /// Every device with its verdict: picked (in the group) or why not.
  const SelectionReport& explain_selection() const noexcept { return report_; }
  /// How contexts were made (adopted managers: per_device, whatever they share).
  ContextSharing sharing() const noexcept { return sharing_; }
  /// True when devices i and j share one OpenCL context (copies between them are device copies).
  /// @throws Error CL_INVALID_VALUE for an index >= size().
  bool shares_context(std::size_t i, std::size_t j) const {
    return managers_[checked(i)]->context()() == managers_[checked(j)]->context()();
  }

  /// @name Sharded buffers
  /// Each call moves every shard at once and returns when all have moved; the _async forms
  /// return at once with one Future (its event() is of manager(0)'s context). A call checks
  /// every argument before it moves a byte: a ShardedBuffer of another group, a moved-from one,
  /// a wrong count or a null pointer is an Error that changed nothing.
  /// @{

  /// A ShardedBuffer of `count` elements split by `partition`, each shard with `halo` units of
  /// ghost elements before and after its part (contents unspecified).
  /// @throws Error as Partition::split(); as BufferManager::allocate().
  template <class T>
  ShardedBuffer<T> allocate(std::size_t count, const Partition& partition = Partition(),
                            std::size_t halo = 0) {
    return detail::guard_host_memory("DeviceGroup::allocate", [&] {
      return make<T>("DeviceGroup::allocate", count, partition, halo);
    });
  }

  /// The `count` elements at `data` split over the devices by `partition`; with a `halo`, each
  /// shard's ghost elements hold the neighbouring elements of the array (T() beyond its ends).
  /// Nothing is left when it fails.
  /// @throws Error as allocate(); CL_INVALID_VALUE for a null `data` with count > 0; as the
  ///         managers' uploads.
  template <class T>
  ShardedBuffer<T> scatter(const T* data, std::size_t count,
                           const Partition& partition = Partition(), std::size_t halo = 0) {
    const char* op = "DeviceGroup::scatter";
    return detail::guard_host_memory(op, [&] {
      detail::check_host_pointer(op, data, count);
      return halo == 0 ? scatter_parts(op, data, count, partition)
                       : scatter_with_halo(op, data, count, partition, halo);
    });
  }
  /// scatter() of a vector.
  template <class T>
  ShardedBuffer<T> scatter(const std::vector<T>& data, const Partition& partition = Partition(),
                           std::size_t halo = 0) {
    return scatter(data.data(), data.size(), partition, halo);
  }
  /// As scatter(), returning at once; `data` must stay alive and unchanged until it completes.
  template <class T>
  Future<ShardedBuffer<T>> scatter_async(const T* data, std::size_t count,
                                         const Partition& partition = Partition(),
                                         std::size_t halo = 0) {
    const char* op = "DeviceGroup::scatter";
    return detail::guard_host_memory(op, [&] {
      detail::check_host_pointer(op, data, count);
      ShardedBuffer<T> out = make<T>(op, count, partition, halo);
      std::vector<Future<void>> parts = detail::start_spans(op, managers_, out, data, true);
      return detail::joined<ShardedBuffer<T>>(op, managers_.front()->context()(), std::move(parts),
                                              std::move(out));
    });
  }
  /// As scatter(), returning at once; the Future owns `data`.
  template <class T>
  Future<ShardedBuffer<T>> scatter_async(std::vector<T> data,
                                         const Partition& partition = Partition(),
                                         std::size_t halo = 0) {
    auto kept = std::make_shared<std::vector<T>>(std::move(data));
    Future<ShardedBuffer<T>> started = scatter_async(kept->data(), kept->size(), partition, halo);
    return detail::keeping(std::move(started), std::move(kept));
  }

  /// Writes `count` elements (exactly buffer.size()) from `data` into `buffer` as scatter()
  /// writes a new one: each shard's part and its ghost elements (the array's neighbouring
  /// elements, T() beyond its ends). For a buffer made by allocate() (or to refresh the ghost
  /// elements from the host).
  /// @throws Error as upload().
  template <class T>
  void scatter_into(ShardedBuffer<T>& buffer, const T* data, std::size_t count) {
    const char* op = "DeviceGroup::scatter_into";
    detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      detail::check_same_size(op, count, buffer.size());
      detail::check_host_pointer(op, data, count);
      detail::write_spans(op, managers_, workers_, buffer, data);
    });
  }
  /// As scatter_into(), returning at once; `data` must stay alive and unchanged until it
  /// completes.
  template <class T>
  Future<void> scatter_into_async(ShardedBuffer<T>& buffer, const T* data, std::size_t count) {
    const char* op = "DeviceGroup::scatter_into";
    return detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      detail::check_same_size(op, count, buffer.size());
      detail::check_host_pointer(op, data, count);
      return detail::joined<void>(op, managers_.front()->context()(),
                                  detail::start_spans(op, managers_, buffer, data, true));
    });
  }

  /// The logical array of `buffer` (its ghost elements left out), in order.
  /// @throws Error for a buffer of another group; as the managers' downloads.
  template <class T>
  std::vector<T> gather(const ShardedBuffer<T>& buffer) {
    const char* op = "DeviceGroup::gather";
    return detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      std::vector<T> out(buffer.size());
      detail::read_parts(op, managers_, workers_, buffer, out.data());
      return out;
    });
  }
  /// As gather(), returning at once.
  template <class T>
  Future<std::vector<T>> gather_async(const ShardedBuffer<T>& buffer) {
    const char* op = "DeviceGroup::gather";
    return detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      std::vector<T> out(buffer.size());
      std::vector<Future<void>> parts = detail::start_reads(op, managers_, buffer, out.data());
      return detail::joined<std::vector<T>>(op, managers_.front()->context()(), std::move(parts),
                                            std::move(out));
    });
  }

  /// Writes `count` elements (exactly buffer.size()) from `data` into the shards' parts; the
  /// ghost elements are left as they were.
  /// @throws Error CL_INVALID_VALUE for another count; as scatter().
  template <class T>
  void upload(ShardedBuffer<T>& buffer, const T* data, std::size_t count) {
    const char* op = "DeviceGroup::upload";
    detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      detail::check_same_size(op, count, buffer.size());
      detail::check_host_pointer(op, data, count);
      every_shard(op, buffer, [&](std::size_t i) {
        managers_[buffer.device(i)]->upload(buffer.shard(i), data + buffer.offset(i),
                                            buffer.count(i), buffer.ghost());
      });
    });
  }
  /// upload() of a vector.
  template <class T>
  void upload(ShardedBuffer<T>& buffer, const std::vector<T>& data) {
    upload(buffer, data.data(), data.size());
  }
  /// As upload(), returning at once; `data` must stay alive and unchanged until it completes.
  template <class T>
  Future<void> upload_async(ShardedBuffer<T>& buffer, const T* data, std::size_t count) {
    const char* op = "DeviceGroup::upload";
    return detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      detail::check_same_size(op, count, buffer.size());
      detail::check_host_pointer(op, data, count);
      return detail::joined<void>(op, managers_.front()->context()(),
                                  detail::start_spans(op, managers_, buffer, data, false));
    });
  }

  /// Reads the logical array (exactly buffer.size() elements) into `out`.
  /// @throws Error CL_INVALID_VALUE for another count or a null `out`; as gather().
  template <class T>
  void download(const ShardedBuffer<T>& buffer, T* out, std::size_t count) {
    const char* op = "DeviceGroup::download";
    detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      detail::check_same_size(op, buffer.size(), count);
      detail::check_host_pointer(op, out, count);
      detail::read_parts(op, managers_, workers_, buffer, out);
    });
  }
  /// As download(), returning at once; `out` must stay alive until it completes.
  template <class T>
  Future<void> download_async(const ShardedBuffer<T>& buffer, T* out, std::size_t count) {
    const char* op = "DeviceGroup::download";
    return detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      detail::check_same_size(op, buffer.size(), count);
      detail::check_host_pointer(op, out, count);
      return each_shard_async(op, buffer, [&](std::size_t i) {
        return managers_[buffer.device(i)]->download_async(buffer.shard(i), out + buffer.offset(i),
                                                           buffer.count(i), buffer.ghost());
      });
    });
  }

  /// Copies `src`'s logical array into `dst`'s, shard by shard on each device (both split alike:
  /// the same count on each device; ghost elements are not copied).
  /// @throws Error CL_INVALID_VALUE for buffers split differently or of another group; as the
  ///         managers' copies.
  template <class T>
  void copy(const ShardedBuffer<T>& src, ShardedBuffer<T>& dst) {
    const char* op = "DeviceGroup::copy";
    detail::guard_host_memory(op, [&] {
      check_alike(op, src, dst);
      every_shard(op, src, [&](std::size_t i) {
        managers_[src.device(i)]->copy_bytes(src.shard(i), dst.shard(i), src.count(i) * sizeof(T),
                                             src.ghost() * sizeof(T), dst.ghost() * sizeof(T));
      });
    });
  }
  /// As copy(), returning at once.
  template <class T>
  Future<void> copy_async(const ShardedBuffer<T>& src, ShardedBuffer<T>& dst) {
    const char* op = "DeviceGroup::copy";
    return detail::guard_host_memory(op, [&] {
      check_alike(op, src, dst);
      return each_shard_async(op, src, [&](std::size_t i) {
        return managers_[src.device(i)]->copy_bytes_async(
            src.shard(i), dst.shard(i), src.count(i) * sizeof(T), src.ghost() * sizeof(T),
            dst.ghost() * sizeof(T));
      });
    });
  }

  /// Sets every element of the logical array to `value` (ghost elements left as they were).
  /// @throws Error for a buffer of another group; as the managers' fills.
  template <class T>
  void fill(ShardedBuffer<T>& buffer, const T& value) {
    const char* op = "DeviceGroup::fill";
    detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      every_shard(op, buffer, [&](std::size_t i) {
        managers_[buffer.device(i)]->fill(buffer.shard(i), value, buffer.count(i), buffer.ghost());
      });
    });
  }
  /// As fill(), returning at once.
  template <class T>
  Future<void> fill_async(ShardedBuffer<T>& buffer, const T& value) {
    const char* op = "DeviceGroup::fill";
    return detail::guard_host_memory(op, [&] {
      check_member(op, buffer);
      return each_shard_async(op, buffer, [&](std::size_t i) {
        return managers_[buffer.device(i)]->fill_async(buffer.shard(i), value, buffer.count(i),
                                                       buffer.ghost());
      });
    });
  }

  /// Throws unless `a` and `b` are ShardedBuffers of this group split alike (the same count on
  /// each device), as copy() checks them; counts in elements of `element_bytes` (a
  /// ShardedBuffer<std::uint8_t> holding elements of a size known at run time, as Python's do).
  /// @throws Error CL_INVALID_VALUE naming `operation`.
  template <class T>
  void check_alike(const char* operation, const ShardedBuffer<T>& a, const ShardedBuffer<T>& b,
                   std::size_t element_bytes = sizeof(T)) const {
    check_member(operation, a);
    check_member(operation, b);
    const std::size_t unit = std::max<std::size_t>(element_bytes / sizeof(T), 1);
    if (a.shards() != b.shards()) {
      detail::fail(operation, CL_INVALID_VALUE,
                   "the buffers are split differently: " + std::to_string(a.shards()) + " and " +
                       std::to_string(b.shards()) + " shards");
    }
    for (std::size_t i = 0; i < a.shards(); ++i) {
      if (a.count(i) != b.count(i) || a.device(i) != b.device(i)) {
        detail::fail(operation, CL_INVALID_VALUE,
                     "the buffers are split differently: " + detail::shard_label(a, i, size()) +
                         " holds " + std::to_string(a.count(i) / unit) + " and " +
                         std::to_string(b.count(i) / unit) + " elements");
      }
    }
  }

  /// Per-shard work of your own over `buffer` (a typed fill, a kernel): start(i), returning a
  /// Future<void>, for each shard i that holds a part (count(i) > 0; on manager(buffer.device(i))),
  /// their Futures joined into one as the _async calls join theirs. An Error start(i) throws
  /// names `operation` and shard i's device; the parts already started are waited for.
  template <class T, class Start>
  Future<void> each_shard_async(const char* operation, const ShardedBuffer<T>& buffer,
                                Start start) {
    std::vector<Future<void>> parts = detail::start_parts(operation, managers_, buffer, start);
    return detail::joined<void>(operation, managers_.front()->context()(), std::move(parts));
  }
  /// As each_shard_async(), blocking: each(i) for each shard that holds a part, the devices on
  /// the group's threads at once when the buffer is large (as upload()), a device's shards in
  /// order; returns when all have. @throws Error as the first each(i) that failed, naming its
  /// device.
  template <class T, class Each>
  void each_shard(const char* operation, const ShardedBuffer<T>& buffer, Each each) {
    detail::every_group_shard(operation, managers_, workers_, buffer, buffer.size_bytes(),
                              [&](std::size_t i) {
                                if (buffer.count(i) != 0) each(i);
                              });
  }
  /// @}

  /// Waits for everything queued on every device (BufferManager::finish() of each).
  /// @throws Error as the first failing finish(), after all have been called.
  void finish() {
    std::exception_ptr first;
    for (const auto& manager : managers_) {
      try {
        manager->finish();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

 private:
  template <class T>
  friend class ShardedHalo;

  std::size_t checked(std::size_t i) const { return detail::group_index(i, managers_.size()); }

  /// The managers of the picked devices (detail/group.hpp: their contexts and queues).
  void open(const std::vector<detail::DeviceEntry>& picked, const Options& options) {
    managers_ = detail::open_group("DeviceGroup", picked, options,
                                   sharing_ == ContextSharing::per_platform);
  }

  /// A ShardedBuffer of `count` elements in shards of this group (contents unspecified).
  template <class T>
  ShardedBuffer<T> make(const char* operation, std::size_t count, const Partition& partition,
                        std::size_t halo) {
    const std::size_t ghost = detail::group_product(operation, halo, partition.unit());
    const std::size_t ghosts = detail::group_product(operation, ghost, 2);
    Partition::Placement placement =
        detail::place_shards<T>(operation, managers_, count, partition, ghost);
    std::vector<DeviceBuffer<T>> shards;
    for (std::size_t k = 0; k < placement.counts.size(); ++k) {
      const std::size_t n = placement.counts[k], d = placement.devices[k];
      if (n > SIZE_MAX - ghosts) detail::fail_overflow(operation, n, sizeof(T));
      shards.push_back(detail::on_group_device(
          operation, d, *managers_[d], [&] { return managers_[d]->allocate<T>(n + ghosts); }));
    }
    return ShardedBuffer<T>(id_, std::move(shards), std::move(placement), ghost, partition);
  }

  /// scatter() without a halo: each shard a new buffer uploaded from its part (fresh memory,
  /// which a host-model device fills without waiting for its queue).
  template <class T>
  ShardedBuffer<T> scatter_parts(const char* operation, const T* data, std::size_t count,
                                 const Partition& partition) {
    Partition::Placement placement =
        detail::place_shards<T>(operation, managers_, count, partition, 0);
    const std::size_t n = placement.counts.size();
    std::vector<std::size_t> offsets(n, 0);
    for (std::size_t k = 1; k < n; ++k) offsets[k] = offsets[k - 1] + placement.counts[k - 1];
    std::vector<DeviceBuffer<T>> shards(n);
    every_device(operation, count * sizeof(T), [&](std::size_t d) {
      for (std::size_t k = 0; k < n; ++k) {
        if (placement.devices[k] != d) continue;
        shards[k] = managers_[d]->upload(data + offsets[k], placement.counts[k]);
      }
    });
    return ShardedBuffer<T>(id_, std::move(shards), std::move(placement), 0, partition);
  }

  /// scatter() with a halo: each shard allocated, its part and ghost elements written.
  template <class T>
  ShardedBuffer<T> scatter_with_halo(const char* operation, const T* data, std::size_t count,
                                     const Partition& partition, std::size_t halo) {
    ShardedBuffer<T> out = make<T>(operation, count, partition, halo);
    detail::write_spans(operation, managers_, workers_, out, data);
    return out;
  }

  /// each(i) for every device (detail::every_group_device: on the group's threads when large).
  template <class Each>
  void every_device(const char* operation, std::size_t bytes, Each each) {
    detail::every_group_device(operation, managers_, workers_, bytes, each);
  }
  /// each(k) for every shard k of `buffer` (detail::every_group_shard).
  template <class T, class Each>
  void every_shard(const char* operation, const ShardedBuffer<T>& buffer, Each each) {
    detail::every_group_shard(operation, managers_, workers_, buffer, buffer.size_bytes(), each);
  }

  template <class T>
  void check_member(const char* operation, const ShardedBuffer<T>& buffer) const {
    if (!buffer.valid()) {
      detail::fail(operation, CL_INVALID_VALUE, "the ShardedBuffer holds nothing (moved from?)");
    }
    if (buffer.group_ != id_) {
      detail::fail(operation, CL_INVALID_VALUE, "the ShardedBuffer belongs to another DeviceGroup");
    }
  }

  static std::uint64_t next_id() noexcept {
    static std::atomic<std::uint64_t> last{0};
    return ++last;
  }

  ContextSharing sharing_ = ContextSharing::per_platform;
  std::vector<std::shared_ptr<BufferManager>> managers_;
  SelectionReport report_;
  std::uint64_t id_ = next_id();
  detail::WorkerPool workers_{16};  // one thread a device, started on first use
};

}  // namespace clbuf

#endif  // CLBUF_DEVICE_GROUP_HPP
