// SPDX-License-Identifier: MIT
// The sub-buffers clbuf makes for native() of views, and the order they are released in.
// NVIDIA's driver (580, H100 and H200) crashes in clReleaseMemObject when overlapping
// sub-buffers that were used while alive together are released; releasing them newest first
// did not save it (the conformance suite's pattern crashed 10 of 10 times under `ordered`:
// bench/results/h100/2026-12-06-issue38/after/). So on NVIDIA native() of a view refuses, before
// the driver is called, while an overlapping sub-buffer clbuf made is alive: an error, never a
// crash; set_view_args() passes such a view to a kernel with no sub-buffer.
#ifndef CLBUF_DETAIL_SUB_BUFFERS_HPP
#define CLBUF_DETAIL_SUB_BUFFERS_HPP

#include <clbuf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace clbuf {
namespace detail {

/// How native() of a view makes and releases its sub-buffer.
enum class SubBufferRule {
  with_view,  ///< released with the view (every driver but NVIDIA's)
  ordered,    ///< kept by clbuf, released newest first among overlapping ones (forced only)
  refuse      ///< refused while an overlapping one is alive (NVIDIA)
};

/// The rule for a device of platform `platform` (CL_PLATFORM_NAME): `refuse` on NVIDIA's, else
/// `with_view`; CLBUF_SUB_BUFFER_RULE (`ordered`, `refuse` or `with_view`) overrides it, so
/// that tests prove each rule on any driver.
inline SubBufferRule sub_buffer_rule(const std::string& platform) {
  const char* forced = std::getenv("CLBUF_SUB_BUFFER_RULE");
  const std::string rule = forced != nullptr ? forced : "";
  if (rule == "ordered") return SubBufferRule::ordered;
  if (rule == "refuse") return SubBufferRule::refuse;
  if (rule == "with_view") return SubBufferRule::with_view;
  return platform.find("NVIDIA") != std::string::npos ? SubBufferRule::refuse
                                                      : SubBufferRule::with_view;
}

/// Every sub-buffer made for native() under `ordered` or `refuse`, per parent buffer, in
/// creation order. Process-wide: views of one buffer may come from several managers of one
/// context. Never destroyed: nothing is released at process exit.
class NativeSubBuffers {
 public:
  static NativeSubBuffers& instance() {
    static NativeSubBuffers* const registry = new NativeSubBuffers();
    return *registry;
  }

  /// The sub-buffer of bytes [offset, offset + bytes) of `parent` with `flags`, and its ticket
  /// for drop() (0 under `with_view`: nothing recorded). Recorded sub-buffers keep a reference
  /// of clbuf's, and one to `owner` (the buffer the view addresses: an adopted sub-buffer
  /// outlives the sub-buffers made of its parent for it). Creation and record are one step, so
  /// the record's order is the driver's. Wraps clCreateSubBuffer.
  /// @throws Error under `refuse`, before OpenCL is called, while a recorded sub-buffer of
  ///         `parent` overlaps the bytes; else the driver's code.
  std::pair<cl::Buffer, std::uint64_t> make(SubBufferRule rule, const cl::Buffer& owner,
                                            cl_mem parent, std::size_t offset, std::size_t bytes,
                                            cl_mem_flags flags) try {
    if (rule == SubBufferRule::with_view) return {create(parent, offset, bytes, flags), 0};
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Entry>& list = parents_[parent];
    if (rule == SubBufferRule::refuse) refuse_overlap(list, offset, bytes);
    list.reserve(list.size() + 1);  // the record cannot fail once the sub-buffer is made
    cl::Buffer made = create(parent, offset, bytes, flags);
    list.push_back(Entry{made, owner, offset, offset + bytes, ++last_ticket_, true});
    return {std::move(made), last_ticket_};
  } catch (...) {
    forget_if_empty(parent);
    throw;
  }

  /// The view holding `ticket` is gone: releases, newest first, every recorded sub-buffer of
  /// `parent` whose view is gone and that no newer recorded sub-buffer overlaps.
  void drop(cl_mem parent, std::uint64_t ticket) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = parents_.find(parent);
    if (found == parents_.end()) return;
    std::vector<Entry>& list = found->second;
    for (Entry& entry : list) {
      if (entry.ticket == ticket) entry.in_use = false;
    }
    for (std::size_t i = list.size(); i-- > 0;) {
      if (list[i].in_use || overlapped_by_newer(list, i)) continue;
      list[i].buffer = cl::Buffer();  // the release, under the lock: in this order on every thread
      list[i].owner = cl::Buffer();
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (list.empty()) parents_.erase(found);
  }

 private:
  struct Entry {
    cl::Buffer buffer;  // clbuf's reference to the sub-buffer
    cl::Buffer owner;
    std::size_t begin = 0;
    std::size_t end = 0;
    std::uint64_t ticket = 0;
    bool in_use = true;  // its view is alive
  };

  NativeSubBuffers() = default;

  static cl::Buffer create(cl_mem parent, std::size_t offset, std::size_t bytes,
                           cl_mem_flags flags) {
    const cl_buffer_region area = {offset, bytes};
    cl_int err = CL_SUCCESS;
    cl::Buffer made(
        CLBUF_CL(clCreateSubBuffer)(parent, flags, CL_BUFFER_CREATE_TYPE_REGION, &area, &err),
        false);
    check(err, "native", "clCreateSubBuffer");
    return made;
  }

  static bool overlapped_by_newer(const std::vector<Entry>& list, std::size_t i) noexcept {
    for (std::size_t j = i + 1; j < list.size(); ++j) {
      if (list[j].begin < list[i].end && list[i].begin < list[j].end) return true;
    }
    return false;
  }

  static void refuse_overlap(const std::vector<Entry>& list, std::size_t offset,
                             std::size_t bytes) {
    for (const Entry& entry : list) {
      if (entry.begin < offset + bytes && offset < entry.end) {
        fail("native", CL_INVALID_OPERATION,
             "the view's bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                 ") of its buffer overlap another view's " + "sub-buffer [" +
                 std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                 "), still alive, and NVIDIA's driver crashes releasing overlapping sub-buffers "
                 "that were used while alive together; pass native_root() and the element "
                 "offset to your kernel instead (clbuf::set_view_args)");
      }
    }
  }

  void forget_if_empty(cl_mem parent) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = parents_.find(parent);
    if (found != parents_.end() && found->second.empty()) parents_.erase(found);
  }

  std::mutex mutex_;
  std::unordered_map<cl_mem, std::vector<Entry>> parents_;
  std::uint64_t last_ticket_ = 0;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_SUB_BUFFERS_HPP
