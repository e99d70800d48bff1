// SPDX-License-Identifier: MIT
#include <clbuf/clbuf.hpp>
// The include above comes before any other on purpose: clbuf.hpp must compile with nothing
// included before it.

#include <gtest/gtest.h>

#include <type_traits>

namespace {

TEST(HeaderAlone, UmbrellaHeaderDeclaresThePublicApi) {
  static_assert(std::is_base_of<std::runtime_error, clbuf::Error>::value, "");
  static_assert(std::is_class<clbuf::DeviceBuffer<float>>::value, "");
  static_assert(std::is_class<clbuf::Future<std::vector<int>>>::value, "");
  static_assert(std::is_class<clbuf::BufferManager>::value, "");
  static_assert(
      std::is_same<decltype(clbuf::list_devices()), std::vector<clbuf::DeviceInfo>>::value, "");
  EXPECT_GE(CLBUF_VERSION_MAJOR, 0);
  EXPECT_GE(CLBUF_VERSION_MINOR, 0);
  EXPECT_GE(CLBUF_VERSION_PATCH, 0);
}

}  // namespace
