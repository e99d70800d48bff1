// SPDX-License-Identifier: MIT
// Bytes between a file and device memory with no whole host copy (npy_io.hpp, checkpoint.hpp).
// A host block of a CPU device (PoCL) is the device's memory: the file is read straight into it
// or written straight out of it, once the queue's earlier work has finished. Any other device:
// chunks of Options::staging_chunk_bytes leased from the manager's pinned pool by the engine's
// chunk calls (chunk_io.hpp; plain host memory where its budget holds none), at most
// file_chunks_in_flight at once: the file's read of chunk i+1 runs while chunk i's DMA does
// (loads), and the device's read of the next chunks while chunk i is written to the file
// (saves). Each chunk passes a FilePass on the host on the way: a CRC32C of its bytes
// (checkpoints, no second pass) and, for a big-endian file, the byte swap.
#ifndef CLBUF_DETAIL_FILE_TRANSFER_HPP
#define CLBUF_DETAIL_FILE_TRANSFER_HPP

#include <clbuf/detail/chunk_io.hpp>
#include <clbuf/detail/crc32c.hpp>
#include <clbuf/detail/file_io.hpp>
#include <clbuf/detail/memory_object.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// Chunks of one file transfer in flight at once (pinned memory: this x staging_chunk_bytes).
constexpr std::size_t file_chunks_in_flight = 4;

/// What happens to each chunk's bytes on the host: counted into `crc` (null: no checksum), and
/// for a load swapped in place in units of `swap_bytes` (0: none; the file is big-endian). The
/// checksum is of the file's bytes (a load's taken before its swap); saves write the host's
/// order, little-endian, and never swap.
struct FilePass {
  std::size_t swap_bytes = 0;
  Crc32c* crc = nullptr;

  void loaded(void* data, std::size_t bytes) const noexcept {
    if (crc != nullptr) crc->update(data, bytes);
    swap(data, bytes);
  }
  void saving(const void* data, std::size_t bytes) const noexcept {
    if (crc != nullptr) crc->update(data, bytes);
  }
  void swap(void* data, std::size_t bytes) const noexcept {
    if (swap_bytes < 2) return;
    unsigned char* p = static_cast<unsigned char*>(data);
    for (std::size_t at = 0; at + swap_bytes <= bytes; at += swap_bytes) {
      std::reverse(p + at, p + at + swap_bytes);
    }
  }
};

/// The events of chunks in flight; waits for every one on its way out, so no chunk's memory
/// goes back to the pool while a command may still use it (declared after the chunks).
class InFlight {
 public:
  explicit InFlight(std::size_t slots) : events_(slots) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    for (const cl::Event& event : events_) ChunkIo::wait_quietly(event);
  }
  cl::Event& operator[](std::size_t slot) noexcept { return events_[slot]; }
  /// Waits for the chunk in `slot`, if any (throws when its command failed).
  void wait(const char* operation, std::size_t slot) {
    cl::Event event = std::exchange(events_[slot], cl::Event());
    if (event() != nullptr) ChunkIo::wait(operation, event);
  }
  void wait_all(const char* operation) {
    for (std::size_t slot = 0; slot < events_.size(); ++slot) wait(operation, slot);
  }

 private:
  std::vector<cl::Event> events_;
};

/// The chunk size of a file transfer of `bytes` (a chunk never larger than the transfer).
inline std::size_t file_chunk_bytes(std::size_t chunk_bytes, std::size_t bytes) noexcept {
  return std::max<std::size_t>(1, std::min(chunk_bytes, bytes));
}

/// `bytes` of `file` at `file_offset` -> `memory` at byte `offset`, blocking. A host block is
/// written straight (the caller has waited for the queue's earlier work); else pinned chunks
/// through `io`, whose commands follow the queue's earlier work in order.
inline void file_to_device(const char* operation, const File& file, std::uint64_t file_offset,
                           const Allocation& memory, std::size_t offset, std::size_t bytes,
                           const ChunkIo& io, std::size_t chunk_bytes, const FilePass& pass) {
  const std::size_t chunk = file_chunk_bytes(chunk_bytes, bytes);
  if (memory.host != nullptr) {
    char* into = memory.host_at(offset);
    for (std::size_t done = 0; done < bytes; done += chunk) {
      const std::size_t n = std::min(chunk, bytes - done);
      file.read_at(operation, into + done, n, file_offset + done);
      pass.loaded(into + done, n);
    }
    return;
  }
  std::vector<HostChunk> chunks(file_chunks_in_flight);
  InFlight busy(file_chunks_in_flight);
  std::size_t i = 0;
  for (std::size_t done = 0; done < bytes; done += chunk, ++i) {
    const std::size_t slot = i % file_chunks_in_flight, n = std::min(chunk, bytes - done);
    busy.wait(operation, slot);
    if (!chunks[slot]) chunks[slot] = io.chunk(operation, chunk);
    file.read_at(operation, chunks[slot].data(), n, file_offset + done);
    pass.loaded(chunks[slot].data(), n);
    busy[slot] = io.write(operation, memory.buffer(), memory.at(offset + done), n,
                          chunks[slot].data(), false);
  }
  busy.wait_all(operation);
}

/// `memory` at byte `offset` -> `bytes` of `file` at `file_offset`, blocking; the mirror of
/// file_to_device(): the device's reads of the next chunks run while a chunk is written out.
inline void device_to_file(const char* operation, const Allocation& memory, std::size_t offset,
                           std::size_t bytes, const File& file, std::uint64_t file_offset,
                           const ChunkIo& io, std::size_t chunk_bytes, const FilePass& pass) {
  const std::size_t chunk = file_chunk_bytes(chunk_bytes, bytes);
  if (memory.host != nullptr) {
    const char* from = memory.host_at(offset);  // saves write the host's order: no swap
    for (std::size_t done = 0; done < bytes; done += chunk) {
      const std::size_t n = std::min(chunk, bytes - done);
      if (pass.crc != nullptr) pass.crc->update(from + done, n);
      file.write_at(operation, from + done, n, file_offset + done);
    }
    return;
  }
  const std::size_t count = (bytes + chunk - 1) / chunk;
  std::vector<HostChunk> chunks(file_chunks_in_flight);
  InFlight busy(file_chunks_in_flight);
  const auto start_read = [&](std::size_t k) {
    const std::size_t slot = k % file_chunks_in_flight, at = k * chunk;
    if (!chunks[slot]) chunks[slot] = io.chunk(operation, chunk);
    busy[slot] = io.read(operation, memory.buffer(), memory.at(offset + at),
                         std::min(chunk, bytes - at), chunks[slot].data(), false);
  };
  for (std::size_t k = 0; k < std::min(count, file_chunks_in_flight); ++k) start_read(k);
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t slot = k % file_chunks_in_flight, at = k * chunk;
    const std::size_t n = std::min(chunk, bytes - at);
    busy.wait(operation, slot);
    pass.saving(chunks[slot].data(), n);
    file.write_at(operation, chunks[slot].data(), n, file_offset + at);
    if (k + file_chunks_in_flight < count) start_read(k + file_chunks_in_flight);
  }
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_FILE_TRANSFER_HPP
