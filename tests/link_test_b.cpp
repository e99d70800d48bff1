// SPDX-License-Identifier: MIT
// The second translation unit of the link test (see link_test_a.cpp).
#include <clbuf/clbuf.hpp>
#include <cstdint>
#include <string>
#include <vector>

std::vector<float> link_test_round_trip_b(clbuf::BufferManager& manager,
                                          const std::vector<float>& data);
std::string link_test_error_name_b(cl_int code);
std::size_t link_test_device_count_b();

std::vector<float> link_test_round_trip_b(clbuf::BufferManager& manager,
                                          const std::vector<float>& data) {
  const auto buffer = manager.upload(data);
  auto copy = manager.allocate<float>(data.size());
  manager.copy(buffer, copy);
  manager.copy_bytes(buffer, copy, buffer.size_bytes());
  auto future = manager.upload_async(std::vector<std::int32_t>{1, 2, 3});
  static_cast<void>(future.get());
  return manager.download(copy);
}

std::string link_test_error_name_b(cl_int code) { return clbuf::error_name(code); }

std::size_t link_test_device_count_b() { return clbuf::list_devices().size(); }
