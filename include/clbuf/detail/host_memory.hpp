// SPDX-License-Identifier: MIT
// Host memory clbuf allocates itself: aligned blocks that ask for huge pages (fresh 4 KiB pages
// are slow to touch), vectors grown without a slow first touch, and a parallel memcpy.
#ifndef CLBUF_DETAIL_HOST_MEMORY_HPP
#define CLBUF_DETAIL_HOST_MEMORY_HPP

#include <clbuf/detail/worker_pool.hpp>
#include <clbuf/error.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

// Streaming (non-temporal) stores for the staging copies: CLBUF_STREAMING_COPY=1 turns them on.
// Off by default: on the H200 host (interleaved A/B, bench/gpu_run.sh stage streaming) plain
// memcpy moved staged downloads 11-24% faster and uploads of 256 MiB-1 GiB 1-7% faster; only
// 64 MiB uploads were mixed (-2%..+8%).
#ifndef CLBUF_STREAMING_COPY
#define CLBUF_STREAMING_COPY 0
#endif
#if CLBUF_STREAMING_COPY && defined(__SSE2__)
#include <emmintrin.h>
#define CLBUF_DETAIL_STREAM_SSE2 1
#endif

namespace clbuf {
namespace detail {

constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

inline std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

/// Asks the kernel to back [data, data + bytes) with huge pages where it can (a hint only).
inline void advise_huge_pages(void* data, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < huge_page_bytes) return;
  const auto first = round_up(reinterpret_cast<std::uintptr_t>(data), 4096);
  const auto last = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~std::uintptr_t{4095};
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

/// memcpy for large copies whose destination will not be read by this CPU soon (a staging
/// chunk the device reads by DMA, a download's destination): streaming stores go to memory
/// without first reading each destination line into the cache, one memory pass less than
/// memcpy for sizes below glibc's own non-temporal threshold. Ranges must not overlap.
inline void copy_streaming(void* dst, const void* src, std::size_t bytes) noexcept {
#if defined(CLBUF_DETAIL_STREAM_SSE2)
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(out) % 16) % 16;
  if (bytes < 4096 + head) {
    std::memcpy(out, in, bytes);
    return;
  }
  std::memcpy(out, in, head);
  out += head;
  in += head;
  bytes -= head;
  const std::size_t body = bytes / 64 * 64;
  for (std::size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 48), d);
  }
  _mm_sfence();  // the stores are visible before the DMA is enqueued or the data handed over
  std::memcpy(out + body, in + body, bytes - body);
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// An aligned host block of at least `bytes` (huge-page aligned and advised when large).
/// Free with std::free. Null when out of memory.
inline void* allocate_host_block(std::size_t bytes) noexcept {
  const std::size_t alignment = bytes >= huge_page_bytes ? huge_page_bytes
                                : bytes >= 65536         ? 4096
                                                         : 128;
  void* block = std::aligned_alloc(alignment, round_up(std::max<std::size_t>(bytes, 1), alignment));
  if (block != nullptr) advise_huge_pages(block, bytes);
  return block;
}

/// A vector for a download of `count` elements, filled by `fill(out)`: reserved first, and huge
/// pages asked for before the elements are first touched (value-initialising a fresh 256 MiB
/// vector is ~8x faster that way).
/// @throws Error CL_OUT_OF_HOST_MEMORY, never std::bad_alloc.
template <class T, class Fill>
std::vector<T> downloaded_vector(const char* operation, std::size_t count, Fill fill) {
  std::vector<T> out;
  const char* what = "the downloaded vector";
  if (count > out.max_size()) fail_host_memory(operation, count * sizeof(T), what);
  guard_host_memory(operation, count * sizeof(T), what, [&] {
    out.reserve(count);
    advise_huge_pages(out.data(), count * sizeof(T));
    fill(out);
  });
  return out;
}

/// A vector of `count` value-initialised elements for a download.
template <class T>
std::vector<T> new_vector(const char* operation, std::size_t count) {
  return downloaded_vector<T>(operation, count,
                              [count](std::vector<T>& out) { out.resize(count); });
}

/// A vector of the `count` elements at `from` (a bounced download's pinned block), built in one
/// pass: no zero-filled vector written a second time.
template <class T>
std::vector<T> new_vector(const char* operation, const T* from, std::size_t count) {
  if (count < huge_page_bytes / sizeof(T)) {  // no huge pages to ask for: one allocation and copy
    return guard_host_memory(operation, count * sizeof(T), "the downloaded vector",
                             [&] { return std::vector<T>(from, from + count); });
  }
  return downloaded_vector<T>(
      operation, count, [from, count](std::vector<T>& out) { out.assign(from, from + count); });
}

/// `data` moved into shared ownership (a Future's host memory).
/// @throws Error CL_OUT_OF_HOST_MEMORY, never std::bad_alloc.
template <class T>
std::shared_ptr<const std::vector<T>> shared_vector(const char* operation, std::vector<T> data) {
  return guard_host_memory(operation, sizeof(std::vector<T>), "the Future's data",
                           [&] { return std::make_shared<const std::vector<T>>(std::move(data)); });
}

/// True when [a, a + bytes) and [b, b + bytes) share a byte.
inline bool host_ranges_overlap(const void* a, const void* b, std::size_t bytes) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return bytes != 0 && (x < y ? y - x < bytes : x - y < bytes);
}

/// memcpy split into chunks that the worker threads take in turn; a plain memcpy when small or
/// with one thread, and memmove when the two ranges overlap (a host pointer into a buffer's own
/// mapped memory). Thread-safe: concurrent calls are serialised.
class ParallelCopier {
 public:
  explicit ParallelCopier(unsigned threads) noexcept : workers_(threads) {}

  unsigned threads() const noexcept { return workers_.limit(); }

  /// Copies `bytes` from `src` to `dst`, in parts of at least `min_part` bytes on up to
  /// threads() threads (one memcpy below two parts).
  void copy(void* dst, const void* src, std::size_t bytes,
            std::size_t min_part = std::size_t{1} << 20) noexcept {
    if (host_ranges_overlap(dst, src, bytes)) {
      std::memmove(dst, src, bytes);
      return;
    }
    if (workers_.limit() == 1 || bytes < 2 * min_part) {
      std::memcpy(dst, src, bytes);
      return;
    }
    const std::size_t part = std::max(min_part, round_up(bytes / workers_.limit() + 1, 4096));
    const std::size_t parts = (bytes + part - 1) / part;
    std::atomic<std::size_t> next{0};
    auto task = [&](unsigned) noexcept {
      for (std::size_t k; (k = next.fetch_add(1)) < parts;) {
        const std::size_t begin = k * part;
        std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                    std::min(part, bytes - begin));
      }
    };
    workers_.run(static_cast<unsigned>(parts), task);
  }

 private:
  WorkerPool workers_;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_HOST_MEMORY_HPP
