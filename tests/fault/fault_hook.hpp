// SPDX-License-Identifier: MIT
// Compile-time fault injection for clbuf: defines CLBUF_CL(fn) before clbuf is included, so every
// OpenCL C entry point clbuf calls goes through a wrapper here that counts the call and, when told,
// makes the Nth call of one entry point fail the way a driver would:
//   - calls that return a code return an error (CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY, ...);
//   - creators (clCreateBuffer, clCreateContext, clCreateCommandQueue, clEnqueueMapBuffer) set
//     *errcode_ret and return null;
//   - clWaitForEvents really waits (the command has ended, as after a real device fault), then
//     reports CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST and marks the events failed;
//     clGetEventInfo reports a failed command (a negative execution status). Either way the
//     failure surfaces only where clbuf looks at the event: Future::wait()/get(), staging.
//   - armed `on_device`, a clEnqueueWriteBuffer (or clEnqueueReadBuffer) is accepted and runs,
//     then reads as failed on the device (its event's status negative; a blocking one returns
//     CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST): the failure a buffered upload can only
//     report later. So does a clEnqueueNDRangeKernel (a kernel that fails as it runs), and a
//     clEnqueueCopyBuffer. A blocking clEnqueueReadBuffer whose wait list holds such an event
//     reads nothing and returns CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, as OpenCL 1.2
//     says; a clEnqueueCopyBuffer whose wait list holds one fails on the device too.
// Include this file instead of <clbuf/clbuf.hpp>, and before anything that includes clbuf.
#ifndef CLBUF_TESTS_FAULT_HOOK_HPP
#define CLBUF_TESTS_FAULT_HOOK_HPP

#ifdef CLBUF_CL
#error "fault_hook.hpp must be included before clbuf"
#endif

#define CL_HPP_TARGET_OPENCL_VERSION 120
#define CL_HPP_MINIMUM_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
// As an application may: then any cl::Error escaping clbuf would be seen by the tests.
#define CL_HPP_ENABLE_EXCEPTIONS
#include <CL/opencl.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace clbuf_fault {

/// Every entry point clbuf calls through CLBUF_CL.
enum Site : int {
  GetPlatformIDs,
  GetPlatformInfo,
  GetDeviceIDs,
  GetDeviceInfo,
  CreateContext,
  CreateCommandQueue,
  GetCommandQueueInfo,
  CreateBuffer,
  SetMemObjectDestructorCallback,
  ReleaseMemObject,
  EnqueueMapBuffer,
  EnqueueUnmapMemObject,
  EnqueueReadBuffer,
  EnqueueWriteBuffer,
  EnqueueCopyBuffer,
  Finish,
  Flush,
  WaitForEvents,
  GetEventInfo,
  EnqueueFillBuffer,
  EnqueueReadBufferRect,
  EnqueueWriteBufferRect,
  EnqueueCopyBufferRect,
  CreateSubBuffer,
  GetMemObjectInfo,
  CreateUserEvent,
  EnqueueMarkerWithWaitList,
  EnqueueBarrierWithWaitList,
  CreateProgramWithSource,  // the rest: clbuf::mpi's kernels (mpi_fault_test)
  BuildProgram,
  GetProgramBuildInfo,
  CreateKernel,
  SetKernelArg,
  EnqueueNDRangeKernel,
  site_count
};

inline const char* site_name(int site) {
  static const char* names[site_count] = {"clGetPlatformIDs",
                                          "clGetPlatformInfo",
                                          "clGetDeviceIDs",
                                          "clGetDeviceInfo",
                                          "clCreateContext",
                                          "clCreateCommandQueue",
                                          "clGetCommandQueueInfo",
                                          "clCreateBuffer",
                                          "clSetMemObjectDestructorCallback",
                                          "clReleaseMemObject",
                                          "clEnqueueMapBuffer",
                                          "clEnqueueUnmapMemObject",
                                          "clEnqueueReadBuffer",
                                          "clEnqueueWriteBuffer",
                                          "clEnqueueCopyBuffer",
                                          "clFinish",
                                          "clFlush",
                                          "clWaitForEvents",
                                          "clGetEventInfo",
                                          "clEnqueueFillBuffer",
                                          "clEnqueueReadBufferRect",
                                          "clEnqueueWriteBufferRect",
                                          "clEnqueueCopyBufferRect",
                                          "clCreateSubBuffer",
                                          "clGetMemObjectInfo",
                                          "clCreateUserEvent",
                                          "clEnqueueMarkerWithWaitList",
                                          "clEnqueueBarrierWithWaitList",
                                          "clCreateProgramWithSource",
                                          "clBuildProgram",
                                          "clGetProgramBuildInfo",
                                          "clCreateKernel",
                                          "clSetKernelArg",
                                          "clEnqueueNDRangeKernel"};
  return names[site];
}

/// The injector's state: call counts per entry point, the armed fault, and what happened.
struct State {
  std::mutex mutex;
  std::array<long, site_count> calls{};
  int target = -1;                      ///< the entry point to fail; -1: none
  long fail_at = 0;                     ///< its call number (1-based) that fails
  bool sticky = false;                  ///< fail that call and every later call of the entry point
  bool on_device = false;               ///< accept the call; its command fails on the device
  long fired = 0;                       ///< how many calls were failed
  std::vector<cl_event> failed_events;  ///< retained; reported as failed by clGetEventInfo
  std::atomic<long> live_buffers{0};    ///< buffers clCreateBuffer made that still exist
  std::atomic<long> created_buffers{0};

  void arm(int site, long n, bool keep_failing, bool failing_on_device = false) {
    std::lock_guard<std::mutex> lock(mutex);
    calls.fill(0);
    target = site;
    fail_at = n;
    sticky = keep_failing;
    on_device = failing_on_device;
    fired = 0;
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex);
    target = -1;
    for (cl_event event : failed_events) ::clReleaseEvent(event);
    failed_events.clear();
  }
  /// Counts a call of `site`; true when this call must fail.
  bool hit(int site) {
    std::lock_guard<std::mutex> lock(mutex);
    const long n = ++calls[static_cast<std::size_t>(site)];
    if (site != target || n < fail_at || (!sticky && n != fail_at)) return false;
    ++fired;
    return true;
  }
  bool event_failed(cl_event event) {
    std::lock_guard<std::mutex> lock(mutex);
    for (cl_event failed : failed_events) {
      if (failed == event) return true;
    }
    return false;
  }
  void mark_failed(cl_uint count, const cl_event* events) {
    std::lock_guard<std::mutex> lock(mutex);
    for (cl_uint i = 0; i < count; ++i) {
      ::clRetainEvent(events[i]);  // so the handle is not reused while it is listed
      failed_events.push_back(events[i]);
    }
  }
};

inline State& state() {
  static State instance;
  return instance;
}

inline void CL_CALLBACK buffer_destroyed(cl_mem, void*) { --state().live_buffers; }

/// A command the driver accepts (`enqueue(&its_event)`) and that then fails on the device: its
/// event reads as failed; a blocking call returns what a driver returns when a command it waited
/// for failed.
template <class Enqueue>
cl_int failing_on_device(cl_bool blocking, cl_event* event, Enqueue enqueue) {
  cl_event mine = nullptr;
  const cl_int err = enqueue(&mine);
  if (err != CL_SUCCESS) return err;
  state().mark_failed(1, &mine);
  if (event != nullptr) {
    *event = mine;
  } else {
    ::clReleaseEvent(mine);
  }
  return blocking ? CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST : CL_SUCCESS;
}

inline cl_int clGetPlatformIDs(cl_uint n, cl_platform_id* platforms, cl_uint* count) {
  if (state().hit(GetPlatformIDs)) return CL_OUT_OF_HOST_MEMORY;
  return ::clGetPlatformIDs(n, platforms, count);
}
inline cl_int clGetPlatformInfo(cl_platform_id p, cl_platform_info what, size_t size, void* value,
                                size_t* size_ret) {
  if (state().hit(GetPlatformInfo)) return CL_OUT_OF_HOST_MEMORY;
  return ::clGetPlatformInfo(p, what, size, value, size_ret);
}
inline cl_int clGetDeviceIDs(cl_platform_id p, cl_device_type type, cl_uint n,
                             cl_device_id* devices, cl_uint* count) {
  if (state().hit(GetDeviceIDs)) return CL_OUT_OF_RESOURCES;
  return ::clGetDeviceIDs(p, type, n, devices, count);
}
inline cl_int clGetDeviceInfo(cl_device_id d, cl_device_info what, size_t size, void* value,
                              size_t* size_ret) {
  if (state().hit(GetDeviceInfo)) return CL_OUT_OF_RESOURCES;
  return ::clGetDeviceInfo(d, what, size, value, size_ret);
}
inline cl_context clCreateContext(
    const cl_context_properties* properties, cl_uint n, const cl_device_id* devices,
    void(CL_CALLBACK* notify)(const char*, const void*, size_t, void*), void* user, cl_int* err) {
  if (state().hit(CreateContext)) {
    if (err) *err = CL_OUT_OF_HOST_MEMORY;
    return nullptr;
  }
  return ::clCreateContext(properties, n, devices, notify, user, err);
}
inline cl_command_queue clCreateCommandQueue(cl_context c, cl_device_id d,
                                             cl_command_queue_properties properties, cl_int* err) {
  if (state().hit(CreateCommandQueue)) {
    if (err) *err = CL_OUT_OF_RESOURCES;
    return nullptr;
  }
  return ::clCreateCommandQueue(c, d, properties, err);
}
inline cl_int clGetCommandQueueInfo(cl_command_queue q, cl_command_queue_info what, size_t size,
                                    void* value, size_t* size_ret) {
  if (state().hit(GetCommandQueueInfo)) return CL_OUT_OF_RESOURCES;
  return ::clGetCommandQueueInfo(q, what, size, value, size_ret);
}
inline cl_mem clCreateBuffer(cl_context c, cl_mem_flags flags, size_t size, void* host,
                             cl_int* err) {
  if (state().hit(CreateBuffer)) {
    if (err) *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    return nullptr;
  }
  cl_int local = CL_SUCCESS;
  cl_mem memory = ::clCreateBuffer(c, flags, size, host, &local);
  if (err) *err = local;
  if (memory != nullptr) {
    ++state().live_buffers;
    ++state().created_buffers;
    ::clSetMemObjectDestructorCallback(memory, buffer_destroyed, nullptr);
  }
  return memory;
}
inline cl_int clSetMemObjectDestructorCallback(cl_mem m, void(CL_CALLBACK* notify)(cl_mem, void*),
                                               void* user) {
  if (state().hit(SetMemObjectDestructorCallback)) return CL_OUT_OF_HOST_MEMORY;
  return ::clSetMemObjectDestructorCallback(m, notify, user);
}
inline cl_int clReleaseMemObject(cl_mem m) {
  // Counted, never failed: a release that fails cannot be recovered from by anyone.
  state().hit(ReleaseMemObject);
  return ::clReleaseMemObject(m);
}
inline cl_int clRetainMemObject(cl_mem m) {
  // Passed through: clbuf retains only to leak memory MPI may still write (PinnedBlock::leak).
  return ::clRetainMemObject(m);
}
inline void* clEnqueueMapBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, cl_map_flags flags,
                                size_t offset, size_t size, cl_uint n, const cl_event* wait,
                                cl_event* event, cl_int* err) {
  if (state().hit(EnqueueMapBuffer)) {
    if (err) *err = CL_MAP_FAILURE;
    return nullptr;
  }
  return ::clEnqueueMapBuffer(q, m, blocking, flags, offset, size, n, wait, event, err);
}
inline cl_int clEnqueueUnmapMemObject(cl_command_queue q, cl_mem m, void* p, cl_uint n,
                                      const cl_event* wait, cl_event* event) {
  if (state().hit(EnqueueUnmapMemObject)) return CL_OUT_OF_RESOURCES;
  return ::clEnqueueUnmapMemObject(q, m, p, n, wait, event);
}
inline cl_int clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset,
                                  size_t size, void* p, cl_uint n, const cl_event* wait,
                                  cl_event* event) {
  if (state().hit(EnqueueReadBuffer)) {
    if (!state().on_device) return CL_OUT_OF_RESOURCES;
    return failing_on_device(blocking, event, [&](cl_event* mine) {
      return ::clEnqueueReadBuffer(q, m, blocking, offset, size, p, n, wait, mine);
    });
  }
  if (blocking) {  // as a driver does when a command it waits for failed: no read, and this code
    for (cl_uint i = 0; i < n; ++i) {
      if (state().event_failed(wait[i])) {
        ::clWaitForEvents(n, wait);
        return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
      }
    }
  }
  return ::clEnqueueReadBuffer(q, m, blocking, offset, size, p, n, wait, event);
}
inline cl_int clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset,
                                   size_t size, const void* p, cl_uint n, const cl_event* wait,
                                   cl_event* event) {
  if (!state().hit(EnqueueWriteBuffer)) {
    return ::clEnqueueWriteBuffer(q, m, blocking, offset, size, p, n, wait, event);
  }
  if (!state().on_device) return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  return failing_on_device(blocking, event, [&](cl_event* mine) {
    return ::clEnqueueWriteBuffer(q, m, blocking, offset, size, p, n, wait, mine);
  });
}
inline cl_int clEnqueueCopyBuffer(cl_command_queue q, cl_mem src, cl_mem dst, size_t src_offset,
                                  size_t dst_offset, size_t size, cl_uint n, const cl_event* wait,
                                  cl_event* event) {
  const auto copy = [&](cl_event* mine) {
    return ::clEnqueueCopyBuffer(q, src, dst, src_offset, dst_offset, size, n, wait, mine);
  };
  if (state().hit(EnqueueCopyBuffer)) {
    if (!state().on_device) return CL_OUT_OF_RESOURCES;
    return failing_on_device(CL_FALSE, event, copy);
  }
  for (cl_uint i = 0; i < n; ++i) {  // as a driver fails a command whose wait list holds a
    if (state().event_failed(wait[i])) return failing_on_device(CL_FALSE, event, copy);  // failure
  }
  return copy(event);
}
inline cl_int clFinish(cl_command_queue q) {
  if (state().hit(Finish)) return CL_OUT_OF_RESOURCES;
  return ::clFinish(q);
}
inline cl_int clFlush(cl_command_queue q) {
  if (state().hit(Flush)) return CL_OUT_OF_HOST_MEMORY;
  return ::clFlush(q);
}
inline cl_int clWaitForEvents(cl_uint n, const cl_event* events) {
  // Counted before it waits, so that another thread sees a wait that has begun (a test releasing
  // a held queue once clbuf waits on it); the command ends either way.
  const bool fails = state().hit(WaitForEvents);
  const cl_int err = ::clWaitForEvents(n, events);
  if (!fails) {
    for (cl_uint i = 0; i < n; ++i) {  // as a driver reports a command that failed
      if (state().event_failed(events[i])) return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
    }
    return err;
  }
  state().mark_failed(n, events);
  return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
}
inline cl_int clGetEventInfo(cl_event e, cl_event_info what, size_t size, void* value,
                             size_t* size_ret) {
  const bool fail = state().hit(GetEventInfo) || state().event_failed(e);
  if (!fail) return ::clGetEventInfo(e, what, size, value, size_ret);
  if (what != CL_EVENT_COMMAND_EXECUTION_STATUS || size < sizeof(cl_int)) {
    return CL_OUT_OF_RESOURCES;
  }
  // A command that failed on the device: wait for it to end, then report a negative status.
  ::clWaitForEvents(1, &e);
  *static_cast<cl_int*>(value) = CL_OUT_OF_RESOURCES;
  if (size_ret) *size_ret = sizeof(cl_int);
  return CL_SUCCESS;
}
// A stream's timing read (tile_stream.hpp): never a fault site, as a trace never fails a transfer.
inline cl_int clGetEventProfilingInfo(cl_event e, cl_profiling_info what, size_t size, void* value,
                                      size_t* size_ret) {
  return ::clGetEventProfilingInfo(e, what, size, value, size_ret);
}

inline cl_int clEnqueueFillBuffer(cl_command_queue q, cl_mem m, const void* pattern,
                                  size_t pattern_size, size_t offset, size_t size, cl_uint n,
                                  const cl_event* wait, cl_event* event) {
  if (state().hit(EnqueueFillBuffer)) return CL_OUT_OF_RESOURCES;
  return ::clEnqueueFillBuffer(q, m, pattern, pattern_size, offset, size, n, wait, event);
}
inline cl_int clEnqueueReadBufferRect(cl_command_queue q, cl_mem m, cl_bool blocking,
                                      const size_t* buffer_origin, const size_t* host_origin,
                                      const size_t* region, size_t buffer_row, size_t buffer_slice,
                                      size_t host_row, size_t host_slice, void* p, cl_uint n,
                                      const cl_event* wait, cl_event* event) {
  if (state().hit(EnqueueReadBufferRect)) return CL_OUT_OF_RESOURCES;
  return ::clEnqueueReadBufferRect(q, m, blocking, buffer_origin, host_origin, region, buffer_row,
                                   buffer_slice, host_row, host_slice, p, n, wait, event);
}
inline cl_int clEnqueueWriteBufferRect(cl_command_queue q, cl_mem m, cl_bool blocking,
                                       const size_t* buffer_origin, const size_t* host_origin,
                                       const size_t* region, size_t buffer_row, size_t buffer_slice,
                                       size_t host_row, size_t host_slice, const void* p, cl_uint n,
                                       const cl_event* wait, cl_event* event) {
  if (state().hit(EnqueueWriteBufferRect)) return CL_OUT_OF_RESOURCES;
  return ::clEnqueueWriteBufferRect(q, m, blocking, buffer_origin, host_origin, region, buffer_row,
                                    buffer_slice, host_row, host_slice, p, n, wait, event);
}
inline cl_int clEnqueueCopyBufferRect(cl_command_queue q, cl_mem src, cl_mem dst,
                                      const size_t* src_origin, const size_t* dst_origin,
                                      const size_t* region, size_t src_row, size_t src_slice,
                                      size_t dst_row, size_t dst_slice, cl_uint n,
                                      const cl_event* wait, cl_event* event) {
  if (state().hit(EnqueueCopyBufferRect)) return CL_OUT_OF_RESOURCES;
  return ::clEnqueueCopyBufferRect(q, src, dst, src_origin, dst_origin, region, src_row, src_slice,
                                   dst_row, dst_slice, n, wait, event);
}
inline cl_mem clCreateSubBuffer(cl_mem m, cl_mem_flags flags, cl_buffer_create_type type,
                                const void* info, cl_int* err) {
  if (state().hit(CreateSubBuffer)) {
    if (err) *err = CL_OUT_OF_RESOURCES;
    return nullptr;
  }
  return ::clCreateSubBuffer(m, flags, type, info, err);
}
inline cl_int clGetMemObjectInfo(cl_mem m, cl_mem_info what, size_t size, void* value,
                                 size_t* size_ret) {
  if (state().hit(GetMemObjectInfo)) return CL_OUT_OF_RESOURCES;
  return ::clGetMemObjectInfo(m, what, size, value, size_ret);
}

inline cl_event clCreateUserEvent(cl_context c, cl_int* err) {
  if (state().hit(CreateUserEvent)) {
    if (err) *err = CL_OUT_OF_HOST_MEMORY;
    return nullptr;
  }
  return ::clCreateUserEvent(c, err);
}
// Not a fault site: a user event that never completes holds its queue forever, which no code
// can recover from, so clbuf (like any application) relies on it; counted through here only.
inline cl_int clSetUserEventStatus(cl_event e, cl_int status) {
  return ::clSetUserEventStatus(e, status);
}
inline cl_int clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint n, const cl_event* wait,
                                          cl_event* event) {
  if (state().hit(EnqueueMarkerWithWaitList)) return CL_OUT_OF_RESOURCES;
  return ::clEnqueueMarkerWithWaitList(q, n, wait, event);
}
inline cl_int clEnqueueBarrierWithWaitList(cl_command_queue q, cl_uint n, const cl_event* wait,
                                           cl_event* event) {
  if (state().hit(EnqueueBarrierWithWaitList)) return CL_OUT_OF_RESOURCES;
  return ::clEnqueueBarrierWithWaitList(q, n, wait, event);
}

inline cl_program clCreateProgramWithSource(cl_context c, cl_uint n, const char** lines,
                                            const size_t* lengths, cl_int* err) {
  if (state().hit(CreateProgramWithSource)) {
    if (err) *err = CL_OUT_OF_HOST_MEMORY;
    return nullptr;
  }
  return ::clCreateProgramWithSource(c, n, lines, lengths, err);
}
inline cl_int clBuildProgram(cl_program p, cl_uint n, const cl_device_id* devices,
                             const char* options, void(CL_CALLBACK* notify)(cl_program, void*),
                             void* user) {
  // As a device without a compiler, or a build that fails: the program is left unbuilt.
  if (state().hit(BuildProgram)) return CL_BUILD_PROGRAM_FAILURE;
  return ::clBuildProgram(p, n, devices, options, notify, user);
}
inline cl_int clGetProgramBuildInfo(cl_program p, cl_device_id d, cl_program_build_info what,
                                    size_t size, void* value, size_t* size_ret) {
  if (state().hit(GetProgramBuildInfo)) return CL_OUT_OF_RESOURCES;
  return ::clGetProgramBuildInfo(p, d, what, size, value, size_ret);
}
inline cl_kernel clCreateKernel(cl_program p, const char* name, cl_int* err) {
  if (state().hit(CreateKernel)) {
    if (err) *err = CL_OUT_OF_RESOURCES;
    return nullptr;
  }
  return ::clCreateKernel(p, name, err);
}
inline cl_int clSetKernelArg(cl_kernel k, cl_uint index, size_t size, const void* value) {
  if (state().hit(SetKernelArg)) return CL_OUT_OF_RESOURCES;
  return ::clSetKernelArg(k, index, size, value);
}
inline cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims,
                                     const size_t* offset, const size_t* global,
                                     const size_t* local, cl_uint n, const cl_event* wait,
                                     cl_event* event) {
  if (!state().hit(EnqueueNDRangeKernel)) {
    return ::clEnqueueNDRangeKernel(q, k, dims, offset, global, local, n, wait, event);
  }
  if (!state().on_device) return CL_OUT_OF_RESOURCES;
  return failing_on_device(CL_FALSE, event, [&](cl_event* mine) {
    return ::clEnqueueNDRangeKernel(q, k, dims, offset, global, local, n, wait, mine);
  });
}

/// Tracing's span of a started transfer (detail/trace.hpp): passed through, no fault site (a
/// refused callback only ends the span at the call; the sweeps do not trace).
inline cl_int clSetEventCallback(cl_event e, cl_int type,
                                 void(CL_CALLBACK* notify)(cl_event, cl_int, void*), void* user) {
  return ::clSetEventCallback(e, type, notify, user);
}

}  // namespace clbuf_fault

#define CLBUF_CL(fn) ::clbuf_fault::fn
#include <clbuf/clbuf.hpp>

#endif  // CLBUF_TESTS_FAULT_HOOK_HPP
