// SPDX-License-Identifier: MIT
// clbuf::MappedView<T>: a typed, move-only span over device memory mapped into the host's address
// space (clEnqueueMapBuffer), unmapped by its destructor. Zero-copy where the device shares host
// memory (PoCL, integrated GPUs).
#ifndef CLBUF_MAPPED_VIEW_HPP
#define CLBUF_MAPPED_VIEW_HPP

#include <clbuf/detail/pool.hpp>
#include <clbuf/detail/queue.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace clbuf {

class BufferManager;

/// How a MappedView may be used: read the device's data, write new data (the old contents are
/// not read back, CL_MAP_WRITE_INVALIDATE_REGION where the device has it), or both.
enum class MapMode { read, write, read_write };

namespace detail {
/// The clEnqueueMapBuffer flags of a MapMode.
inline cl_map_flags map_flags(MapMode mode) noexcept {
  return mode == MapMode::read    ? CL_MAP_READ
         : mode == MapMode::write ? CL_MAP_WRITE_INVALIDATE_REGION
                                  : CL_MAP_READ | CL_MAP_WRITE;
}
}  // namespace detail

/// A range of a DeviceBuffer mapped for the host, made by BufferManager::map(). Use it like an
/// array; the device sees what was written once the view is unmapped, by unmap() or by the
/// destructor. Move-only; after unmap() or a move it is empty (data() is null, size() 0), so no
/// access through it can reach unmapped memory. The buffer's memory is not reused by clbuf's pool
/// while the view is alive, even if the DeviceBuffer is destroyed first.
template <class T>
class MappedView {
  static_assert(std::is_trivially_copyable<T>::value,
                "clbuf::MappedView<T> needs a trivially copyable T");

 public:
  using value_type = T;  ///< The element type.
  using iterator = T*;   ///< A pointer into the mapped memory.

  MappedView() = default;
  MappedView(const MappedView&) = delete;
  MappedView& operator=(const MappedView&) = delete;
  /// Takes over `other`'s mapping; `other` is left empty.
  MappedView(MappedView&& other) noexcept { swap(other); }
  /// Unmaps this view's memory (as the destructor does), then takes over `other`'s mapping.
  MappedView& operator=(MappedView&& other) noexcept {
    MappedView(std::move(other)).swap(*this);
    return *this;
  }

  /// Unmaps and waits for the unmap; never throws (a failed unmap is ignored: use unmap() to see
  /// it).
  ~MappedView() {
    try {
      unmap();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }

  /// Unmaps now and leaves the view empty; idempotent. Wraps clEnqueueUnmapMemObject and waits
  /// for it (clWaitForEvents), so any queue may use the buffer afterwards.
  /// @throws Error when OpenCL reports a failure (the view is empty all the same).
  void unmap() {
    if (mapped_ == nullptr) return;
    void* mapped = std::exchange(mapped_, nullptr);
    data_ = nullptr;
    size_ = 0;
    const cl::CommandQueue queue = std::move(queue_);
    const cl::Buffer buffer = std::move(buffer_);
    const std::shared_ptr<detail::Lease> lease = std::move(lease_);
    if (lease) lease->remove_mapping(mapped);
    cl_event event = nullptr;
    const cl_int err = detail::Queue(queue).unmap(buffer(), mapped, &event);
    detail::check(err, "unmap", "clEnqueueUnmapMemObject");
    const cl::Event owned(event, false);
    detail::check(CLBUF_CL(clWaitForEvents)(1, &event), "unmap", "clWaitForEvents");
  }

  /// The mapped host memory; null when empty().
  T* data() const noexcept { return data_; }
  /// Number of mapped elements; 0 after unmap() or a move.
  std::size_t size() const noexcept { return size_; }
  /// Number of mapped bytes: size() * sizeof(T).
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// True when nothing is mapped (size() is 0).
  bool empty() const noexcept { return size_ == 0; }
  /// The mode it was mapped with.
  MapMode mode() const noexcept { return mode_; }
  /// Element `i` of the mapped range (unchecked, as std::vector's operator[]).
  T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// The first mapped element.
  T* begin() const noexcept { return data_; }
  /// One past the last mapped element.
  T* end() const noexcept { return data_ + size_; }

 private:
  friend class BufferManager;

  MappedView(cl::CommandQueue queue, cl::Buffer buffer, std::shared_ptr<detail::Lease> lease,
             void* mapped, std::size_t size, MapMode mode)
      : queue_(std::move(queue)),
        buffer_(std::move(buffer)),
        lease_(std::move(lease)),
        mapped_(mapped),
        data_(static_cast<T*>(mapped)),
        size_(size),
        mode_(mode) {}

  void swap(MappedView& other) noexcept {
    std::swap(queue_, other.queue_);
    std::swap(buffer_, other.buffer_);
    std::swap(lease_, other.lease_);
    std::swap(mapped_, other.mapped_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(mode_, other.mode_);
  }

  cl::CommandQueue queue_;
  cl::Buffer buffer_;
  std::shared_ptr<detail::Lease> lease_;  // keeps the memory out of the pool while mapped
  void* mapped_ = nullptr;
  T* data_ = nullptr;
  std::size_t size_ = 0;
  MapMode mode_ = MapMode::read;
};

}  // namespace clbuf

#endif  // CLBUF_MAPPED_VIEW_HPP
