// SPDX-License-Identifier: MIT
// The library's interface: clbuf types in it, so its users need clbuf too.
#ifndef EXPORTER_HPP
#define EXPORTER_HPP

#include <clbuf/clbuf.hpp>

#include <vector>

namespace exporter {

/// Uploads `data` and downloads it again through `manager`.
std::vector<double> round_trip(clbuf::BufferManager& manager, const std::vector<double>& data);

}  // namespace exporter

#endif  // EXPORTER_HPP
