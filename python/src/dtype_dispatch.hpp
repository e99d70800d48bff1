// SPDX-License-Identifier: MIT
// The module's one dispatch on element size: a numpy dtype's itemsize (1, 2, 4, 8 or 16 bytes) as
// the C++ element type of that size (std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t,
// Bytes16), for the library's typed calls on memory the module holds as bytes (a Handle's
// DeviceBuffer<std::uint8_t>, a ShardedBuffer<std::uint8_t> carrying a dtype). Only the size
// matters: the bytes move unchanged, so float32 and int32 are both std::uint32_t here.
//
// Use (fill, and any typed call to come, such as .npy's load and save of a dtype):
//
//   check_element_size(op, itemsize, "fill");  // before anything moves: clbuf.Error otherwise
//   with_element_type(op, itemsize, "fill", [&](auto tag) {
//     using W = decltype(tag);                  // the element type of itemsize bytes
//     ... alias_of<W>(op, handle, manager) ... fill_as<W>(manager, *alias, pattern, ...) ...
//   });
//
// Every other dtype size (a structured or string dtype, 32-byte elements) is refused by both
// with "cannot <action> elements of N bytes".
#ifndef CLBUF_PYTHON_DTYPE_DISPATCH_HPP
#define CLBUF_PYTHON_DTYPE_DISPATCH_HPP

#include "common.hpp"

namespace clbuf_python {

/// An element of 16 bytes (complex128, longdouble on x86-64): two words, moved as they are.
struct Bytes16 {
  std::uint64_t words[2];
};

/// True for the element sizes with_element_type() dispatches: 1, 2, 4, 8 and 16 bytes.
inline bool has_element_type(std::size_t itemsize) noexcept {
  return itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8 || itemsize == 16;
}

/// clbuf.Error (CL_INVALID_VALUE) naming `operation`, "cannot <action> elements of N bytes",
/// unless has_element_type(itemsize).
inline void check_element_size(const char* operation, std::size_t itemsize, const char* action) {
  if (!has_element_type(itemsize)) {
    fail(operation, CL_INVALID_VALUE,
         std::string("cannot ") + action + " elements of " + std::to_string(itemsize) + " bytes");
  }
}

/// f(W{}) with W the C++ element type of `itemsize` bytes (see the top of this file), and its
/// result; clbuf.Error as check_element_size() for any other size.
template <class F>
decltype(auto) with_element_type(const char* operation, std::size_t itemsize, const char* action,
                                 F&& f) {
  switch (itemsize) {
    case 1:
      return f(std::uint8_t{});
    case 2:
      return f(std::uint16_t{});
    case 4:
      return f(std::uint32_t{});
    case 8:
      return f(std::uint64_t{});
    case 16:
      return f(Bytes16{});
    default:
      check_element_size(operation, itemsize, action);  // throws
      return f(std::uint8_t{});                         // never reached
  }
}

/// Fills `count` elements of `buffer` from element `at` with `pattern` (the sizeof(W) bytes of
/// one element, as value_bytes() gives them): blocking (an empty Future back), or started after
/// `after` (async).
template <class W>
clbuf::Future<void> fill_as(clbuf::BufferManager& manager, clbuf::DeviceBuffer<W>& buffer,
                            const std::string& pattern, std::size_t count, std::size_t at,
                            bool async, const std::vector<cl::Event>& after = {}) {
  W value{};
  std::memcpy(&value, pattern.data(), sizeof(W));
  if (!async) {
    manager.fill(buffer, value, count, at);
    return clbuf::Future<void>();
  }
  return manager.fill_async(buffer, value, count, at, after);
}

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_DTYPE_DISPATCH_HPP
