// SPDX-License-Identifier: MIT
// The application's own include of the Khronos C++ bindings, by either name.
#if COEXIST_CL2
// <CL/cl2.hpp> prints a message saying it was renamed (clang's -Werror makes that an error,
// with or without clbuf): the application's own warning to silence.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-W#pragma-messages"
#endif
#include <CL/cl2.hpp>
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
#else
#include <CL/opencl.hpp>
#endif
