// SPDX-License-Identifier: MIT
// Which device of a stream takes which tile (clbuf/group_tile_stream.hpp; one device takes
// every tile of clbuf/tile_stream.hpp's stream): pure arithmetic. The tiles are dealt in turn
// by a table of `period` places repeated; device d holds parts[d] places of it, spread through
// it (the place goes to the device with the largest parts[d] / (dealt[d] + 1), the lower device
// on a tie: equal parts deal round robin, 0, 1, ..., D-1, 0, ...).
#ifndef CLBUF_DETAIL_TILE_DEAL_HPP
#define CLBUF_DETAIL_TILE_DEAL_HPP

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

class TileDeal {
 public:
  /// Device d takes parts[d] places of every sum(parts) tiles (a part may be 0; one is not).
  explicit TileDeal(std::vector<std::size_t> parts) : parts_(std::move(parts)) {
    std::size_t period = 0;
    for (std::size_t part : parts_) period += part;
    std::vector<std::size_t> dealt(parts_.size(), 0);
    table_.reserve(period);
    for (std::size_t place = 0; place < period; ++place) {
      std::size_t best = parts_.size();
      for (std::size_t d = 0; d < parts_.size(); ++d) {
        if (dealt[d] == parts_[d]) continue;
        // parts[d] / (dealt[d] + 1) > parts[best] / (dealt[best] + 1), in integers
        if (best == parts_.size() ||
            static_cast<std::uint64_t>(parts_[d]) * (dealt[best] + 1) >
                static_cast<std::uint64_t>(parts_[best]) * (dealt[d] + 1)) {
          best = d;
        }
      }
      table_.push_back(best);
      ++dealt[best];
    }
  }

  /// The device that takes tile k.
  std::size_t owner(std::size_t k) const noexcept { return table_[k % table_.size()]; }

  /// How many of `tiles` tiles (0 to tiles - 1) device d takes.
  std::size_t tiles_of(std::size_t d, std::size_t tiles) const noexcept {
    std::size_t count = tiles / table_.size() * parts_[d];
    for (std::size_t place = 0; place < tiles % table_.size(); ++place) {
      if (table_[place] == d) ++count;
    }
    return count;
  }

  /// How many devices.
  std::size_t devices() const noexcept { return parts_.size(); }

 private:
  std::vector<std::size_t> parts_;
  std::vector<std::size_t> table_;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TILE_DEAL_HPP
