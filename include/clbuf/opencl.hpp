// The Khronos C++ bindings, configured for clbuf: OpenCL 1.2 API level by default, so that every
// driver (PoCL, NVIDIA, ...) runs it. Define the CL_HPP_* macros before including clbuf to change
// it.
#ifndef CLBUF_OPENCL_HPP
#define CLBUF_OPENCL_HPP

#ifndef CL_HPP_TARGET_OPENCL_VERSION
#define CL_HPP_TARGET_OPENCL_VERSION 120
#endif
#ifndef CL_HPP_MINIMUM_OPENCL_VERSION
// Debian's bindings do not compile with minimum 120 and a target of 200 or more.
#if CL_HPP_TARGET_OPENCL_VERSION >= 200
#define CL_HPP_MINIMUM_OPENCL_VERSION 200
#else
#define CL_HPP_MINIMUM_OPENCL_VERSION 120
#endif
#endif
#ifndef CL_USE_DEPRECATED_OPENCL_1_2_APIS
// clbuf calls clCreateCommandQueue, the 1.2 entry point every driver has.
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#endif

#include <CL/opencl.hpp>

// Every OpenCL C entry point clbuf calls goes through this macro: a test can define it to
// inject failures. Applications leave it alone.
#ifndef CLBUF_CL
#define CLBUF_CL(fn) ::fn
#endif

#endif  // CLBUF_OPENCL_HPP
