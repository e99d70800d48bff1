// SPDX-License-Identifier: MIT
// Issue 44: .npy files in and out of device memory (BufferManager::load_npy / save_npy and their
// async forms), on a CPU device's own memory (MemoryModel::host) and through pinned chunks
// (MemoryModel::discrete with 4 KiB chunks, so small files cross chunk edges); numpy reads what
// clbuf writes and clbuf reads what numpy writes (/usr/bin/python3 with numpy); every error of
// the issue: a missing file, a folder, no permission, a full disk (RLIMIT_FSIZE in a child
// process), another dtype, Fortran order, a header that lies about the size, a corrupted header.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <clbuf/checkpoint.hpp>
#include <clbuf/clbuf.hpp>
#include <clbuf/detail/crc32c.hpp>
#include <clbuf/detail/npy_format.hpp>
#include <clbuf/sharded_npy.hpp>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/device_test.hpp"

namespace {

using clbuf::detail::Crc32c;

constexpr std::size_t chunk_bytes = 4096;

/// A fresh folder under TMPDIR (or /tmp), removed with what it holds at the end.
class TempFolder {
 public:
  TempFolder() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/clbuf-files-XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    if (::mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name.data();
  }
  ~TempFolder() {
    try {
      clbuf::detail::remove_tree("test", path_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): best effort
    }
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> entries() const {
    auto names = clbuf::detail::folder_entries("test", path_);
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

/// Runs /usr/bin/python3 on `script` with `args`; its exit status (-1: could not run).
int run_python(const std::string& script, const std::string& args) {
  const std::string command = "/usr/bin/python3 " + script + " " + args;
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool numpy_available() {
  static const bool available =
      std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return available;
}

/// The value of element i in every interop file, a formula numpy computes too.
template <class T>
T pattern_value(std::size_t i) {
  if constexpr (std::is_same<T, bool>::value) {
    return i % 3 == 0;
  } else if constexpr (std::is_same<T, std::complex<float>>::value ||
                       std::is_same<T, std::complex<double>>::value) {
    using R = typename T::value_type;
    return T(static_cast<R>((i * 7 + 3) % 251), -static_cast<R>(i % 13));
  } else {
    return static_cast<T>((i * 7 + 3) % 251);
  }
}

template <class T>
std::vector<T> pattern(std::size_t count) {
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = pattern_value<T>(i);
  return data;
}

/// A buffer of `count` elements of pattern<T> (bool too: no std::vector<bool>).
template <class T>
clbuf::DeviceBuffer<T> upload_pattern(clbuf::BufferManager& manager, std::size_t count) {
  std::unique_ptr<T[]> data(new T[count + 1]);
  for (std::size_t i = 0; i < count; ++i) data[i] = pattern_value<T>(i);
  return manager.upload(data.get(), count);
}

/// `buffer` holds pattern<T> of its size.
template <class T>
::testing::AssertionResult holds_pattern(clbuf::BufferManager& manager,
                                         const clbuf::DeviceBuffer<T>& buffer) {
  std::unique_ptr<T[]> out(new T[buffer.size() + 1]);
  manager.download(buffer, out.get(), buffer.size());
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    if (!(out[i] == pattern_value<T>(i))) {
      return ::testing::AssertionFailure() << "element " << i << " of " << buffer.size();
    }
  }
  return ::testing::AssertionSuccess();
}

clbuf::Options model_options(clbuf::MemoryModel model) {
  clbuf::Options options;
  options.memory = model;
  options.staging_chunk_bytes = chunk_bytes;
  options.staging_chunks = 3;
  return options;
}

/// load_npy / save_npy on one memory model.
class Files : public ::testing::TestWithParam<clbuf::MemoryModel> {
 protected:
  void SetUp() override {
    if (clbuf_test::host_model_unavailable(GetParam())) {
      GTEST_SKIP() << "MemoryModel::host needs a CPU device";
    }
    try {
      manager_ = std::make_unique<clbuf::BufferManager>("", model_options(GetParam()));
    } catch (const clbuf::Error& error) {
      if (clbuf_test::device_required()) FAIL() << "no device: " << error.what();
      GTEST_SKIP() << "no OpenCL device: " << error.what();
    }
  }
  clbuf::BufferManager& manager() { return *manager_; }

  template <class T>
  void expect_round_trip(std::size_t count) {
    SCOPED_TRACE(std::to_string(count) + " elements of " + clbuf::detail::npy_descr<T>());
    auto buffer = upload_pattern<T>(manager(), count);
    const std::string path = folder_ / "a.npy";
    manager().save_npy(path, buffer);
    std::vector<std::size_t> shape;
    auto back = manager().load_npy<T>(path, &shape);
    EXPECT_EQ(shape, std::vector<std::size_t>{count});
    EXPECT_EQ(back.shape(), std::vector<std::size_t>{count});
    EXPECT_TRUE(holds_pattern(manager(), back));
  }

  std::unique_ptr<clbuf::BufferManager> manager_;
  TempFolder folder_;
};

std::string model_name(const ::testing::TestParamInfo<clbuf::MemoryModel>& info) {
  return clbuf::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(Models, Files,
                         ::testing::Values(clbuf::MemoryModel::host, clbuf::MemoryModel::discrete),
                         model_name);

// ---------------------------------------------------------------------------------------------
// The format, without a device.

TEST(Crc32c, GivesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c::of("123456789", 9), 0xE3069283U);
  Crc32c parts;  // in pieces, across the eight-byte steps
  parts.update("1234", 4);
  parts.update("56789", 5);
  EXPECT_EQ(parts.value(), 0xE3069283U);
  EXPECT_EQ(Crc32c::of("", 0), 0U);
}

TEST(NpyFormat, HeaderIsWhatNumpyWritesAndAlignedTo64) {
  const std::string header = clbuf::detail::format_npy_header("<f4", {2, 3});
  EXPECT_EQ(header.size() % 64, 0U);
  EXPECT_EQ(header.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(header.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"),
            std::string::npos);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_NE(clbuf::detail::format_npy_header("|u1", {5}).find("(5,)"), std::string::npos);
  EXPECT_NE(clbuf::detail::format_npy_header("<f8", {}).find("'shape': ()"), std::string::npos);
}

TEST(NpyFormat, ParsesWhatItFormats) {
  const std::vector<std::vector<std::size_t>> shapes = {{}, {0}, {7}, {2, 3, 4}};
  for (const auto& shape : shapes) {
    const std::string header = clbuf::detail::format_npy_header(">c16", shape);
    clbuf::NpyHeader parsed;
    ASSERT_EQ(clbuf::detail::parse_npy_header(reinterpret_cast<const unsigned char*>(header.data()),
                                              header.size(), parsed),
              "");
    EXPECT_EQ(parsed.shape, shape);
    EXPECT_EQ(parsed.descr(), ">c16");
    EXPECT_EQ(parsed.data_offset, header.size());
  }
}

TEST(NpyFormat, LongHeaderUsesVersionTwo) {
  const std::vector<std::size_t> shape(7000, 1);    // "1, " 7000 times: 21 kB, version 1.0
  const std::vector<std::size_t> longer(22000, 1);  // 66 kB: past 1.0's 65535-byte header
  const std::string header = clbuf::detail::format_npy_header("<i8", longer);
  EXPECT_EQ(header[6], 2);
  EXPECT_EQ(header.size() % 64, 0U);
  clbuf::NpyHeader parsed;
  EXPECT_EQ(clbuf::detail::parse_npy_header(reinterpret_cast<const unsigned char*>(header.data()),
                                            header.size(), parsed),
            "");
  EXPECT_EQ(parsed.shape.size(), longer.size());
  EXPECT_EQ(clbuf::detail::format_npy_header("<i8", shape)[6], 1);
}

std::string parse_error(const std::string& dict) {
  std::string bytes("\x93NUMPY\x01\x00", 8);
  std::string padded = dict;
  while ((10 + padded.size() + 1) % 64 != 0) padded += ' ';
  padded += '\n';
  bytes += static_cast<char>(padded.size() & 0xFF);
  bytes += static_cast<char>(padded.size() >> 8);
  bytes += padded;
  clbuf::NpyHeader parsed;
  return clbuf::detail::parse_npy_header(reinterpret_cast<const unsigned char*>(bytes.data()),
                                         bytes.size(), parsed);
}

TEST(NpyFormat, RefusesHeadersThatAreNotNumericCOrderArrays) {
  EXPECT_EQ(parse_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"), "");
  EXPECT_EQ(parse_error("{\"descr\": \"<f4\", \"shape\": (3,), \"fortran_order\": True}"), "");
  EXPECT_NE(parse_error("{'descr': '<U5', 'fortran_order': False, 'shape': (3,), }"), "");
  EXPECT_NE(parse_error("{'descr': '|O', 'fortran_order': False, 'shape': (3,), }"), "");
  EXPECT_NE(parse_error("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (3,), }"), "");
  EXPECT_NE(parse_error("{'descr': '<f4', 'fortran_order': False, }"), "");
  EXPECT_NE(parse_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}"), "");
  EXPECT_NE(parse_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}"), "");
  EXPECT_NE(parse_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }"), "");
  EXPECT_NE(parse_error("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }"), "");
  EXPECT_NE(parse_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } x"), "");
  EXPECT_NE(parse_error("{'descr': '<f3', 'fortran_order': False, 'shape': (3,), }"), "");
  EXPECT_NE(parse_error("{'descr': '|f4', 'fortran_order': False, 'shape': (3,), }"), "");
  EXPECT_NE(parse_error("{'descr': '<f4', 'fortran_order': False, 'shape': "
                        "(99999999999999999999999,), }"),
            "");
  const std::string overflow =
      parse_error("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }");
  EXPECT_NE(overflow.find("overflow"), std::string::npos) << overflow;
  const std::string bytes_overflow =
      parse_error("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 536870912), }");
  EXPECT_NE(bytes_overflow.find("overflow"), std::string::npos) << bytes_overflow;
}

TEST(NpyFormat, OneBitFlipsOfTheHeaderAreRefusedOrChangeOnlyTheSizeOrTheByteOrder) {
  // A flipped bit anywhere in the header is refused, or parses to the same array, or to one of
  // another byte count (load_npy then refuses the file's size), or to the other byte order
  // ('<' and '>' differ by one bit: only a checksum, a Checkpoint's, catches that one).
  const std::string header = clbuf::detail::format_npy_header("<f4", {2, 3});
  clbuf::NpyHeader original;
  ASSERT_EQ(clbuf::detail::parse_npy_header(reinterpret_cast<const unsigned char*>(header.data()),
                                            header.size(), original),
            "");
  for (std::size_t at = 0; at < header.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = header;
      flipped[at] = static_cast<char>(flipped[at] ^ (1 << bit));
      clbuf::NpyHeader parsed;
      const std::string why = clbuf::detail::parse_npy_header(
          reinterpret_cast<const unsigned char*>(flipped.data()), flipped.size(), parsed);
      if (!why.empty()) continue;
      const bool same = parsed.descr() == original.descr() && parsed.shape == original.shape &&
                        parsed.fortran_order == original.fortran_order &&
                        parsed.data_offset == original.data_offset;
      const bool byte_order = parsed.byte_order == '>' && parsed.shape == original.shape &&
                              parsed.kind == original.kind;
      EXPECT_TRUE(same || byte_order || parsed.data_bytes != original.data_bytes)
          << "byte " << at << " bit " << bit << " gives " << parsed.descr();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips in clbuf.

TEST_P(Files, RoundTripsEveryDtypeAtChunkEdges) {
  const auto sizes = [](std::size_t item) {
    const std::size_t per_chunk = chunk_bytes / item;
    return std::vector<std::size_t>{
        0, 1, per_chunk - 1, per_chunk, per_chunk + 1, 5 * per_chunk + 3};
  };
  for (std::size_t n : sizes(1)) expect_round_trip<std::int8_t>(n);
  for (std::size_t n : sizes(1)) expect_round_trip<std::uint8_t>(n);
  for (std::size_t n : sizes(1)) expect_round_trip<bool>(n);
  for (std::size_t n : sizes(2)) expect_round_trip<std::int16_t>(n);
  for (std::size_t n : sizes(2)) expect_round_trip<std::uint16_t>(n);
  for (std::size_t n : sizes(4)) expect_round_trip<std::int32_t>(n);
  for (std::size_t n : sizes(4)) expect_round_trip<std::uint32_t>(n);
  for (std::size_t n : sizes(8)) expect_round_trip<std::int64_t>(n);
  for (std::size_t n : sizes(8)) expect_round_trip<std::uint64_t>(n);
  for (std::size_t n : sizes(4)) expect_round_trip<float>(n);
  for (std::size_t n : sizes(8)) expect_round_trip<double>(n);
  for (std::size_t n : sizes(8)) expect_round_trip<std::complex<float>>(n);
  for (std::size_t n : sizes(16)) expect_round_trip<std::complex<double>>(n);
}

TEST_P(Files, SavesTheShapeGivenAndLoadsItBack) {
  auto buffer = manager().upload(pattern<float>(24));
  const std::string path = folder_ / "shaped.npy";
  manager().save_npy(path, buffer, {2, 3, 4});
  EXPECT_EQ(clbuf::read_npy_header(path).shape, (std::vector<std::size_t>{2, 3, 4}));
  auto back = manager().load_npy<float>(path);
  EXPECT_EQ(back.shape(), (std::vector<std::size_t>{2, 3, 4}));
  EXPECT_CLBUF_ERROR(manager().save_npy(path, buffer, {5, 5}), CL_INVALID_VALUE, "save_npy",
                     "shape [5, 5]");
}

TEST_P(Files, SavesAViewAndLoadsIntoAView) {
  auto whole = manager().upload(pattern<std::int32_t>(3000));
  auto middle = manager().view(whole, 1000, 1500);
  const std::string path = folder_ / "view.npy";
  manager().save_npy(path, middle);
  auto target = manager().upload(std::vector<std::int32_t>(4000, -1));
  auto window = manager().view(target, 7, 1500);
  manager().load_npy(path, window);
  const std::vector<std::int32_t> got = manager().download(target);
  const std::vector<std::int32_t> all = pattern<std::int32_t>(3000);
  for (std::size_t i = 0; i < 4000; ++i) {
    const std::int32_t expected = i >= 7 && i < 1507 ? all[1000 + i - 7] : -1;
    ASSERT_EQ(got[i], expected) << "element " << i;
  }
  auto small = manager().allocate<std::int32_t>(10);
  EXPECT_CLBUF_ERROR(manager().load_npy(path, small), CL_INVALID_VALUE, "load_npy", path,
                     "1500 elements", "the buffer 10");
}

TEST_P(Files, AsyncFormsRoundTripAndOrderLaterWork) {
  const std::vector<double> data = pattern<double>(20000);
  auto buffer = manager().upload(data);
  const std::string path = folder_ / "async.npy";
  clbuf::Future<void> saved = manager().save_npy_async(path, buffer);
  // A fill queued after the save runs after the save has read the buffer.
  manager().fill(buffer, 0.5);
  saved.get();
  auto loaded = manager().load_npy_async<double>(path);
  auto back = loaded.get();
  EXPECT_TRUE(manager().download(back) == data);
  auto into = manager().allocate<double>(data.size());
  clbuf::Future<void> filled = manager().load_npy_async(path, into);
  // A download queued after the load sees the file's bytes.
  EXPECT_TRUE(manager().download(into) == data);
  filled.get();
  EXPECT_TRUE(manager().download(buffer) == std::vector<double>(data.size(), 0.5));
}

TEST_P(Files, ReplacesAnExistingFileWholeAndLeavesNoTemporaryFile) {
  const std::string path = folder_ / "a.npy";
  write_all(path, "old contents");
  auto buffer = manager().upload(pattern<float>(5000));
  manager().save_npy(path, buffer);
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"a.npy"});
  EXPECT_TRUE(manager().download(manager().load_npy<float>(path)) == pattern<float>(5000));
}

// ---------------------------------------------------------------------------------------------
// numpy reads what clbuf writes; clbuf reads what numpy writes (little- and big-endian).

const char* const interop_script = R"PY(
import sys, numpy as np
folder, names = sys.argv[1], sys.argv[2:]
def expected(dt, n):
    i = np.arange(n, dtype=np.int64)
    if dt.kind == 'b':
        return (i % 3) == 0
    if dt.kind == 'c':
        return (((i * 7 + 3) % 251) - 1j * (i % 13)).astype(dt)
    return ((i * 7 + 3) % 251).astype(dt)
for name in names:
    descr, n = name.split('_')
    n = int(n)
    a = np.load(folder + '/clbuf_' + name + '.npy')
    dt = np.dtype(descr)
    assert a.dtype == dt, (name, a.dtype)
    assert a.shape == (n,), (name, a.shape)
    assert np.array_equal(a, expected(dt, n)), name
    np.save(folder + '/numpy_' + name + '.npy', expected(dt, n))
    np.save(folder + '/numpy_be_' + name + '.npy', expected(dt, n).astype(dt.newbyteorder('>')))
    np.save(folder + '/numpy_2d_' + name + '.npy', expected(dt, n).reshape(1, n))
print('ok', len(names))
)PY";

template <class T>
void save_for_numpy(clbuf::BufferManager& manager, const TempFolder& folder, std::size_t count,
                    std::vector<std::string>& names) {
  const std::string name = clbuf::detail::npy_descr<T>() + "_" + std::to_string(count);
  auto buffer = upload_pattern<T>(manager, count);
  manager.save_npy(folder / ("clbuf_" + name + ".npy"), buffer);
  names.push_back(name);
}

template <class T>
void load_from_numpy(clbuf::BufferManager& manager, const TempFolder& folder, std::size_t count) {
  const std::string name = clbuf::detail::npy_descr<T>() + "_" + std::to_string(count);
  SCOPED_TRACE(name);
  for (const char* kind : {"numpy_", "numpy_be_", "numpy_2d_"}) {
    std::vector<std::size_t> shape;
    auto buffer = manager.load_npy<T>(folder / (kind + name + ".npy"), &shape);
    EXPECT_TRUE(holds_pattern(manager, buffer)) << kind;
    const std::vector<std::size_t> expected = std::string(kind) == "numpy_2d_"
                                                  ? std::vector<std::size_t>{1, count}
                                                  : std::vector<std::size_t>{count};
    EXPECT_EQ(shape, expected) << kind;
  }
}

template <class T>
struct Tag {
  using type = T;
};

/// `action(Tag<T>(), n)` for every dtype T and the sizes 0, 1 and a chunk's elements -1 and +1.
template <class Action>
void each_dtype_and_size(const Action& action) {
  const auto sizes = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::size_t per_chunk = chunk_bytes / sizeof(T);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, per_chunk - 1, per_chunk + 1}) {
      action(tag, n);
    }
  };
  sizes(Tag<std::int8_t>());
  sizes(Tag<std::uint8_t>());
  sizes(Tag<bool>());
  sizes(Tag<std::int16_t>());
  sizes(Tag<std::uint16_t>());
  sizes(Tag<std::int32_t>());
  sizes(Tag<std::uint32_t>());
  sizes(Tag<std::int64_t>());
  sizes(Tag<std::uint64_t>());
  sizes(Tag<float>());
  sizes(Tag<double>());
  sizes(Tag<std::complex<float>>());
  sizes(Tag<std::complex<double>>());
}

TEST_P(Files, NumpyReadsClbufsFilesAndClbufReadsNumpysInBothByteOrders) {
  if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 has no numpy";
  std::vector<std::string> names;
  each_dtype_and_size([&](auto tag, std::size_t n) {
    save_for_numpy<typename decltype(tag)::type>(manager(), folder_, n, names);
  });
  const std::string script = folder_ / "interop.py";
  write_all(script, interop_script);
  std::string args = folder_.path();
  for (const std::string& name : names) args += " '" + name + "'";
  ASSERT_EQ(run_python(script, args), 0) << "numpy refused or misread a file clbuf wrote";
  each_dtype_and_size([&](auto tag, std::size_t n) {
    load_from_numpy<typename decltype(tag)::type>(manager(), folder_, n);
  });
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST_P(Files, MissingFileFolderAndNotNpyAreErrorsNamingThePath) {
  const std::string missing = folder_ / "missing.npy";
  EXPECT_CLBUF_ERROR(manager().load_npy<float>(missing), CL_INVALID_VALUE, "load_npy", missing,
                     "No such file");
  EXPECT_CLBUF_ERROR(manager().load_npy<float>(folder_.path()), CL_INVALID_VALUE, "load_npy",
                     folder_.path(), "is a folder");
  const std::string text = folder_ / "text.npy";
  write_all(text, "hello, this is not numpy");
  EXPECT_CLBUF_ERROR(manager().load_npy<float>(text), CL_INVALID_VALUE, "load_npy", text,
                     "not a .npy file");
  write_all(text, "");
  EXPECT_CLBUF_ERROR(manager().load_npy<float>(text), CL_INVALID_VALUE, text, "0 bytes");
  EXPECT_CLBUF_ERROR(manager().load_npy<float>(std::string("a\0b.npy", 7)), CL_INVALID_VALUE,
                     "load_npy", "holds a NUL");
  EXPECT_CLBUF_ERROR(manager().load_npy<float>(""), CL_INVALID_VALUE, "load_npy", "empty");
  const std::string fifo = folder_ / "fifo.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_CLBUF_ERROR(manager().load_npy<float>(fifo), CL_INVALID_VALUE, fifo, "not a regular file");
  auto buffer = manager().upload(pattern<float>(10));
  const std::string nowhere = folder_ / "no/such/folder/a.npy";
  EXPECT_CLBUF_ERROR(manager().save_npy(nowhere, buffer), CL_INVALID_VALUE, "save_npy",
                     "No such file");
  EXPECT_CLBUF_ERROR(static_cast<void>(manager().save_npy_async(nowhere, buffer)), CL_INVALID_VALUE,
                     "save_npy_async", "No such file");
  EXPECT_CLBUF_ERROR(static_cast<void>(manager().load_npy_async<float>(missing)), CL_INVALID_VALUE,
                     "load_npy_async", missing);
}

TEST_P(Files, AnotherDtypeAndFortranOrderAreRefused) {
  auto buffer = manager().upload(pattern<float>(12));
  const std::string path = folder_ / "f4.npy";
  manager().save_npy(path, buffer, {3, 4});
  EXPECT_CLBUF_ERROR(manager().load_npy<std::int32_t>(path), CL_INVALID_VALUE, "load_npy", path,
                     "<f4", "<i4");
  EXPECT_CLBUF_ERROR(manager().load_npy<double>(path), CL_INVALID_VALUE, "<f4", "<f8");
  std::string bytes = read_all(path);
  const std::size_t at = bytes.find("False");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "True ");
  const std::string fortran = folder_ / "fortran.npy";
  write_all(fortran, bytes);
  EXPECT_CLBUF_ERROR(manager().load_npy<float>(fortran), CL_INVALID_VALUE, "load_npy", fortran,
                     "Fortran order");
}

TEST_P(Files, AFileShorterOrLongerThanItsHeaderSaysIsRefusedBeforeAnythingChanges) {
  auto buffer = manager().upload(pattern<std::int16_t>(5000));
  const std::string path = folder_ / "a.npy";
  manager().save_npy(path, buffer);
  const std::string bytes = read_all(path);
  auto target = manager().upload(std::vector<std::int16_t>(5000, 7));
  const std::string cut = folder_ / "cut.npy";
  write_all(cut, bytes.substr(0, bytes.size() - 1));
  EXPECT_CLBUF_ERROR(manager().load_npy(cut, target), CL_INVALID_VALUE, "load_npy", cut,
                     "truncated");
  write_all(cut, bytes.substr(0, 40));  // inside the header
  EXPECT_CLBUF_ERROR(manager().load_npy(cut, target), CL_INVALID_VALUE, cut, "truncated");
  write_all(cut, bytes + "x");
  EXPECT_CLBUF_ERROR(manager().load_npy(cut, target), CL_INVALID_VALUE, cut, "longer");
  EXPECT_TRUE(manager().download(target) == std::vector<std::int16_t>(5000, 7));
  EXPECT_CLBUF_ERROR(static_cast<void>(manager().load_npy_async<std::int16_t>(cut)),
                     CL_INVALID_VALUE, "load_npy_async", "longer");
}

TEST_P(Files, ACorruptedHeaderIsRefused) {
  auto buffer = manager().upload(pattern<float>(100));
  const std::string path = folder_ / "a.npy";
  manager().save_npy(path, buffer);
  const std::string bytes = read_all(path);
  std::size_t refused = 0, checked = 0;
  const std::size_t header = clbuf::read_npy_header(path).data_offset;
  for (std::size_t at = 0; at < header; ++at) {
    std::string corrupted = bytes;
    corrupted[at] = static_cast<char>(corrupted[at] ^ 0x04);
    write_all(path, corrupted);
    ++checked;
    try {
      auto loaded = manager().load_npy<float>(path);
      // Parsed anyway: then it is the same array (a quote changed for the other kind cannot be).
      EXPECT_TRUE(manager().download(loaded) == pattern<float>(100)) << "byte " << at;
    } catch (const clbuf::Error& error) {
      ++refused;
      EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
    }
  }
  EXPECT_GT(refused, checked * 9 / 10);
}

TEST_P(Files, AShapeWhoseBytesOverflowIsRefused) {
  std::string header = clbuf::detail::format_npy_header("<f8", {1});
  const std::string huge = "(4294967296, 4294967296)";
  const std::size_t at = header.find("(1,)");
  header.replace(at, 4, huge);
  header.erase(header.size() - 1 - (huge.size() - 4), huge.size() - 4);  // keep the length
  const std::string path = folder_ / "huge.npy";
  write_all(path, header);
  EXPECT_CLBUF_ERROR(manager().load_npy<double>(path), CL_INVALID_VALUE, "load_npy", path,
                     "overflow");
}

TEST_P(Files, NoPermissionIsAnErrorNamingThePath) {
  auto buffer = manager().upload(pattern<float>(10));
  const std::string path = folder_ / "a.npy";
  manager().save_npy(path, buffer);
  const std::string locked = folder_ / "locked";
  ASSERT_EQ(::mkdir(locked.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  ASSERT_EQ(::chmod(locked.c_str(), 0555), 0);
  if (::geteuid() != 0) {
    EXPECT_CLBUF_ERROR(manager().load_npy<float>(path), CL_INVALID_VALUE, path,
                       "Permission denied");
    EXPECT_CLBUF_ERROR(manager().save_npy(locked + "/b.npy", buffer), CL_INVALID_VALUE, "save_npy",
                       locked, "Permission denied");
    return;
  }
  // root reads and writes anything: a child that has given up root meets the permissions. The
  // calls fail before any OpenCL call, so the forked child needs no driver thread.
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int failures = 0;
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(90);
    try {
      static_cast<void>(manager().load_npy<float>(path));
      ++failures;
    } catch (const clbuf::Error& error) {
      if (std::string(error.what()).find("Permission denied") == std::string::npos) ++failures;
    }
    try {
      manager().save_npy(locked + "/b.npy", buffer);
      ++failures;
    } catch (const clbuf::Error& error) {
      if (std::string(error.what()).find("Permission denied") == std::string::npos) ++failures;
    }
    ::_exit(failures);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "90: setuid failed; else the failures counted";
  ::chmod(locked.c_str(), 0755);
}

/// In a child started by start_child: the file-size limit it was given (CLBUF_FILES_CHILD_FSIZE,
/// bytes; 0 or unset: none), SIGXFSZ left at its default (end the process): clbuf blocks it.
/// The child lifts the limit again before it exits.
void apply_child_file_size_limit() {
  const char* bytes = std::getenv("CLBUF_FILES_CHILD_FSIZE");
  if (bytes == nullptr || std::strtoull(bytes, nullptr, 10) == 0) return;
  struct rlimit limit {};
  limit.rlim_cur = std::strtoull(bytes, nullptr, 10);
  limit.rlim_max = RLIM_INFINITY;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0) << std::strerror(errno);
}

/// The child of FullDiskLeavesTheOldFileAndNoTemporaryFile: runs in a fresh process of this
/// binary under RLIMIT_FSIZE (SIGXFSZ at its default), given the folder by CLBUF_FILES_CHILD_DIR.
TEST_P(Files, DISABLED_ChildUnderAFileSizeLimit) {
  apply_child_file_size_limit();
  // Also a checkpoint's save: the previous checkpoint stays, no temporary folder is left.
  if (std::getenv("CLBUF_FILES_CHILD_DIR") != nullptr) {
    const std::string folder = std::string(std::getenv("CLBUF_FILES_CHILD_DIR")) + "/ckpt";
    if (clbuf::detail::is_folder(folder)) {
      auto big = manager().upload(pattern<float>(100000));
      clbuf::Checkpoint checkpoint(manager(), folder);
      checkpoint.add("u", big);
      EXPECT_CLBUF_ERROR(checkpoint.save(), CL_INVALID_VALUE, "Checkpoint::save", "File too large");
    }
  }
  const char* dir = std::getenv("CLBUF_FILES_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run by FullDiskLeavesTheOldFileAndNoTemporaryFile";
  const std::string path = std::string(dir) + "/a.npy";
  auto buffer = manager().upload(pattern<float>(200000));  // 800 KB, the limit 64 KiB
  EXPECT_CLBUF_ERROR(manager().save_npy(path, buffer), CL_INVALID_VALUE, "save_npy",
                     "File too large");
  clbuf::Future<void> saved = manager().save_npy_async(path, buffer);
  EXPECT_CLBUF_ERROR(saved.get(), CL_INVALID_VALUE, "save_npy_async", "File too large");
  if (!HasFailure()) write_all(std::string(dir) + "/child-ran", "");  // small: under the limit
  // The limit lifted before exit: a coverage build's counters are written then (past 64 KiB).
  struct rlimit limit {};
  limit.rlim_cur = limit.rlim_max = RLIM_INFINITY;
  ::setrlimit(RLIMIT_FSIZE, &limit);
}

/// Runs the disabled case `name` of this binary on `model` in a child process with
/// CLBUF_FILES_CHILD_DIR=`folder` (and `extra` in CLBUF_FILES_CHILD_ARG), under a file-size limit
/// of `fsize_limit` bytes (0: none) that the child sets itself (apply_child_file_size_limit):
/// set here, between fork and exec, it would kill the forked copy in a coverage build, whose
/// wrapped execl writes the copy's counters (.gcda, past the limit) first. Returns the child's pid.
pid_t start_child(const std::string& name, clbuf::MemoryModel model, const std::string& folder,
                  std::size_t fsize_limit, const std::string& extra = "") {
  const std::string filter =
      std::string("--gtest_filter=Models/Files.DISABLED_") + name + "/" + clbuf::to_string(model);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child != 0) return child;
  ::setenv("CLBUF_FILES_CHILD_FSIZE", std::to_string(fsize_limit).c_str(), 1);
  ::setenv("CLBUF_FILES_CHILD_DIR", folder.c_str(), 1);
  ::setenv("CLBUF_FILES_CHILD_ARG", extra.c_str(), 1);
  // The child's own fixture folder goes inside the parent's, which removes it: a child killed
  // mid-save never removes its own (50 empty folders in /tmp a run before).
  ::setenv("TMPDIR", folder.c_str(), 1);
  const int null = ::open("/dev/null", O_WRONLY);
  if (null >= 0) ::dup2(null, 1);
  ::execl("/proc/self/exe", "files_test", filter.c_str(), "--gtest_also_run_disabled_tests",
          static_cast<char*>(nullptr));
  ::_exit(91);
}

/// The exit status of `child` (-1: it did not exit, e.g. killed).
int wait_child(pid_t child) {
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_P(Files, FullDiskLeavesTheOldFileAndNoTemporaryFile) {
  const std::string path = folder_ / "a.npy";
  write_all(path, "the previous file");
  auto previous = manager().upload(std::vector<float>(100000, 1.0f));
  clbuf::Checkpoint checkpoint(manager(), folder_ / "ckpt");
  checkpoint.add("u", previous);
  checkpoint.save();
  const pid_t child = start_child("ChildUnderAFileSizeLimit", GetParam(), folder_.path(), 64 << 10);
  ASSERT_GT(child, 0);
  EXPECT_EQ(wait_child(child), 0) << "the child's save did not fail as it should (91: exec)";
  EXPECT_EQ(::unlink((folder_ / "child-ran").c_str()), 0) << "the child's test did not run";
  EXPECT_EQ(read_all(path), "the previous file");
  EXPECT_EQ(folder_.entries(), (std::vector<std::string>{"a.npy", "ckpt"}));
  manager().fill(previous, 0.0f);
  checkpoint.load();
  EXPECT_TRUE(manager().download(previous) == std::vector<float>(100000, 1.0f));
}

// ---------------------------------------------------------------------------------------------
// A DeviceGroup's ShardedBuffer: one file, each shard its part (several shards of one device
// here: the partition caps a shard at 4 KiB, so parts start mid-chunk).

TEST(ShardedFiles, EachShardLoadsAndSavesItsPartOfOneFile) {
  clbuf::DeviceGroup group;
  TempFolder folder;
  const std::size_t count = 10007;
  const std::vector<float> data = pattern<float>(count);
  const std::string path = folder / "whole.npy";
  {
    clbuf::BufferManager manager;
    manager.save_npy(path, manager.upload(data), {10007});
  }
  const clbuf::Partition partition = clbuf::Partition().max_shard_bytes(4096);
  std::vector<std::size_t> shape;
  clbuf::ShardedBuffer<float> array = clbuf::load_npy<float>(group, path, partition, 1, &shape);
  EXPECT_EQ(shape, std::vector<std::size_t>{count});
  EXPECT_GT(array.shards(), 5U);
  EXPECT_TRUE(group.gather(array) == data);
  const std::string back = folder / "back.npy";
  clbuf::save_npy(group, back, array);
  EXPECT_EQ(read_all(back), read_all(path));
  EXPECT_CLBUF_ERROR(clbuf::load_npy<double>(group, path), CL_INVALID_VALUE,
                     "DeviceGroup::load_npy", path, "<f4");
}

TEST(ShardedFiles, ACheckpointHoldsEveryShardOfAShardedBuffer) {
  clbuf::DeviceGroup group;
  TempFolder folder;
  const std::vector<double> data = pattern<double>(5003);
  clbuf::ShardedBuffer<double> array =
      group.scatter(data, clbuf::Partition().max_shard_bytes(8192), 1);
  auto extra = group.manager(0).upload(pattern<std::int32_t>(10));
  clbuf::Checkpoint checkpoint(group.manager(0), folder / "ckpt");
  checkpoint.add("field", group, array).add("extra", extra);
  EXPECT_CLBUF_ERROR(checkpoint.add("extra", extra), CL_INVALID_VALUE, "'extra' added twice");
  checkpoint.save();
  EXPECT_GT(array.shards(), 3U);
  group.fill(array, -1.0);
  checkpoint.load();
  EXPECT_TRUE(group.gather(array) == data);
  const std::string shard = folder / "ckpt/field-shard1.npy";
  std::string bytes = read_all(shard);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  write_all(shard, bytes);
  group.fill(array, -1.0);
  EXPECT_CLBUF_ERROR(checkpoint.load(), CL_INVALID_VALUE, shard, "CRC32C");
  EXPECT_TRUE(group.gather(array) == std::vector<double>(data.size(), -1.0));
}

// ---------------------------------------------------------------------------------------------
// Checkpoints.

TEST_P(Files, CheckpointSavesAndLoadsNamedBuffersAndViews) {
  auto u = manager().upload(pattern<double>(3000), {30, 100});
  auto whole = upload_pattern<std::int16_t>(manager(), 5000);
  auto part = manager().view(whole, 100, 2000);
  auto flags = upload_pattern<bool>(manager(), 77);
  clbuf::Checkpoint checkpoint(manager(), folder_ / "ckpt");
  checkpoint.add("u", u).add("part", part).add("flags", flags);
  checkpoint.save();
  checkpoint.save();  // over the previous one
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"ckpt"});
  EXPECT_EQ(clbuf::read_npy_header(folder_ / "ckpt/u.npy").shape,
            (std::vector<std::size_t>{30, 100}));
  manager().fill(u, -1.0);
  manager().fill(whole, std::int16_t{-1});
  manager().fill(flags, false);
  checkpoint.load();
  EXPECT_TRUE(manager().download(u) == pattern<double>(3000));
  EXPECT_TRUE(holds_pattern(manager(), flags));
  const std::vector<std::int16_t> all = manager().download(whole);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::int16_t expected = i >= 100 && i < 2100 ? pattern_value<std::int16_t>(i) : -1;
    ASSERT_EQ(all[i], expected) << "element " << i;
  }
}

TEST_P(Files, CheckpointRefusesAFlippedByteInAnyFileAndLeavesTheBuffersAlone) {
  auto u = manager().upload(pattern<float>(100));
  auto v = upload_pattern<std::int64_t>(manager(), 20);
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u).add("v", v);
  checkpoint.save();
  manager().fill(u, 5.0f);
  for (const std::string name : {"u.npy", "v.npy", "manifest"}) {
    const std::string path = folder + "/" + name;
    const std::string bytes = read_all(path);
    for (std::size_t at = 0; at < bytes.size(); ++at) {
      std::string flipped = bytes;
      flipped[at] = static_cast<char>(flipped[at] ^ (1 << (at % 8)));
      write_all(path, flipped);
      try {
        checkpoint.load();
        ADD_FAILURE() << "a flipped bit at byte " << at << " of " << name << " was loaded";
      } catch (const clbuf::Error& error) {
        ASSERT_NE(std::string(error.what()).find(path), std::string::npos)
            << "byte " << at << ": " << error.what();
      }
    }
    write_all(path, bytes);
  }
  EXPECT_TRUE(manager().download(u) == std::vector<float>(100, 5.0f));
  checkpoint.load();
  EXPECT_TRUE(manager().download(u) == pattern<float>(100));
}

TEST_P(Files, CheckpointRefusesMissingTruncatedAndMismatchedFiles) {
  auto u = manager().upload(pattern<float>(300));
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint none(manager(), folder);
  none.add("u", u);
  EXPECT_CLBUF_ERROR(none.load(), CL_INVALID_VALUE, "Checkpoint::load", folder, "no checkpoint");
  none.save();
  const std::string file = folder + "/u.npy";
  const std::string bytes = read_all(file);
  write_all(file, bytes.substr(0, bytes.size() - 4));
  EXPECT_CLBUF_ERROR(none.load(), CL_INVALID_VALUE, file, "truncated");
  ASSERT_EQ(::unlink(file.c_str()), 0);
  EXPECT_CLBUF_ERROR(none.load(), CL_INVALID_VALUE, file, "No such file");
  write_all(file, bytes);
  auto d = manager().upload(pattern<double>(300));
  clbuf::Checkpoint other_type(manager(), folder);
  other_type.add("u", d);
  EXPECT_CLBUF_ERROR(other_type.load(), CL_INVALID_VALUE, file, "<f4", "<f8");
  auto longer = manager().upload(pattern<float>(301));
  clbuf::Checkpoint other_shape(manager(), folder);
  other_shape.add("u", longer);
  EXPECT_CLBUF_ERROR(other_shape.load(), CL_INVALID_VALUE, file, "[300]", "[301]");
  clbuf::Checkpoint other_name(manager(), folder);
  other_name.add("w", u);
  EXPECT_CLBUF_ERROR(other_name.load(), CL_INVALID_VALUE, "manifest", "no array 'w'");
  EXPECT_CLBUF_ERROR(other_name.add("a b", u), CL_INVALID_VALUE, "'a b'");
  // A manifest (its checksum right) that names a file outside the folder is refused unread.
  write_all(folder_ / "outside.npy", bytes);
  std::string manifest = read_all(folder + "/manifest");
  manifest = manifest.substr(0, manifest.rfind("crc32c "));
  const std::size_t name_at = manifest.find(" u.npy ");
  ASSERT_NE(name_at, std::string::npos) << manifest;
  manifest.replace(name_at, 7, " ../outside.npy ");
  manifest += "crc32c " +
              std::to_string(clbuf::detail::Crc32c::of(manifest.data(), manifest.size())) + "\n";
  write_all(folder + "/manifest", manifest);
  EXPECT_CLBUF_ERROR(none.load(), CL_INVALID_VALUE, "manifest", "'../outside.npy'", "'u.npy'");
  ASSERT_EQ(::unlink((folder + "/manifest").c_str()), 0);
  EXPECT_CLBUF_ERROR(none.load(), CL_INVALID_VALUE, folder + "/manifest", "No such file");
}

TEST_P(Files, CheckpointNeverReplacesAFolderThatIsNotOne) {
  const std::string folder = folder_ / "mine";
  ASSERT_EQ(::mkdir(folder.c_str(), 0755), 0);
  write_all(folder + "/precious.txt", "keep me");
  auto u = manager().upload(pattern<float>(10));
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u);
  EXPECT_CLBUF_ERROR(checkpoint.save(), CL_INVALID_VALUE, folder, "not a clbuf checkpoint");
  EXPECT_EQ(read_all(folder + "/precious.txt"), "keep me");
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"mine"});
}

TEST_P(Files, CheckpointCutOffBetweenItsRenamesLoadsTheOldOneAndTheNextSaveCleansUp) {
  auto u = manager().upload(pattern<float>(100));
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u);
  checkpoint.save();
  ASSERT_EQ(::rename(folder.c_str(), (folder + ".old").c_str()), 0);  // as a kill there leaves it
  ASSERT_EQ(::mkdir((folder + ".tmp").c_str(), 0755), 0);             // and a half-written one
  EXPECT_EQ(clbuf::Checkpoint::complete_folder(folder), folder + ".old");
  manager().fill(u, 0.0f);
  checkpoint.load();
  EXPECT_TRUE(manager().download(u) == pattern<float>(100));
  checkpoint.save();
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"ckpt"});
}

/// The child of CheckpointKilledAtRandomPointsAlwaysLeavesACompleteOne: saves checkpoints of
/// generation g = base, base + 1, ... (every element of u is g, of v 2g, w -g) until killed.
TEST_P(Files, DISABLED_ChildSavesCheckpointsUntilKilled) {
  const char* dir = std::getenv("CLBUF_FILES_CHILD_DIR");
  const char* arg = std::getenv("CLBUF_FILES_CHILD_ARG");
  if (dir == nullptr || arg == nullptr) GTEST_SKIP() << "run by the kill test";
  auto u = manager().allocate<float>(3000);
  auto v = manager().allocate<std::int32_t>(1500);
  auto w = manager().allocate<double>(700);
  clbuf::Checkpoint checkpoint(manager(), std::string(dir) + "/ckpt");
  checkpoint.add("u", u).add("v", v).add("w", w);
  for (long g = std::atol(arg);; ++g) {
    manager().fill(u, static_cast<float>(g));
    manager().fill(v, static_cast<std::int32_t>(2 * g));
    manager().fill(w, -static_cast<double>(g));
    checkpoint.save();
  }
}

// A load while another process saves checkpoints into the same folder, again and again (a
// monitor reading a running simulation's checkpoints; a rank left running after its mpiexec was
// killed): every load reads one whole checkpoint, never one file of it and another of the next
// (a CRC32C mismatch) nor a file removed meanwhile, and the generations it finds only grow.
TEST_P(Files, ALoadWhileAnotherProcessSavesReadsOneWholeCheckpoint) {
  auto u = manager().upload(std::vector<float>(3000, 0.0f));
  auto v = manager().upload(std::vector<std::int32_t>(1500, 0));
  auto w = manager().upload(std::vector<double>(700, -0.0));
  clbuf::Checkpoint checkpoint(manager(), folder_ / "ckpt");
  checkpoint.add("u", u).add("v", v).add("w", w);
  checkpoint.save();  // generation 0
  const pid_t child =
      start_child("ChildSavesCheckpointsUntilKilled", GetParam(), folder_.path(), 0, "1");
  ASSERT_GT(child, 0);
  struct KilledAtExit {  // an assertion's early return leaves no child saving
    pid_t pid;
    ~KilledAtExit() {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } running{child};
  long newest = 0;
  int loads = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < until || newest < 20) {
    ASSERT_NO_THROW(checkpoint.load()) << "load " << loads << " after generation " << newest;
    ++loads;
    const std::vector<float> us = manager().download(u);
    const auto gen = static_cast<long>(us[0]);
    ASSERT_TRUE(us == std::vector<float>(3000, us[0])) << "load " << loads;
    ASSERT_TRUE(manager().download(v) ==
                std::vector<std::int32_t>(1500, static_cast<std::int32_t>(2 * gen)))
        << "load " << loads << ": generation " << gen;
    ASSERT_TRUE(manager().download(w) == std::vector<double>(700, -static_cast<double>(gen)))
        << "load " << loads << ": generation " << gen;
    ASSERT_GE(gen, newest) << "load " << loads;
    newest = gen;
    if (std::chrono::steady_clock::now() > until + std::chrono::seconds(60)) break;  // a slow child
  }
  running.pid = 0;
  ::kill(child, SIGKILL);
  EXPECT_EQ(wait_child(child), -1) << "the child ended by itself";
  EXPECT_GT(newest, 0) << "the child saved nothing while " << loads << " loads ran";
}

TEST_P(Files, CheckpointKilledAtRandomPointsAlwaysLeavesACompleteOne) {
  auto u = manager().upload(std::vector<float>(3000, 0.0f));
  auto v = manager().upload(std::vector<std::int32_t>(1500, 0));
  auto w = manager().upload(std::vector<double>(700, -0.0));
  clbuf::Checkpoint checkpoint(manager(), folder_ / "ckpt");
  checkpoint.add("u", u).add("v", v).add("w", w);
  checkpoint.save();  // generation 0
  std::mt19937 rng(clbuf_test::fresh_seed());
  long newest = 0;
  int saved_while_running = 0;
  for (int trial = 1; trial <= 50; ++trial) {
    const long base = 1000L * trial;
    const pid_t child = start_child("ChildSavesCheckpointsUntilKilled", GetParam(), folder_.path(),
                                    0, std::to_string(base));
    ASSERT_GT(child, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 250));
    ::kill(child, SIGKILL);
    ASSERT_EQ(wait_child(child), -1) << "trial " << trial << ": the child ended by itself";
    checkpoint.load();  // throws if nothing complete is left
    const float g = manager().download(u)[0];
    const auto gen = static_cast<long>(g);
    EXPECT_TRUE(manager().download(u) == std::vector<float>(3000, g)) << "trial " << trial;
    EXPECT_TRUE(manager().download(v) ==
                std::vector<std::int32_t>(1500, static_cast<std::int32_t>(2 * gen)))
        << "trial " << trial;
    EXPECT_TRUE(manager().download(w) == std::vector<double>(700, -static_cast<double>(gen)))
        << "trial " << trial;
    EXPECT_TRUE(gen == newest || gen >= base) << "trial " << trial << ": generation " << gen;
    if (gen >= base) ++saved_while_running;
    newest = gen;
  }
  EXPECT_GT(saved_while_running, 10) << "the children saved too rarely to test anything";
}

// ---------------------------------------------------------------------------------------------
// A large file (label files only: not in the unit suite).

TEST_P(Files, LargeFileOf100MiBRoundTrips) {
  clbuf::Options options = model_options(GetParam());
  options.staging_chunk_bytes = std::size_t{1} << 20;
  clbuf::BufferManager big("", options);
  const std::size_t count = (std::size_t{100} << 20) / sizeof(std::uint32_t);
  std::vector<std::uint32_t> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<std::uint32_t>(i * 2654435761U);
  auto buffer = big.upload(data);
  const std::string path = folder_ / "large.npy";
  big.save_npy(path, buffer);
  auto back = big.load_npy<std::uint32_t>(path);
  EXPECT_TRUE(big.download(back) == data);
}

}  // namespace
