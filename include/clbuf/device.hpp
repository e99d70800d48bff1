// Device discovery and selection: list_devices(), the selector grammar shared by CLBUF_DEVICE
// and BufferManager(selector), and the GPU-first default.
#ifndef CLBUF_DEVICE_HPP
#define CLBUF_DEVICE_HPP

#include <clbuf/error.hpp>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace clbuf {

enum class DeviceType { gpu, cpu, accelerator, other };

/// "gpu", "cpu", "accelerator" or "other".
inline const char* to_string(DeviceType type) noexcept {
  switch (type) {
    case DeviceType::gpu:
      return "gpu";
    case DeviceType::cpu:
      return "cpu";
    case DeviceType::accelerator:
      return "accelerator";
    case DeviceType::other:
      break;
  }
  return "other";
}

/// What clbuf knows of one OpenCL device.
struct DeviceInfo {
  std::string platform;  ///< CL_PLATFORM_NAME
  std::string name;      ///< CL_DEVICE_NAME
  DeviceType type = DeviceType::other;
  std::uint64_t global_mem_bytes = 0;  ///< CL_DEVICE_GLOBAL_MEM_SIZE
  std::uint64_t max_alloc_bytes = 0;   ///< CL_DEVICE_MAX_MEM_ALLOC_SIZE
  std::size_t platform_index = 0;      ///< as numbered by list_devices()
  std::size_t device_index = 0;        ///< within its platform
};

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

/// Every device of every platform, in the order of clGetPlatformIDs and clGetDeviceIDs.
/// No platform at all (CL_PLATFORM_NOT_FOUND_KHR from the ICD loader) is an empty list, and so
/// is a platform without devices (CL_DEVICE_NOT_FOUND).
inline std::vector<DeviceEntry> enumerate_devices(const char* operation) {
  constexpr cl_int platform_not_found_khr = -1001;
  cl_uint platform_count = 0;
  cl_int err = CLBUF_CL(clGetPlatformIDs)(0, nullptr, &platform_count);
  if (err == platform_not_found_khr || platform_count == 0) return {};
  check(err, operation, "clGetPlatformIDs");
  std::vector<cl_platform_id> platforms(platform_count);
  check(CLBUF_CL(clGetPlatformIDs)(platform_count, platforms.data(), nullptr), operation,
        "clGetPlatformIDs");

  std::vector<DeviceEntry> entries;
  for (std::size_t p = 0; p < platforms.size(); ++p) {
    cl_uint device_count = 0;
    err = CLBUF_CL(clGetDeviceIDs)(platforms[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count);
    if (err == CL_DEVICE_NOT_FOUND || device_count == 0) continue;
    check(err, operation, "clGetDeviceIDs");
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

struct Selection {
  DeviceEntry entry;
  std::string reason;  ///< why this device, in words
};

/// Picks a device by `selector`; `origin` says where the selector came from, for messages
/// (e.g. "CLBUF_DEVICE"). Throws CL_PLATFORM_NOT_FOUND_KHR when no platform exists and
/// CL_DEVICE_NOT_FOUND, listing the devices that do exist, when nothing matches.
inline Selection select_device(const std::string& selector_text, const std::string& origin,
                               const char* operation) {
  const std::vector<DeviceEntry> entries = enumerate_devices(operation);
  if (entries.empty()) {
    cl_uint platforms = 0;
    const bool any_platform =
        CLBUF_CL(clGetPlatformIDs)(0, nullptr, &platforms) == CL_SUCCESS && platforms > 0;
    fail(operation, any_platform ? CL_DEVICE_NOT_FOUND : -1001,
         std::string(any_platform ? "OpenCL platforms exist but none has a device"
                                  : "no OpenCL platform is installed") +
             "; install an OpenCL driver, e.g. Debian's pocl-opencl-icd for the CPU, and check "
             "with clinfo -l");
  }

  const Selector selector = parse_selector(selector_text);
  const std::string quoted = "\"" + trimmed(selector_text) + "\" (from " + origin + ")";
  auto first_of = [&](DeviceType type) -> const DeviceEntry* {
    for (const DeviceEntry& entry : entries) {
      if (entry.info.type == type) return &entry;
    }
    return nullptr;
  };

  const DeviceEntry* found = nullptr;
  std::string reason;
  switch (selector.kind) {
    case Selector::Kind::automatic:
      if ((found = first_of(DeviceType::gpu))) {
        reason = "the first GPU (default: GPU preferred)";
      } else if ((found = first_of(DeviceType::cpu))) {
        reason = "no GPU found, so the first CPU device (default: GPU preferred, CPU fallback)";
      } else {
        found = &entries.front();
        reason = "no GPU or CPU device found, so the first device";
      }
      break;
    case Selector::Kind::type:
      found = first_of(selector.type);
      reason =
          std::string("the first ") + to_string(selector.type) + " device, as " + quoted + " asks";
      break;
    case Selector::Kind::index:
      for (const DeviceEntry& entry : entries) {
        if (entry.info.platform_index == selector.platform_index &&
            entry.info.device_index == selector.device_index) {
          found = &entry;
        }
      }
      reason = "platform " + std::to_string(selector.platform_index) + ", device " +
               std::to_string(selector.device_index) + ", as " + quoted + " asks";
      break;
    case Selector::Kind::name:
      for (const DeviceEntry& entry : entries) {
        if (!found && lower_case(entry.info.name).find(selector.name) != std::string::npos) {
          found = &entry;
        }
      }
      reason = "the first device whose name contains " + quoted;
      break;
  }
  if (!found) {
    fail(operation, CL_DEVICE_NOT_FOUND,
         "no device matches " + quoted + "; devices: " + describe_entries(entries) +
             "; selectors: gpu, cpu, accelerator, P:D, or part of a device name");
  }
  return {*found, reason};
}

}  // namespace detail

/// Every device of every OpenCL platform, numbered as the `P:D` selector counts them.
/// Empty when no OpenCL platform is installed.
/// @throws Error when an OpenCL query fails. Wraps clGetPlatformIDs, clGetDeviceIDs.
inline std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> infos;
  for (detail::DeviceEntry& entry : detail::enumerate_devices("list_devices")) {
    infos.push_back(std::move(entry.info));
  }
  return infos;
}

}  // namespace clbuf

#endif  // CLBUF_DEVICE_HPP
