// clbuf::DeviceBuffer<T>: a typed, move-only owner of device memory.
#ifndef CLBUF_BUFFER_HPP
#define CLBUF_BUFFER_HPP

#include <clbuf/pool.hpp>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace clbuf {

class BufferManager;

/// Device memory holding `size()` elements of `T`. Move-only; frees its memory when destroyed.
/// Stays valid after the BufferManager that made it is cleaned up or destroyed (an OpenCL
/// buffer retains its context). A default-constructed or moved-from buffer holds nothing:
/// `valid()` is false and every BufferManager operation rejects it.
template <class T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable<T>::value,
                "clbuf::DeviceBuffer<T> needs a trivially copyable T: its bytes are copied as is");
  static_assert(!std::is_const<T>::value && !std::is_volatile<T>::value,
                "clbuf::DeviceBuffer<T> needs an unqualified T");

 public:
  using value_type = T;

  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }

  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer(std::move(other)).swap(*this);
    return *this;
  }

  /// Gives the memory back to its manager's pool (or frees it when there is none).
  ~DeviceBuffer() {
    if (pool_) pool_->give_back(std::move(memory_));
  }

  /// Number of elements.
  std::size_t size() const noexcept { return size_; }
  /// Number of bytes: size() * sizeof(T).
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  /// The shape given at upload, else {size()}.
  const std::vector<std::size_t>& shape() const noexcept { return shape_; }
  /// The underlying OpenCL buffer, for kernels; a null buffer when empty(). Pooled memory may
  /// be larger than size_bytes(). Work you enqueue on it on a queue of your own must be finished
  /// before the DeviceBuffer is destroyed: its memory goes back to the pool for reuse.
  const cl::Buffer& native() const noexcept { return memory_.buffer; }
  /// False for a default-constructed or moved-from buffer.
  bool valid() const noexcept { return context_() != nullptr; }
  /// The OpenCL context the memory belongs to (null when !valid()).
  cl_context context() const noexcept { return context_(); }

 private:
  friend class BufferManager;

  DeviceBuffer(detail::Allocation memory, std::shared_ptr<detail::MemoryPool> pool,
               cl::Context context, std::size_t size, std::vector<std::size_t> shape)
      : memory_(std::move(memory)),
        pool_(std::move(pool)),
        context_(std::move(context)),
        size_(size),
        shape_(std::move(shape)) {}

  void swap(DeviceBuffer& other) noexcept {
    std::swap(memory_, other.memory_);
    std::swap(pool_, other.pool_);
    std::swap(context_, other.context_);
    std::swap(size_, other.size_);
    std::swap(shape_, other.shape_);
  }

  detail::Allocation memory_;
  std::shared_ptr<detail::MemoryPool> pool_;  // null for empty buffers
  cl::Context context_;                       // retained, for empty buffers too
  std::size_t size_ = 0;
  std::vector<std::size_t> shape_;
};

}  // namespace clbuf

#endif  // CLBUF_BUFFER_HPP
