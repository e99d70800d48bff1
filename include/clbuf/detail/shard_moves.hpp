// SPDX-License-Identifier: MIT
// What each device does in a DeviceGroup's move of a ShardedBuffer: the running of a call on every
// device (on the group's threads at once when large; every error naming its device), what a
// scatter writes into each shard (ScatterSpan: a plain record made before anything moves), and
// the per-shard calls of the group's moves: each shard through its own manager's public calls.
#ifndef CLBUF_DETAIL_SHARD_MOVES_HPP
#define CLBUF_DETAIL_SHARD_MOVES_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/worker_pool.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/sharded_buffer.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace clbuf {
namespace detail {

/// A group's managers, device i's at i.
using GroupManagers = std::vector<std::shared_ptr<BufferManager>>;

// ---- What a scatter writes into each shard ---------------------------------------------------

/// What a scatter writes into one shard (elements of T): the array's elements [first, end) at
/// element `at` of the shard, and T() in its first `fill_before` elements and in its elements
/// [fill_from, total). Without ghost elements only the part: fill_before 0, fill_from total.
struct ScatterSpan {
  std::size_t first = 0;        ///< the first element of the array written (an index)
  std::size_t end = 0;          ///< one past the last element of the array written (an index)
  std::size_t at = 0;           ///< where element `first` lands in the shard (an index)
  std::size_t fill_before = 0;  ///< T() elements at the shard's start (a count)
  std::size_t fill_from = 0;    ///< T() from this element of the shard to its end (an index)
  std::size_t total = 0;        ///< the shard's elements (a count)
};

/// The ScatterSpan of the shard holding the array's elements [offset, offset + count) at element
/// `ghost` of its `total` elements, in an array of `size` elements; with `ghosts`, its ghost
/// elements too (the array's neighbouring elements, T() beyond its ends).
inline ScatterSpan scatter_span(std::size_t offset, std::size_t count, std::size_t ghost,
                                std::size_t size, std::size_t total, bool ghosts) {
  const std::size_t g = ghosts ? ghost : 0;
  ScatterSpan span;
  span.first = offset >= g ? offset - g : 0;
  span.end = std::min(offset + count + g, size);
  span.at = ghost - (offset - span.first);
  span.fill_before = ghosts ? span.at : 0;
  span.total = total;
  span.fill_from = ghosts ? span.at + (span.end - span.first) : total;
  return span;
}

// ---- A call on each device -------------------------------------------------------------------

/// f() for device i (of `manager`): its clbuf::Error names `operation` and the device first, as
/// every error of a group's call does ("op: CL_NAME (code): device 1 (<name>): ...").
template <class F>
auto on_group_device(const char* operation, std::size_t i, const BufferManager& manager, F f)
    -> decltype(f()) {
  try {
    return f();
  } catch (const Error& error) {
    throw Error(error.code(), error_message(operation, error.code(),
                                            "device " + std::to_string(i) + " (" +
                                                manager.device().name + "): " + error.what()));
  }
}

/// Moves of at least this many bytes a device run on the devices at once.
inline constexpr std::size_t group_parallel_bytes = std::size_t{1} << 20;

/// each(i) for every device of `managers`, on `workers` at once when the move is large (one
/// device per thread; the calling thread too) and some device's bytes cross a bus of its own,
/// else one after the other on this thread: between host memory and host-model devices (CPU
/// devices) each call's copy already runs on the manager's copy threads over the one memory
/// bus, and two at once only contend (PoCL, 2 devices: 64 MiB uploads 1.15x slower). Every
/// device's call ends before it returns.
/// @throws Error as the first call that failed (naming its device).
template <class Each>
void every_group_device(const char* operation, const GroupManagers& managers, WorkerPool& workers,
                        std::size_t bytes, Each each) {
  const std::size_t n = managers.size();
  std::atomic<std::size_t> next{0};
  std::mutex failed;
  std::exception_ptr first;
  auto task = [&](unsigned) {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        on_group_device(operation, i, *managers[i], [&] { each(i); });
      } catch (...) {
        std::lock_guard<std::mutex> lock(failed);
        if (!first) first = std::current_exception();
      }
    }
  };
  const bool all_host_model = std::all_of(managers.begin(), managers.end(), [](const auto& m) {
    return m->memory_model() == MemoryModel::host;
  });
  if (n > 1 && bytes / n >= group_parallel_bytes && !all_host_model) {
    workers.run(static_cast<unsigned>(n), task);
  } else {
    task(0u);
  }
  if (first) std::rethrow_exception(first);
}

/// each(k) for every shard k of `buffer`, as every_group_device() runs each device's call: a
/// device's shards one after the other, in order, on its thread (an error names the device).
template <class T, class Each>
void every_group_shard(const char* operation, const GroupManagers& managers, WorkerPool& workers,
                       const ShardedBuffer<T>& buffer, std::size_t bytes, Each each) {
  every_group_device(operation, managers, workers, bytes, [&](std::size_t d) {
    for (std::size_t k = 0; k < buffer.shards(); ++k) {
      if (buffer.device(k) == d) each(k);
    }
  });
}

/// Where `partition` puts the shards of `count` elements of T with `ghost` ghost elements on the
/// devices of `managers` (each device's largest allocation bounds its shards).
template <class T>
Partition::Placement place_shards(const char* operation, const GroupManagers& managers,
                                  std::size_t count, const Partition& partition,
                                  std::size_t ghost) {
  std::vector<std::uint64_t> max_alloc;
  for (const auto& manager : managers) max_alloc.push_back(manager->device().max_alloc_bytes);
  return partition.place(operation, count, sizeof(T), ghost, max_alloc);
}

/// "device d" for a buffer with a shard a device (of `devices`), else "shard k (device d)".
template <class T>
std::string shard_label(const ShardedBuffer<T>& buffer, std::size_t k, std::size_t devices) {
  const std::string device = "device " + std::to_string(buffer.device(k));
  return buffer.shards() == devices ? device : "shard " + std::to_string(k) + " (" + device + ")";
}

// ---- The per-shard calls of the group's moves -------------------------------------------------

/// The ScatterSpan of shard i of `buffer` (with `ghosts`: its ghost elements too).
template <class T>
ScatterSpan span_of(const ShardedBuffer<T>& buffer, std::size_t i, bool ghosts) {
  return scatter_span(buffer.offset(i), buffer.count(i), buffer.ghost(), buffer.size(),
                      buffer.shard(i).size(), ghosts);
}

/// Writes each shard's part of `data` and its ghost elements (the array's neighbouring elements,
/// T() beyond its ends), blocking (every_group_device()).
template <class T>
void write_spans(const char* operation, const GroupManagers& managers, WorkerPool& workers,
                 ShardedBuffer<T>& buffer, const T* data) {
  every_group_shard(operation, managers, workers, buffer, buffer.size_bytes(), [&](std::size_t i) {
    const ScatterSpan span = span_of(buffer, i, true);
    BufferManager& manager = *managers[buffer.device(i)];
    DeviceBuffer<T>& shard = buffer.shard(i);
    if (span.end > span.first) {
      manager.upload(shard, data + span.first, span.end - span.first, span.at);
    }
    if (span.fill_before > 0) manager.fill(shard, T(), span.fill_before, 0);
    if (span.fill_from < span.total) {
      manager.fill(shard, T(), span.total - span.fill_from, span.fill_from);
    }
  });
}

/// Starts each shard's upload of its part of `data` (with `ghosts`: and its ghost elements, the
/// array's neighbouring elements and T() beyond its ends): the started Futures.
template <class T>
std::vector<Future<void>> start_spans(const char* operation, const GroupManagers& managers,
                                      ShardedBuffer<T>& buffer, const T* data, bool ghosts) {
  std::vector<Future<void>> parts;
  for (std::size_t i = 0; i < buffer.shards(); ++i) {
    on_group_device(operation, buffer.device(i), *managers[buffer.device(i)], [&] {
      const ScatterSpan span = span_of(buffer, i, ghosts);
      BufferManager& manager = *managers[buffer.device(i)];
      DeviceBuffer<T>& shard = buffer.shard(i);
      if (span.end > span.first) {
        parts.push_back(
            manager.upload_async(shard, data + span.first, span.end - span.first, span.at));
      }
      if (span.fill_before > 0)
        parts.push_back(manager.fill_async(shard, T(), span.fill_before, 0));
      if (span.fill_from < span.total) {
        parts.push_back(
            manager.fill_async(shard, T(), span.total - span.fill_from, span.fill_from));
      }
    });
  }
  return parts;
}

/// Reads every shard's part into `out` (the logical array's layout), blocking.
template <class T>
void read_parts(const char* operation, const GroupManagers& managers, WorkerPool& workers,
                const ShardedBuffer<T>& buffer, T* out) {
  every_group_shard(operation, managers, workers, buffer, buffer.size_bytes(), [&](std::size_t i) {
    managers[buffer.device(i)]->download(buffer.shard(i), out + buffer.offset(i), buffer.count(i),
                                         buffer.ghost());
  });
}

/// start(i) for each shard i of `buffer` that holds a part (count(i) > 0), on its device
/// buffer.device(i): the started Futures; an Error start(i) throws names the device (those
/// started are waited for by theirs).
template <class T, class Start>
std::vector<Future<void>> start_parts(const char* operation, const GroupManagers& managers,
                                      const ShardedBuffer<T>& buffer, Start start) {
  std::vector<Future<void>> parts;
  for (std::size_t i = 0; i < buffer.shards(); ++i) {
    if (buffer.count(i) == 0) continue;
    const std::size_t d = buffer.device(i);
    parts.push_back(on_group_device(operation, d, *managers[d], [&] { return start(i); }));
  }
  return parts;
}

/// Starts each shard's download of its part into `out` (the logical array's layout).
template <class T>
std::vector<Future<void>> start_reads(const char* operation, const GroupManagers& managers,
                                      const ShardedBuffer<T>& buffer, T* out) {
  return start_parts(operation, managers, buffer, [&](std::size_t i) {
    return managers[buffer.device(i)]->download_async(buffer.shard(i), out + buffer.offset(i),
                                                      buffer.count(i), buffer.ghost());
  });
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_SHARD_MOVES_HPP
