// SPDX-License-Identifier: MIT
// Device discovery and the selector grammar behind list_devices(), explain_selection() and
// BufferManager(selector): the platforms' devices in P:D order (asked once at a time), a selector
// parsed (gpu, cpu, accelerator, P:D, part of a name), every device judged against it with the
// reason, CLBUF_DEVICE's turn, and the one device picked (GPU first by default).
#ifndef CLBUF_DETAIL_SELECTION_HPP
#define CLBUF_DETAIL_SELECTION_HPP

#include <clbuf/device_info.hpp>
#include <clbuf/error.hpp>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace clbuf {
namespace detail {

struct DeviceEntry {
  DeviceInfo info;
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
};

inline std::string trimmed(std::string text) {
  const char* space = " \t\r\n\v\f";
  const auto first = text.find_first_not_of(space);
  if (first == std::string::npos) return {};
  text.erase(text.find_last_not_of(space) + 1);
  return text.substr(first);
}

inline std::string lower_case(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

inline std::string platform_string(cl_platform_id platform, cl_platform_info what,
                                   const char* operation) {
  std::size_t size = 0;
  check(CLBUF_CL(clGetPlatformInfo)(platform, what, 0, nullptr, &size), operation,
        "clGetPlatformInfo");
  std::string value(size, '\0');
  check(CLBUF_CL(clGetPlatformInfo)(platform, what, size, &value[0], nullptr), operation,
        "clGetPlatformInfo");
  return trimmed(value.c_str());
}

inline std::string device_string(cl_device_id device, cl_device_info what, const char* operation) {
  std::size_t size = 0;
  check(CLBUF_CL(clGetDeviceInfo)(device, what, 0, nullptr, &size), operation, "clGetDeviceInfo");
  std::string value(size, '\0');
  check(CLBUF_CL(clGetDeviceInfo)(device, what, size, &value[0], nullptr), operation,
        "clGetDeviceInfo");
  return trimmed(value.c_str());
}

template <class V>
V device_value(cl_device_id device, cl_device_info what, const char* operation) {
  V value{};
  check(CLBUF_CL(clGetDeviceInfo)(device, what, sizeof(V), &value, nullptr), operation,
        "clGetDeviceInfo");
  return value;
}

inline DeviceType device_type_of(cl_device_type type) noexcept {
  if (type & CL_DEVICE_TYPE_GPU) return DeviceType::gpu;
  if (type & CL_DEVICE_TYPE_CPU) return DeviceType::cpu;
  if (type & CL_DEVICE_TYPE_ACCELERATOR) return DeviceType::accelerator;
  return DeviceType::other;
}

inline DeviceInfo describe_device(cl_platform_id platform, cl_device_id device,
                                  std::size_t platform_index, std::size_t device_index,
                                  const char* operation) {
  DeviceInfo info;
  info.platform = platform_string(platform, CL_PLATFORM_NAME, operation);
  info.name = device_string(device, CL_DEVICE_NAME, operation);
  info.type = device_type_of(device_value<cl_device_type>(device, CL_DEVICE_TYPE, operation));
  info.global_mem_bytes = device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE, operation);
  info.max_alloc_bytes = device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, operation);
  info.platform_index = platform_index;
  info.device_index = device_index;
  return info;
}

/// Serialises clbuf's OpenCL discovery and context creation in the process: drivers initialise
/// lazily on first use and some do it unsafely (PoCL 3.1 crashes, or lists no device, when
/// several threads make their first OpenCL calls at once).
inline std::unique_lock<std::mutex> discovery_lock() {
  static std::mutex mutex;
  return std::unique_lock<std::mutex>(mutex);
}

/// Every device of every platform, in the order of clGetPlatformIDs and clGetDeviceIDs.
/// No platform at all (CL_PLATFORM_NOT_FOUND_KHR from the ICD loader) is an empty list, and so
/// is a platform without devices (CL_DEVICE_NOT_FOUND).
inline std::vector<DeviceEntry> enumerate_devices(const char* operation) {
  const auto serial = discovery_lock();
  constexpr cl_int platform_not_found_khr = -1001;
  cl_uint platform_count = 0;
  cl_int err = CLBUF_CL(clGetPlatformIDs)(0, nullptr, &platform_count);
  if (err == platform_not_found_khr) return {};
  check(err, operation, "clGetPlatformIDs");  // a failed query is an error, not "no platform"
  if (platform_count == 0) return {};
  std::vector<cl_platform_id> platforms(platform_count);
  check(CLBUF_CL(clGetPlatformIDs)(platform_count, platforms.data(), nullptr), operation,
        "clGetPlatformIDs");

  std::vector<DeviceEntry> entries;
  for (std::size_t p = 0; p < platforms.size(); ++p) {
    cl_uint device_count = 0;
    err = CLBUF_CL(clGetDeviceIDs)(platforms[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count);
    if (err == CL_DEVICE_NOT_FOUND) continue;
    check(err, operation, "clGetDeviceIDs");
    if (device_count == 0) continue;
    std::vector<cl_device_id> devices(device_count);
    check(CLBUF_CL(clGetDeviceIDs)(platforms[p], CL_DEVICE_TYPE_ALL, device_count, devices.data(),
                                   nullptr),
          operation, "clGetDeviceIDs");
    for (std::size_t d = 0; d < devices.size(); ++d) {
      entries.push_back(
          {describe_device(platforms[p], devices[d], p, d, operation), platforms[p], devices[d]});
    }
  }
  return entries;
}

/// A parsed selector string (the grammar of CLBUF_DEVICE and BufferManager(selector)).
struct Selector {
  enum class Kind { automatic, type, index, name };
  Kind kind = Kind::automatic;
  DeviceType type = DeviceType::other;  ///< for Kind::type
  std::size_t platform_index = 0;       ///< for Kind::index
  std::size_t device_index = 0;         ///< for Kind::index
  std::string name;                     ///< for Kind::name: lower-case, trimmed
};

/// Parses digits into `out`; false for anything but 1-19 decimal digits that fit in size_t.
inline bool parse_index(const std::string& text, std::size_t& out) noexcept {
  if (text.empty() || text.size() > 19) return false;
  std::size_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::size_t>(c - '0');
  }
  out = value;
  return true;
}

/// "" -> automatic; "gpu", "cpu", "accelerator" (any case) -> type; "P:D" -> index; else a
/// case-insensitive substring of the device name. Surrounding white space is ignored.
inline Selector parse_selector(const std::string& text) {
  Selector selector;
  const std::string key = lower_case(trimmed(text));
  if (key.empty()) return selector;
  if (key == "gpu" || key == "cpu" || key == "accelerator") {
    selector.kind = Selector::Kind::type;
    selector.type = key == "gpu"   ? DeviceType::gpu
                    : key == "cpu" ? DeviceType::cpu
                                   : DeviceType::accelerator;
    return selector;
  }
  const auto colon = key.find(':');
  if (colon != std::string::npos && parse_index(key.substr(0, colon), selector.platform_index) &&
      parse_index(key.substr(colon + 1), selector.device_index)) {
    selector.kind = Selector::Kind::index;
    return selector;
  }
  selector.kind = Selector::Kind::name;
  selector.name = key;
  return selector;
}

inline std::string describe_entries(const std::vector<DeviceEntry>& entries) {
  std::string text;
  for (const DeviceEntry& entry : entries) {
    text += text.empty() ? "" : "; ";
    text += "[" + std::to_string(entry.info.platform_index) + ":" +
            std::to_string(entry.info.device_index) + "] " + entry.info.name + " (" +
            to_string(entry.info.type) + ", " + entry.info.platform + ")";
  }
  return text;
}

/// One device as a selector judged it.
struct Verdict {
  std::size_t entry = 0;  ///< index into the entries
  bool picked = false;
  std::string reason;
};

/// "[P:D]": how a verdict names a device.
inline std::string device_label(const DeviceEntry& entry) {
  return "[" + std::to_string(entry.info.platform_index) + ":" +
         std::to_string(entry.info.device_index) + "]";
}

/// The first entry of `type`, or entries.size().
inline std::size_t first_of_type(const std::vector<DeviceEntry>& entries, DeviceType type) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].info.type == type) return i;
  }
  return entries.size();
}

// The judges of judge_devices(), one a kind of selector: each gives every verdict the reason it
// is not picked, sets `reason` to why its pick is, and returns the pick (entries.size(): none).

/// The default: the first GPU, else the first CPU device, else the first device.
inline std::size_t judge_by_default(const std::vector<DeviceEntry>& entries,
                                    std::vector<Verdict>& verdicts, std::string& reason) {
  const std::size_t gpu = first_of_type(entries, DeviceType::gpu);
  const std::size_t cpu = first_of_type(entries, DeviceType::cpu);
  std::size_t pick = entries.size();
  if (gpu < entries.size()) {
    pick = gpu;
    reason = "the first GPU (default: GPU preferred)";
  } else if (cpu < entries.size()) {
    pick = cpu;
    reason = "no GPU found, so the first CPU device (default: GPU preferred, CPU fallback)";
  } else if (!entries.empty()) {
    pick = 0;
    reason = "no GPU or CPU device found, so the first device";
  }
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const DeviceType type = entries[i].info.type;
    verdicts[i].reason = type == entries[pick].info.type
                             ? std::string("a later ") + to_string(type) + " device; " +
                                   device_label(entries[pick]) + " comes first"
                             : std::string("a ") + to_string(type) + " device; the default takes " +
                                   (gpu < entries.size() ? "a GPU" : "a CPU device") + " first";
  }
  return pick;
}

/// "gpu", "cpu", "accelerator": the first device of that type.
inline std::size_t judge_by_type(const std::vector<DeviceEntry>& entries, DeviceType wanted,
                                 const std::string& quoted, std::vector<Verdict>& verdicts,
                                 std::string& reason) {
  const std::size_t pick = first_of_type(entries, wanted);
  reason = std::string("the first ") + to_string(wanted) + " device, as " + quoted + " asks";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    verdicts[i].reason = entries[i].info.type == wanted
                             ? std::string("a later ") + to_string(wanted) + " device; " +
                                   device_label(entries[pick]) + " comes first"
                             : std::string("a ") + to_string(entries[i].info.type) +
                                   " device, not the " + to_string(wanted) + " device " + quoted +
                                   " asks for";
  }
  return pick;
}

/// "P:D": that device.
inline std::size_t judge_by_index(const std::vector<DeviceEntry>& entries, const Selector& selector,
                                  const std::string& quoted, std::vector<Verdict>& verdicts,
                                  std::string& reason) {
  std::size_t pick = entries.size();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].info.platform_index == selector.platform_index &&
        entries[i].info.device_index == selector.device_index) {
      pick = i;
    }
    verdicts[i].reason = "not platform " + std::to_string(selector.platform_index) + ", device " +
                         std::to_string(selector.device_index) + " of " + quoted;
  }
  reason = "platform " + std::to_string(selector.platform_index) + ", device " +
           std::to_string(selector.device_index) + ", as " + quoted + " asks";
  return pick;
}

/// Part of a name (lower case): the first device whose name contains it.
inline std::size_t judge_by_name(const std::vector<DeviceEntry>& entries, const std::string& name,
                                 const std::string& quoted, std::vector<Verdict>& verdicts,
                                 std::string& reason) {
  std::size_t pick = entries.size();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const bool match = lower_case(entries[i].info.name).find(name) != std::string::npos;
    if (match && pick == entries.size()) pick = i;
    verdicts[i].reason =
        match ? "its name matches too, but " + device_label(entries[pick]) + " comes first"
              : "its name does not contain " + quoted;
  }
  reason = "the first device whose name contains " + quoted;
  return pick;
}

/// Judges every entry by `selector`; at most one verdict is picked. The picked verdict's reason
/// is the manager's selection_reason(), so the report and the choice never disagree.
inline std::vector<Verdict> judge_devices(const std::vector<DeviceEntry>& entries,
                                          const Selector& selector, const std::string& quoted) {
  std::vector<Verdict> verdicts(entries.size());
  std::size_t pick = entries.size();
  std::string reason;
  switch (selector.kind) {
    case Selector::Kind::automatic:
      pick = judge_by_default(entries, verdicts, reason);
      break;
    case Selector::Kind::type:
      pick = judge_by_type(entries, selector.type, quoted, verdicts, reason);
      break;
    case Selector::Kind::index:
      pick = judge_by_index(entries, selector, quoted, verdicts, reason);
      break;
    case Selector::Kind::name:
      pick = judge_by_name(entries, selector.name, quoted, verdicts, reason);
      break;
  }
  for (std::size_t i = 0; i < entries.size(); ++i) verdicts[i].entry = i;
  if (pick < entries.size()) {
    verdicts[pick].picked = true;
    verdicts[pick].reason = reason;
  }
  return verdicts;
}

/// The selector text in force: `selector` unless it is blank, then CLBUF_DEVICE when set and not
/// empty, else "" (the default). `origin` says which.
inline std::string effective_selector(const std::string& selector, std::string& origin) {
  const char* from_environment = std::getenv("CLBUF_DEVICE");
  if (trimmed(selector).empty() && from_environment != nullptr && *from_environment != '\0') {
    origin = "CLBUF_DEVICE";
    return from_environment;
  }
  origin = trimmed(selector).empty() ? "default" : "selector";
  return selector;
}

struct Selection {
  DeviceEntry entry;
  std::string reason;  ///< why this device, in words
};

[[noreturn]] inline void fail_no_devices(const char* operation) {
  cl_uint platforms = 0;
  bool any_platform = false;
  {
    const auto serial = discovery_lock();
    any_platform =
        CLBUF_CL(clGetPlatformIDs)(0, nullptr, &platforms) == CL_SUCCESS && platforms > 0;
  }
  fail(operation, any_platform ? CL_DEVICE_NOT_FOUND : -1001,
       std::string(any_platform ? "OpenCL platforms exist but none has a device"
                                : "no OpenCL platform is installed") +
           "; install an OpenCL driver, e.g. Debian's pocl-opencl-icd for the CPU, and check "
           "with clinfo -l");
}

/// `text` with control bytes written as escapes (\0, \n, \x1f), so a message shows them and
/// is never cut short by a NUL.
inline std::string printable(const std::string& text) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == 0) {
      out += "\\0";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += std::string("\\x") + digits[byte >> 4] + digits[byte & 15];
    } else {
      out += c;
    }
  }
  return out;
}

inline std::string quote_selector(const std::string& selector_text, const std::string& origin) {
  return "\"" + printable(trimmed(selector_text)) + "\" (from " + origin + ")";
}

/// Picks a device by `selector`; `origin` says where the selector came from, for messages
/// (e.g. "CLBUF_DEVICE"). Throws CL_PLATFORM_NOT_FOUND_KHR when no platform exists and
/// CL_DEVICE_NOT_FOUND, listing the devices that do exist, when nothing matches.
inline Selection select_device(const std::string& selector_text, const std::string& origin,
                               const char* operation) {
  const std::vector<DeviceEntry> entries = enumerate_devices(operation);
  if (entries.empty()) fail_no_devices(operation);
  const std::string quoted = quote_selector(selector_text, origin);
  for (Verdict& verdict : judge_devices(entries, parse_selector(selector_text), quoted)) {
    if (verdict.picked) return {entries[verdict.entry], std::move(verdict.reason)};
  }
  fail(operation, CL_DEVICE_NOT_FOUND,
       "no device matches " + quoted + "; devices: " + describe_entries(entries) +
           "; selectors: gpu, cpu, accelerator, P:D, or part of a device name");
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_SELECTION_HPP
