// SPDX-License-Identifier: MIT
// Size arguments of the benchmarks that take them as text ("64M", "4096,1M,1G"): cross_device
// and duplex.
#ifndef CLBUF_BENCH_SIZE_LIST_HPP
#define CLBUF_BENCH_SIZE_LIST_HPP

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

// "64M" -> 64 MiB; suffixes K, M, G (binary, any case), none for bytes.
inline std::size_t parse_size(const std::string& text) {
  std::size_t pos = 0;
  const unsigned long long value = std::stoull(text, &pos);
  const std::string unit = text.substr(pos);
  std::size_t shift = 0;
  if (unit == "K" || unit == "k") {
    shift = 10;
  } else if (unit == "M" || unit == "m") {
    shift = 20;
  } else if (unit == "G" || unit == "g") {
    shift = 30;
  } else if (!unit.empty()) {
    throw std::invalid_argument("bad size '" + text + "' (use e.g. 4096, 64K, 16M, 1G)");
  }
  return static_cast<std::size_t>(value) << shift;
}

inline std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

// "4096,1M,1G" -> the sizes in bytes.
inline std::vector<std::size_t> parse_sizes(const std::string& list) {
  std::vector<std::size_t> sizes;
  for (const std::string& s : split(list, ',')) sizes.push_back(parse_size(s));
  return sizes;
}

}  // namespace bench

#endif  // CLBUF_BENCH_SIZE_LIST_HPP
