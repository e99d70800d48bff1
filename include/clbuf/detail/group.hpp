// SPDX-License-Identifier: MIT
// What a DeviceGroup is made of: its selection (the selector grammar of docs/design.md "Which
// devices", each device with a verdict and its reason, as explain_selection() gives for one
// device; a list of DeviceInfo; adopted managers), the report of a group, and its OpenCL
// contexts and queues (the group layer's only OpenCL calls besides the joined Future's user
// event, detail/joined_future.hpp). What each device does in a group's move: shard_moves.hpp.
#ifndef CLBUF_DETAIL_GROUP_HPP
#define CLBUF_DETAIL_GROUP_HPP

#include <clbuf/detail/queue.hpp>
#include <clbuf/detail/range.hpp>
#include <clbuf/detail/selection.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/options.hpp>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace clbuf {
namespace detail {

/// The type the default selection picks (the first GPU, else the first CPU device, else the
/// first device's type).
inline DeviceType default_group_type(const std::vector<DeviceEntry>& entries) {
  if (first_of_type(entries, DeviceType::gpu) < entries.size()) return DeviceType::gpu;
  if (first_of_type(entries, DeviceType::cpu) < entries.size()) return DeviceType::cpu;
  return entries.empty() ? DeviceType::gpu : entries.front().info.type;
}

/// "a, b, c": each part a single selector (judge_devices), its pick in the group.
/// @throws Error CL_DEVICE_NOT_FOUND for a part that picks nothing; CL_INVALID_VALUE for an
///         empty part or a device named twice.
inline void judge_group_list(const char* operation, const std::vector<DeviceEntry>& entries,
                             const std::string& text, std::vector<Verdict>& verdicts,
                             std::vector<std::size_t>& order) {
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string part = trimmed(text.substr(start, comma - start));
    if (part.empty()) {
      fail(operation, CL_INVALID_VALUE, "the device list \"" + text + "\" has an empty entry");
    }
    const std::string quoted = "\"" + part + "\" of \"" + text + "\"";
    bool found = false;
    for (Verdict& verdict : judge_devices(entries, parse_selector(part), quoted)) {
      if (!verdict.picked) continue;
      found = true;
      if (verdicts[verdict.entry].picked) {
        fail(operation, CL_INVALID_VALUE,
             "the device list \"" + text + "\" names " + device_label(entries[verdict.entry]) +
                 " twice");
      }
      verdicts[verdict.entry] = verdict;
      order.push_back(verdict.entry);
    }
    if (!found) {
      fail(operation, CL_DEVICE_NOT_FOUND,
           "no device matches " + quoted + "; devices: " + describe_entries(entries));
    }
    start = comma + 1;
  }
}

/// Picks every device that `match` accepts, with `reason`; the others get `rejected`.
template <class Match>
void judge_group_each(const std::vector<DeviceEntry>& entries, std::vector<Verdict>& verdicts,
                      Match match, const std::string& reason, const std::string& rejected) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    verdicts[i].picked = match(entries[i]);
    verdicts[i].reason = verdicts[i].picked ? reason : rejected;
  }
}

/// "" (the type the default picks), "gpu", "cpu", "accelerator": every device of that type.
inline void judge_group_by_type(const std::vector<DeviceEntry>& entries, const Selector& single,
                                const std::string& text, std::vector<Verdict>& verdicts) {
  const bool asked = single.kind == Selector::Kind::type;
  const DeviceType type = asked ? single.type : default_group_type(entries);
  const std::string why =
      asked ? std::string("a ") + to_string(type) + " device, as \"" + text + "\" asks"
            : std::string("a ") + to_string(type) +
                  " device (default: every device of the type clbuf picks)";
  judge_group_each(
      entries, verdicts, [&](const DeviceEntry& entry) { return entry.info.type == type; }, why,
      std::string("not a ") + to_string(type) + " device");
}

/// Judges every device for a DeviceGroup `selector` (its grammar: docs/design.md "Which
/// devices"; "" is every device of the type the default picks). `order`
/// receives the picked entries in the group's order (a list's, else list_devices()').
/// @throws Error as judge_group_list().
inline std::vector<Verdict> judge_group(const char* operation,
                                        const std::vector<DeviceEntry>& entries,
                                        const std::string& selector,
                                        std::vector<std::size_t>& order) {
  std::vector<Verdict> verdicts(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) verdicts[i].entry = i;
  const std::string text = trimmed(selector);
  const std::string key = lower_case(text);
  if (text.find(',') != std::string::npos) {
    for (Verdict& verdict : verdicts) verdict.reason = "not in the list \"" + text + "\"";
    judge_group_list(operation, entries, text, verdicts, order);
    return verdicts;
  }
  const Selector single = parse_selector(text);
  if (key == "all") {
    judge_group_each(
        entries, verdicts, [](const DeviceEntry&) { return true; }, "\"all\"", "");
  } else if (single.kind == Selector::Kind::automatic || single.kind == Selector::Kind::type) {
    judge_group_by_type(entries, single, text, verdicts);
  } else if (single.kind == Selector::Kind::index) {
    verdicts = judge_devices(entries, single, "\"" + text + "\"");
  } else {
    judge_group_each(
        entries, verdicts,
        [&](const DeviceEntry& entry) {
          return lower_case(entry.info.name).find(single.name) != std::string::npos;
        },
        "its name contains \"" + text + "\"", "its name does not contain \"" + text + "\"");
  }
  for (const Verdict& verdict : verdicts) {
    if (verdict.picked) order.push_back(verdict.entry);
  }
  return verdicts;
}

/// The report of a group made of `picked` (listed devices): each picked device, every other
/// rejected.
inline SelectionReport group_report(const std::vector<DeviceEntry>& entries,
                                    const std::vector<DeviceEntry>& picked) {
  SelectionReport report;
  report.origin = "selector";
  for (const DeviceEntry& entry : entries) {
    bool in = false;
    for (const DeviceEntry& chosen : picked) in = in || chosen.device == entry.device;
    report.devices.push_back({entry.info, in, in ? "listed" : "not listed"});
  }
  return report;
}

/// One context of `devices` (all of one platform). Wraps clCreateContext.
inline cl::Context group_context(const char* operation, cl_platform_id platform,
                                 const std::vector<cl_device_id>& devices) {
  const cl_context_properties properties[] = {CL_CONTEXT_PLATFORM,
                                              reinterpret_cast<cl_context_properties>(platform), 0};
  cl_int err = CL_SUCCESS;
  const auto serial = discovery_lock();
  cl::Context context(CLBUF_CL(clCreateContext)(properties, static_cast<cl_uint>(devices.size()),
                                                devices.data(), nullptr, nullptr, &err),
                      false);
  check(err, operation, "clCreateContext");
  return context;
}

/// `i`, or an Error CL_INVALID_VALUE naming DeviceGroup::manager for i >= `size`.
inline std::size_t group_index(std::size_t i, std::size_t size) {
  if (i >= size) {
    fail("DeviceGroup::manager", CL_INVALID_VALUE,
         "device " + std::to_string(i) + " of a group of " + std::to_string(size));
  }
  return i;
}

/// a * b, or an Error CL_INVALID_VALUE naming both when it overflows.
inline std::size_t group_product(const char* operation, std::size_t a, std::size_t b) {
  std::size_t out = 0;
  if (!checked_multiply(a, b, out)) fail_overflow(operation, a, b);
  return out;
}

// ---- A group's devices: picked, opened or adopted --------------------------------------------

/// The entries `selector` picks (in the group's order), each device's verdict in `report`.
/// @throws Error CL_DEVICE_NOT_FOUND when there is no device or nothing matches (naming every
///         device); as judge_group().
inline std::vector<DeviceEntry> select_group(const char* operation, const std::string& selector,
                                             SelectionReport& report) {
  const std::vector<DeviceEntry> entries = enumerate_devices(operation);
  if (entries.empty()) fail_no_devices(operation);
  report.selector = selector;
  report.origin = trimmed(selector).empty() ? "default" : "selector";
  std::vector<std::size_t> order;
  for (Verdict& verdict : judge_group(operation, entries, selector, order)) {
    report.devices.push_back(
        {entries[verdict.entry].info, verdict.picked, std::move(verdict.reason)});
  }
  if (order.empty()) {
    fail(operation, CL_DEVICE_NOT_FOUND,
         "no device matches \"" + selector + "\"; devices: " + describe_entries(entries));
  }
  std::vector<DeviceEntry> picked;
  for (std::size_t i : order) picked.push_back(entries[i]);
  return picked;
}

/// The entries of `devices`, matched by platform and device index, with the group's report.
/// @throws Error CL_INVALID_VALUE for an empty list or a device listed twice;
///         CL_DEVICE_NOT_FOUND for a device no platform has.
inline std::vector<DeviceEntry> select_group_devices(const char* operation,
                                                     const std::vector<DeviceInfo>& devices,
                                                     SelectionReport& report) {
  if (devices.empty()) fail(operation, CL_INVALID_VALUE, "an empty list of devices");
  const std::vector<DeviceEntry> entries = enumerate_devices(operation);
  std::vector<DeviceEntry> picked;
  for (const DeviceInfo& device : devices) {
    const auto found = std::find_if(entries.begin(), entries.end(), [&](const auto& entry) {
      return entry.info.platform_index == device.platform_index &&
             entry.info.device_index == device.device_index;
    });
    if (found == entries.end()) {
      fail(operation, CL_DEVICE_NOT_FOUND,
           "no device " + std::to_string(device.platform_index) + ":" +
               std::to_string(device.device_index) + " (" + device.name + ")");
    }
    for (const DeviceEntry& entry : picked) {
      if (entry.device == found->device) {
        fail(operation, CL_INVALID_VALUE, "device " + found->info.name + " listed twice");
      }
    }
    picked.push_back(*found);
  }
  report = group_report(entries, picked);
  return picked;
}

/// A manager per entry: one context per platform (`per_platform`) or per device, an in-order
/// queue each. Wraps clCreateContext (group_context()) and clCreateCommandQueue (Queue::create).
inline std::vector<std::shared_ptr<BufferManager>> open_group(
    const char* operation, const std::vector<DeviceEntry>& picked, const Options& options,
    bool per_platform) {
  std::map<cl_platform_id, cl::Context> contexts;
  if (per_platform) {
    std::map<cl_platform_id, std::vector<cl_device_id>> devices;
    for (const DeviceEntry& entry : picked) devices[entry.platform].push_back(entry.device);
    for (const auto& [platform, list] : devices) {
      contexts[platform] = group_context(operation, platform, list);
    }
  }
  std::vector<std::shared_ptr<BufferManager>> managers;
  for (const DeviceEntry& entry : picked) {
    const cl::Context context = per_platform
                                    ? contexts[entry.platform]
                                    : group_context(operation, entry.platform, {entry.device});
    const Queue queue = Queue::create(operation, context(), entry.device);
    managers.push_back(std::make_shared<BufferManager>(context, queue.handle(), options));
  }
  return managers;
}

/// The report of a group of the application's own managers, checked first.
/// @throws Error CL_INVALID_VALUE for an empty list, a null manager or one listed twice.
inline SelectionReport adopted_group_report(
    const char* operation, const std::vector<std::shared_ptr<BufferManager>>& managers) {
  if (managers.empty()) fail(operation, CL_INVALID_VALUE, "an empty list of managers");
  for (std::size_t i = 0; i < managers.size(); ++i) {
    if (!managers[i])
      fail(operation, CL_INVALID_VALUE, "manager " + std::to_string(i) + " is null");
    for (std::size_t j = 0; j < i; ++j) {
      if (managers[j] == managers[i]) {
        fail(operation, CL_INVALID_VALUE, "manager " + std::to_string(i) + " is listed twice");
      }
    }
  }
  SelectionReport report;
  report.origin = "adopted";
  for (const auto& manager : managers)
    report.devices.push_back({manager->device(), true, "adopted"});
  return report;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_GROUP_HPP
