// SPDX-License-Identifier: MIT
// Shared test support: the DeviceTest fixture (acquires a device or skips), seeded random data,
// byte-exact comparison, and EXPECT_CLBUF_ERROR for checking a clbuf::Error by type, code and
// message fragments.
#ifndef CLBUF_TESTS_SUPPORT_DEVICE_TEST_HPP
#define CLBUF_TESTS_SUPPORT_DEVICE_TEST_HPP

#include <gtest/gtest.h>

#include <clbuf/clbuf.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "path_count.hpp"

namespace clbuf_test {

/// The fault sweeps' options: `model` forced, and every transfer above 8 KiB staged through
/// three 4 KiB chunks on `copy_threads` threads, so that a small workload takes the staged
/// pipeline.
inline clbuf::Options fault_options(clbuf::MemoryModel model, unsigned copy_threads = 1) {
  clbuf::Options options;
  options.memory = model;
  options.staging_threshold_bytes = 8192;
  options.staging_chunk_bytes = 4096;
  options.staging_chunks = 3;
  options.copy_threads = copy_threads;
  return options;
}

/// True in a ThreadSanitizer build. PoCL 3.1 takes its events' locks in two orders when an event
/// fails (pocl_update_event_failed against an enqueue), which TSan reports as a lock-order
/// inversion inside the driver, whoever made the event fail: the tests that make events fail on
/// purpose skip under TSan (they run in every other build, ASan's included).
/// address_sanitizer: true in an AddressSanitizer build (its leak check reports a leak a test
/// makes on purpose). CLBUF_TEST_TSAN / CLBUF_TEST_ASAN: the same for the preprocessor.
#if defined(__SANITIZE_THREAD__)
#define CLBUF_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CLBUF_TEST_TSAN 1
#endif
#endif
#ifndef CLBUF_TEST_TSAN
#define CLBUF_TEST_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CLBUF_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CLBUF_TEST_ASAN 1
#endif
#endif
#ifndef CLBUF_TEST_ASAN
#define CLBUF_TEST_ASAN 0
#endif
constexpr bool thread_sanitizer = CLBUF_TEST_TSAN != 0;
constexpr bool address_sanitizer = CLBUF_TEST_ASAN != 0;

/// True when CLBUF_REQUIRE_DEVICE=1: a missing device is then a failure, not a skip.
inline bool device_required() {
  const char* value = std::getenv("CLBUF_REQUIRE_DEVICE");
  return value != nullptr && std::string(value) == "1";
}

/// True when `model` is MemoryModel::host and the device clbuf picks is no CPU: the host path
/// needs a CPU device (a BufferManager refuses it elsewhere, CL_INVALID_VALUE), so a test of that
/// path skips there, as on NVIDIA's GPU. False without a device (the caller's check says so).
inline bool host_model_unavailable(clbuf::MemoryModel model) {
  if (model != clbuf::MemoryModel::host) return false;
  try {
    return clbuf::BufferManager().device().type != clbuf::DeviceType::cpu;
  } catch (const clbuf::Error&) {
    return false;
  }
}

/// A seed from CLBUF_TEST_SEED (to repeat a failed run) or from std::random_device.
inline std::uint32_t fresh_seed() {
  if (const char* value = std::getenv("CLBUF_TEST_SEED")) {
    return static_cast<std::uint32_t>(std::strtoul(value, nullptr, 10));
  }
  std::random_device device;
  return device();
}

/// `count` elements of any trivially copyable T filled with random bytes (for floating point:
/// every bit pattern, NaN payloads included); never all zero.
template <class T>
std::vector<T> random_bytes(std::mt19937& rng, std::size_t count) {
  static_assert(std::is_trivially_copyable<T>::value, "random_bytes needs a trivially copyable T");
  std::vector<T> data(count);
  auto* bytes = reinterpret_cast<unsigned char*>(data.data());
  const std::size_t total = count * sizeof(T);
  std::size_t i = 0;
  for (; i + 4 <= total; i += 4) {
    const std::uint32_t word = static_cast<std::uint32_t>(rng());
    std::memcpy(bytes + i, &word, 4);
  }
  for (; i < total; ++i) bytes[i] = static_cast<unsigned char>(rng() & 0xffu);
  bool all_zero = true;
  for (std::size_t b = 0; b < total; ++b) {
    if (bytes[b] != 0) {
      all_zero = false;
      break;
    }
  }
  if (all_zero && total != 0) bytes[0] = 1;
  return data;
}

/// `count` random values of any arithmetic T spread over its range; never all zero.
template <class T>
std::vector<T> random_values(std::mt19937& rng, std::size_t count) {
  static_assert(std::is_arithmetic<T>::value, "random_values needs an arithmetic T");
  if constexpr (std::is_integral<T>::value && !std::is_same<T, bool>::value) {
    // Uniform over T's whole range is uniform over its bit patterns: random bytes, a 32-bit
    // draw each 4 of them (a distribution call per element made the 32 MiB byte arrays of
    // views_test most of its time under ASan at -O0).
    return random_bytes<T>(rng, count);
  } else {
    std::vector<T> data(count);
    if constexpr (std::is_same<T, bool>::value) {
      std::bernoulli_distribution dist(0.5);
      for (auto&& value : data) value = dist(rng);
    } else {
      std::uniform_real_distribution<T> dist(static_cast<T>(-1.0e6), static_cast<T>(1.0e6));
      for (T& value : data) value = dist(rng);
    }
    bool all_zero = true;
    for (const T& value : data) {
      if (value != T{}) {
        all_zero = false;
        break;
      }
    }
    if (all_zero && !data.empty()) data[0] = static_cast<T>(1);
    return data;
  }
}

/// The byte every sentinel-filled array holds.
constexpr unsigned char sentinel_byte = 0xA5;

/// `count` elements whose every byte is sentinel_byte.
template <class T>
std::vector<T> sentinels(std::size_t count) {
  std::vector<T> data(count);
  std::memset(static_cast<void*>(data.data()), sentinel_byte, count * sizeof(T));
  return data;
}

/// "0x5a": one byte in hex. (AssertionResult streams each value on its own, so std::hex given
/// to it would not reach the next value.)
inline std::string hex_byte(unsigned char byte) {
  std::ostringstream text;
  text << "0x" << std::hex << static_cast<unsigned>(byte);
  return text.str();
}

/// Byte-exact comparison (memcmp: NaN payloads and -0.0 compare exactly); names the first
/// differing byte.
inline ::testing::AssertionResult same_bytes(const void* expected, const void* actual,
                                             std::size_t bytes) {
  if (bytes == 0 || std::memcmp(expected, actual, bytes) == 0) {
    return ::testing::AssertionSuccess();
  }
  const auto* a = static_cast<const unsigned char*>(expected);
  const auto* b = static_cast<const unsigned char*>(actual);
  std::size_t first = 0;
  while (a[first] == b[first]) ++first;
  std::size_t differing = 0;
  for (std::size_t i = 0; i < bytes; ++i) differing += a[i] != b[i] ? 1u : 0u;
  return ::testing::AssertionFailure()
         << differing << " of " << bytes << " bytes differ; first at byte " << first
         << ": expected " << hex_byte(a[first]) << ", got " << hex_byte(b[first]);
}

template <class T>
::testing::AssertionResult same_bytes(const std::vector<T>& expected,
                                      const std::vector<T>& actual) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << "expected " << expected.size() << " elements, got " << actual.size();
  }
  return same_bytes(expected.data(), actual.data(), expected.size() * sizeof(T));
}

/// True when every byte of the range is sentinel_byte.
inline ::testing::AssertionResult all_sentinel(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (p[i] != sentinel_byte) {
      return ::testing::AssertionFailure()
             << "byte " << i << " of " << bytes << " was overwritten (" << hex_byte(p[i]) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
::testing::AssertionResult all_sentinel(const std::vector<T>& data) {
  return all_sentinel(data.data(), data.size() * sizeof(T));
}

/// Checks that `message` contains every fragment.
inline ::testing::AssertionResult has_fragments(const std::string& message,
                                                const std::vector<std::string>& fragments) {
  for (const std::string& fragment : fragments) {
    if (message.find(fragment) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << message << "\" lacks \"" << fragment << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

/// Runs `statement`, expecting a clbuf::Error with `code` whose what() has every fragment.
inline void expect_error(const std::function<void()>& statement, cl_int code,
                         const std::vector<std::string>& fragments) {
  try {
    statement();
  } catch (const clbuf::Error& error) {
    EXPECT_EQ(error.code(), code) << "(" << clbuf::error_name(code) << " expected, got "
                                  << clbuf::error_name(error.code())
                                  << ") message: " << error.what();
    EXPECT_TRUE(has_fragments(error.what(), fragments));
    return;
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw a non-clbuf exception: " << error.what();
    return;
  } catch (...) {
    ADD_FAILURE() << "threw something that is not a std::exception";
    return;
  }
  ADD_FAILURE() << "did not throw; expected clbuf::Error " << clbuf::error_name(code);
}

/// The message of the clbuf::Error `statement` throws ("" and a failure when it does not).
inline std::string error_message(const std::function<void()>& statement) {
  try {
    statement();
  } catch (const clbuf::Error& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw a non-clbuf exception: " << error.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

/// "<CL_NAME> (<code>)" as messages write it.
inline std::string code_text(cl_int code) {
  return std::string(clbuf::error_name(code)) + " (" + std::to_string(code) + ")";
}

/// The path one transfer took, by name ("host_copy", "staged", "buffered", "bounced", "relayed",
/// "direct"), from the stats of its direction counted over that transfer alone; when they hold
/// other than one operation on one path, what they hold instead (so a comparison fails with it).
inline std::string path_taken(const clbuf::DirectionStats& stats) {
  const std::string path = one_path({{"host_copy", stats.paths.host_copy},
                                     {"staged", stats.paths.staged},
                                     {"buffered", stats.paths.buffered},
                                     {"bounced", stats.paths.bounced},
                                     {"relayed", stats.paths.relayed},
                                     {"direct", stats.paths.direct}});
  return stats.operations == 1 ? path : std::to_string(stats.operations) + " operations, " + path;
}

/// Sets (or with nullptr unsets) an environment variable for one scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// A trivially copyable struct without padding, for round trips of user types.
struct Sample {
  double weight;
  std::int32_t id;
  float score;
  std::uint16_t flags[4];
};
static_assert(sizeof(Sample) == 24, "Sample must have no padding");
static_assert(std::is_trivially_copyable<Sample>::value, "Sample must be trivially copyable");

/// A 3-byte element: sizes and offsets that are never multiples of 2 or 4.
struct Rgb {
  std::uint8_t r, g, b;
};
static_assert(sizeof(Rgb) == 3, "Rgb must be 3 bytes");

/// Acquires a BufferManager on the default device for every test. Without a device the test is
/// skipped, unless CLBUF_REQUIRE_DEVICE=1 (as CI sets), which makes it a failure. Random data
/// comes from rng_, seeded per test and printed when the test fails.
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = fresh_seed();
    rng_.seed(seed_);
    try {
      manager_ = std::make_unique<clbuf::BufferManager>();
    } catch (const clbuf::Error& error) {
      if (device_required()) {
        FAIL() << "CLBUF_REQUIRE_DEVICE=1 but no device: " << error.what();
      }
      GTEST_SKIP() << "no OpenCL device: " << error.what();
    }
  }

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "[ seed     ] " << seed_ << " (CLBUF_TEST_SEED=" << seed_
                << " repeats this run's random data)\n";
    }
  }

  clbuf::BufferManager& manager() { return *manager_; }

  /// The cl::Device of the manager's context.
  cl::Device cl_device() { return manager().context().getInfo<CL_CONTEXT_DEVICES>().at(0); }

  template <class T>
  std::vector<T> random(std::size_t count) {
    return random_values<T>(rng_, count);
  }

  template <class T>
  std::vector<T> random_raw(std::size_t count) {
    return random_bytes<T>(rng_, count);
  }

  /// A uniform integer in [low, high].
  std::size_t pick(std::size_t low, std::size_t high) {
    return std::uniform_int_distribution<std::size_t>(low, high)(rng_);
  }

  std::uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<clbuf::BufferManager> manager_;
};

/// A DeviceTest whose `paths()` manager is forced onto the MemoryModel the test is instantiated
/// with (CLBUF_INSTANTIATE_MODELS), so one test body proves every transfer path. The host path
/// needs a CPU device; elsewhere it skips. Override configure() to tune the Options further.
class ModelTest : public DeviceTest, public ::testing::WithParamInterface<clbuf::MemoryModel> {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (GetParam() == clbuf::MemoryModel::host &&
        manager().device().type != clbuf::DeviceType::cpu) {
      GTEST_SKIP() << "the host path needs a CPU device";
    }
    clbuf::Options options;
    options.memory = GetParam();
    configure(options);
    paths_ = std::make_unique<clbuf::BufferManager>(std::string(), options);
  }

  virtual void configure(clbuf::Options&) {}

  clbuf::BufferManager& paths() { return *paths_; }

  std::unique_ptr<clbuf::BufferManager> paths_;
};

/// "Host", "Unified", "DiscreteStaged": test names for each MemoryModel.
inline std::string model_name(const ::testing::TestParamInfo<clbuf::MemoryModel>& info) {
  switch (info.param) {
    case clbuf::MemoryModel::host:
      return "Host";
    case clbuf::MemoryModel::unified:
      return "Unified";
    case clbuf::MemoryModel::discrete:
      return "DiscreteStaged";
    case clbuf::MemoryModel::automatic:
      break;
  }
  return "Automatic";
}

}  // namespace clbuf_test

/// Runs every TEST_P of a ModelTest suite on the host, unified and discrete paths.
#define CLBUF_INSTANTIATE_MODELS(Suite)                                        \
  INSTANTIATE_TEST_SUITE_P(                                                    \
      Models, Suite,                                                           \
      ::testing::Values(clbuf::MemoryModel::host, clbuf::MemoryModel::unified, \
                        clbuf::MemoryModel::discrete),                         \
      ::clbuf_test::model_name)

/// EXPECT_CLBUF_ERROR(statement, code, fragment...): `statement` throws a clbuf::Error whose
/// code() is `code` and whose what() contains every fragment (const char* or std::string).
/// Wrap a statement holding top-level commas in parentheses.
#define EXPECT_CLBUF_ERROR(statement, code, ...)                                \
  do {                                                                          \
    SCOPED_TRACE("EXPECT_CLBUF_ERROR(" #statement ")");                         \
    ::clbuf_test::expect_error([&]() { static_cast<void>(statement); }, (code), \
                               std::vector<std::string>{__VA_ARGS__});          \
  } while (false)

#endif  // CLBUF_TESTS_SUPPORT_DEVICE_TEST_HPP
