// SPDX-License-Identifier: MIT
// Includes clbuf and nothing else: compiled as C++14, or without the Khronos C++ bindings on the
// include path, the one error must say what is missing.
#include <clbuf/clbuf.hpp>

int main() { return 0; }
