// SPDX-License-Identifier: MIT
// Device discovery and selection: list_devices(), the selector grammar shared by CLBUF_DEVICE
// and BufferManager(selector), and the GPU-first default (the workings in detail/selection.hpp).
#ifndef CLBUF_DEVICE_HPP
#define CLBUF_DEVICE_HPP

#include <clbuf/detail/selection.hpp>
#include <clbuf/device_info.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {

/// Every device of every OpenCL platform, numbered as the `P:D` selector counts them.
/// Empty when no OpenCL platform is installed.
/// @throws Error when an OpenCL query fails. Wraps clGetPlatformIDs, clGetDeviceIDs.
inline std::vector<DeviceInfo> list_devices() {
  return detail::guard_host_memory("list_devices", [&] {
    std::vector<DeviceInfo> infos;
    for (detail::DeviceEntry& entry : detail::enumerate_devices("list_devices")) {
      infos.push_back(std::move(entry.info));
    }
    return infos;
  });
}

/// One device of a SelectionReport: picked, or why not.
struct DeviceVerdict {
  DeviceInfo device;    ///< the device
  bool picked = false;  ///< true for the one device the selector picked
  std::string reason;   ///< why it was picked (as selection_reason() says) or rejected
};

/// What a selector makes of every device: explain_selection()'s answer.
struct SelectionReport {
  std::string selector;                ///< the selector text in force ("" for the default)
  std::string origin;                  ///< "selector", "CLBUF_DEVICE" or "default"
  std::vector<DeviceVerdict> devices;  ///< every device, in list_devices() order
  std::string problem;                 ///< why nothing was picked ("" when a device was)

  /// The picked device, or nullptr when none matches.
  const DeviceVerdict* picked() const noexcept {
    for (const DeviceVerdict& verdict : devices) {
      if (verdict.picked) return &verdict;
    }
    return nullptr;
  }

  /// One line for the selector, then one per device, e.g.
  /// "  [0:0] pthread-... (cpu, Portable Computing Language): picked: no GPU found, ...".
  std::string to_string() const {
    std::string text = "clbuf device selection by " +
                       (origin == "default" ? std::string("the default (GPU preferred)")
                                            : detail::quote_selector(selector, origin)) +
                       ": " + std::to_string(devices.size()) + " device(s)\n";
    for (const DeviceVerdict& verdict : devices) {
      text += "  [" + std::to_string(verdict.device.platform_index) + ":" +
              std::to_string(verdict.device.device_index) + "] " + verdict.device.name + " (" +
              clbuf::to_string(verdict.device.type) + ", " + verdict.device.platform +
              "): " + (verdict.picked ? "picked: " : "rejected: ") + verdict.reason + "\n";
    }
    if (!problem.empty()) text += "  nothing picked: " + problem + "\n";
    return text;
  }
};

/// Every device of every platform with the verdict `selector` (the grammar of CLBUF_DEVICE;
/// blank: CLBUF_DEVICE, then the default) gives it: picked, or why it was rejected. The same
/// logic as BufferManager's constructor, so the report never disagrees with the choice. Never
/// throws for a selector that matches nothing or for a missing platform: `problem` says so.
/// @throws Error when an OpenCL query fails. Wraps clGetPlatformIDs, clGetDeviceIDs.
inline SelectionReport explain_selection(const std::string& selector = std::string()) {
  return detail::guard_host_memory("explain_selection", [&] {
    SelectionReport report;
    report.selector = detail::effective_selector(selector, report.origin);
    const std::vector<detail::DeviceEntry> entries = detail::enumerate_devices("explain_selection");
    if (entries.empty()) {
      report.problem =
          "no OpenCL device on any platform; install an OpenCL driver, e.g. Debian's "
          "pocl-opencl-icd for the CPU, and check with clinfo -l";
      return report;
    }
    const std::string quoted = detail::quote_selector(report.selector, report.origin);
    for (detail::Verdict& verdict :
         detail::judge_devices(entries, detail::parse_selector(report.selector), quoted)) {
      report.devices.push_back(
          {entries[verdict.entry].info, verdict.picked, std::move(verdict.reason)});
    }
    if (report.picked() == nullptr) report.problem = "no device matches " + quoted;
    return report;
  });
}

}  // namespace clbuf

#endif  // CLBUF_DEVICE_HPP
