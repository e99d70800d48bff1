// SPDX-License-Identifier: MIT
// numpy's .npy header (NEP 1, numpy/lib/format.py), read and written: pure functions on bytes,
// no file and no OpenCL (fuzzed like checks.hpp). A file is the magic "\x93NUMPY", the format
// version (major, minor: 1.0, 2.0 or 3.0), the header's length (little-endian: 2 bytes in 1.0,
// 4 in 2.0 and 3.0), the header, then the array's bytes. The header is a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and ended by '\n' so that the array's bytes start at a multiple of 64.
// clbuf reads the numeric dtypes only (bool, signed and unsigned integers, floats, complex), in
// C order; a big-endian descr ('>') is read and byte-swapped as the chunks pass (npy_io.hpp).
// It writes version 1.0 (2.0 when the header passes 65535 bytes), little-endian, C order.
#ifndef CLBUF_DETAIL_NPY_FORMAT_HPP
#define CLBUF_DETAIL_NPY_FORMAT_HPP

#include <complex>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace clbuf {

/// The numpy dtype of an element type T, for .npy files: `kind` ('b' bool, 'i' signed integer,
/// 'u' unsigned integer, 'f' float, 'c' complex) and `bytes`. Defined for bool, every integer
/// type, float, double, std::complex<float> and std::complex<double>; a program may specialize it
/// for a type of its own (e.g. a 2-byte half float: kind 'f', bytes 2). cl_half is uint16_t to
/// C++, so a DeviceBuffer<cl_half> reads and writes '<u2'.
template <class T, class = void>
struct NpyType {};
template <>
struct NpyType<bool> {
  static constexpr char kind = 'b';
  static constexpr std::size_t bytes = 1;
};
template <class T>
struct NpyType<T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value>> {
  static constexpr char kind = std::is_signed<T>::value ? 'i' : 'u';
  static constexpr std::size_t bytes = sizeof(T);
};
template <class T>
struct NpyType<T,
               std::enable_if_t<std::is_same<T, float>::value || std::is_same<T, double>::value>> {
  static constexpr char kind = 'f';
  static constexpr std::size_t bytes = sizeof(T);
};
template <class T>
struct NpyType<std::complex<T>,
               std::enable_if_t<std::is_same<T, float>::value || std::is_same<T, double>::value>> {
  static constexpr char kind = 'c';
  static constexpr std::size_t bytes = sizeof(std::complex<T>);
};

/// What a .npy file's header says (read_npy_header(), BufferManager::load_npy()).
struct NpyHeader {
  unsigned major = 1, minor = 0;   ///< the format version
  char byte_order = '<';           ///< '<' little, '>' big, '|' not applicable (one byte)
  char kind = 'f';                 ///< 'b' bool, 'i' signed, 'u' unsigned, 'f' float, 'c' complex
  std::size_t item_bytes = 0;      ///< bytes of one element
  bool fortran_order = false;      ///< true: column-major (clbuf refuses it)
  std::vector<std::size_t> shape;  ///< () for a scalar: one element
  std::size_t elements = 0;        ///< the product of shape
  std::size_t data_bytes = 0;      ///< elements * item_bytes
  std::uint64_t data_offset = 0;   ///< where the array's bytes start in the file

  /// The descr as numpy writes it: "<f4", "|u1", ...
  std::string descr() const {
    return std::string(1, byte_order) + kind + std::to_string(item_bytes);
  }
};

namespace detail {

/// The magic and the version and length fields: what a reader needs before the header.
constexpr std::size_t npy_prefix_bytes = 12;

/// Given the first `n` bytes of a file (at least 10, 12 for versions 2.0 and 3.0), sets `total`
/// to the bytes of magic, version, length and header together (where the array starts).
/// Returns "" or why the bytes are not a .npy file's beginning.
inline std::string npy_header_length(const unsigned char* bytes, std::size_t n,
                                     std::uint64_t& total) {
  static const char magic[] = "\x93NUMPY";
  if (n < 10) return "the file has " + std::to_string(n) + " bytes, too few for a .npy header";
  for (int i = 0; i < 6; ++i) {
    if (bytes[i] != static_cast<unsigned char>(magic[i])) {
      return "not a .npy file (its first bytes are not \\x93NUMPY)";
    }
  }
  const unsigned major = bytes[6], minor = bytes[7];
  if (minor != 0 || major < 1 || major > 3) {
    return "format version " + std::to_string(major) + "." + std::to_string(minor) +
           " of .npy is not one clbuf reads (1.0, 2.0, 3.0)";
  }
  if (major == 1) {
    total = 10 + (std::uint64_t{bytes[8]} | std::uint64_t{bytes[9]} << 8);
    return std::string();
  }
  if (n < 12) return "the file has " + std::to_string(n) + " bytes, too few for a .npy header";
  total = 12 + (std::uint64_t{bytes[8]} | std::uint64_t{bytes[9]} << 8 |
                std::uint64_t{bytes[10]} << 16 | std::uint64_t{bytes[11]} << 24);
  return std::string();
}

/// A reader of the header's dict literal, strict about what numpy writes.
class NpyDictReader {
 public:
  NpyDictReader(const char* text, std::size_t n) : at_(text), end_(text + n) {}

  /// Parses the dict into `out`; returns "" or what is wrong.
  std::string parse(NpyHeader& out) {
    skip_space();
    if (!take('{')) return "the header is not a dict literal (no '{')";
    bool descr = false, order = false, shape = false;
    for (;;) {
      skip_space();
      if (take('}')) break;
      std::string key;
      if (!string(key)) return "a key of the header's dict is not a quoted string";
      skip_space();
      if (!take(':')) return "no ':' after the key '" + key + "'";
      skip_space();
      std::string why;
      if (key == "descr" && !descr) {
        descr = true;
        why = parse_descr(out);
      } else if (key == "fortran_order" && !order) {
        order = true;
        if (!boolean(out.fortran_order)) why = "'fortran_order' is not True or False";
      } else if (key == "shape" && !shape) {
        shape = true;
        why = parse_shape(out.shape);
      } else {
        why = "the header's key '" + key + "' is not one of descr, fortran_order, shape once each";
      }
      if (!why.empty()) return why;
      skip_space();
      if (take('}')) break;
      if (!take(',')) return "no ',' or '}' after the value of '" + key + "'";
    }
    if (!descr || !order || !shape) {
      return "the header lacks one of 'descr', 'fortran_order', 'shape'";
    }
    while (at_ + 1 < end_ && *at_ == ' ') ++at_;
    if (at_ + 1 != end_ || *at_ != '\n') {
      return "the header does not end in spaces and one '\\n' after its dict";
    }
    return std::string();
  }

 private:
  void skip_space() {
    while (at_ < end_ && (*at_ == ' ' || *at_ == '\t' || *at_ == '\n' || *at_ == '\r')) ++at_;
  }
  bool take(char c) {
    if (at_ < end_ && *at_ == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool string(std::string& out) {
    if (at_ >= end_ || (*at_ != '\'' && *at_ != '"')) return false;
    const char quote = *at_++;
    const char* start = at_;
    while (at_ < end_ && *at_ != quote) {
      if (*at_ == '\\' || *at_ == '\n') return false;
      ++at_;
    }
    if (at_ >= end_) return false;
    out.assign(start, at_);
    ++at_;
    return true;
  }
  bool word(const char* w) {
    const char* p = at_;
    for (; *w != '\0'; ++w, ++p) {
      if (p >= end_ || *p != *w) return false;
    }
    at_ = p;
    return true;
  }
  bool boolean(bool& out) {
    if (word("True")) return out = true, true;
    if (word("False")) return out = false, true;
    return false;
  }
  bool number(std::size_t& out) {
    if (at_ >= end_ || *at_ < '0' || *at_ > '9') return false;
    std::size_t value = 0;
    while (at_ < end_ && *at_ >= '0' && *at_ <= '9') {
      const std::size_t digit = static_cast<std::size_t>(*at_ - '0');
      if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10) return false;
      value = value * 10 + digit;
      ++at_;
    }
    if (at_ < end_ && (*at_ == 'L' || *at_ == 'l')) ++at_;  // Python 2's long
    out = value;
    return true;
  }
  std::string parse_shape(std::vector<std::size_t>& shape) {
    if (!take('(')) return "'shape' is not a tuple";
    bool comma = false;
    for (;;) {
      skip_space();
      if (take(')')) break;
      std::size_t extent = 0;
      if (!number(extent)) return "'shape' holds something other than whole numbers of size_t";
      shape.push_back(extent);
      skip_space();
      comma = take(',');
      if (!comma) {
        skip_space();
        if (!take(')')) return "'shape' is not a tuple of numbers";
        break;
      }
    }
    if (shape.size() == 1 && !comma) return "'shape' is (n), a number, not a tuple (n,)";
    return std::string();
  }
  std::string parse_descr(NpyHeader& out) {
    std::string d;
    if (!string(d)) return "'descr' is not a quoted string (a structured dtype?)";
    std::size_t at = 0;
    out.byte_order = '|';
    if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
      out.byte_order = d[0] == '=' ? '<' : d[0];  // '=': native, little-endian on clbuf's hosts
      ++at;
    }
    if (at >= d.size()) return "'descr' '" + d + "' names no dtype";
    out.kind = d[at++];
    std::size_t size = 0;
    bool digits = at < d.size();
    for (; at < d.size(); ++at) {
      if (d[at] < '0' || d[at] > '9' || size > 64) {
        digits = false;
        break;
      }
      size = size * 10 + static_cast<std::size_t>(d[at] - '0');
    }
    const bool fits = digits && ((out.kind == 'b' && size == 1) ||
                                 ((out.kind == 'i' || out.kind == 'u') &&
                                  (size == 1 || size == 2 || size == 4 || size == 8)) ||
                                 (out.kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
                                 (out.kind == 'c' && (size == 8 || size == 16)));
    if (!fits) {
      return "dtype '" + d +
             "' is not one clbuf reads (bool, int8-int64, uint8-uint64, float16-float64, "
             "complex64, complex128)";
    }
    if (out.byte_order == '|' && size != 1) return "dtype '" + d + "' has no byte order";
    if (size == 1) out.byte_order = '|';
    out.item_bytes = size;
    return std::string();
  }

  const char* at_;
  const char* end_;
};

/// Parses a whole .npy header (`n` bytes: magic, version, length and the dict; `n` at least
/// what npy_header_length() gave) into `out`. Returns "" or what is wrong. Fortran order is
/// parsed, not refused: the caller refuses it.
inline std::string parse_npy_header(const unsigned char* bytes, std::size_t n, NpyHeader& out) {
  std::uint64_t total = 0;
  std::string why = npy_header_length(bytes, n, total);
  if (!why.empty()) return why;
  if (total > n) return "the header is cut short (truncated)";
  out = NpyHeader();
  out.major = bytes[6];
  out.minor = bytes[7];
  const std::size_t start = out.major == 1 ? 10 : 12;
  for (std::size_t i = start; i < total; ++i) {
    if (bytes[i] >= 0x80 && out.major != 3) return "the header has bytes that are not ASCII";
    if (bytes[i] == 0) return "the header has a NUL byte";
  }
  why = NpyDictReader(reinterpret_cast<const char*>(bytes) + start,
                      static_cast<std::size_t>(total - start))
            .parse(out);
  if (!why.empty()) return why;
  std::size_t elements = 1;
  for (std::size_t extent : out.shape) {
    if (extent != 0 && elements > std::numeric_limits<std::size_t>::max() / extent) {
      return "the shape's elements overflow size_t";
    }
    elements *= extent;
  }
  if (elements > std::numeric_limits<std::size_t>::max() / out.item_bytes) {
    return "the array's bytes (" + std::to_string(elements) + " elements of " +
           std::to_string(out.item_bytes) + " bytes) overflow size_t";
  }
  out.elements = elements;
  out.data_bytes = elements * out.item_bytes;
  out.data_offset = total;
  return std::string();
}

/// The bytes of a .npy header (magic to '\n') for `descr` ("<f4") and `shape`, C order: version
/// 1.0, or 2.0 when the header passes 65535 bytes; the array starts at a multiple of 64.
inline std::string format_npy_header(const std::string& descr,
                                     const std::vector<std::size_t>& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (i + 1 < shape.size() || shape.size() == 1) dict += ',';
    if (i + 1 < shape.size()) dict += ' ';
  }
  dict += "), }";
  std::size_t prefix = 10;
  std::size_t length = (dict.size() + 1 + prefix + 63) / 64 * 64 - prefix;
  if (length > 65535) {
    prefix = 12;
    length = (dict.size() + 1 + prefix + 63) / 64 * 64 - prefix;
  }
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(prefix == 10 ? 1 : 2);
  out += '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((length >> (8 * i)) & 0xFF);
  out += dict;
  out.append(length - dict.size() - 1, ' ');
  out += '\n';
  return out;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_NPY_FORMAT_HPP
