// SPDX-License-Identifier: MIT
// clbuf::mpi's wire format and vocabulary: the header every message starts with, element type
// codes and their names, and MPI errors as clbuf::Error (the public Op, Path and Options are in
// clbuf/mpi/options.hpp). Every message is a header on the user's (duplicated) communicator, with
// the payload inline when it is small, else followed by chunks on a second communicator, tagged
// with a stream number the header names, so chunks of concurrent messages never match each other.
#ifndef CLBUF_DETAIL_MPI_WIRE_HPP
#define CLBUF_DETAIL_MPI_WIRE_HPP

#include <mpi.h>
#include <clbuf/error.hpp>
#include <clbuf/mpi/options.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace clbuf {
namespace mpi {
namespace detail {

constexpr std::uint32_t magic = 0x636c6266u;  // "clbf"

/// What a message is part of: receivers of a collective reject a point-to-point header and the
/// reverse; `abort` tells the receiver that its sender gave up (a collective that failed there).
enum class Kind : std::uint32_t { point_to_point = 1, collective = 2, abort = 3 };

struct Header {
  std::uint32_t magic = detail::magic;
  std::uint32_t kind = 1;
  std::uint64_t count = 0;  // elements
  std::uint64_t bytes = 0;
  std::uint32_t element_size = 1;
  std::uint32_t type = 0;          // TypeCode; 0: any trivially copyable type
  std::uint32_t stream = 0;        // tag of the chunks on the data communicator
  std::uint32_t inline_bytes = 0;  // payload bytes after the header in this message
  std::uint64_t chunk_bytes = 0;   // bytes per chunk message; 0 when the payload is inline
};
static_assert(std::is_trivially_copyable<Header>::value, "Header travels as bytes");
constexpr std::size_t header_bytes = sizeof(Header);

/// Element types MPI and OpenCL C both name; 0 for every other trivially copyable type (only
/// sizes are compared then).
enum TypeCode : std::uint32_t {
  any_type = 0,
  int8 = 1,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  uint64,
  float32,
  float64,
  boolean
};

template <class T>
constexpr std::uint32_t type_code() noexcept {
  if (std::is_same<T, bool>::value) return boolean;
  if (std::is_floating_point<T>::value) {
    if (std::is_same<T, float>::value && sizeof(T) == 4) return float32;
    return std::is_same<T, double>::value && sizeof(T) == 8 ? std::uint32_t{float64} : 0u;
  }
  if (std::is_integral<T>::value) {
    const std::uint32_t base = std::is_signed<T>::value ? int8 : uint8;
    switch (sizeof(T)) {
      case 1:
        return base;
      case 2:
        return base + 2;
      case 4:
        return base + 4;
      case 8:
        return base + 6;
      default:
        return 0;
    }
  }
  return 0;
}

inline const char* type_name(std::uint32_t code) noexcept {
  static const char* const names[] = {"bytes",  "int8",  "uint8",  "int16", "uint16", "int32",
                                      "uint32", "int64", "uint64", "float", "double", "bool"};
  return code < sizeof(names) / sizeof(names[0]) ? names[code] : "unknown";
}

/// The OpenCL C name of a reducible type (allreduce's kernel).
inline const char* cl_type_name(std::uint32_t code) noexcept {
  static const char* const names[] = {"",     "char", "uchar", "short", "ushort", "int",
                                      "uint", "long", "ulong", "float", "double"};
  return code >= int8 && code <= float64 ? names[code] : "";
}

inline MPI_Datatype mpi_type(std::uint32_t code) noexcept {
  switch (code) {
    case int8:
      return MPI_INT8_T;
    case uint8:
      return MPI_UINT8_T;
    case int16:
      return MPI_INT16_T;
    case uint16:
      return MPI_UINT16_T;
    case int32:
      return MPI_INT32_T;
    case uint32:
      return MPI_UINT32_T;
    case int64:
      return MPI_INT64_T;
    case uint64:
      return MPI_UINT64_T;
    case float32:
      return MPI_FLOAT;
    case float64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;
  }
}

/// The MPI datatype a plain-MPI peer names for elements of `code` (MPI_FLOAT for float, ...);
/// MPI_BYTE for bool and types MPI has no name for (counted in bytes then).
inline MPI_Datatype plain_type(std::uint32_t code) noexcept {
  const MPI_Datatype type = mpi_type(code);
  return type == MPI_DATATYPE_NULL ? MPI_BYTE : type;
}

inline const char* op_name(Op op) noexcept {
  return op == Op::sum ? "sum" : op == Op::min ? "min" : "max";
}

inline MPI_Op mpi_op(Op op) noexcept {
  return op == Op::sum ? MPI_SUM : op == Op::min ? MPI_MIN : MPI_MAX;
}

/// "1000 elements of 4 bytes (float)".
inline std::string describe(std::uint64_t count, std::uint32_t element_size, std::uint32_t type) {
  return std::to_string(count) + " elements of " + std::to_string(element_size) + " bytes (" +
         type_name(type) + ")";
}

inline const char* mpi_class_name(int error_class) noexcept {
  switch (error_class) {
    case MPI_ERR_BUFFER:
      return "MPI_ERR_BUFFER";
    case MPI_ERR_COUNT:
      return "MPI_ERR_COUNT";
    case MPI_ERR_TYPE:
      return "MPI_ERR_TYPE";
    case MPI_ERR_TAG:
      return "MPI_ERR_TAG";
    case MPI_ERR_COMM:
      return "MPI_ERR_COMM";
    case MPI_ERR_RANK:
      return "MPI_ERR_RANK";
    case MPI_ERR_REQUEST:
      return "MPI_ERR_REQUEST";
    case MPI_ERR_ROOT:
      return "MPI_ERR_ROOT";
    case MPI_ERR_OP:
      return "MPI_ERR_OP";
    case MPI_ERR_TRUNCATE:
      return "MPI_ERR_TRUNCATE";
    case MPI_ERR_INTERN:
      return "MPI_ERR_INTERN";
    case MPI_ERR_IN_STATUS:
      return "MPI_ERR_IN_STATUS";
    case MPI_ERR_PENDING:
      return "MPI_ERR_PENDING";
    default:
      return "MPI_ERR_OTHER";
  }
}

/// An MPI call's failure as a clbuf::Error (code CL_SUCCESS: OpenCL has no code for it) naming
/// the call, MPI's error class and MPI's own words.
[[noreturn]] inline void fail_mpi(const char* operation, int err, const char* call) {
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(err, &error_class);
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(err, text, &length);
  clbuf::detail::fail(operation, CL_SUCCESS,
                      std::string(call) + " failed: " + mpi_class_name(error_class) + " (" +
                          std::string(text, static_cast<std::size_t>(std::max(length, 0))) + ")");
}

inline void check_mpi(int err, const char* operation, const char* call) {
  if (err != MPI_SUCCESS) fail_mpi(operation, err, call);
}

/// Bytes per chunk for a message of `bytes` (more than one chunk's worth): half the message,
/// rounded up to 4 KiB, between min(256 KiB, chunk_bytes) and chunk_bytes, so that a message of
/// two chunks or more always has two to overlap.
inline std::size_t chunk_for(std::size_t bytes, std::size_t chunk_bytes) noexcept {
  const std::size_t low = std::min<std::size_t>(std::size_t{256} << 10, chunk_bytes);
  const std::size_t half = (bytes / 2 + 4095) / 4096 * 4096;
  return std::clamp(half, low, chunk_bytes);
}

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_WIRE_HPP
