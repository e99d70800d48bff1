// SPDX-License-Identifier: MIT
// Several devices of one platform: the cases of support/multi_device_cases.hpp as suite
// MultiDevice. Registered with POCL_DEVICES="pthread pthread" (two PoCL devices); the same cases
// run as multi_platform_test with PoCL and oclgrind as two platforms.
#define CLBUF_MULTI_SUITE MultiDevice
#include "support/multi_device_cases.hpp"
