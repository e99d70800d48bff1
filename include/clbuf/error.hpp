// SPDX-License-Identifier: MIT
// clbuf::Error, the table of OpenCL error names, and the factories every failure goes through,
// so that the same failure always reads the same:
//   "<operation>: <CL_NAME> (<code>): <details>"
#ifndef CLBUF_ERROR_HPP
#define CLBUF_ERROR_HPP

#include <clbuf/opencl.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

// A wrapper with no call of its own (always inlined); code off the hot path (never inlined).
#if defined(__GNUC__)
#define CLBUF_DETAIL_INLINE inline __attribute__((always_inline))
#define CLBUF_DETAIL_COLD __attribute__((noinline, cold))
#else
#define CLBUF_DETAIL_INLINE inline
#define CLBUF_DETAIL_COLD
#endif

namespace clbuf {

namespace detail {

struct ErrorName {
  cl_int code;
  const char* name;
};

/// Every OpenCL error code's name, by literal numbers, not the cl.h macros: the names of every
/// OpenCL version are known even when the headers are configured for 1.2.
inline constexpr ErrorName error_names[] = {
    {0, "CL_SUCCESS"},
    {-1, "CL_DEVICE_NOT_FOUND"},
    {-2, "CL_DEVICE_NOT_AVAILABLE"},
    {-3, "CL_COMPILER_NOT_AVAILABLE"},
    {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
    {-5, "CL_OUT_OF_RESOURCES"},
    {-6, "CL_OUT_OF_HOST_MEMORY"},
    {-7, "CL_PROFILING_INFO_NOT_AVAILABLE"},
    {-8, "CL_MEM_COPY_OVERLAP"},
    {-9, "CL_IMAGE_FORMAT_MISMATCH"},
    {-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED"},
    {-11, "CL_BUILD_PROGRAM_FAILURE"},
    {-12, "CL_MAP_FAILURE"},
    {-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET"},
    {-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
    {-15, "CL_COMPILE_PROGRAM_FAILURE"},
    {-16, "CL_LINKER_NOT_AVAILABLE"},
    {-17, "CL_LINK_PROGRAM_FAILURE"},
    {-18, "CL_DEVICE_PARTITION_FAILED"},
    {-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE"},
    {-30, "CL_INVALID_VALUE"},
    {-31, "CL_INVALID_DEVICE_TYPE"},
    {-32, "CL_INVALID_PLATFORM"},
    {-33, "CL_INVALID_DEVICE"},
    {-34, "CL_INVALID_CONTEXT"},
    {-35, "CL_INVALID_QUEUE_PROPERTIES"},
    {-36, "CL_INVALID_COMMAND_QUEUE"},
    {-37, "CL_INVALID_HOST_PTR"},
    {-38, "CL_INVALID_MEM_OBJECT"},
    {-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR"},
    {-40, "CL_INVALID_IMAGE_SIZE"},
    {-41, "CL_INVALID_SAMPLER"},
    {-42, "CL_INVALID_BINARY"},
    {-43, "CL_INVALID_BUILD_OPTIONS"},
    {-44, "CL_INVALID_PROGRAM"},
    {-45, "CL_INVALID_PROGRAM_EXECUTABLE"},
    {-46, "CL_INVALID_KERNEL_NAME"},
    {-47, "CL_INVALID_KERNEL_DEFINITION"},
    {-48, "CL_INVALID_KERNEL"},
    {-49, "CL_INVALID_ARG_INDEX"},
    {-50, "CL_INVALID_ARG_VALUE"},
    {-51, "CL_INVALID_ARG_SIZE"},
    {-52, "CL_INVALID_KERNEL_ARGS"},
    {-53, "CL_INVALID_WORK_DIMENSION"},
    {-54, "CL_INVALID_WORK_GROUP_SIZE"},
    {-55, "CL_INVALID_WORK_ITEM_SIZE"},
    {-56, "CL_INVALID_GLOBAL_OFFSET"},
    {-57, "CL_INVALID_EVENT_WAIT_LIST"},
    {-58, "CL_INVALID_EVENT"},
    {-59, "CL_INVALID_OPERATION"},
    {-60, "CL_INVALID_GL_OBJECT"},
    {-61, "CL_INVALID_BUFFER_SIZE"},
    {-62, "CL_INVALID_MIP_LEVEL"},
    {-63, "CL_INVALID_GLOBAL_WORK_SIZE"},
    {-64, "CL_INVALID_PROPERTY"},
    {-65, "CL_INVALID_IMAGE_DESCRIPTOR"},
    {-66, "CL_INVALID_COMPILER_OPTIONS"},
    {-67, "CL_INVALID_LINKER_OPTIONS"},
    {-68, "CL_INVALID_DEVICE_PARTITION_COUNT"},
    {-69, "CL_INVALID_PIPE_SIZE"},
    {-70, "CL_INVALID_DEVICE_QUEUE"},
    {-71, "CL_INVALID_SPEC_ID"},
    {-72, "CL_MAX_SIZE_RESTRICTION_EXCEEDED"},
    {-1000, "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR"},
    {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
    {-1002, "CL_INVALID_D3D10_DEVICE_KHR"},
    {-1003, "CL_INVALID_D3D10_RESOURCE_KHR"},
    {-1004, "CL_D3D10_RESOURCE_ALREADY_ACQUIRED_KHR"},
    {-1005, "CL_D3D10_RESOURCE_NOT_ACQUIRED_KHR"},
    {-1006, "CL_INVALID_D3D11_DEVICE_KHR"},
    {-1007, "CL_INVALID_D3D11_RESOURCE_KHR"},
    {-1008, "CL_D3D11_RESOURCE_ALREADY_ACQUIRED_KHR"},
    {-1009, "CL_D3D11_RESOURCE_NOT_ACQUIRED_KHR"},
    {-1057, "CL_DEVICE_PARTITION_FAILED_EXT"},
    {-1058, "CL_INVALID_PARTITION_COUNT_EXT"},
    {-1059, "CL_INVALID_PARTITION_NAME_EXT"},
    {-1092, "CL_EGL_RESOURCE_NOT_ACQUIRED_KHR"},
    {-1093, "CL_INVALID_EGL_OBJECT_KHR"},
    {-1094, "CL_INVALID_ACCELERATOR_INTEL"},
    {-1095, "CL_INVALID_ACCELERATOR_TYPE_INTEL"},
    {-1096, "CL_INVALID_ACCELERATOR_DESCRIPTOR_INTEL"},
    {-1097, "CL_ACCELERATOR_TYPE_NOT_SUPPORTED_INTEL"},
    {-1098, "CL_INVALID_VA_API_MEDIA_ADAPTER_INTEL"},
    {-1099, "CL_INVALID_VA_API_MEDIA_SURFACE_INTEL"},
    {-1100, "CL_VA_API_MEDIA_SURFACE_ALREADY_ACQUIRED_INTEL"},
    {-1101, "CL_VA_API_MEDIA_SURFACE_NOT_ACQUIRED_INTEL"},
    {-1143, "CL_COMMAND_TERMINATED_ITSELF_WITH_FAILURE_ARM"},
    {-1144, "CL_INVALID_COMMAND_BUFFER_KHR"},
    {-1145, "CL_INVALID_SYNC_POINT_WAIT_LIST_KHR"},
    {-1146, "CL_INCOMPATIBLE_COMMAND_QUEUE_KHR"},
};

}  // namespace detail

/// The name of an OpenCL error code, e.g. `error_name(-30)` is "CL_INVALID_VALUE".
/// Unknown codes give "CL_UNKNOWN_ERROR".
inline const char* error_name(cl_int code) noexcept {
  for (const detail::ErrorName& entry : detail::error_names) {
    if (entry.code == code) return entry.name;
  }
  return "CL_UNKNOWN_ERROR";
}

/// The one exception clbuf throws. `what()` names the operation, the OpenCL error by name and
/// number where there is one, and the values that were wrong.
class Error : public std::runtime_error {
 public:
  /// An error with OpenCL code `code` (CL_SUCCESS for misuse OpenCL has no code for) and the
  /// whole message `what()` returns.
  Error(cl_int code, const std::string& message) : std::runtime_error(message), code_(code) {}

  /// The OpenCL code that names the failure; CL_SUCCESS for misuse OpenCL has no code for.
  cl_int code() const noexcept { return code_; }

 private:
  cl_int code_ = CL_SUCCESS;
};

namespace detail {

/// The text of an Error: "operation: CL_NAME (code): details" (no name for CL_SUCCESS).
inline std::string error_message(const char* operation, cl_int code, const std::string& details) {
  std::string message = operation;
  message += ": ";
  if (code != CL_SUCCESS) {
    message += error_name(code);
    message += " (" + std::to_string(code) + "): ";
  }
  message += details;
  // what() is a C string: a NUL inside the details (a user's text) would cut the message short.
  for (std::size_t at = message.find('\0'); at != std::string::npos; at = message.find('\0', at)) {
    message.replace(at, 1, "\\0");
  }
  return message;
}

[[noreturn]] inline void fail(const char* operation, cl_int code, const std::string& details) {
  throw Error(code, error_message(operation, code, details));
}

/// Out of host memory while clbuf allocates host memory of `bytes` (`what`).
[[noreturn]] inline void fail_host_memory(const char* operation, std::size_t bytes,
                                          const char* what) {
  fail(operation, CL_OUT_OF_HOST_MEMORY,
       std::string("could not allocate ") + std::to_string(bytes) + " bytes of host memory for " +
           what);
}

/// std::bad_alloc caught where a public call returns: the same failure as a clbuf::Error (README
/// "Errors": out of host memory is CL_OUT_OF_HOST_MEMORY, never std::bad_alloc), for what clbuf
/// allocates along the way (strings, records, lists) that has no check of its own.
[[noreturn]] inline void out_of_host_memory(const char* operation) {
  fail(operation, CL_OUT_OF_HOST_MEMORY, "could not allocate host memory for clbuf's bookkeeping");
}

/// Rethrows the exception being handled, a std::bad_alloc as out_of_host_memory(operation), or,
/// with `what`, as fail_host_memory(operation, bytes, what): clbuf's one conversion of
/// std::bad_alloc. Call it only from a catch handler: a constructor's function-try-block, whose
/// member initialisers guard_host_memory() cannot wrap.
[[noreturn]] inline void rethrow_host_memory(const char* operation, std::size_t bytes = 0,
                                             const char* what = nullptr) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    if (what == nullptr) out_of_host_memory(operation);
    fail_host_memory(operation, bytes, what);
  }
}

/// Runs `body` and returns what it returns; a std::bad_alloc from it becomes
/// fail_host_memory(operation, bytes, what): an allocation clbuf knows, of `bytes` for `what`.
template <class Body>
CLBUF_DETAIL_INLINE decltype(auto) guard_host_memory(const char* operation, std::size_t bytes,
                                                     const char* what, Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    rethrow_host_memory(operation, bytes, what);
  }
}

/// Runs `body` and returns what it returns; a std::bad_alloc from it becomes
/// out_of_host_memory(operation). Every public call that allocates runs in one.
template <class Body>
CLBUF_DETAIL_INLINE decltype(auto) guard_host_memory(const char* operation, Body&& body) {
  return guard_host_memory(operation, 0, nullptr, std::forward<Body>(body));
}

/// check()'s failure: an Error naming the OpenCL C call.
[[noreturn]] CLBUF_DETAIL_COLD inline void fail_call(cl_int code, const char* operation,
                                                     const char* call) {
  fail(operation, code, std::string(call) + " failed");
}
/// Turns the return code of an OpenCL C call into an Error naming the call. Inline, the
/// failure's text out of line: a test and a branch on every call's path (issue 47: as a call of
/// its own it cost a small transfer ~6 instructions per OpenCL call).
CLBUF_DETAIL_INLINE void check(cl_int code, const char* operation, const char* call) {
  if (code != CL_SUCCESS) fail_call(code, operation, call);
}

/// `count * element_size` as a number of bytes, or, when that does not fit in size_t,
/// "N elements of S bytes" (`suffix` follows the number only in the first form).
inline std::string describe_bytes(std::size_t count, std::size_t element_size,
                                  const char* suffix = " bytes") {
  if (element_size != 0 && count > std::numeric_limits<std::size_t>::max() / element_size) {
    return std::to_string(count) + " elements of " + std::to_string(element_size) + " bytes";
  }
  return std::to_string(count * element_size) + suffix;
}

// The misuse factories: one per kind of bad input, so each reads the same everywhere.

[[noreturn]] inline void fail_cleaned_up(const char* operation) {
  fail(operation, CL_SUCCESS,
       "the BufferManager was released by cleanup(); create a new BufferManager");
}

[[noreturn]] inline void fail_invalid_buffer(const char* operation) {
  fail(operation, CL_INVALID_MEM_OBJECT,
       "the DeviceBuffer holds no device memory (it was moved from or default-constructed)");
}

[[noreturn]] inline void fail_other_context(const char* operation) {
  fail(operation, CL_INVALID_CONTEXT,
       "the DeviceBuffer belongs to another OpenCL context than this BufferManager's");
}

[[noreturn]] inline void fail_null_pointer(const char* operation, std::size_t count) {
  fail(operation, CL_INVALID_VALUE,
       "null host pointer with a count of " + std::to_string(count) + " elements");
}

[[noreturn]] inline void fail_overflow(const char* operation, std::size_t count,
                                       std::size_t element_size) {
  fail(operation, CL_INVALID_VALUE,
       std::to_string(count) + " elements of " + std::to_string(element_size) +
           " bytes overflow size_t");
}

[[noreturn]] inline void fail_too_large(const char* operation, std::size_t bytes,
                                        std::uint64_t max_alloc_bytes) {
  fail(operation, CL_INVALID_BUFFER_SIZE,
       std::to_string(bytes) + " bytes exceed the device's max allocation of " +
           std::to_string(max_alloc_bytes) + " bytes");
}

/// `access` is "read" or "write"; counts are in elements of `element_size` bytes.
[[noreturn]] inline void fail_range(const char* operation, const char* access, std::size_t count,
                                    std::size_t offset, std::size_t capacity,
                                    std::size_t element_size) {
  fail(operation, CL_INVALID_VALUE,
       std::string(access) + " of " + describe_bytes(count, element_size) + " at offset " +
           describe_bytes(offset, element_size, "") + " past the end of a " +
           std::to_string(capacity * element_size) + "-byte buffer");
}

[[noreturn]] inline void fail_overlap(const char* operation, std::size_t src_offset,
                                      std::size_t dst_offset, std::size_t bytes) {
  fail(operation, CL_MEM_COPY_OVERLAP,
       "ranges [" + std::to_string(src_offset) + ", " + std::to_string(src_offset + bytes) +
           ") and [" + std::to_string(dst_offset) + ", " + std::to_string(dst_offset + bytes) +
           ") of one buffer overlap");
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_ERROR_HPP
