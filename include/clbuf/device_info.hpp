// SPDX-License-Identifier: MIT
// What clbuf knows of one OpenCL device (DeviceInfo) and its kind (DeviceType): the values
// list_devices(), explain_selection() and BufferManager::device() hand out.
#ifndef CLBUF_DEVICE_INFO_HPP
#define CLBUF_DEVICE_INFO_HPP

#include <cstddef>
#include <cstdint>
#include <string>

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
  std::string platform;                 ///< CL_PLATFORM_NAME
  std::string name;                     ///< CL_DEVICE_NAME
  DeviceType type = DeviceType::other;  ///< CL_DEVICE_TYPE: gpu, cpu, accelerator or other
  std::uint64_t global_mem_bytes = 0;   ///< CL_DEVICE_GLOBAL_MEM_SIZE
  std::uint64_t max_alloc_bytes = 0;    ///< CL_DEVICE_MAX_MEM_ALLOC_SIZE
  std::size_t platform_index = 0;       ///< as numbered by list_devices()
  std::size_t device_index = 0;         ///< within its platform
};

}  // namespace clbuf

#endif  // CLBUF_DEVICE_INFO_HPP
