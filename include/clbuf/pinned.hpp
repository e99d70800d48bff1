// SPDX-License-Identifier: MIT
// clbuf::PinnedBuffer<T>: page-locked host memory, the fastest path to and from a discrete device.
#ifndef CLBUF_PINNED_HPP
#define CLBUF_PINNED_HPP

#include <clbuf/detail/pinned_pool.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

namespace clbuf {

class BufferManager;

/// Host memory the driver has pinned (a CL_MEM_ALLOC_HOST_PTR buffer, mapped), made by
/// BufferManager::allocate_pinned(). Use it like an array; the upload/download overloads that
/// take it transfer by DMA at full bus speed, with no staging copy. Move-only.
template <class T>
class PinnedBuffer {
  static_assert(std::is_trivially_copyable<T>::value,
                "clbuf::PinnedBuffer<T> needs a trivially copyable T");

 public:
  using value_type = T;  ///< The element type.

  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  /// Takes over `other`'s memory; `other` is left empty.
  PinnedBuffer(PinnedBuffer&& other) noexcept { swap(other); }
  /// Frees this buffer's memory (as the destructor does), then takes over `other`'s.
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    PinnedBuffer(std::move(other)).swap(*this);
    return *this;
  }

  /// The page-locked host memory; null when empty().
  T* data() noexcept { return data_; }
  /// The page-locked host memory; null when empty().
  const T* data() const noexcept { return data_; }
  /// Number of elements.
  std::size_t size() const noexcept { return size_; }
  /// Number of bytes: size() * sizeof(T).
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// True when size() is 0.
  bool empty() const noexcept { return size_ == 0; }
  /// Element `i` (unchecked, as std::vector's operator[]).
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  /// Element `i` (unchecked, as std::vector's operator[]).
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// The first element.
  T* begin() noexcept { return data_; }
  /// One past the last element.
  T* end() noexcept { return data_ + size_; }
  /// The first element.
  const T* begin() const noexcept { return data_; }
  /// One past the last element.
  const T* end() const noexcept { return data_ + size_; }

 private:
  friend class BufferManager;

  PinnedBuffer(detail::PinnedBlock block, std::size_t size) noexcept
      : block_(std::move(block)), data_(static_cast<T*>(block_.data())), size_(size) {}

  void swap(PinnedBuffer& other) noexcept {
    std::swap(block_, other.block_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
  }

  detail::PinnedBlock block_;  // unmapped on destruction
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace clbuf

#endif  // CLBUF_PINNED_HPP
