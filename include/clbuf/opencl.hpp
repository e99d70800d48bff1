// SPDX-License-Identifier: MIT
// The Khronos C++ bindings, as the application configures them. clbuf works with any target
// version from 1.2 on, exceptions on or off, whichever is included first: clbuf or the bindings
// (<CL/opencl.hpp>, <CL/cl2.hpp>, <CL/cl.h>). The first include fixes the bindings for the
// translation unit, as for any user of them, so an application configures them (CL_HPP_*,
// CL_TARGET_OPENCL_VERSION) before its first include of either. When nothing is configured,
// clbuf leaves the Khronos defaults (target 3.0, minimum 2.0) and only spells out the target,
// so that the bindings print no "not defined" message (after <CL/cl.h> alone, the target is
// CL_TARGET_OPENCL_VERSION); it defines nothing else.
#ifndef CLBUF_OPENCL_HPP
#define CLBUF_OPENCL_HPP

// What clbuf needs, each checked once with a message that says what to do; clbuf.hpp includes
// nothing more when one is missing, so this is the only error.
#if !defined(__cplusplus) || \
    (__cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L))
#error \
    "clbuf needs C++17 or later: compile with -std=c++17 (CMake: link clbuf::clbuf, which requires cxx_std_17)"
#define CLBUF_DETAIL_CANNOT_COMPILE
#elif defined(__has_include)
#if !__has_include(<CL/opencl.hpp>)
#error \
    "clbuf needs the Khronos OpenCL C++ bindings <CL/opencl.hpp>: on Debian and Ubuntu, apt install opencl-clhpp-headers (with opencl-c-headers and ocl-icd-opencl-dev)"
#define CLBUF_DETAIL_CANNOT_COMPILE
#endif
#endif

#ifndef CLBUF_DETAIL_CANNOT_COMPILE
#ifndef CL_HPP_TARGET_OPENCL_VERSION
#ifdef CL_TARGET_OPENCL_VERSION
// <CL/cl.h> came first: the bindings follow the C headers' version.
#define CL_HPP_TARGET_OPENCL_VERSION CL_TARGET_OPENCL_VERSION
#if CL_TARGET_OPENCL_VERSION < 200 && !defined(CL_HPP_MINIMUM_OPENCL_VERSION)
#define CL_HPP_MINIMUM_OPENCL_VERSION CL_TARGET_OPENCL_VERSION
#endif
#else
// The bindings' own default, without the message they print when it is left undefined.
#define CL_HPP_TARGET_OPENCL_VERSION 300
#endif
#endif

#include <CL/opencl.hpp>

#if CL_HPP_TARGET_OPENCL_VERSION < 120 || \
    (defined(CL_TARGET_OPENCL_VERSION) && CL_TARGET_OPENCL_VERSION < 120)
#error \
    "clbuf needs the OpenCL 1.2 API or later: CL_HPP_TARGET_OPENCL_VERSION and CL_TARGET_OPENCL_VERSION must be 120 or more"
#endif

// Every OpenCL C entry point clbuf calls goes through this macro: a test can define it to
// inject failures. Applications leave it alone.
#ifndef CLBUF_CL
#define CLBUF_CL(fn) ::fn
#endif
#endif  // CLBUF_DETAIL_CANNOT_COMPILE

#endif  // CLBUF_OPENCL_HPP
