// SPDX-License-Identifier: MIT
// HaloExchange's pack kernel: a box of thin rows (an x face of a 2-D or 3-D field: one element
// or a few a row) copied between the field and a contiguous buffer by one launch of a small
// OpenCL kernel, each work-item one word, instead of a rect copy. Some drivers copy a rect row
// by row (PoCL: a memcpy a row, ~7 ns each: 480 us for the x face of a 256^3 block), where the
// kernel copies all rows at once on every compute unit. Built on first use, once per
// Communicator; a device that cannot build it (no compiler) keeps the rect copies.
#ifndef CLBUF_DETAIL_MPI_PACK_HPP
#define CLBUF_DETAIL_MPI_PACK_HPP

#include <clbuf/detail/chunk_io.hpp>
#include <clbuf/detail/kernel_cache.hpp>
#include <clbuf/error.hpp>
#include <clbuf/rect.hpp>

#include <cstddef>
#include <vector>

namespace clbuf {
namespace mpi {
namespace detail {

class Packer {
 public:
  Packer() = default;
  Packer(const Packer&) = delete;  // kernels_ points into cache_
  Packer& operator=(const Packer&) = delete;

  /// Whether the kernel is built for the device of `io`'s queue, building it on the first call;
  /// false (for good) where the device cannot build it (or there was no memory to): then the caller
  /// copies rects instead.
  bool ready(const clbuf::detail::ChunkIo& io) noexcept {
    if (state_ == State::unknown) {
      try {
        kernels_ =
            &io.build(cache_, "HaloExchange", 0, source,
                      {"clbuf_box_1", "clbuf_box_2", "clbuf_box_4", "clbuf_box_8", "clbuf_box_16"},
                      "pack kernel");
        state_ = State::built;
      } catch (...) {
        state_ = State::failed;
      }
    }
    return state_ == State::built;
  }

  /// Enqueues by `io` (in order after the work before it) the copy of `region.size`
  /// elements of `element_size` bytes from the array at byte `src_offset` of `src` to the one
  /// at byte `dst_offset` of `dst`, laid out as `region` says (checked by the caller); returns
  /// its event. Call only after ready() returned true.
  /// Wraps clSetKernelArg, clEnqueueNDRangeKernel, clFlush.
  cl::Event copy(const char* operation, const clbuf::detail::ChunkIo& io, cl_mem src,
                 std::size_t src_offset, cl_mem dst, std::size_t dst_offset, const Region& region,
                 std::size_t element_size) {
    const std::size_t row = region.size.x * element_size;
    const std::size_t src_row = region.src_extents.x * element_size;
    const std::size_t dst_row = region.dst_extents.x * element_size;
    const std::size_t src_slice = src_row * region.src_extents.y;
    const std::size_t dst_slice = dst_row * region.dst_extents.y;
    const std::size_t src_start = src_offset + region.src_origin.x * element_size +
                                  region.src_origin.y * src_row + region.src_origin.z * src_slice;
    const std::size_t dst_start = dst_offset + region.dst_origin.x * element_size +
                                  region.dst_origin.y * dst_row + region.dst_origin.z * dst_slice;
    // The widest word (1 to 16 bytes) that every row, pitch and start is a whole number of.
    const std::size_t all =
        row | src_row | dst_row | src_slice | dst_slice | src_start | dst_start | std::size_t{16};
    const std::size_t word = all & (~all + 1);  // lowest set bit
    std::size_t k = 0;
    while ((std::size_t{1} << k) < word) ++k;
    cl_kernel kernel = (*kernels_)[k]();
    const cl_ulong args[6] = {src_start / word, src_row / word, src_slice / word,
                              dst_start / word, dst_row / word, dst_slice / word};
    using clbuf::detail::set_kernel_arg;
    set_kernel_arg(operation, kernel, 0, sizeof(cl_mem), &src);
    set_kernel_arg(operation, kernel, 4, sizeof(cl_mem), &dst);
    for (cl_uint a = 0; a < 3; ++a) {
      set_kernel_arg(operation, kernel, 1 + a, sizeof(cl_ulong), &args[a]);
      set_kernel_arg(operation, kernel, 5 + a, sizeof(cl_ulong), &args[3 + a]);
    }
    const std::size_t global[3] = {row / word, region.size.y, region.size.z};
    return io.run(operation, kernel, 3, global);
  }

 private:
  enum class State { unknown, built, failed };

  /// One program of five kernels, one per word: each work-item copies one word of the box.
  static constexpr const char* source =
      "#define CLBUF_BOX(NAME, W) \\\n"
      "__kernel void NAME(__global const W* src, ulong s0, ulong srow, ulong sslice, \\\n"
      "                   __global W* dst, ulong d0, ulong drow, ulong dslice) { \\\n"
      "  const ulong x = get_global_id(0), y = get_global_id(1), z = get_global_id(2); \\\n"
      "  dst[d0 + x + y * drow + z * dslice] = src[s0 + x + y * srow + z * sslice]; \\\n"
      "}\n"
      "CLBUF_BOX(clbuf_box_1, uchar)\n"
      "CLBUF_BOX(clbuf_box_2, ushort)\n"
      "CLBUF_BOX(clbuf_box_4, uint)\n"
      "CLBUF_BOX(clbuf_box_8, ulong)\n"
      "CLBUF_BOX(clbuf_box_16, uint4)\n";

  State state_ = State::unknown;
  clbuf::detail::KernelCache<int> cache_;             // the one program (key 0)
  const std::vector<cl::Kernel>* kernels_ = nullptr;  // word of 1, 2, 4, 8, 16 bytes
};

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_PACK_HPP
