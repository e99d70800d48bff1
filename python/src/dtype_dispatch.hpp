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

// ---- Dispatch on the numpy dtype, for calls whose files carry the dtype --------------------
//
// The library's .npy-typed calls (clbuf::Checkpoint's add: each array's descr in its file and in
// the manifest) take the dtype from the C++ element type (clbuf::NpyType<T>), so there the size
// alone is not enough: float32 and int32 must write '<f4' and '<i4'. NumpyElement<Kind, Bytes> is
// an element of the dtype of numpy kind `Kind` and `Bytes` bytes, moved as bytes, that
// clbuf::NpyType knows (the specialization after this namespace):
//
//   with_numpy_element(op, dtype, "checkpoint", [&](auto tag) {
//     using E = decltype(tag);                  // NpyType<E>: the dtype's kind and size
//     ... clbuf::DeviceBuffer<E> ... checkpoint.add(name, buffer) ...
//   });
//
// The dtypes: bool, int8-int64, uint8-uint64, float16-float64, complex64, complex128 in the
// host's byte order (those clbuf's .npy reader takes); any other is refused by
// check_numpy_element() with "cannot <action> elements of <dtype>".

/// An element of the numpy dtype of kind `Kind` ('b', 'i', 'u', 'f', 'c') and `Bytes` bytes.
template <char Kind, std::size_t Bytes>
struct NumpyElement {
  unsigned char bytes[Bytes];
};

/// The dtype's numpy kind, or 0 when with_numpy_element() does not dispatch it.
inline char numpy_element_kind(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const auto size = static_cast<std::size_t>(dtype.itemsize());
  if (!dtype.attr("isnative").cast<bool>()) return 0;  // the library writes the host's order
  const bool sized =
      (kind == 'b' && size == 1) ||
      ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
      (kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
      (kind == 'c' && (size == 8 || size == 16));
  return sized ? kind : 0;
}

/// clbuf.Error (CL_INVALID_VALUE) naming `operation`, "cannot <action> elements of <dtype>",
/// unless with_numpy_element() dispatches `dtype`.
inline void check_numpy_element(const char* operation, const py::dtype& dtype, const char* action) {
  if (numpy_element_kind(dtype) == 0) {
    fail(operation, CL_INVALID_VALUE,
         std::string("cannot ") + action + " elements of " + describe_dtype(dtype) +
             " (bool, integers, float16-float64, complex64 and complex128 in the host's byte "
             "order only)");
  }
}

/// f(E{}) with E the NumpyElement of `dtype`, and its result; clbuf.Error as
/// check_numpy_element() for any other dtype.
template <class F>
decltype(auto) with_numpy_element(const char* operation, const py::dtype& dtype, const char* action,
                                  F&& f) {
  const auto size = static_cast<std::size_t>(dtype.itemsize());
  switch (numpy_element_kind(dtype)) {
    case 'b':
      return f(NumpyElement<'b', 1>{});
    case 'i':
      if (size == 1) return f(NumpyElement<'i', 1>{});
      if (size == 2) return f(NumpyElement<'i', 2>{});
      if (size == 4) return f(NumpyElement<'i', 4>{});
      return f(NumpyElement<'i', 8>{});
    case 'u':
      if (size == 1) return f(NumpyElement<'u', 1>{});
      if (size == 2) return f(NumpyElement<'u', 2>{});
      if (size == 4) return f(NumpyElement<'u', 4>{});
      return f(NumpyElement<'u', 8>{});
    case 'f':
      if (size == 2) return f(NumpyElement<'f', 2>{});
      if (size == 4) return f(NumpyElement<'f', 4>{});
      return f(NumpyElement<'f', 8>{});
    case 'c':
      if (size == 8) return f(NumpyElement<'c', 8>{});
      return f(NumpyElement<'c', 16>{});
    default:
      check_numpy_element(operation, dtype, action);  // throws
      return f(NumpyElement<'u', 1>{});               // never reached
  }
}

}  // namespace clbuf_python

/// The .npy dtype of a NumpyElement: its kind and size.
template <char Kind, std::size_t Bytes>
struct clbuf::NpyType<clbuf_python::NumpyElement<Kind, Bytes>, void> {
  static constexpr char kind = Kind;
  static constexpr std::size_t bytes = Bytes;
};

#endif  // CLBUF_PYTHON_DTYPE_DISPATCH_HPP
