// SPDX-License-Identifier: MIT
// Host-access flags (CL_MEM_HOST_READ_ONLY, CL_MEM_HOST_WRITE_ONLY, CL_MEM_HOST_NO_ACCESS) of
// adopted buffers, their views and adopted sub-buffers, checked by clbuf for every call that
// touches the buffer from the host, identically on every vendor (NVIDIA's driver lets a
// host-read-only buffer be mapped for writing; PoCL does not). A forbidden call is
// CL_INVALID_OPERATION from clbuf's own check (its message names the flag, no OpenCL entry point)
// and changes no data; an allowed one works; calls that stay on the device work whatever the
// flags.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::code_text;
using clbuf_test::same_bytes;

/// One host-touching call on `buffer` of `manager`; `other` is a manager of another context.
struct Call {
  const char* name;
  bool reads;   ///< the host reads the buffer
  bool writes;  ///< the host writes the buffer
  std::function<void(clbuf::BufferManager& manager, clbuf::BufferManager& other,
                     clbuf::DeviceBuffer<std::uint32_t>& buffer)>
      run;
};

constexpr std::size_t count = 64;

std::vector<Call> host_calls() {
  using Buffer = clbuf::DeviceBuffer<std::uint32_t>;
  using M = clbuf::BufferManager;
  const std::vector<std::uint32_t> data(count, 7);
  clbuf::Region box;
  box.size = {4, 2};
  box.src_extents = box.dst_extents = {8, count / 8};
  return {
      {"upload", false, true, [data](M& m, M&, Buffer& b) { m.upload(b, data); }},
      {"upload", false, true, [data](M& m, M&, Buffer& b) { m.upload(b, data.data(), 3, 1); }},
      {"upload", false, true,
       [](M& m, M&, Buffer& b) {
         clbuf::PinnedBuffer<std::uint32_t> pinned = m.allocate_pinned<std::uint32_t>(count);
         m.upload(b, pinned);
       }},
      {"upload_async", false, true,
       [data](M& m, M&, Buffer& b) { m.upload_async(b, data).wait(); }},
      {"upload_async", false, true,
       [data](M& m, M&, Buffer& b) { m.upload_async(b, data.data(), 5, 2).wait(); }},
      {"upload_rect", false, true,
       [data, box](M& m, M&, Buffer& b) { m.upload_rect(b, data, box); }},
      {"upload_rect_async", false, true,
       [data, box](M& m, M&, Buffer& b) { m.upload_rect_async(b, data, box).wait(); }},
      {"download", true, false, [](M& m, M&, Buffer& b) { static_cast<void>(m.download(b)); }},
      {"download", true, false,
       [](M& m, M&, Buffer& b) {
         std::vector<std::uint32_t> out(3);
         m.download(b, out.data(), 3, 1);
       }},
      {"download", true, false,
       [](M& m, M&, Buffer& b) {
         clbuf::PinnedBuffer<std::uint32_t> pinned = m.allocate_pinned<std::uint32_t>(count);
         m.download(b, pinned);
       }},
      {"download_async", true, false,
       [](M& m, M&, Buffer& b) { static_cast<void>(m.download_async(b).get()); }},
      {"download_async", true, false,
       [](M& m, M&, Buffer& b) {
         std::vector<std::uint32_t> out(3);
         m.download_async(b, out.data(), 3).wait();
       }},
      {"download_rect", true, false,
       [box](M& m, M&, Buffer& b) {
         std::vector<std::uint32_t> out(count);
         m.download_rect(b, out, box);
       }},
      {"download_rect_async", true, false,
       [box](M& m, M&, Buffer& b) {
         std::vector<std::uint32_t> out(count);
         m.download_rect_async(b, out, box).wait();
       }},
      {"map", true, false,
       [](M& m, M&, Buffer& b) { static_cast<void>(m.map(b, clbuf::MapMode::read)); }},
      {"map", false, true,
       [](M& m, M&, Buffer& b) { static_cast<void>(m.map(b, clbuf::MapMode::write, 1, 4)); }},
      {"map", true, true,
       [](M& m, M&, Buffer& b) { static_cast<void>(m.map(b, clbuf::MapMode::read_write)); }},
      {"map", true, false,  // the checks apply to zero-sized calls too
       [](M& m, M&, Buffer& b) { static_cast<void>(m.map(b, clbuf::MapMode::read, 0, 0)); }},
      {"copy_from", true, false,  // between contexts the bytes pass through host memory
       [](M& m, M& other, Buffer& b) {
         Buffer there = other.allocate<std::uint32_t>(b.size());
         other.copy_from(m, b, there);
       }},
      {"copy_from", false, true,
       [](M& m, M& other, Buffer& b) {
         Buffer there = other.upload(std::vector<std::uint32_t>(b.size(), 3));
         m.copy_from(other, there, b);
       }},
      {"copy_from_async", false, true,
       [](M& m, M& other, Buffer& b) {
         Buffer there = other.upload(std::vector<std::uint32_t>(b.size(), 3));
         m.copy_from_async(other, there, b).wait();
       }},
  };
}

/// The flag combinations a buffer can be created with, and what the host may do under each.
struct Flags {
  cl_mem_flags flags;
  const char* name;
  bool read;
  bool write;
};
const Flags every_flag[] = {
    {0, "no host flag", true, true},
    {CL_MEM_HOST_READ_ONLY, "CL_MEM_HOST_READ_ONLY", true, false},
    {CL_MEM_HOST_WRITE_ONLY, "CL_MEM_HOST_WRITE_ONLY", false, true},
    {CL_MEM_HOST_NO_ACCESS, "CL_MEM_HOST_NO_ACCESS", false, false},
};

class HostAccess : public clbuf_test::DeviceTest {
 protected:
  /// Runs every call on `make(flags)`'s buffer for every flag combination; forbidden calls must
  /// fail before OpenCL is reached and leave the buffer's bytes as they were.
  void every_call_and_flag(const char* kind, const std::function<clbuf::DeviceBuffer<std::uint32_t>(
                                                 cl_mem_flags, const cl::Buffer&)>& make) {
    clbuf::BufferManager other;  // another context: copy_from goes through the host
    for (const Flags& f : every_flag) {
      for (const Call& call : host_calls()) {
        SCOPED_TRACE(std::string(kind) + ", " + f.name + ": " + call.name +
                     (call.reads ? " (reads)" : "") + (call.writes ? " (writes)" : ""));
        const std::vector<std::uint32_t> before = random<std::uint32_t>(2 * count);
        cl::Buffer raw(manager().context(), CL_MEM_READ_WRITE | f.flags,
                       before.size() * sizeof(std::uint32_t));
        clbuf::DeviceBuffer<std::uint32_t> whole = manager().adopt<std::uint32_t>(raw, 2 * count);
        clbuf::DeviceBuffer<std::uint32_t> readable = manager().upload(before);
        manager().copy(readable, whole);  // device copy: allowed whatever the flags
        clbuf::DeviceBuffer<std::uint32_t> buffer = make(f.flags, raw);
        const bool allowed = (!call.reads || f.read) && (!call.writes || f.write);
        if (allowed) {
          EXPECT_NO_THROW(call.run(manager(), other, buffer));
        } else {
          const char* flag = (f.flags & CL_MEM_HOST_NO_ACCESS) != 0   ? "CL_MEM_HOST_NO_ACCESS"
                             : (f.flags & CL_MEM_HOST_READ_ONLY) != 0 ? "CL_MEM_HOST_READ_ONLY"
                                                                      : "CL_MEM_HOST_WRITE_ONLY";
          const std::string message =
              clbuf_test::error_message([&] { call.run(manager(), other, buffer); });
          EXPECT_TRUE(clbuf_test::has_fragments(
              message,
              {std::string(call.name) + ": " + code_text(CL_INVALID_OPERATION),
               std::string("the buffer was created with ") + flag,
               call.reads && !f.read ? "the host may not read it" : "the host may not write it"}));
          EXPECT_EQ(message.find("clEnqueue"), std::string::npos)
              << "OpenCL was called: " << message;
          manager().copy(whole, readable);
          EXPECT_TRUE(same_bytes(before, manager().download(readable))) << "data changed";
        }
        if (HasFatalFailure()) return;
      }
    }
  }
};

TEST_F(HostAccess, AdoptedBuffersAreCheckedForEveryHostCall) {
  every_call_and_flag("adopted buffer", [&](cl_mem_flags, const cl::Buffer& raw) {
    return manager().adopt<std::uint32_t>(raw, count);
  });
}

TEST_F(HostAccess, ViewsCarryTheirRootsFlags) {
  every_call_and_flag("view at element 3", [&](cl_mem_flags, const cl::Buffer& raw) {
    clbuf::DeviceBuffer<std::uint32_t> root = manager().adopt<std::uint32_t>(raw, 2 * count);
    return manager().view(root, 3, count);
  });
}

TEST_F(HostAccess, AdoptedSubBuffersInheritTheirParentsFlags) {
  const std::size_t align = cl_device().getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() / 8;
  every_call_and_flag("adopted sub-buffer", [&](cl_mem_flags, const cl::Buffer& raw) {
    // The second half of the root, or all of it from 0 where the alignment is coarser.
    const cl_buffer_region area = {count * sizeof(std::uint32_t) / align * align,
                                   count * sizeof(std::uint32_t)};
    cl_int err = CL_SUCCESS;
    cl::Buffer sub(
        clCreateSubBuffer(raw(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &area, &err),
        false);
    EXPECT_EQ(err, CL_SUCCESS);
    return manager().adopt<std::uint32_t>(sub, count);
  });
}

// A sub-buffer may narrow its parent's host access (a host-read-only view of a buffer the host
// may read and write); clbuf takes the sub-buffer's own flags.
TEST_F(HostAccess, ASubBuffersOwnFlagsCount) {
  const std::size_t align = cl_device().getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() / 8;
  const std::size_t bytes = std::max<std::size_t>(align, 64);
  cl::Buffer raw(manager().context(), CL_MEM_READ_WRITE, 2 * bytes);
  const cl_buffer_region area = {0, bytes};
  cl_int err = CL_SUCCESS;
  cl::Buffer sub(clCreateSubBuffer(raw(), CL_MEM_READ_WRITE | CL_MEM_HOST_READ_ONLY,
                                   CL_BUFFER_CREATE_TYPE_REGION, &area, &err),
                 false);
  ASSERT_EQ(err, CL_SUCCESS);
  clbuf::DeviceBuffer<std::uint8_t> buffer = manager().adopt<std::uint8_t>(sub, bytes);
  EXPECT_NO_THROW(static_cast<void>(manager().download(buffer)));
  EXPECT_CLBUF_ERROR(manager().map(buffer, clbuf::MapMode::write), CL_INVALID_OPERATION,
                     "map: ", "CL_MEM_HOST_READ_ONLY, so the host may not write it");
  EXPECT_CLBUF_ERROR(manager().upload(buffer, std::vector<std::uint8_t>(bytes)),
                     CL_INVALID_OPERATION, "upload: ", "CL_MEM_HOST_READ_ONLY");
}

// Device-side work needs no host access: fill (any pattern size), copies and views work on a
// buffer the host may not touch at all.
TEST_F(HostAccess, DeviceWorkIgnoresTheFlags) {
  cl::Buffer raw(manager().context(), CL_MEM_READ_WRITE | CL_MEM_HOST_NO_ACCESS,
                 2 * count * sizeof(std::uint32_t));
  clbuf::DeviceBuffer<std::uint32_t> hidden = manager().adopt<std::uint32_t>(raw, 2 * count);
  manager().fill(hidden, 5u);
  clbuf::DeviceBuffer<std::uint32_t> part = manager().view(hidden, 1, count);
  manager().fill_async(part, 9u).wait();
  clbuf::DeviceBuffer<std::uint32_t> seen = manager().allocate<std::uint32_t>(2 * count);
  manager().copy(hidden, seen);
  std::vector<std::uint32_t> expected(2 * count, 5u);
  std::fill(expected.begin() + 1, expected.begin() + 1 + count, 9u);
  EXPECT_TRUE(same_bytes(expected, manager().download(seen)));
}

}  // namespace
