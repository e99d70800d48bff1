// SPDX-License-Identifier: MIT
// A translation unit of an application that uses the Khronos OpenCL headers itself next to
// clbuf. tests/cmake/CMakeLists.txt compiles it under -Wall -Wextra -Werror, clbuf on a plain -I
// path (as a header copy is), for every combination of
//   COEXIST_ORDER       1: the application's settings, clbuf, then the application's bindings
//                       2: the application's settings and bindings, then clbuf
//                       3: <CL/cl.h> (CL_TARGET_OPENCL_VERSION only), clbuf, then the bindings
//                       4: clbuf, then the application restates the defaults, then the bindings
//   COEXIST_TARGET      0 (the application sets nothing), 120, 200 or 300
//   COEXIST_EXCEPTIONS  1: CL_HPP_ENABLE_EXCEPTIONS
//   COEXIST_CL2         1: the bindings by their old name, <CL/cl2.hpp>
// and checks that the application gets the bindings it asked for (clbuf changes none of its
// settings) and that clbuf's code compiles without a warning under them.
// The include order is what is tested: clang-format must not sort it.
// clang-format off
#if COEXIST_ORDER == 1
#include "settings.hpp"
#include <clbuf/clbuf.hpp>
#include "bindings.hpp"
#elif COEXIST_ORDER == 2
#include "settings.hpp"
#include "bindings.hpp"
#include <clbuf/clbuf.hpp>
#elif COEXIST_ORDER == 3
#include "settings.hpp"
#include <CL/cl.h>
#include <clbuf/clbuf.hpp>
#include "bindings.hpp"
#elif COEXIST_ORDER == 4
#include <clbuf/clbuf.hpp>
// Identical to what clbuf and the bindings define when the application sets nothing.
#define CL_HPP_TARGET_OPENCL_VERSION 300
#define CL_HPP_MINIMUM_OPENCL_VERSION 200
#include "bindings.hpp"
#endif
// clang-format on

#include <vector>

// What the application asked for, or the Khronos defaults when it asked for nothing.
#if COEXIST_TARGET != 0
static_assert(CL_HPP_TARGET_OPENCL_VERSION == COEXIST_TARGET, "the application's target");
static_assert(CL_TARGET_OPENCL_VERSION == COEXIST_TARGET, "the application's target");
#else
static_assert(CL_HPP_TARGET_OPENCL_VERSION == 300, "the bindings' default target");
static_assert(CL_HPP_MINIMUM_OPENCL_VERSION == 200, "the bindings' default minimum");
#endif
#if !COEXIST_EXCEPTIONS && defined(CL_HPP_ENABLE_EXCEPTIONS)
#error "clbuf turned the bindings' exceptions on"
#endif

int main() {
  try {
    clbuf::BufferManager manager;
    const std::vector<float> data{1.5f, -2.25f, 3.0f};
    if (manager.download(manager.upload(data)) != data) return 1;
    // The application's own OpenCL objects, next to clbuf's.
    cl::Context context = manager.context();
#if CL_HPP_TARGET_OPENCL_VERSION >= 200
    // Lost when clbuf fixed the bindings at 1.2.
    cl::DeviceCommandQueue* device_queue = nullptr;
    static_cast<void>(device_queue);
#endif
    static_cast<void>(context);
  } catch (const clbuf::Error&) {
    return 2;
  }
#if COEXIST_EXCEPTIONS
  catch (const cl::Error&) {
    return 3;
  }
#endif
  return 0;
}
