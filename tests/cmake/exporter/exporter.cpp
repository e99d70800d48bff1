// SPDX-License-Identifier: MIT
#include "exporter.hpp"

namespace exporter {

std::vector<double> round_trip(clbuf::BufferManager& manager, const std::vector<double>& data) {
  return manager.download(manager.upload(data));
}

}  // namespace exporter
