// SPDX-License-Identifier: MIT
// OpenCL C programs clbuf builds for itself (clbuf::mpi's reduction and pack kernels), built for
// the device of a queue on first use and kept with their kernels, one program a key: the one
// place clbuf creates, builds and caches programs. A failure keeps nothing, so the next call
// tries again; a caller that must not retry remembers the failure itself.
#ifndef CLBUF_DETAIL_KERNEL_CACHE_HPP
#define CLBUF_DETAIL_KERNEL_CACHE_HPP

#include <clbuf/detail/queue.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// Sets argument `index` of `kernel`. Wraps clSetKernelArg.
inline void set_kernel_arg(const char* operation, cl_kernel kernel, cl_uint index, std::size_t size,
                           const void* value) {
  check(CLBUF_CL(clSetKernelArg)(kernel, index, size, value), operation, "clSetKernelArg");
}

/// Enqueues `kernel` on `queue` over `global` (`dimensions` of them; the driver picks the local
/// size), in order after the work before it; returns its event. Wraps clEnqueueNDRangeKernel.
inline cl::Event run_kernel(const char* operation, const Queue& queue, cl_kernel kernel,
                            cl_uint dimensions, const std::size_t* global) {
  cl_event event = nullptr;
  check(CLBUF_CL(clEnqueueNDRangeKernel)(queue.get(), kernel, dimensions, nullptr, global, nullptr,
                                         0, nullptr, &event),
        operation, "clEnqueueNDRangeKernel");
  return cl::Event(event, false);
}

/// Built programs by key, each with the kernels it was asked for.
template <class Key>
class KernelCache {
 public:
  /// The kernels `names` (in that order) of the program kept for `key`, or null when none is.
  const std::vector<cl::Kernel>* find(const Key& key) const noexcept {
    const auto found = programs_.find(key);
    return found == programs_.end() ? nullptr : &found->second.kernels;
  }

  /// Builds `source` for the device of `queue`, keeps it for `key` and returns its kernels
  /// `names` (in that order). Wraps clGetCommandQueueInfo, clCreateProgramWithSource,
  /// clBuildProgram, clCreateKernel.
  /// @throws Error of the first call that failed; for clBuildProgram, "clBuildProgram failed for
  ///         the <what>: <the build log>".
  const std::vector<cl::Kernel>& build(const char* operation, const Queue& queue, const Key& key,
                                       const std::string& source,
                                       std::initializer_list<const char*> names,
                                       const std::string& what) {
    Program built;
    cl_device_id device = nullptr;
    built.program = compile(operation, queue, source, what, device);
    for (const char* name : names) {
      cl_int err = CL_SUCCESS;
      built.kernels.emplace_back(CLBUF_CL(clCreateKernel)(built.program(), name, &err), false);
      check(err, operation, "clCreateKernel");
    }
    return programs_.insert_or_assign(key, std::move(built)).first->second.kernels;
  }

 private:
  struct Program {
    cl::Program program;
    std::vector<cl::Kernel> kernels;
  };

  /// `source` built for the device of `queue` (returned in `device`).
  static cl::Program compile(const char* operation, const Queue& queue, const std::string& source,
                             const std::string& what, cl_device_id& device) {
    cl_context context = nullptr;
    check(CLBUF_CL(clGetCommandQueueInfo)(queue.get(), CL_QUEUE_CONTEXT, sizeof(context), &context,
                                          nullptr),
          operation, "clGetCommandQueueInfo");
    check(CLBUF_CL(clGetCommandQueueInfo)(queue.get(), CL_QUEUE_DEVICE, sizeof(device), &device,
                                          nullptr),
          operation, "clGetCommandQueueInfo");
    const char* lines = source.c_str();
    const std::size_t length = source.size();
    cl_int err = CL_SUCCESS;
    cl::Program program(CLBUF_CL(clCreateProgramWithSource)(context, 1, &lines, &length, &err),
                        false);
    check(err, operation, "clCreateProgramWithSource");
    err = CLBUF_CL(clBuildProgram)(program(), 1, &device, "", nullptr, nullptr);
    if (err != CL_SUCCESS) {
      fail(operation, err, "clBuildProgram failed for the " + what + ": " + log(program, device));
    }
    return program;
  }

  /// The build log of `program` for `device` ("" where it cannot be had).
  static std::string log(const cl::Program& program, cl_device_id device) {
    std::size_t size = 0;
    CLBUF_CL(clGetProgramBuildInfo)(program(), device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::string text(size, '\0');
    if (size > 0) {
      CLBUF_CL(clGetProgramBuildInfo)
      (program(), device, CL_PROGRAM_BUILD_LOG, size, &text[0], nullptr);
    }
    return text.c_str();  // up to the log's own NUL
  }

  std::map<Key, Program> programs_;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_KERNEL_CACHE_HPP
