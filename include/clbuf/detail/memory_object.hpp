// SPDX-License-Identifier: MIT
// OpenCL memory objects that clbuf does not allocate from its pool: an application's buffer
// being adopted (what OpenCL says about it) and sub-buffer views.
#ifndef CLBUF_DETAIL_MEMORY_OBJECT_HPP
#define CLBUF_DETAIL_MEMORY_OBJECT_HPP

#include <clbuf/detail/pool.hpp>
#include <clbuf/error.hpp>

#include <cstddef>

namespace clbuf {
namespace detail {

/// What clGetMemObjectInfo says about a buffer to adopt.
struct MemoryFacts {
  cl_context context = nullptr;
  std::size_t size = 0;     ///< CL_MEM_SIZE
  cl_mem parent = nullptr;  ///< CL_MEM_ASSOCIATED_MEMOBJECT: set for a sub-buffer
  std::size_t offset = 0;   ///< CL_MEM_OFFSET within the parent
};

/// @throws Error CL_INVALID_MEM_OBJECT for a null buffer, or the query's code.
inline MemoryFacts memory_facts(const char* operation, cl_mem buffer) {
  if (buffer == nullptr) fail(operation, CL_INVALID_MEM_OBJECT, "the cl::Buffer to adopt is null");
  MemoryFacts facts;
  const auto query = [&](cl_mem_info what, std::size_t size, void* value) {
    check(CLBUF_CL(clGetMemObjectInfo)(buffer, what, size, value, nullptr), operation,
          "clGetMemObjectInfo");
  };
  query(CL_MEM_CONTEXT, sizeof(facts.context), &facts.context);
  query(CL_MEM_SIZE, sizeof(facts.size), &facts.size);
  query(CL_MEM_ASSOCIATED_MEMOBJECT, sizeof(facts.parent), &facts.parent);
  query(CL_MEM_OFFSET, sizeof(facts.offset), &facts.offset);
  return facts;
}

/// A sub-buffer of `root` of `bytes` at byte `offset` (checked against the root and its
/// alignment), as an Allocation that is never pooled. Wraps clCreateSubBuffer.
inline Allocation sub_buffer(const char* operation, cl_mem root, std::size_t offset,
                             std::size_t bytes) {
  const cl_buffer_region area = {offset, bytes};
  cl_int err = CL_SUCCESS;
  Allocation memory;
  memory.buffer = cl::Buffer(CLBUF_CL(clCreateSubBuffer)(root, CL_MEM_READ_WRITE,
                                                         CL_BUFFER_CREATE_TYPE_REGION, &area, &err),
                             false);
  check(err, operation, "clCreateSubBuffer");
  memory.capacity = bytes;
  return memory;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MEMORY_OBJECT_HPP
