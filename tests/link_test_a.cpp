// SPDX-License-Identifier: MIT
// With link_test_b.cpp: two translation units that include clbuf and instantiate the same
// templates, linked into one program. A non-inline function in a header fails to link here.
#include <clbuf/clbuf.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "support/device_test.hpp"

// Defined in link_test_b.cpp.
std::vector<float> link_test_round_trip_b(clbuf::BufferManager& manager,
                                          const std::vector<float>& data);
std::string link_test_error_name_b(cl_int code);
std::size_t link_test_device_count_b();

namespace {

std::vector<float> round_trip_a(clbuf::BufferManager& manager, const std::vector<float>& data) {
  const auto buffer = manager.upload(data);
  auto copy = manager.allocate<float>(data.size());
  manager.copy(buffer, copy);
  return manager.download_async(copy).get();
}

class Link : public clbuf_test::DeviceTest {};

TEST_F(Link, TwoTranslationUnitsShareTheHeaderFunctions) {
  const auto data = random<float>(100);
  EXPECT_TRUE(clbuf_test::same_bytes(data, round_trip_a(manager(), data)));
  EXPECT_TRUE(clbuf_test::same_bytes(data, link_test_round_trip_b(manager(), data)));
  EXPECT_EQ(link_test_error_name_b(CL_INVALID_VALUE), clbuf::error_name(CL_INVALID_VALUE));
  EXPECT_EQ(link_test_device_count_b(), clbuf::list_devices().size());
}

}  // namespace
