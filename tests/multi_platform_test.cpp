// SPDX-License-Identifier: MIT
// Two platforms, PoCL and oclgrind (tests/CMakeLists.txt points the ICD loader at both): the
// cases of support/multi_device_cases.hpp as suite MultiPlatform, copies between managers of
// different platforms.
#define CLBUF_MULTI_SUITE MultiPlatform
#include "support/multi_device_cases.hpp"
