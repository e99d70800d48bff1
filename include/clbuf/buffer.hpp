// SPDX-License-Identifier: MIT
// clbuf::DeviceBuffer<T>: a typed, move-only owner of device memory.
#ifndef CLBUF_BUFFER_HPP
#define CLBUF_BUFFER_HPP

#include <clbuf/detail/memory_object.hpp>
#include <clbuf/detail/pool.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

namespace clbuf {

class BufferManager;
namespace detail {
struct BufferAccess;  // detail/buffer_access.hpp: the byte-level view for layers over the manager
}

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
  using value_type = T;  ///< The element type.

  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Takes over `other`'s memory; `other` is left empty (!valid()).
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }

  /// Gives this buffer's memory back (as the destructor does), then takes over `other`'s.
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer(std::move(other)).swap(*this);
    return *this;
  }

  /// Gives the memory back to its manager's pool (or frees it when there is none). Memory that
  /// views or mapped views still use goes back only when the last of them is gone.
  ~DeviceBuffer() {
    if (pool_ && !lease_) {                       // else the Lease gives the memory back
      memory_.shape_storage = std::move(shape_);  // kept for the next buffer of this memory
      pool_->give_back(std::move(memory_));
    }
  }

  /// Hands the OpenCL buffer to the caller and leaves this DeviceBuffer empty (!valid()). The
  /// memory never goes back to clbuf's pool, even when views of it are alive; CL_MEM_SIZE may be
  /// larger than size_bytes() (pooled memory is binned). A view hands over native(): a
  /// sub-buffer of its bytes. Returns a null buffer when !valid() or empty().
  /// @throws Error as native() for a view whose sub-buffer cannot be made (then nothing changes).
  [[nodiscard]] cl::Buffer release() {
    cl::Buffer out = native();
    if (lease_) lease_->reusable.store(false);
    memory_.buffer = cl::Buffer();  // never to the pool: the caller owns it now
    DeviceBuffer().swap(*this);
    return out;
  }

  /// True for a view of another buffer (BufferManager::view()) and for an adopted sub-buffer.
  bool is_view() const noexcept { return root_() != nullptr; }
  /// Byte offset of this buffer's first element within its root buffer (0 unless a view).
  std::size_t root_offset_bytes() const noexcept { return root_offset_; }

  /// Number of elements.
  std::size_t size() const noexcept { return size_; }
  /// Number of bytes: size() * sizeof(T).
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// True when size() is 0.
  bool empty() const noexcept { return size_ == 0; }
  /// The shape given at upload, else {size()}.
  const std::vector<std::size_t>& shape() const noexcept { return shape_; }
  /// The underlying OpenCL buffer, for kernels; a null buffer when empty(). Pooled memory may
  /// be larger than size_bytes(). Work you enqueue on it on a queue of your own must be finished
  /// before the DeviceBuffer is destroyed: its memory goes back to the pool for reuse.
  /// For a view, a sub-buffer of exactly its bytes, made on the first call (clCreateSubBuffer);
  /// clbuf's own operations never use it. It is released with the view. On NVIDIA, whose driver
  /// (580) crashes releasing overlapping sub-buffers used together, a view that overlaps a live
  /// sub-buffer is refused (README "Views"). A copy you keep past the view is yours to release.
  /// set_view_args() passes a view to a kernel with no sub-buffer.
  /// @throws Error CL_MISALIGNED_SUB_BUFFER_OFFSET for a view whose offset is not a multiple of
  ///         the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN (views themselves take any offset);
  ///         CL_INVALID_OPERATION on NVIDIA's driver (or under CLBUF_SUB_BUFFER_RULE=refuse)
  ///         while an overlapping view's sub-buffer is alive: that driver crashes releasing
  ///         overlapping sub-buffers used together.
  const cl::Buffer& native() const {
    if (!native_view_) return memory_.buffer;
    // A view of an adopted sub-buffer: a sub-buffer of the parent, with the adopted one's flags.
    const bool of_sub_buffer = root_() != nullptr && root_() != memory_.buffer();
    return of_sub_buffer
               ? native_view_->get(memory_.buffer, root_(), root_offset_, size_bytes(), access_)
               : native_view_->get(memory_.buffer, memory_.buffer(), memory_.offset, size_bytes(),
                                   0);
  }
  /// The OpenCL buffer this buffer's bytes live in: native() for a buffer, the root's (or an
  /// adopted sub-buffer's) for a view. Element 0 is at native_offset_bytes() in it.
  const cl::Buffer& native_root() const noexcept { return memory_.buffer; }
  /// The byte offset of element 0 in native_root(): 0 unless a view. A multiple of sizeof(T).
  std::size_t native_offset_bytes() const noexcept { return memory_.offset; }
  /// False for a default-constructed or moved-from buffer.
  bool valid() const noexcept { return context_ != nullptr; }
  /// The OpenCL context the memory belongs to (null when !valid()).
  cl_context context() const noexcept { return context_; }

 private:
  friend class BufferManager;
  friend struct detail::BufferAccess;

  DeviceBuffer(detail::Allocation memory, std::shared_ptr<detail::MemoryPool> pool,
               const cl::Context& context, std::size_t size, std::vector<std::size_t> shape)
      : memory_(std::move(memory)),
        pool_(std::move(pool)),
        context_(context()),
        size_(size),
        shape_(std::move(shape)) {
    // An OpenCL buffer retains its context: only a buffer without one retains the context itself
    // (two driver calls less for every buffer from the pool).
    if (memory_.buffer() == nullptr) keep_context_ = context;
  }
  /// A 1-D buffer of `size` elements, `bytes` (> 0) of `pool`'s memory taken in place, its
  /// shape {size} in the heap block that the memory's last buffer left in the pool
  /// (Allocation::shape_storage): a buffer from the pool allocates nothing on the host and moves
  /// no Allocation (issue 47). @throws Error as MemoryPool::acquire(), std::bad_alloc (the memory
  /// goes back to the pool: the object is whole once the delegated constructor has run).
  DeviceBuffer(const std::shared_ptr<detail::MemoryPool>& pool, cl_context context,
               std::size_t size, std::size_t bytes, const char* operation)
      : DeviceBuffer(pool, context, size) {
    pool_->acquire_into(memory_, bytes, operation);
    shape_.swap(memory_.shape_storage);
    shape_.assign(1, size);
  }
  DeviceBuffer(const std::shared_ptr<detail::MemoryPool>& pool, cl_context context,
               std::size_t size) noexcept
      : pool_(pool), context_(context), size_(size) {}  // its memory's buffer retains `context`

  /// Records a command of a queue other than the owning manager's that uses this memory: the
  /// pool does not hand the memory out again before it has completed.
  /// Where the record cannot be kept (out of host memory), waits for the command instead.
  CLBUF_DETAIL_INLINE void fence(const detail::MemoryPool* user_pool,
                                 const cl::Event& event) const noexcept {
    // A buffer of the pool `user_pool` with no view is the common case, decided first (issue 47).
    const detail::Lease* lease = shared_lease();
    if (lease == nullptr && pool_.get() == user_pool) return;
    if (event() == nullptr || !memory_.fences) return;  // a view's fences are its root's
    const detail::MemoryPool* owner = lease != nullptr ? lease->pool.get() : pool_.get();
    if (owner == nullptr || owner == user_pool) return;
    add_fence(event);
  }
  CLBUF_DETAIL_COLD void add_fence(const cl::Event& event) const noexcept {
    const std::shared_ptr<detail::Fences>& fences = memory_.fences;
    try {
      fences->add(event);
    } catch (...) {
      cl_event wait = event();
      CLBUF_CL(clWaitForEvents)(1, &wait);
    }
  }

  /// The OpenCL buffer that owns the bytes: a view's root, an adopted sub-buffer's parent, else
  /// native(). Overlap checks compare roots and root_offset_bytes().
  cl_mem root() const noexcept { return root_() != nullptr ? root_() : memory_.buffer(); }

  /// Shares this buffer's memory with a view: from now on it goes back to the pool only when
  /// this buffer and every view are gone. Several threads may make views of one buffer at once,
  /// and read it meanwhile: the Lease is made once, under a lock, and published by `shared_`
  /// (readers see either no Lease or the whole one; pool_ and memory_ do not change).
  const std::shared_ptr<detail::Lease>& share_memory() {
    if (!shared_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(detail::lease_mutex(this));
      if (!shared_.load(std::memory_order_relaxed)) {
        lease_ = std::make_shared<detail::Lease>(memory_, pool_);
        shared_.store(true, std::memory_order_release);
      }
    }
    return lease_;
  }
  /// A view's memory: the Lease of the buffer it views.
  void share_lease(std::shared_ptr<detail::Lease> lease) noexcept {
    lease_ = std::move(lease);
    shared_.store(lease_ != nullptr, std::memory_order_release);
  }
  /// The Lease once the memory is shared (a view made, or mapped), else null; safe while another
  /// thread makes the first view.
  detail::Lease* shared_lease() const noexcept {
    return shared_.load(std::memory_order_acquire) ? lease_.get() : nullptr;
  }

  void swap(DeviceBuffer& other) noexcept {  // never concurrent with other calls on either
    std::swap(memory_, other.memory_);
    std::swap(lease_, other.lease_);
    const bool shared = shared_.load(std::memory_order_relaxed);
    shared_.store(other.shared_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    other.shared_.store(shared, std::memory_order_relaxed);
    std::swap(root_, other.root_);
    std::swap(root_offset_, other.root_offset_);
    std::swap(native_view_, other.native_view_);
    std::swap(access_, other.access_);
    std::swap(pool_, other.pool_);
    std::swap(context_, other.context_);
    std::swap(keep_context_, other.keep_context_);
    std::swap(size_, other.size_);
    std::swap(shape_, other.shape_);
  }

  detail::Allocation memory_;
  std::shared_ptr<detail::MemoryPool> pool_;  // null for empty, adopted memory and views
  std::shared_ptr<detail::Lease> lease_;      // shared with views; null until a view is made
  std::atomic<bool> shared_{false};           // lease_ is set (share_memory)
  cl::Buffer root_;                           // a view's root, an adopted sub-buffer's parent
  std::size_t root_offset_ = 0;               // bytes from the start of root()
  std::shared_ptr<detail::NativeView> native_view_;  // a view's native(); null otherwise
  cl_mem_flags access_ = 0;       // CL_MEM_HOST_*, CL_MEM_READ_ONLY, _WRITE_ONLY of adopted memory
  cl_context context_ = nullptr;  // kept alive by memory_.buffer, else by:
  cl::Context keep_context_;      // retained only when memory_ has no buffer
  std::size_t size_ = 0;
  std::vector<std::size_t> shape_;
};

}  // namespace clbuf

#endif  // CLBUF_BUFFER_HPP
