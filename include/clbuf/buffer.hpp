// clbuf::DeviceBuffer<T>: a typed, move-only owner of device memory.
#ifndef CLBUF_BUFFER_HPP
#define CLBUF_BUFFER_HPP

#include <clbuf/opencl.hpp>

#include <cstddef>
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

  DeviceBuffer(DeviceBuffer&& other) noexcept
      : buffer_(std::move(other.buffer_)),
        context_(std::exchange(other.context_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        shape_(std::move(other.shape_)) {
    other.shape_.clear();
  }

  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      buffer_ = std::move(other.buffer_);
      context_ = std::exchange(other.context_, nullptr);
      size_ = std::exchange(other.size_, 0);
      shape_ = std::move(other.shape_);
      other.shape_.clear();
    }
    return *this;
  }

  ~DeviceBuffer() = default;

  /// Number of elements.
  std::size_t size() const noexcept { return size_; }
  /// Number of bytes: size() * sizeof(T).
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  /// The shape given at upload, else {size()}.
  const std::vector<std::size_t>& shape() const noexcept { return shape_; }
  /// The underlying OpenCL buffer, for kernels; a null buffer when empty().
  const cl::Buffer& native() const noexcept { return buffer_; }
  /// False for a default-constructed or moved-from buffer.
  bool valid() const noexcept { return context_ != nullptr; }
  /// The OpenCL context the memory belongs to (null when !valid()).
  cl_context context() const noexcept { return context_; }

 private:
  friend class BufferManager;

  DeviceBuffer(cl::Buffer buffer, cl_context context, std::size_t size,
               std::vector<std::size_t> shape)
      : buffer_(std::move(buffer)), context_(context), size_(size), shape_(std::move(shape)) {}

  cl::Buffer buffer_;
  cl_context context_ = nullptr;  // not retained: buffer_ retains it while there is memory
  std::size_t size_ = 0;
  std::vector<std::size_t> shape_;
};

}  // namespace clbuf

#endif  // CLBUF_BUFFER_HPP
