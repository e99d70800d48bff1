// SPDX-License-Identifier: MIT
// clbuf::Options: how a BufferManager moves bytes (memory model, pool, staging, copy threads).
#ifndef CLBUF_OPTIONS_HPP
#define CLBUF_OPTIONS_HPP

#include <cstddef>
#include <limits>
#include <string>

namespace clbuf {

/// How a device's memory relates to the host's, which decides the transfer paths.
enum class MemoryModel {
  automatic,  ///< ask the device (CL_DEVICE_TYPE, CL_DEVICE_HOST_UNIFIED_MEMORY)
  host,       ///< a CPU device: device memory is host memory that clbuf allocates and copies itself
  unified,    ///< shares host memory but is not the CPU (integrated GPU): no staging
  discrete    ///< own memory over a bus: large pageable transfers are staged through pinned memory
};

/// "automatic", "host", "unified" or "discrete".
inline const char* to_string(MemoryModel model) noexcept {
  switch (model) {
    case MemoryModel::automatic:
      return "automatic";
    case MemoryModel::host:
      return "host";
    case MemoryModel::unified:
      return "unified";
    case MemoryModel::discrete:
      return "discrete";
  }
  return "unknown";
}

/// Tuning of a BufferManager; the defaults suit most applications (docs/environment.md).
struct Options {
  /// A size clbuf works out from the device (see each field).
  static constexpr std::size_t automatic = std::numeric_limits<std::size_t>::max();
  /// A threshold that is never reached: turns the feature off (see each field).
  static constexpr std::size_t never = std::numeric_limits<std::size_t>::max();
  /// Most bytes of freed device memory kept for reuse; `automatic`: a quarter of the device's
  /// memory, at most 1 GiB. 0 turns the pool off.
  std::size_t pool_limit_bytes = automatic;
  /// Pageable transfers at least this large to or from a discrete device are staged through
  /// pinned memory; `never` turns staging off.
  std::size_t staging_threshold_bytes = std::size_t{4} << 20;
  /// Bytes per pinned chunk; at most the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE.
  std::size_t staging_chunk_bytes = std::size_t{1} << 20;
  /// Pinned chunks (at least 2, at most 4096) per staging lane (uploads and downloads have one
  /// each), shared out among the copy threads, two or more each; pinned memory stays at
  /// staging_chunk_bytes * staging_chunks per direction used.
  std::size_t staging_chunks = 24;
  /// Blocking downloads from a discrete device into pageable memory below
  /// staging_threshold_bytes and of at most this many bytes read into a pinned block of clbuf's
  /// and copy out (the copy threads help from 2 MiB), instead of the driver's pageable read;
  /// uploads never bounce. `automatic` (the default): all of them, up to 4 MiB; 0 turns it off.
  /// Each download in flight at once holds one block of this size (two are kept between calls);
  /// at most CL_DEVICE_MAX_MEM_ALLOC_SIZE, and values above staging_threshold_bytes act as it.
  std::size_t bounce_max_bytes = automatic;
  /// Blocking uploads of pageable memory of at most this many bytes to a discrete device return
  /// once the bytes are in a pinned ring of clbuf's (16 x this size, allocated at the first
  /// one): the write to the device follows in queue order, so a round trip waits for the device
  /// once. A write that fails on the device is reported by the manager's next synchronising call
  /// (README "Errors"). 0 turns buffering off; at most 1 MiB (larger values are clamped).
  /// Always 0 for a manager that adopts the application's context and queue (other queues of
  /// that context, and other managers on it, would not see the data in order).
  std::size_t buffered_upload_max_bytes = std::size_t{64} << 10;
  /// Most bytes of pinned host memory clbuf holds for its own use at once, leased and cached
  /// (TransferStats::pinned): the staging slots, the buffered uploads' ring, bounced downloads,
  /// copy_from's chunks between contexts and the chunks of every clbuf::mpi Communicator on this
  /// manager lease from one pool within it. A transfer that finds no room goes without (fewer
  /// staging slots, the driver's own pageable transfer; an MPI chunk waits for one to come back).
  /// `automatic`: both staging lanes, the ring, four bounce blocks and 128 MiB for copies and
  /// clbuf::mpi (193 MiB with the other defaults). 0: no pinned memory at all.
  std::size_t pinned_budget_bytes = automatic;
  /// Threads for large host copies (the CPU device's memcpy, staged chunks); 0: as many as
  /// the host has, at most 12.
  unsigned copy_threads = 0;
  /// The transfer paths: host (a CPU device), unified or discrete; `automatic` asks the device.
  MemoryModel memory = MemoryModel::automatic;
  /// A file to write a timeline of this manager's transfers to (Chrome Trace Event Format JSON,
  /// for https://ui.perfetto.dev; docs/performance.md "Tracing"); empty: CLBUF_TRACE, read when
  /// the manager is made, else no tracing. Managers tracing to one path share its file.
  std::string trace_path;
};

}  // namespace clbuf

#endif  // CLBUF_OPTIONS_HPP
