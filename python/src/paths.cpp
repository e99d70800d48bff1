// SPDX-License-Identifier: MIT
// What `clbuf info` (python/clbuf/cli.py) shows of a manager's transfer paths: the path the C++
// engine's own rule (TransferEngine::route) takes for an upload or download of a size, and the
// resolved Options its thresholds come from. Private functions of clbuf._clbuf.
#include "manager.hpp"

namespace clbuf_python {

void bind_paths(py::module_& m) {
  m.def(
      "_transfer_path",
      [](Self<Manager> self, std::size_t bytes, const std::string& direction) {
        const auto& manager = initialised(self, "_transfer_path");
        if (direction != "upload" && direction != "download") {
          fail("_transfer_path", CL_INVALID_VALUE,
               "direction must be \"upload\" or \"download\", not \"" + direction + "\"");
        }
        return std::string(
            clbuf::detail::ManagerAccess::path(manager->cpp(), bytes, direction == "upload"));
      },
      py::arg("manager"), py::arg("nbytes"), py::arg("direction"),
      "The path of a blocking upload_to_device (direction 'upload') or download_from_device "
      "('download') of `nbytes` bytes of a numpy array: 'host_copy', 'staged', 'buffered', "
      "'bounced' or 'direct' (as stats()' paths name them).");
  m.def(
      "_options",
      [](Self<Manager> self) {
        const clbuf::Options& options = initialised(self, "_options")->cpp().options();
        py::dict out;
        out["memory"] = clbuf::to_string(options.memory);
        out["staging_threshold_bytes"] = options.staging_threshold_bytes;
        out["staging_chunk_bytes"] = options.staging_chunk_bytes;
        out["staging_chunks"] = options.staging_chunks;
        out["bounce_max_bytes"] = options.bounce_max_bytes;
        out["buffered_upload_max_bytes"] = options.buffered_upload_max_bytes;
        out["pool_limit_bytes"] = options.pool_limit_bytes;
        out["pinned_budget_bytes"] = options.pinned_budget_bytes;
        out["copy_threads"] = options.copy_threads;
        out["never"] = clbuf::Options::never;
        return out;
      },
      py::arg("manager"),
      "The manager's clbuf::Options with every 'automatic' resolved, as a dict; 'never' is the "
      "value of a threshold that is never reached.");
}

}  // namespace clbuf_python
