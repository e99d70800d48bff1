// SPDX-License-Identifier: MIT
// clbuf::mpi's public vocabulary: the reduction of allreduce() (Op), the way a message's bytes
// reach MPI (Path), a Communicator's tuning (Options) and its counts of messages by path
// (MessageStats). Plain values, with no MPI or OpenCL in them.
#ifndef CLBUF_MPI_OPTIONS_HPP
#define CLBUF_MPI_OPTIONS_HPP

#include <cstddef>
#include <cstdint>

namespace clbuf {
namespace mpi {

/// The reduction of allreduce().
enum class Op {
  sum,  ///< a + b
  min,  ///< the smaller
  max   ///< the larger
};

/// How a message's bytes reach MPI.
enum class Path {
  automatic,  ///< by BufferManager::memory_model(): zero_copy where there is a host block
              ///< (host), else map (unified) or staged (discrete)
  zero_copy,  ///< MPI on the buffer's own host block (CPU device); buffers without one are mapped
  map,        ///< map the buffer for the host around MPI
  staged,     ///< pinned chunks, the DMA of one overlapping MPI's transfer of another
  whole       ///< plain MPI for peers without clbuf: a message is one MPI message of the raw
              ///< bytes (the element's MPI datatype) on the communicator itself, collectives
              ///< are MPI's own on host memory; construction is local (docs/mpi.md)
};

/// Tuning of a Communicator; chunk_bytes must be the same on every rank (checked), and so must
/// path == Path::whole (not checked: construction is collective only without it).
struct Options {
  /// Bytes per chunk of a large message (4 KiB .. 1 GiB); messages of two chunks or more are
  /// cut into chunks of at least min(256 KiB, chunk_bytes), at most chunk_bytes.
  std::size_t chunk_bytes = std::size_t{4} << 20;
  /// Pinned chunks per direction per message in flight on the staged path (1 .. 64).
  std::size_t depth = 2;
  /// How every message's bytes reach MPI; Path::automatic by the manager's memory model.
  Path path = Path::automatic;
  /// allreduce() of at least this many bytes reduces with an OpenCL kernel on the device; below
  /// it, MPI_Allreduce on host memory.
  std::size_t device_reduce_bytes = std::size_t{1} << 20;
  /// Collectives first agree on their arguments (one small MPI_Allreduce), so that a mismatch is
  /// a clbuf::Error on every rank. false skips it (a small allreduce then costs one MPI call,
  /// not two), and a mismatch becomes whatever MPI makes of it: an error, or a hang.
  bool verify_collectives = true;
  /// HaloExchange on a discrete device (the staged path): a box of at most this many bytes goes
  /// straight between the field and pinned host memory of the exchange's own, one rect read
  /// (clEnqueueReadBufferRect) at start() and one rect write when it has arrived, instead of a
  /// device pack copy, a staged chunk each way and a device unpack copy: two device commands a
  /// box instead of four. The wire format is the same, so ranks may differ. 0: never.
  std::size_t halo_direct_max_bytes = std::size_t{64} << 10;
  /// HaloExchange: a box packed or unpacked on the device (not straight) of at least
  /// halo_kernel_min_rows rows that hold at most this many bytes each (an x face) is copied by
  /// one launch of a small OpenCL kernel (built once per Communicator) instead of a rect copy,
  /// which some drivers copy row by row (PoCL: ~7 ns a row, 430 us for 65536 rows against the
  /// kernel's 125). Where the device cannot build the kernel, rect copies. 0: never.
  std::size_t halo_kernel_max_row_bytes = 64;
  /// See halo_kernel_max_row_bytes: below this many rows a rect copy costs about as little as
  /// a kernel launch or less (PoCL: 64 rows 12 us against 21; 2-D exchanges with faces of 1,024
  /// rows were slower with the kernel, with 4,096 rows even).
  std::size_t halo_kernel_min_rows = 4096;
};

/// How many messages took each path (Communicator::stats()); a message counts once, when its
/// path is chosen: a send when it is posted, a receive once its header has arrived and its buffer
/// took it.
struct MessagePaths {
  /// The payload inside the header's envelope (at most 3968 bytes: Open MPI's eager fragment),
  /// read or written by the manager's own blocking transfer (its TransferStats count it too),
  /// or copied straight from or into a CPU device's host block.
  std::uint64_t inline_payload = 0;
  std::uint64_t zero_copy = 0;  ///< larger: MPI on the buffer's own host block (Path::zero_copy)
  std::uint64_t map = 0;        ///< larger: the buffer mapped for the host around MPI (Path::map)
  std::uint64_t staged = 0;     ///< larger: pinned chunks, DMA overlapping MPI (Path::staged)
};

/// A Communicator's messages by path, sent and received apart: point-to-point messages and the
/// messages clbuf's collectives and HaloExchange are made of (not MPI's own collectives on host
/// memory). Under Path::whole each plain MPI message counts as zero_copy or map.
struct MessageStats {
  MessagePaths sent;      ///< messages this rank sent
  MessagePaths received;  ///< messages this rank received
};

}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_MPI_OPTIONS_HPP
