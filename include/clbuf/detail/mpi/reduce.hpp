// SPDX-License-Identifier: MIT
// allreduce()'s device reduction: one small OpenCL kernel per element type and operation,
// `acc[offset + i] = op(acc[offset + i], in[i])`, built on first use and cached. Large
// reductions run here rather than in MPI on host memory, which reduces floats at 1-3 GB/s.
#ifndef CLBUF_DETAIL_MPI_REDUCE_HPP
#define CLBUF_DETAIL_MPI_REDUCE_HPP

#include <clbuf/detail/chunk_io.hpp>
#include <clbuf/detail/kernel_cache.hpp>
#include <clbuf/detail/mpi/wire.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {
namespace detail {

class Reducer {
 public:
  /// Enqueues `acc[acc_offset + i] = op(acc[acc_offset + i], in[i])` for i < count (offsets and
  /// count in elements of the type `type`) by `io`, in order after the work before it.
  /// Wraps clCreateProgramWithSource and clBuildProgram (first use), clEnqueueNDRangeKernel.
  void reduce(const char* operation, const clbuf::detail::ChunkIo& io, std::uint32_t type, Op op,
              cl_mem acc, std::size_t acc_offset, cl_mem in, std::size_t count) {
    if (count == 0) return;
    cl_kernel kernel = kernel_for(operation, io, type, op);
    const cl_ulong offset = acc_offset;
    clbuf::detail::set_kernel_arg(operation, kernel, 0, sizeof(cl_mem), &acc);
    clbuf::detail::set_kernel_arg(operation, kernel, 1, sizeof(cl_mem), &in);
    clbuf::detail::set_kernel_arg(operation, kernel, 2, sizeof(offset), &offset);
    const std::size_t global = count;
    io.run(operation, kernel, 1, &global);
  }

 private:
  static std::string source(std::uint32_t type, Op op) {
    const std::string expression = op == Op::sum   ? "a + b"
                                   : op == Op::min ? "(b < a ? b : a)"
                                                   : "(b > a ? b : a)";
    std::string text;
    if (type == float64) text += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
    text += std::string("typedef ") + cl_type_name(type) + " T;\n";
    text +=
        "__kernel void clbuf_reduce(__global T* acc, __global const T* in, ulong offset) {\n"
        "  const size_t i = get_global_id(0);\n"
        "  const T a = acc[offset + i];\n"
        "  const T b = in[i];\n"
        "  acc[offset + i] = (T)(" +
        expression + ");\n}\n";
    return text;
  }

  cl_kernel kernel_for(const char* operation, const clbuf::detail::ChunkIo& io, std::uint32_t type,
                       Op op) {
    const auto key = std::make_pair(type, static_cast<int>(op));
    const std::vector<cl::Kernel>* kernels = kernels_.find(key);
    if (kernels == nullptr) {
      kernels = &io.build(kernels_, operation, key, source(type, op), {"clbuf_reduce"},
                          std::string(type_name(type)) + " " + op_name(op) + " kernel");
    }
    return (*kernels)[0]();
  }

  clbuf::detail::KernelCache<std::pair<std::uint32_t, int>> kernels_;
};

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_REDUCE_HPP
