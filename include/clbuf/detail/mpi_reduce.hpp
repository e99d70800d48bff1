// SPDX-License-Identifier: MIT
// allreduce()'s device reduction: one small OpenCL kernel per element type and operation,
// `acc[offset + i] = op(acc[offset + i], in[i])`, built on first use and cached. Large
// reductions run here rather than in MPI on host memory, which reduces floats at 1-3 GB/s.
#ifndef CLBUF_DETAIL_MPI_REDUCE_HPP
#define CLBUF_DETAIL_MPI_REDUCE_HPP

#include <clbuf/detail/mpi_wire.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace clbuf {
namespace mpi {
namespace detail {

class Reducer {
 public:
  /// Enqueues `acc[acc_offset + i] = op(acc[acc_offset + i], in[i])` for i < count (offsets and
  /// count in elements of the type `type`) on `queue`, in order after the work before it.
  /// Wraps clCreateProgramWithSource and clBuildProgram (first use), clEnqueueNDRangeKernel.
  void reduce(const char* operation, const clbuf::detail::Queue& queue, std::uint32_t type, Op op,
              cl_mem acc, std::size_t acc_offset, cl_mem in, std::size_t count) {
    if (count == 0) return;
    cl_kernel kernel = kernel_for(operation, queue, type, op);
    const cl_ulong offset = acc_offset;
    clbuf::detail::check(CLBUF_CL(clSetKernelArg)(kernel, 0, sizeof(cl_mem), &acc), operation,
                         "clSetKernelArg");
    clbuf::detail::check(CLBUF_CL(clSetKernelArg)(kernel, 1, sizeof(cl_mem), &in), operation,
                         "clSetKernelArg");
    clbuf::detail::check(CLBUF_CL(clSetKernelArg)(kernel, 2, sizeof(offset), &offset), operation,
                         "clSetKernelArg");
    const std::size_t global = count;
    clbuf::detail::check(CLBUF_CL(clEnqueueNDRangeKernel)(queue.get(), kernel, 1, nullptr, &global,
                                                          nullptr, 0, nullptr, nullptr),
                         operation, "clEnqueueNDRangeKernel");
    queue.flush(operation);
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

  cl_kernel kernel_for(const char* operation, const clbuf::detail::Queue& queue, std::uint32_t type,
                       Op op) {
    const auto key = std::make_pair(type, static_cast<int>(op));
    const auto found = kernels_.find(key);
    if (found != kernels_.end()) return found->second.second();
    cl_context context = nullptr;
    cl_device_id device = nullptr;
    clbuf::detail::check(CLBUF_CL(clGetCommandQueueInfo)(queue.get(), CL_QUEUE_CONTEXT,
                                                         sizeof(context), &context, nullptr),
                         operation, "clGetCommandQueueInfo");
    clbuf::detail::check(CLBUF_CL(clGetCommandQueueInfo)(queue.get(), CL_QUEUE_DEVICE,
                                                         sizeof(device), &device, nullptr),
                         operation, "clGetCommandQueueInfo");
    const std::string text = source(type, op);
    const char* lines = text.c_str();
    const std::size_t length = text.size();
    cl_int err = CL_SUCCESS;
    cl::Program program(CLBUF_CL(clCreateProgramWithSource)(context, 1, &lines, &length, &err),
                        false);
    clbuf::detail::check(err, operation, "clCreateProgramWithSource");
    err = CLBUF_CL(clBuildProgram)(program(), 1, &device, "", nullptr, nullptr);
    if (err != CL_SUCCESS) {
      std::size_t size = 0;
      CLBUF_CL(clGetProgramBuildInfo)(program(), device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
      std::string log(size, '\0');
      if (size > 0) {
        CLBUF_CL(clGetProgramBuildInfo)
        (program(), device, CL_PROGRAM_BUILD_LOG, size, &log[0], nullptr);
      }
      clbuf::detail::fail(operation, err,
                          std::string("clBuildProgram failed for the ") + type_name(type) + " " +
                              op_name(op) + " kernel: " + log.c_str());
    }
    cl::Kernel kernel(CLBUF_CL(clCreateKernel)(program(), "clbuf_reduce", &err), false);
    clbuf::detail::check(err, operation, "clCreateKernel");
    cl_kernel handle = kernel();
    kernels_.emplace(key, std::make_pair(std::move(program), std::move(kernel)));
    return handle;
  }

  std::map<std::pair<std::uint32_t, int>, std::pair<cl::Program, cl::Kernel>> kernels_;
};

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_REDUCE_HPP
