// SPDX-License-Identifier: MIT
// The path one transfer or message took, by name, from counters by path (a manager's PathStats,
// a Communicator's MessagePaths) counted over it alone.
#ifndef CLBUF_TESTS_SUPPORT_PATH_COUNT_HPP
#define CLBUF_TESTS_SUPPORT_PATH_COUNT_HPP

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace clbuf_test {

/// The name of the one path of `counts` (name, count) that counted once, the others nothing;
/// else what they counted ("paths: staged 1 direct 1", "paths: none"), so that a comparison with
/// a path's name fails showing it.
inline std::string one_path(std::initializer_list<std::pair<const char*, std::uint64_t>> counts) {
  std::string taken;
  std::uint64_t total = 0;
  for (const auto& path : counts) {
    if (path.second == 0) continue;
    total += path.second;
    taken +=
        (taken.empty() ? "" : " ") + std::string(path.first) + " " + std::to_string(path.second);
  }
  if (total == 1) return taken.substr(0, taken.find(' '));
  return "paths: " + (taken.empty() ? std::string("none") : taken);
}

}  // namespace clbuf_test

#endif  // CLBUF_TESTS_SUPPORT_PATH_COUNT_HPP
