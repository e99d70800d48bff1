// SPDX-License-Identifier: MIT
// The application's own settings of the Khronos headers (no include guard: app.cpp includes it
// where the application would write them). COEXIST_TARGET 0: the application sets nothing.
#if COEXIST_ORDER == 3
// A user of the C API: it sets the C headers' version only.
#if COEXIST_TARGET != 0
#define CL_TARGET_OPENCL_VERSION COEXIST_TARGET
#endif
#else
#if COEXIST_TARGET != 0
#define CL_HPP_TARGET_OPENCL_VERSION COEXIST_TARGET
#if COEXIST_TARGET < 200
// The bindings' default minimum (200) must not exceed the target.
#define CL_HPP_MINIMUM_OPENCL_VERSION COEXIST_TARGET
#endif
#endif
#endif
#if COEXIST_EXCEPTIONS
#define CL_HPP_ENABLE_EXCEPTIONS
#endif
