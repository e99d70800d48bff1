// SPDX-License-Identifier: MIT
// copy_from between managers of different contexts (other devices or platforms): OpenCL has no
// copy between contexts, so bytes go through host memory, never as a full host copy: straight
// into or out of a CPU device's own host block, or pipelined through two pinned chunks.
#ifndef CLBUF_DETAIL_CROSS_CONTEXT_HPP
#define CLBUF_DETAIL_CROSS_CONTEXT_HPP

#include <clbuf/detail/async.hpp>
#include <clbuf/detail/device_context.hpp>
#include <clbuf/detail/pinned_pool.hpp>
#include <clbuf/detail/pool.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/transfer_engine.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace clbuf {
namespace detail {

/// copy_across_contexts() between two buffers without host blocks: two pinned chunks leased from
/// the target engine's pool (host memory of clbuf's when its budget holds none); while one is
/// written to `dst`, the next is read into the other.
inline void copy_through_pinned(const char* operation, const Queue& source, const Allocation& src,
                                const Queue& queue, TransferEngine& engine, const Allocation& dst,
                                std::size_t bytes) {
  const std::size_t chunk = std::max<std::size_t>(engine.options().staging_chunk_bytes, 4096);
  HostChunk chunks[2];  // given back after `drain` (declared after them)
  for (std::size_t i = 0; i < 2 && i * chunk < bytes; ++i) {  // one chunk may be all it takes
    chunks[i] = HostChunk(engine.pinned(), operation, chunk, queue);
  }
  // On every way out, nothing may still use the chunks when they are given back.
  struct Drain {
    const Queue& queue;
    ~Drain() { CLBUF_CL(clFinish)(queue.get()); }
  } drain{queue};
  cl::Event written[2];  // the last write out of each chunk
  for (std::size_t offset = 0, i = 0; offset < bytes; offset += chunk, ++i) {
    const std::size_t n = std::min(chunk, bytes - offset);
    const std::size_t slot = i % 2;
    if (written[slot]() != nullptr) Queue::wait(operation, written[slot]);
    source.read(operation, src.buffer(), src.at(offset), n, chunks[slot].data(), true);
    written[slot] =
        queue.write(operation, dst.buffer(), dst.at(offset), n, chunks[slot].data(), false);
    queue.flush(operation);
  }
  // The last writes' own events, not clFinish, which reports no command that failed on the
  // device: such a write is this copy's error (the earlier ones were waited for above).
  for (const cl::Event& last : written) {
    if (last() != nullptr) Queue::wait(operation, last);
  }
}

/// All `bytes` of `src` (read on `source`, whose earlier work has finished) into `dst` (written
/// on `target`, of the other context; counted and copied by `engine`, the target's), blocking.
inline void copy_across_contexts(const char* operation, const Queue& source, const Allocation& src,
                                 const Queue& target, TransferEngine& engine, const Allocation& dst,
                                 std::size_t bytes) {
  // Counted as a memcpy between two host blocks, one command where one side is a host block,
  // else relayed through the pinned chunks.
  const Telemetry::Path path = src.host != nullptr && dst.host != nullptr   ? Telemetry::host_copy
                               : src.host != nullptr || dst.host != nullptr ? Telemetry::direct
                                                                            : Telemetry::relayed;
  Telemetry::Timer timer(engine.telemetry(), Telemetry::copy, path, bytes, operation);
  if (dst.host != nullptr) {  // a CPU device's own memory: read straight into it
    target.finish(operation);
    if (src.host != nullptr) {
      engine.copier().copy(dst.host_at(0), src.host_at(0), bytes);
    } else {
      source.read(operation, src.buffer(), src.at(0), bytes, dst.host_at(0), true);
    }
    return;
  }
  if (src.host != nullptr) {  // write straight out of a CPU device's own memory
    target.write(operation, dst.buffer(), dst.at(0), bytes, src.host_at(0), true);
    return;
  }
  copy_through_pinned(operation, source, src, target, engine, dst, bytes);
}

/// What copy_across_contexts_async()'s background copy holds: both buffers, the target's
/// context, both managers' main and side queues, the markers it waits for, and the user events
/// that release the barriers holding both queues.
struct CrossContextJob {
  Allocation src, dst;  // retain both buffers
  cl::Context context;  // retained: either manager may be destroyed meanwhile
  Queue source_main, source_side, target_main, target_side;
  cl::Event source_before, target_before;
  UserEvent source_done, target_done;
  std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();

  /// The copy, on the background thread: once the work queued before the call has finished,
  /// copy_across_contexts() on the side queues; then both barriers go, the failure (if any) kept
  /// in `outcome`.
  void run(const char* operation, std::size_t bytes, TransferEngine& engine) noexcept {
    try {
      Queue::wait(operation, source_before);  // one context per clWaitForEvents
      Queue::wait(operation, target_before);
      copy_across_contexts(operation, source_side, src, target_side, engine, dst, bytes);
    } catch (const Error& e) {
      outcome->failed(e);
    } catch (...) {
      outcome->failed(operation, CL_OUT_OF_HOST_MEMORY, "a copy ran out of host memory");
    }
    source_done.complete();
    target_done.complete();
    CLBUF_CL(clFlush)(source_main.get());
    CLBUF_CL(clFlush)(target_main.get());
  }
};

/// copy_from_async between contexts: as copy_across_contexts(), on `engine`'s background thread,
/// returning at once. Both managers' queues hold their later work behind a barrier until the
/// copy has ended (async.hpp), and the copy runs on their side queues once the work queued
/// before the call has finished; the job holds its own handles, so either manager may be
/// destroyed meanwhile (its cleanup waits for the barrier).
inline Started copy_across_contexts_async(const char* operation, const DeviceContext& source,
                                          const Allocation& src, const DeviceContext& target,
                                          TransferEngine& engine, const Allocation& dst,
                                          std::size_t bytes) {
  auto job = std::make_shared<CrossContextJob>();
  job->src = src;
  job->dst = dst;
  job->context = target.context();
  job->source_main = source.queue();
  job->source_side = source.side_queue(operation);
  job->target_main = target.queue();
  job->target_side = target.side_queue(operation);
  job->source_done = UserEvent(operation, source.context()());
  job->target_done = UserEvent(operation, target.context()());
  std::function<void()> task = [job, operation, bytes, &engine]() noexcept {
    job->run(operation, bytes, engine);
  };
  // Markers, barriers and the place on the background thread together (async.hpp).
  std::lock_guard<std::mutex> submitting(submission_mutex());
  job->source_before = source.queue().marker(operation);
  job->target_before = target.queue().marker(operation);
  job->source_done.barrier(operation, source.queue());
  Started started{job->target_done.barrier(operation, target.queue()), job->outcome};
  source.queue().flush(operation);
  target.queue().flush(operation);
  engine.background().post(std::move(task));
  return started;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_CROSS_CONTEXT_HPP
