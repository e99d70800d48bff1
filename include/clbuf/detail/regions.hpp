// SPDX-License-Identifier: MIT
// Rectangular transfers (upload_rect, download_rect, copy_rect) on checked sides (checks.hpp):
// the byte geometry OpenCL takes, and the row-by-row copies where clEnqueueCopyBufferRect
// cannot express a copy.
#ifndef CLBUF_DETAIL_REGIONS_HPP
#define CLBUF_DETAIL_REGIONS_HPP

#include <clbuf/detail/checks.hpp>
#include <clbuf/detail/pool.hpp>
#include <clbuf/detail/transfer_engine.hpp>
#include <clbuf/rect.hpp>

#include <array>
#include <cstddef>
#include <optional>

namespace clbuf {
namespace detail {

/// One side of a rectangular command: the OpenCL buffer it addresses and the byte offset of the
/// box's origin in it (a view's offset plus the origin within the view), with its checked
/// geometry.
struct RectEnd {
  cl_mem root = nullptr;
  std::size_t at = 0;
  RectSide side;
  std::size_t rows = 1;  // the side's extents.y: rows per slice
};

/// The origin of `end`'s box in its buffer's coordinates: the absolute offset split back into
/// (x bytes, row, slice) by that side's pitches.
inline std::array<std::size_t, 3> origin_in_buffer(const RectEnd& end) noexcept {
  return {end.at % end.side.slice_pitch % end.side.row_pitch,
          end.at % end.side.slice_pitch / end.side.row_pitch, end.at / end.side.slice_pitch};
}

/// The box of `extent` (x in bytes) stays inside one row and one slice of `end` from `origin`:
/// a rectangular command can address it. A view whose offset is not a whole number of rows or
/// slices moves the box across a row or slice boundary of the buffer; OpenCL rejects that.
inline bool box_fits(const RectEnd& end, const std::array<std::size_t, 3>& origin,
                     const std::size_t extent[3]) noexcept {
  return origin[0] + extent[0] <= end.side.row_pitch && origin[1] + extent[1] <= end.rows;
}

/// Counts a rect transfer of `bytes`: a blocking one timed while this lives (its API span), a
/// started one traced until the event of its last command completes (started()).
class RectCount {
 public:
  RectCount(TransferEngine& engine, Telemetry::Direction direction, std::size_t bytes,
            const char* operation, bool blocking) {
    if (blocking) {
      timer_.emplace(engine.telemetry(), direction, Telemetry::direct, bytes, operation);
    } else {
      span_ = engine.telemetry().count_async(direction, Telemetry::direct, bytes, operation);
    }
  }

  /// `last`, the transfer's last event, once its span is set to end when it completes.
  cl::Event started(cl::Event last) const noexcept {
    Telemetry::traced(span_, last());
    return last;
  }

 private:
  std::optional<Telemetry::Timer> timer_;
  Telemetry::AsyncSpan span_;  // a started transfer's; not traced for blocking ones
};

/// A rectangular write (`to_device`) or read between `memory` (laid out as `device`, extents.y
/// `rows`) and `host` (laid out as `host_side`). Blocking, or started: then the event of the
/// last command returns (the queue is in order) and `host` must stay alive until it completes.
/// One clEnqueueWriteBufferRect / clEnqueueReadBufferRect on `memory`'s buffer, or one
/// clEnqueueWriteBuffer / clEnqueueReadBuffer per row where a view's offset splits the box.
inline cl::Event transfer_rect(TransferEngine& engine, const char* operation, bool to_device,
                               const Allocation& memory, const RectSide& device, std::size_t rows,
                               void* host, const RectSide& host_side, const Region& region,
                               std::size_t element_size, bool blocking) {
  const Offset& host_origin = to_device ? region.src_origin : region.dst_origin;
  RectEnd end;
  end.root = memory.buffer();
  end.at = memory.at(device.origin_bytes);
  end.side = device;
  end.rows = rows;
  const std::array<std::size_t, 3> buffer_origin = origin_in_buffer(end);
  const std::size_t host_offset[3] = {host_origin.x * element_size, host_origin.y, host_origin.z};
  const std::size_t extent[3] = {region.size.x * element_size, region.size.y, region.size.z};
  const Telemetry::Direction direction = to_device ? Telemetry::upload : Telemetry::download;
  const std::size_t bytes = extent[0] * extent[1] * extent[2];
  const RectCount count(engine, direction, bytes, operation, blocking);
  const Queue& queue = engine.queue();
  if (box_fits(end, buffer_origin, extent)) {
    return count.started(queue.transfer_rect(
        operation, to_device, end.root, buffer_origin.data(), host_offset, extent, device.row_pitch,
        device.slice_pitch, host_side.row_pitch, host_side.slice_pitch, host, blocking));
  }
  cl::Event last;
  char* const base = static_cast<char*>(host) + host_side.origin_bytes;
  for (std::size_t z = 0; z < region.size.z; ++z) {
    for (std::size_t y = 0; y < region.size.y; ++y) {
      const std::size_t at = end.at + z * device.slice_pitch + y * device.row_pitch;
      char* row = base + z * host_side.slice_pitch + y * host_side.row_pitch;
      last = to_device ? queue.write(operation, end.root, at, extent[0], row, false)
                       : queue.read(operation, end.root, at, extent[0], row, false);
    }
  }
  if (blocking) Queue::wait(operation, last);
  return count.started(last);
}

/// One checked side of a copy_rect, in its root buffer.
inline RectEnd rect_end(const char* operation, const char* side, cl_mem root,
                        std::size_t root_offset, const Extents& size, const Offset& origin,
                        const Extents& extents, std::size_t capacity, std::size_t element_size) {
  RectEnd end;
  end.root = root;
  end.side = rect_side(operation, side, size, origin, extents, capacity, element_size);
  end.at = root_offset + end.side.origin_bytes;
  end.rows = extents.y;
  return end;
}

/// copy_rect() row by row (`row_bytes` each), each row after the one before (its wait list): a
/// row that fails on the device fails the rows after it, so the last row's event, which the
/// caller waits for or hands on, reports any row's failure. Returns that event.
inline cl::Event copy_rows(TransferEngine& engine, const char* operation, const RectEnd& from,
                           const RectEnd& to, const Extents& size, std::size_t row_bytes) {
  cl::Event last;
  for (std::size_t z = 0; z < size.z; ++z) {
    for (std::size_t y = 0; y < size.y; ++y) {
      last = engine.queue().copy(operation, from.root, to.root,
                                 from.at + z * from.side.slice_pitch + y * from.side.row_pitch,
                                 to.at + z * to.side.slice_pitch + y * to.side.row_pitch, row_bytes,
                                 last() != nullptr ? &last : nullptr);
    }
  }
  return last;
}

/// Copies the box `size` (x in elements of `element_size`) from `from` to `to`, blocking or
/// started (then the event of its last command returns: the queue is in order, and copied row
/// by row each row waits for the one before, so that the last fails if any row failed); one
/// buffer's sides must not share a byte (CL_MEM_COPY_OVERLAP otherwise). Both
/// sides are addressed in their root buffers, never a sub-buffer (PoCL 3.1 crashes in
/// clEnqueueCopyBufferRect on sub-buffers), with the absolute offset split back into (x bytes,
/// row, slice) by that side's pitches.
inline cl::Event copy_rect(TransferEngine& engine, const char* operation, const RectEnd& from,
                           const RectEnd& to, const Extents& size, std::size_t element_size,
                           bool blocking) {
  if (from.root == to.root) {
    check_rect_overlap(operation, from.at, from.side, to.at, to.side, size, element_size);
  }
  const std::array<std::size_t, 3> src_origin = origin_in_buffer(from);
  const std::array<std::size_t, 3> dst_origin = origin_in_buffer(to);
  const std::size_t extent[3] = {size.x * element_size, size.y, size.z};
  const std::size_t bytes = extent[0] * extent[1] * extent[2];
  const RectCount count(engine, Telemetry::copy, bytes, operation, blocking);
  cl::Event last;
  const bool same_pitches =
      from.side.row_pitch == to.side.row_pitch && from.side.slice_pitch == to.side.slice_pitch;
  if ((from.root == to.root && !same_pitches) || !box_fits(from, src_origin, extent) ||
      !box_fits(to, dst_origin, extent)) {
    // clEnqueueCopyBufferRect rejects two pitches within one buffer, and a box that wraps in
    // the root's coordinates (a view whose offset is not a whole number of rows or slices).
    last = copy_rows(engine, operation, from, to, size, extent[0]);
  } else {
    last = engine.queue().copy_rect(operation, from.root, to.root, src_origin.data(),
                                    dst_origin.data(), extent, from.side.row_pitch,
                                    from.side.slice_pitch, to.side.row_pitch, to.side.slice_pitch);
  }
  if (blocking) Queue::wait(operation, last);
  return count.started(last);
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_REGIONS_HPP
