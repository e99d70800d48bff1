// SPDX-License-Identifier: MIT
// copy_from between managers of different contexts (other devices or platforms): OpenCL has no
// copy between contexts, so bytes go through host memory, never as a full host copy: straight
// into or out of a CPU device's own host block, or pipelined through two pinned chunks.
#ifndef CLBUF_DETAIL_CROSS_CONTEXT_HPP
#define CLBUF_DETAIL_CROSS_CONTEXT_HPP

#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/pinned_block.hpp>
#include <clbuf/detail/pool.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/transfer_engine.hpp>

#include <algorithm>
#include <cstddef>

namespace clbuf {
namespace detail {

/// All `bytes` of `src` (read on `source`, whose earlier work has finished) into `dst` of the
/// context `target` runs (written by `engine`), blocking.
inline void copy_across_contexts(const char* operation, const Queue& source, const Allocation& src,
                                 const DeviceContext& target, TransferEngine& engine,
                                 const Allocation& dst, std::size_t bytes) {
  Telemetry::Timer timer(engine.telemetry(), Telemetry::copy, bytes);
  if (dst.host != nullptr) {  // a CPU device's own memory: read straight into it
    target.queue().finish(operation);
    if (src.host != nullptr) {
      engine.copier().copy(dst.host, src.host, bytes);
    } else {
      source.read(operation, src.buffer(), 0, bytes, dst.host, true);
    }
    return;
  }
  if (src.host != nullptr) {  // write straight out of a CPU device's own memory
    target.queue().write(operation, dst.buffer(), 0, bytes, src.host, true);
    return;
  }
  // Two pinned chunks of the target's context: while one is written to `dst`, the next is read
  // into the other.
  const std::size_t chunk =
      std::min(bytes, std::max<std::size_t>(engine.options().staging_chunk_bytes, 4096));
  const Queue& queue = target.queue();
  PinnedBlock pinned[2] = {PinnedBlock(target.context(), queue.handle(), chunk, operation),
                           PinnedBlock(target.context(), queue.handle(), chunk, operation)};
  // On every way out, nothing may still use the chunks when they are unmapped.
  struct Drain {
    const Queue& queue;
    ~Drain() { CLBUF_CL(clFinish)(queue.get()); }
  } drain{queue};
  cl::Event written[2];  // the last write out of each chunk
  for (std::size_t offset = 0, i = 0; offset < bytes; offset += chunk, ++i) {
    const std::size_t n = std::min(chunk, bytes - offset);
    const std::size_t slot = i % 2;
    if (written[slot]() != nullptr) Queue::wait(operation, written[slot]);
    source.read(operation, src.buffer(), offset, n, pinned[slot].data(), true);
    written[slot] = queue.write(operation, dst.buffer(), offset, n, pinned[slot].data(), false);
    queue.flush(operation);
  }
  queue.finish(operation);
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_CROSS_CONTEXT_HPP
