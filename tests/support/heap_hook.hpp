// SPDX-License-Identifier: MIT
// Replaces the process's C++ heap (operator new and delete) so that a test can watch or fail
// every allocation: each new calls `clbuf_test_heap_new(size)`, which the one translation unit
// that includes this file defines (malloc, or nullptr for an allocation that must fail: the
// throwing forms then throw std::bad_alloc), and each delete calls free. Every unaligned form is
// replaced: a sanitizer runtime replaces each form on its own, so one left to it would pair its
// new with this delete. (The aligned forms stay the runtime's, new and delete alike.) Include it
// in one translation unit of a test binary only.
#ifndef CLBUF_TESTS_HEAP_HOOK_HPP
#define CLBUF_TESTS_HEAP_HOOK_HPP

#include <cstddef>
#include <cstdlib>
#include <new>

// gcc 11+ flags the replaced delete's free() of what the replaced new got from malloc, once
// inlined, as a mismatch: here the pair is malloc and free throughout.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

/// The includer's allocation: `size` bytes from malloc, or nullptr to fail it.
void* clbuf_test_heap_new(std::size_t size) noexcept;

void* operator new(std::size_t size) {
  if (void* memory = clbuf_test_heap_new(size)) return memory;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (void* memory = clbuf_test_heap_new(size)) return memory;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return clbuf_test_heap_new(size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return clbuf_test_heap_new(size);
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete(void* memory, const std::nothrow_t&) noexcept { std::free(memory); }
void operator delete[](void* memory, const std::nothrow_t&) noexcept { std::free(memory); }

#endif  // CLBUF_TESTS_HEAP_HOOK_HPP
