// SPDX-License-Identifier: MIT
// clbuf::Error and clbuf::error_name: the name table, the exception type, and the message
// format "<operation>: <CL_NAME> (<code>): <details>" as real failures produce it.
#include <regex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::DeviceTest;

TEST(ErrorName, NamesCommonCodes) {
  EXPECT_STREQ(clbuf::error_name(0), "CL_SUCCESS");
  EXPECT_STREQ(clbuf::error_name(-1), "CL_DEVICE_NOT_FOUND");
  EXPECT_STREQ(clbuf::error_name(-4), "CL_MEM_OBJECT_ALLOCATION_FAILURE");
  EXPECT_STREQ(clbuf::error_name(-5), "CL_OUT_OF_RESOURCES");
  EXPECT_STREQ(clbuf::error_name(-6), "CL_OUT_OF_HOST_MEMORY");
  EXPECT_STREQ(clbuf::error_name(-8), "CL_MEM_COPY_OVERLAP");
  EXPECT_STREQ(clbuf::error_name(-30), "CL_INVALID_VALUE");
  EXPECT_STREQ(clbuf::error_name(-34), "CL_INVALID_CONTEXT");
  EXPECT_STREQ(clbuf::error_name(-36), "CL_INVALID_COMMAND_QUEUE");
  EXPECT_STREQ(clbuf::error_name(-38), "CL_INVALID_MEM_OBJECT");
  EXPECT_STREQ(clbuf::error_name(-59), "CL_INVALID_OPERATION");
  EXPECT_STREQ(clbuf::error_name(-61), "CL_INVALID_BUFFER_SIZE");
}

TEST(ErrorName, NamesCodesThroughTheClMacros) {
  EXPECT_STREQ(clbuf::error_name(CL_SUCCESS), "CL_SUCCESS");
  EXPECT_STREQ(clbuf::error_name(CL_INVALID_VALUE), "CL_INVALID_VALUE");
  EXPECT_STREQ(clbuf::error_name(CL_MEM_COPY_OVERLAP), "CL_MEM_COPY_OVERLAP");
  EXPECT_STREQ(clbuf::error_name(CL_INVALID_BUFFER_SIZE), "CL_INVALID_BUFFER_SIZE");
  EXPECT_STREQ(clbuf::error_name(CL_DEVICE_NOT_FOUND), "CL_DEVICE_NOT_FOUND");
}

TEST(ErrorName, NamesPlatformNotFoundKhr) {
  EXPECT_STREQ(clbuf::error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
}

TEST(ErrorName, UnknownCodesAreUnknownError) {
  EXPECT_STREQ(clbuf::error_name(1), "CL_UNKNOWN_ERROR");
  EXPECT_STREQ(clbuf::error_name(-29), "CL_UNKNOWN_ERROR");
  EXPECT_STREQ(clbuf::error_name(-9999), "CL_UNKNOWN_ERROR");
  EXPECT_STREQ(clbuf::error_name(12345), "CL_UNKNOWN_ERROR");
}

TEST(ErrorName, NeverReturnsNull) {
  for (cl_int code = -1200; code <= 10; ++code) {
    const char* name = clbuf::error_name(code);
    ASSERT_NE(name, nullptr) << code;
    EXPECT_EQ(std::string(name).rfind("CL_", 0), 0u) << code << " -> " << name;
  }
}

// what() is a C string: a NUL in the details (text a user gave) is written as \0, so the
// message is never cut short there.
TEST(ErrorMessageText, NulBytesInTheDetailsAreEscaped) {
  const std::string details("before\0after\0", 13);
  const std::string message = clbuf::detail::error_message("upload", CL_INVALID_VALUE, details);
  EXPECT_EQ(message, "upload: CL_INVALID_VALUE (-30): before\\0after\\0");
  EXPECT_EQ(std::string(clbuf::Error(CL_INVALID_VALUE, message).what()), message);
  EXPECT_EQ(clbuf::detail::error_message("op", CL_SUCCESS, std::string(1, '\0')), "op: \\0");
}

TEST(ErrorType, IsARuntimeErrorCarryingCodeAndMessage) {
  static_assert(std::is_base_of<std::runtime_error, clbuf::Error>::value,
                "clbuf::Error must derive from std::runtime_error");
  static_assert(noexcept(std::declval<const clbuf::Error&>().code()), "code() is noexcept");
  const clbuf::Error error(CL_INVALID_VALUE, "download: CL_INVALID_VALUE (-30): details");
  EXPECT_EQ(error.code(), CL_INVALID_VALUE);
  EXPECT_STREQ(error.what(), "download: CL_INVALID_VALUE (-30): details");
}

TEST(ErrorType, CatchableAsStdException) {
  try {
    throw clbuf::Error(-1001, "no platform");
  } catch (const std::exception& error) {
    EXPECT_STREQ(error.what(), "no platform");
    const auto* as_clbuf = dynamic_cast<const clbuf::Error*>(&error);
    ASSERT_NE(as_clbuf, nullptr);
    EXPECT_EQ(as_clbuf->code(), -1001);
  }
}

TEST(ErrorType, CopiesKeepCodeAndMessage) {
  const clbuf::Error original(CL_MEM_COPY_OVERLAP, "copy_bytes: overlap");
  const clbuf::Error copied = original;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copied.code(), CL_MEM_COPY_OVERLAP);
  EXPECT_STREQ(copied.what(), "copy_bytes: overlap");
}

/// The format every failure with an OpenCL code follows.
::testing::AssertionResult follows_format(const std::string& message, const std::string& operation,
                                          cl_int code) {
  const std::regex format("^" + operation + ": " + clbuf::error_name(code) + " \\(" +
                          std::to_string(code) + "\\): [^\\n]+$");
  if (!std::regex_match(message, format)) {
    return ::testing::AssertionFailure()
           << "\"" << message << "\" does not read \"" << operation << ": "
           << clbuf::error_name(code) << " (" << code << "): <details>\"";
  }
  if (message.back() == '.') {
    return ::testing::AssertionFailure() << "\"" << message << "\" ends in a full stop";
  }
  return ::testing::AssertionSuccess();
}

class ErrorMessage : public DeviceTest {};

TEST_F(ErrorMessage, RangeErrorReadsOperationNameCodeAndDetails) {
  const auto data = random<float>(256);
  auto buffer = manager().upload(data);
  std::vector<float> out(1024);
  const std::string message =
      clbuf_test::error_message([&] { manager().download(buffer, out.data(), out.size()); });
  EXPECT_TRUE(follows_format(message, "download", CL_INVALID_VALUE));
  EXPECT_NE(message.find("4096"), std::string::npos) << message;  // requested bytes
  EXPECT_NE(message.find("1024"), std::string::npos) << message;  // buffer bytes
}

TEST_F(ErrorMessage, OverlapErrorReadsOperationNameCodeAndRanges) {
  auto buffer = manager().upload(random<std::uint8_t>(64));
  const std::string message =
      clbuf_test::error_message([&] { manager().copy_bytes(buffer, buffer, 16, 0, 8); });
  EXPECT_TRUE(follows_format(message, "copy_bytes", CL_MEM_COPY_OVERLAP));
  EXPECT_TRUE(clbuf_test::has_fragments(message, {"0", "16", "8", "24"}));
}

TEST_F(ErrorMessage, AllocationErrorNamesBytesAndLimit) {
  const std::uint64_t max_alloc = manager().device().max_alloc_bytes;
  ASSERT_GT(max_alloc, 0u);
  const auto count = static_cast<std::size_t>(max_alloc / sizeof(std::uint32_t) + 1);
  const std::string message = clbuf_test::error_message(
      [&] { static_cast<void>(manager().allocate<std::uint32_t>(count)); });
  EXPECT_TRUE(follows_format(message, "allocate", CL_INVALID_BUFFER_SIZE));
  EXPECT_TRUE(clbuf_test::has_fragments(
      message, {std::to_string(count * sizeof(std::uint32_t)), std::to_string(max_alloc)}));
}

TEST_F(ErrorMessage, ShapeErrorNamesShapeAndCounts) {
  const auto data = random<int>(5);
  const std::string message = clbuf_test::error_message([&] {
    static_cast<void>(manager().upload(data, {2, 3}));
  });
  EXPECT_TRUE(follows_format(message, "upload", CL_INVALID_VALUE));
  EXPECT_TRUE(clbuf_test::has_fragments(message, {"2, 3", "6", "5"}));
}

TEST_F(ErrorMessage, CopySizeErrorNamesBothCounts) {
  auto src = manager().upload(random<double>(10));
  auto dst = manager().upload(random<double>(12));
  const std::string message = clbuf_test::error_message([&] { manager().copy(src, dst); });
  EXPECT_TRUE(follows_format(message, "copy", CL_INVALID_VALUE));
  EXPECT_TRUE(clbuf_test::has_fragments(message, {"10", "12"}));
}

TEST_F(ErrorMessage, DeviceNotFoundReadsConstructorName) {
  const std::string message =
      clbuf_test::error_message([&] { clbuf::BufferManager unused("no-such-device-xyzzy"); });
  EXPECT_TRUE(follows_format(message, "BufferManager", CL_DEVICE_NOT_FOUND));
  EXPECT_NE(message.find("no-such-device-xyzzy"), std::string::npos) << message;
}

TEST_F(ErrorMessage, CleanedUpManagerSaysCleanup) {
  manager().cleanup();
  try {
    manager().finish();
    ADD_FAILURE() << "finish() after cleanup() did not throw";
  } catch (const clbuf::Error& error) {
    EXPECT_EQ(error.code(), CL_SUCCESS);
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("finish: ", 0), 0u) << message;
    EXPECT_NE(message.find("cleanup"), std::string::npos) << message;
  }
}

}  // namespace
