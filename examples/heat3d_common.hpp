// SPDX-License-Identifier: MIT
// What examples 08 (clbuf::mpi, ranks) and 09 (DeviceGroup, devices of one process) share, so
// that both compute the same field bit for bit and print the same checksum: the kernel, the
// initial field, the host reference, the FNV-1a checksum and the argument parsing of numbers.
#ifndef CLBUF_EXAMPLES_HEAT3D_COMMON_HPP
#define CLBUF_EXAMPLES_HEAT3D_COMMON_HPP

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace heat3d {

// FP_CONTRACT OFF: a fused multiply-add would round differently from the host reference. One
// launch updates a box of a local field: `row` and `slice` are its pitches in elements, the box
// starts at (x0, y0, z0) and the NDRange is its size.
inline const char* const kernel_source = R"(
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
__kernel void jacobi(__global const double* in, __global double* out, ulong row, ulong slice,
                     ulong x0, ulong y0, ulong z0) {
  const size_t i = (z0 + get_global_id(2)) * slice + (y0 + get_global_id(1)) * row + x0 +
                   get_global_id(0);
  out[i] = (in[i - 1] + in[i + 1] + in[i - row] + in[i + row] + in[i - slice] + in[i + slice]) /
           6.0;
}
)";

/// Reads a whole decimal number in [low, high]; false for anything else.
inline bool parse_number(const std::string& text, std::size_t low, std::size_t high,
                         std::size_t& out) {
  if (text.empty() || text.size() > 9 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  out = static_cast<std::size_t>(std::stoul(text));
  return out >= low && out <= high;
}

/// The starting value of cell (x, y, z) of the cube of edge n: the bottom plane hot (1), the
/// other faces cold (0), the inside a pattern.
inline double initial_value(std::size_t n, std::size_t x, std::size_t y, std::size_t z) {
  if (z == 0) return 1.0;
  if (x == 0 || y == 0 || x == n - 1 || y == n - 1 || z == n - 1) return 0.0;
  return static_cast<double>((7 * x + 13 * y + 29 * z) % 64) / 64.0;
}

/// The whole starting cube, x fastest, then y, then z.
inline std::vector<double> initial_field(std::size_t n) {
  std::vector<double> field(n * n * n);
  std::size_t next = 0;
  for (std::size_t z = 0; z < n; ++z) {
    for (std::size_t y = 0; y < n; ++y) {
      for (std::size_t x = 0; x < n; ++x) field[next++] = initial_value(n, x, y, z);
    }
  }
  return field;
}

/// The whole cube on the host after `iters` steps, with the kernel's arithmetic in its order.
inline std::vector<double> host_reference(std::size_t n, std::size_t iters) {
  std::vector<double> in = initial_field(n);
  std::vector<double> out = in;
  const std::size_t plane = n * n;
  for (std::size_t step = 0; step < iters; ++step) {
    for (std::size_t z = 1; z + 1 < n; ++z) {
      for (std::size_t y = 1; y + 1 < n; ++y) {
        for (std::size_t x = 1; x + 1 < n; ++x) {
          const std::size_t i = z * plane + y * n + x;
          out[i] =
              (in[i - 1] + in[i + 1] + in[i - n] + in[i + n] + in[i - plane] + in[i + plane]) / 6.0;
        }
      }
    }
    std::swap(in, out);
  }
  return in;
}

/// 64-bit FNV-1a of the field's bytes.
inline std::uint64_t fnv1a(const std::vector<double>& field) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(field.data());
  for (std::size_t i = 0; i < field.size() * sizeof(double); ++i) {
    hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
  }
  return hash;
}

/// `value` as 16 hex digits.
inline std::string hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, value);
  return text;
}

}  // namespace heat3d

#endif  // CLBUF_EXAMPLES_HEAT3D_COMMON_HPP
